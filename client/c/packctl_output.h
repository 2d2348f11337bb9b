/* packctl: printing a PlanResponse as JSON (packctl_json.h), as a readable
 * summary, or as an SVG picture of the balance (packctl_svg.h); and a
 * request (`plan --dry-run`) as a summary.
 *
 * The functions only read their arguments; they write to f and return 0, or
 * -1 when writing failed. */
#ifndef PACKCTL_OUTPUT_H
#define PACKCTL_OUTPUT_H

#include <stddef.h>
#include <stdio.h>

#include "packd/v1/packd.pb-c.h"

typedef enum {
  PACKCTL_FORMAT_SUMMARY = 0,
  PACKCTL_FORMAT_JSON = 1,
  PACKCTL_FORMAT_SVG = 2,
} packctl_format_t;

/* "summary", "json" or "svg"; returns 0 or -1. */
int packctl_format_parse(const char *s, packctl_format_t *out);

/* Writes resp in format fmt. req (may be NULL) adds request details to the
 * summary. */
int packctl_write(FILE *f, packctl_format_t fmt, const Packd__V1__PlanResponse *resp,
                  const Packd__V1__PlanRequest *req);

/* What `plan --dry-run` prints: the request's size and plan id, its
 * sequences and the fields that are set. req_len is its packed size. */
int packctl_write_request_summary(FILE *f, const Packd__V1__PlanRequest *req, size_t req_len);

int packctl_write_summary(FILE *f, const Packd__V1__PlanResponse *resp,
                          const Packd__V1__PlanRequest *req);

#endif
