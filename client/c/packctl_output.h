/* packctl: printing a PlanResponse as JSON (the protobuf JSON mapping, as
 * Python's google.protobuf.json_format.MessageToJson prints it, through
 * libjansson: packctl_json.c), as a readable summary, or as an SVG picture
 * of the balance; and a request (`plan --dry-run`) as JSON or a summary.
 *
 * The functions only read their arguments; they write to f and return 0, or
 * -1 when writing failed. */
#ifndef PACKCTL_OUTPUT_H
#define PACKCTL_OUTPUT_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

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

/* Any protobuf-c message in the protobuf JSON mapping: lowerCamelCase names,
 * fields in number order, default values left out, 64-bit integers as
 * strings, enums by name, doubles as Python's repr, 2-space indentation and
 * ASCII-only strings — the text MessageToJson(msg) returns, plus a final
 * newline. */
int packctl_write_json(FILE *f, const ProtobufCMessage *msg);

/* A jansson value, dumped the way packctl_write_json dumps a message
 * (two-space indentation, ASCII only, doubles as Python's repr), plus a
 * final newline. */
int packctl_write_json_value(FILE *f, const json_t *root);

/* What `plan --dry-run` prints: the request's size and plan id, its
 * sequences and the fields that are set. req_len is its packed size. */
int packctl_write_request_summary(FILE *f, const Packd__V1__PlanRequest *req, size_t req_len);

int packctl_write_summary(FILE *f, const Packd__V1__PlanResponse *resp,
                          const Packd__V1__PlanRequest *req);

/* Ranks x micro-batches as bars (packctl_svg.c). */
int packctl_write_svg(FILE *f, const Packd__V1__PlanResponse *resp);

/* A dynamic-CP answer (resp->dynamic_cp set; packctl_dcp.c): the summary
 * (figures, and per slot its cost and group sizes) and the SVG (GPUs down,
 * slots across, a span per group). */
int packctl_write_dcp_summary(FILE *f, const Packd__V1__PlanResponse *resp);
int packctl_write_dcp_svg(FILE *f, const Packd__V1__PlanResponse *resp);

/* SVG helpers (packctl_svg.c), shared with `packctl calibrate`'s picture:
 * text with the five XML special characters escaped, and the round number
 * an axis runs to (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 or 10 times a power
 * of ten, the least at or above max; 1 when max <= 0). */
void packctl_svg_text(FILE *f, const char *s);
double packctl_svg_axis(double max);

/* A double as Python's repr() spells it ("0.1", "1e-05", "1500.0"), written
 * into buf (32 bytes are enough). NaN and infinities give "nan", "inf",
 * "-inf". */
void packctl_format_double(double v, char *buf, size_t len);

#endif
