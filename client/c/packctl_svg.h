/* packctl: SVG pictures (packctl_svg.c). They only read their arguments;
 * they write to f and return 0, or -1 when writing failed. */
#ifndef PACKCTL_SVG_H
#define PACKCTL_SVG_H

#include <stdio.h>

#include "packd/v1/packd.pb-c.h"

/* Ranks x micro-batches as bars (packctl_svg.c). */
int packctl_write_svg(FILE *f, const Packd__V1__PlanResponse *resp);

/* SVG helpers (packctl_svg.c), shared with `packctl calibrate`'s picture:
 * text with the five XML special characters escaped, and the round number
 * an axis runs to (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 or 10 times a power
 * of ten, the least at or above max; 1 when max <= 0). */
void packctl_svg_text(FILE *f, const char *s);
double packctl_svg_axis(double max);

#endif
