/* packctl: doubles as Python's repr() spells them (packctl_number.c). */
#ifndef PACKCTL_NUMBER_H
#define PACKCTL_NUMBER_H

#include <stddef.h>

/* A double as Python's repr() spells it ("0.1", "1e-05", "1500.0"), written
 * into buf (32 bytes are enough). NaN and infinities give "nan", "inf",
 * "-inf". */
void packctl_format_double(double v, char *buf, size_t len);

#endif
