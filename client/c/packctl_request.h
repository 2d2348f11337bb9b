/* packctl: building a packd.v1.PlanRequest from text (flags, manifests),
 * reading a binary request, and sampling sequences.
 *
 * Ownership: requests are heap messages whose every part was allocated with
 * malloc, exactly like an unpacked message; free them with
 * packd__v1__plan_request__free_unpacked(req, NULL). Functions return 0 or a
 * negative pk_error code: PK_EINVAL for bad input (a message naming the flag
 * or field and the value is written into err), PK_ENOMEM when memory runs
 * out. */
#ifndef PACKCTL_REQUEST_H
#define PACKCTL_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "packd/v1/packd.pb-c.h"

/* A new request with every field at its default; NULL when out of memory. */
Packd__V1__PlanRequest *packctl_request_new(void);

/* Creates the sub-message `sub` (a dotted path such as
 * "parallel.dynamic_cp") and the ones above it if absent; 0 or a pk_error
 * code with a message. */
int packctl_request_touch(Packd__V1__PlanRequest *req, const char *sub, char *err, size_t errlen);

/* Sets the scalar field `field` of sub-message `sub` ("parallel",
 * "batching", "cost", "layout"; NULL for the top level: "job", "seed") from
 * text, creating the sub-message when absent. Field names are the proto
 * names ("max_tokens"); enums take the proto name ("MODE_PADDED"), the short
 * name ("padded") or the number of a defined value; bools take
 * true/false/1/0/yes/no/on/off. `what` names the source in messages
 * ("--max-tokens", "manifest field batching.max_tokens"). */
int packctl_request_set(Packd__V1__PlanRequest *req, const char *sub, const char *field,
                        const char *text, const char *what, char *err, size_t errlen);

/* Parses an unsigned decimal integer no larger than max (digits only, no
 * sign, no spaces). Returns 0 or PK_EINVAL with a message naming `what`. */
int packctl_parse_u64(const char *text, uint64_t max, const char *what, uint64_t *out, char *err,
                      size_t errlen);

/* Reads all of path ("-" for stdin) into a new NUL-terminated buffer (free
 * with free()). */
int packctl_slurp(const char *path, char **data, size_t *len, char *err, size_t errlen);

/* Reads a binary packd.v1.PlanRequest from path ("-" for stdin) into a new
 * request (*req). */
int packctl_read_request_file(const char *path, Packd__V1__PlanRequest **req, char *err,
                              size_t errlen);

/* Keeps a deterministic sample of `count` sequences (without replacement,
 * seeded by `seed`, in their input order) of lengths, loss_tokens and
 * groups. PK_EINVAL when count exceeds the number of sequences. */
int packctl_sample(Packd__V1__PlanRequest *req, size_t count, uint64_t seed, char *err,
                   size_t errlen);

/* Sets groups to runs of `size` consecutive sequences (ids 0, 1, ...: the
 * layout of a GRPO rollout, n responses per prompt), replacing any groups
 * the input had. PK_EINVAL when size is 0; PK_ENOMEM. */
int packctl_group_runs(Packd__V1__PlanRequest *req, uint64_t size, char *err, size_t errlen);

#endif
