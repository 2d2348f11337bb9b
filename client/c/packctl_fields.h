/* packctl's request-field flags: one table of the flags that set
 * PlanRequest fields (`--dp N` sets parallel.dp), shared by `packctl plan`
 * and `packctl load`, so that both take the same flags with the same
 * placeholders, help and checks.
 *
 * Values are parsed by packctl_request_set (packctl_request.h), the parser
 * the JSON manifest reader uses too. Bool fields take an optional value
 * (`--shuffle`, `--shuffle=false`). */
#ifndef PACKCTL_FIELDS_H
#define PACKCTL_FIELDS_H

#include <getopt.h>
#include <stddef.h>
#include <stdio.h>

#include "packd/v1/packd.pb-c.h"

typedef struct packctl_field_flag {
  const char *flag;  /* Without dashes: "max-tokens". */
  const char *sub;   /* Sub-message ("batching"), NULL for the top level. */
  const char *field; /* Proto field name: "max_tokens". */
  const char *meta;  /* Value placeholder in the help ("N"); NULL for bools. */
  const char *help;  /* One line with the default; NULL: an alias left out of the help. */
} packctl_field_flag_t;

extern const packctl_field_flag_t packctl_field_flags[];
extern const size_t packctl_n_field_flags;

/* Writes one getopt_long entry per field flag into opts (room for
 * packctl_n_field_flags entries), with val = base + index into
 * packctl_field_flags. */
void packctl_fields_options(struct option *opts, int base);

/* The help lines of the field flags ("  --dp N   data-parallel ranks ..."). */
void packctl_fields_usage(FILE *f);

/* Sets field flag `index` from text on req; `what` in messages is the flag
 * ("--max-tokens"). Returns 0 or a pk_error code with a message in err. */
int packctl_fields_set(Packd__V1__PlanRequest *req, size_t index, const char *text, char *err,
                       size_t errlen);

#endif
