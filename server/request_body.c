/* Received messages into one buffer, inflated under a limit and the
 * decoded-bytes budget (see request_body.h). */
#include "request_body.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/compression.h>
#include <grpc/slice.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* The first output buffer of an inflation, and the least it grows by. */
#define PK_INFLATE_FIRST (64u << 10)

static void over_budget(const pk_decode_budget_t *b, int64_t want, char *msg, size_t msglen) {
  snprintf(msg, msglen,
           "server busy: %" PRId64 " more bytes of request would take the decoded bytes in flight "
           "(%" PRId64 ") over --max-decoded-bytes %" PRId64 "; retry later",
           want, (int64_t)atomic_load(&b->used), b->limit);
}

/* Inflates the slices of a compressed message into body->owned. */
static pk_body_result_t inflate_body(const grpc_byte_buffer *bb, int64_t limit,
                                     pk_request_body_t *body, char *msg, size_t msglen) {
  z_stream z;
  memset(&z, 0, sizeof z);
  /* 15 + 32: a zlib (deflate) or gzip header, detected. */
  if (inflateInit2(&z, 15 + 32) != Z_OK) {
    snprintf(msg, msglen, "request: cannot start inflating the message");
    return PK_BODY_NOMEM;
  }
  pk_body_result_t res = PK_BODY_OK;
  size_t cap = 0, len = 0;
  uint8_t *out = NULL;
  const grpc_slice_buffer *sb = &bb->data.raw.slice_buffer;
  int zrc = Z_OK;
  for (size_t i = 0; i < sb->count && zrc != Z_STREAM_END && res == PK_BODY_OK; i++) {
    z.next_in = (Bytef *)GRPC_SLICE_START_PTR(sb->slices[i]);
    z.avail_in = (uInt)GRPC_SLICE_LENGTH(sb->slices[i]);
    while (z.avail_in > 0 && zrc != Z_STREAM_END && res == PK_BODY_OK) {
      if (len == cap) {
        if ((int64_t)cap >= limit) {
          /* Full at the limit and more to come. */
          res = PK_BODY_TOO_LARGE;
          snprintf(msg, msglen,
                   "request: the compressed message inflates past %" PRId64
                   " bytes, the limit of this method (--max-message-bytes for Plan)",
                   limit);
          break;
        }
        size_t grow = cap < PK_INFLATE_FIRST ? PK_INFLATE_FIRST : cap;
        if ((int64_t)(cap + grow) > limit)
          grow = (size_t)(limit - (int64_t)cap);
        if (!pk_decode_budget_take(body->budget, (int64_t)grow)) {
          res = PK_BODY_OVER_BUDGET;
          over_budget(body->budget, (int64_t)grow, msg, msglen);
          break;
        }
        body->charged += (int64_t)grow;
        uint8_t *bigger = realloc(out, cap + grow);
        if (bigger == NULL) {
          res = PK_BODY_NOMEM;
          snprintf(msg, msglen, "request: cannot allocate %zu bytes to inflate the message",
                   cap + grow);
          break;
        }
        out = bigger;
        cap += grow;
      }
      z.next_out = out + len;
      z.avail_out = (uInt)(cap - len > UINT32_MAX ? UINT32_MAX : cap - len);
      uInt before = z.avail_out, in_before = z.avail_in;
      zrc = inflate(&z, Z_NO_FLUSH);
      len += before - z.avail_out;
      /* Z_BUF_ERROR is only "no progress possible": with input and room
       * left that is a stream zlib cannot go on with. */
      bool stuck = zrc == Z_BUF_ERROR && z.avail_in == in_before && z.avail_out == before;
      if (stuck || (zrc != Z_OK && zrc != Z_STREAM_END && zrc != Z_BUF_ERROR)) {
        res = PK_BODY_BAD;
        snprintf(msg, msglen, "request: the compressed message is not valid gzip/deflate data (%s)",
                 z.msg != NULL ? z.msg : "zlib error");
      }
    }
  }
  if (res == PK_BODY_OK && zrc != Z_STREAM_END) {
    res = PK_BODY_BAD;
    snprintf(msg, msglen, "request: the compressed message ends before its compressed stream");
  }
  inflateEnd(&z);
  if (res != PK_BODY_OK) {
    free(out);
    return res;
  }
  body->owned = out;
  body->bytes = out != NULL ? out : (const uint8_t *)"";
  body->len = len;
  return PK_BODY_OK;
}

pk_body_result_t pk_request_body_read(grpc_byte_buffer *bb, int64_t limit,
                                      pk_decode_budget_t *budget, pk_request_body_t *body,
                                      char *msg, size_t msglen) {
  memset(body, 0, sizeof *body);
  body->budget = budget;
  int64_t wire = (int64_t)grpc_byte_buffer_length(bb);
  grpc_compression_algorithm alg =
      bb->type == GRPC_BB_RAW ? bb->data.raw.compression : GRPC_COMPRESS_NONE;
  if (alg == GRPC_COMPRESS_NONE && wire > limit) {
    snprintf(msg, msglen,
             "request: the message is %" PRId64 " bytes, over this method's limit %" PRId64, wire,
             limit);
    return PK_BODY_TOO_LARGE;
  }
  /* The received bytes are in memory already; they count while the call
   * holds them. */
  if (!pk_decode_budget_take(budget, wire)) {
    over_budget(budget, wire, msg, msglen);
    return PK_BODY_OVER_BUDGET;
  }
  body->charged = wire;
  pk_body_result_t res;
  if (alg == GRPC_COMPRESS_GZIP || alg == GRPC_COMPRESS_DEFLATE) {
    res = inflate_body(bb, limit, body, msg, msglen);
  } else if (alg != GRPC_COMPRESS_NONE) {
    res = PK_BODY_BAD;
    snprintf(msg, msglen, "request: compression algorithm %d is not supported", (int)alg);
  } else {
    grpc_byte_buffer_reader rd;
    if (!grpc_byte_buffer_reader_init(&rd, bb)) {
      res = PK_BODY_BAD;
      snprintf(msg, msglen, "request: cannot read the message bytes");
    } else {
      body->slice = grpc_byte_buffer_reader_readall(&rd);
      grpc_byte_buffer_reader_destroy(&rd);
      body->has_slice = 1;
      body->bytes = GRPC_SLICE_START_PTR(body->slice);
      body->len = GRPC_SLICE_LENGTH(body->slice);
      res = PK_BODY_OK;
    }
  }
  if (res != PK_BODY_OK) {
    pk_decode_budget_give(budget, body->charged);
    body->charged = 0;
  }
  return res;
}

void pk_request_body_free(pk_request_body_t *body) {
  free(body->owned);
  body->owned = NULL;
  if (body->has_slice)
    grpc_slice_unref(body->slice);
  body->has_slice = 0;
  body->bytes = NULL;
  body->len = 0;
  if (body->budget != NULL)
    pk_decode_budget_give(body->budget, body->charged);
  body->charged = 0;
}
