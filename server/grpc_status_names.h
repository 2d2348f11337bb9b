/* The canonical names of the gRPC status codes, shared by the server's
 * metrics and logs (metrics.c) and the C client (client/c/pk_client.c), so
 * both spell a code the same way. Header-only: the table is static. */
#ifndef PK_GRPC_STATUS_NAMES_H
#define PK_GRPC_STATUS_NAMES_H

/* gRPC status codes 0 (OK) to 16 (UNAUTHENTICATED). */
#define PK_GRPC_CODE_COUNT 17

/* The name of a gRPC status code ("OK", "UNAVAILABLE"); "UNKNOWN" for a
 * code outside 0..16. Never NULL. */
static inline const char *pk_grpc_status_name(int code) {
  static const char *const names[PK_GRPC_CODE_COUNT] = {
      "OK",
      "CANCELLED",
      "UNKNOWN",
      "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED",
      "NOT_FOUND",
      "ALREADY_EXISTS",
      "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION",
      "ABORTED",
      "OUT_OF_RANGE",
      "UNIMPLEMENTED",
      "INTERNAL",
      "UNAVAILABLE",
      "DATA_LOSS",
      "UNAUTHENTICATED",
  };
  if (code < 0 || code >= PK_GRPC_CODE_COUNT)
    return "UNKNOWN";
  return names[code];
}

#endif
