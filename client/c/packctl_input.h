/* packctl: reading the input of `packctl plan`.
 *
 * A lengths file has one sequence per line: `TOTAL`, or `PROMPT RESPONSE`
 * (length = PROMPT + RESPONSE, loss tokens = RESPONSE); `#` starts a comment
 * and blank lines are skipped. When no line has two numbers the request gets
 * no loss_tokens (the planner counts every token); when some do, a TOTAL line
 * counts all its tokens as loss tokens.
 *
 * A JSON manifest (the first non-blank character is `{`) is a PlanRequest in
 * the protobuf JSON mapping: "lengths", "loss_tokens", "groups", "job",
 * "seed", and the objects "parallel", "batching", "cost", "layout" with their
 * fields; proto names and lowerCamelCase names are both accepted, enums take
 * the proto name ("MODE_PADDED"), the short name ("padded") or the number,
 * 64-bit integers may be strings. Unknown fields are errors. */
#ifndef PACKCTL_INPUT_H
#define PACKCTL_INPUT_H

#include <stddef.h>

#include "packd/v1/packd.pb-c.h"

/* Reads path ("-" for stdin) into req (created by packctl_request_new),
 * replacing its lengths and loss tokens and setting the manifest's fields.
 * Returns 0, PK_EINVAL with a message naming the file, line or field, or
 * PK_ENOMEM. */
int packctl_read_input(const char *path, Packd__V1__PlanRequest *req, char *err, size_t errlen);

/* The same on a buffer of size bytes (no NUL terminator needed); name is the
 * source in messages ("stdin", a path). The fuzz target and the unit tests
 * enter here. */
int packctl_parse_input(const char *name, const char *data, size_t size,
                        Packd__V1__PlanRequest *req, char *err, size_t errlen);

#endif
