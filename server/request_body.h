/* A received gRPC message as one contiguous buffer, inflated here when the
 * client compressed it.
 *
 * The server turns off gRPC's own per-message decompression, so that no
 * message is inflated before packd has authenticated the call and charged
 * the inflated bytes to the decoded-bytes budget (decode_budget.h). Here a
 * gzip or deflate message is inflated in steps: each growth of the output
 * buffer is charged to the budget first, and inflation stops at the call's
 * limit of decompressed bytes, so a message that inflates a thousandfold
 * costs at most the limit, and never more than the budget allows.
 *
 * Ownership: the byte buffer stays the caller's. On success body->bytes is
 * malloc'd (or points into a slice the body holds) and body->charged bytes
 * are taken from the budget; pk_request_body_free releases both. */
#ifndef PK_REQUEST_BODY_H
#define PK_REQUEST_BODY_H

#include <grpc/byte_buffer.h>
#include <stddef.h>
#include <stdint.h>

#include "decode_budget.h"

typedef struct pk_request_body {
  const uint8_t *bytes; /* The message, decompressed. */
  size_t len;
  uint8_t *owned;   /* Freed with free(); NULL when bytes is in `slice`. */
  grpc_slice slice; /* Holds an uncompressed message that was one slice. */
  int has_slice;
  int64_t charged; /* Bytes taken from the budget. */
  pk_decode_budget_t *budget;
} pk_request_body_t;

/* Why pk_request_body_read failed. */
typedef enum {
  PK_BODY_OK = 0,
  PK_BODY_OVER_BUDGET = 1, /* The budget cannot take the bytes now: retry later. */
  PK_BODY_TOO_LARGE = 2,   /* It inflates past `limit`. */
  PK_BODY_BAD = 3,         /* Not valid gzip/deflate data, or an unknown algorithm. */
  PK_BODY_NOMEM = 4,
} pk_body_result_t;

/* Reads bb into *body, charging the budget for the received bytes and the
 * inflated ones. `limit` bounds the decompressed size. On failure nothing
 * stays charged, msg says why (naming the limit or the budget) and *body
 * needs no free. */
pk_body_result_t pk_request_body_read(grpc_byte_buffer *bb, int64_t limit,
                                      pk_decode_budget_t *budget, pk_request_body_t *body,
                                      char *msg, size_t msglen);

/* Frees the bytes and returns the charge. */
void pk_request_body_free(pk_request_body_t *body);

#endif
