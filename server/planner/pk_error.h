/* Error codes shared by the planner, the codec, the server and the clients.
 *
 * Every function that can fail returns 0 on success or one of the negative
 * codes below. The codes map to gRPC status codes in exactly one place
 * (server/codec/codec.c, pk_status_from_error). */
#ifndef PK_ERROR_H
#define PK_ERROR_H

#include "pk_export.h"

#ifdef __cplusplus
extern "C" {
#endif

enum pk_error {
  PK_OK = 0,
  /* A request field has a bad value (gRPC INVALID_ARGUMENT). */
  PK_EINVAL = -1,
  /* Valid fields that cannot be met together (gRPC FAILED_PRECONDITION). */
  PK_EPRECOND = -2,
  /* An allocation sized by the request failed or would be too large
   * (gRPC RESOURCE_EXHAUSTED). */
  PK_ENOMEM = -3,
  /* An internal invariant failed; a bug (gRPC INTERNAL). */
  PK_EINTERNAL = -4,
  /* Malformed bytes on the wire (gRPC INVALID_ARGUMENT). */
  PK_EDECODE = -5,
  /* Not found (gRPC NOT_FOUND), e.g. a plan id not in the cache. */
  PK_ENOTFOUND = -6,
  /* The caller's stop condition (pk_limits_t.should_stop) asked the planner
   * to stop; nothing was planned (gRPC CANCELLED, unless the caller knows a
   * better reason: a passed deadline or a shutdown). */
  PK_ECANCELED = -7,
  /* Over a limit the caller configured (pk_limits_t: max_sequences,
   * max_plan_bytes; the server's --max-message-bytes), as opposed to an
   * allocation that failed (gRPC RESOURCE_EXHAUSTED too, with a message
   * naming the limit). */
  PK_ELIMIT = -8,
};

/* A static string naming the code, e.g. "invalid argument". Never NULL. */
PK_EXPORT const char *pk_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif
