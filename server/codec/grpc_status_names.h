/* The gRPC status codes, by number and by name: the one table of them in
 * packd. The server's handlers and logs (handlers.c, grpc_server.c), its
 * metrics (metrics.c), the codec's error mapping (codec.c), the C client
 * (client/c/pk_client.c) and packctl all take their codes and names from
 * here, so that a code is spelled the same way everywhere.
 *
 * The numbers are gRPC's own (grpc_status_code in grpc/status.h); they are
 * spelled out here so that the codec and the handlers, which run without
 * gRPC in libpackd.so and in unit tests, need no gRPC headers. pk_client.c,
 * which has both, checks at compile time that the two tables agree.
 *
 * Header-only: the name table is static. */
#ifndef PK_GRPC_STATUS_NAMES_H
#define PK_GRPC_STATUS_NAMES_H

enum {
  PK_GRPC_OK = 0,
  PK_GRPC_CANCELLED = 1,
  PK_GRPC_UNKNOWN = 2,
  PK_GRPC_INVALID_ARGUMENT = 3,
  PK_GRPC_DEADLINE_EXCEEDED = 4,
  PK_GRPC_NOT_FOUND = 5,
  PK_GRPC_ALREADY_EXISTS = 6,
  PK_GRPC_PERMISSION_DENIED = 7,
  PK_GRPC_RESOURCE_EXHAUSTED = 8,
  PK_GRPC_FAILED_PRECONDITION = 9,
  PK_GRPC_ABORTED = 10,
  PK_GRPC_OUT_OF_RANGE = 11,
  PK_GRPC_UNIMPLEMENTED = 12,
  PK_GRPC_INTERNAL = 13,
  PK_GRPC_UNAVAILABLE = 14,
  PK_GRPC_DATA_LOSS = 15,
  PK_GRPC_UNAUTHENTICATED = 16,
};

/* gRPC status codes 0 (OK) to 16 (UNAUTHENTICATED). */
#define PK_GRPC_CODE_COUNT 17

/* The name of a gRPC status code ("OK", "UNAVAILABLE"); "UNKNOWN" for a
 * code outside 0..16. Never NULL. */
static inline const char *pk_grpc_status_name(int code) {
  static const char *const names[PK_GRPC_CODE_COUNT] = {
      [PK_GRPC_OK] = "OK",
      [PK_GRPC_CANCELLED] = "CANCELLED",
      [PK_GRPC_UNKNOWN] = "UNKNOWN",
      [PK_GRPC_INVALID_ARGUMENT] = "INVALID_ARGUMENT",
      [PK_GRPC_DEADLINE_EXCEEDED] = "DEADLINE_EXCEEDED",
      [PK_GRPC_NOT_FOUND] = "NOT_FOUND",
      [PK_GRPC_ALREADY_EXISTS] = "ALREADY_EXISTS",
      [PK_GRPC_PERMISSION_DENIED] = "PERMISSION_DENIED",
      [PK_GRPC_RESOURCE_EXHAUSTED] = "RESOURCE_EXHAUSTED",
      [PK_GRPC_FAILED_PRECONDITION] = "FAILED_PRECONDITION",
      [PK_GRPC_ABORTED] = "ABORTED",
      [PK_GRPC_OUT_OF_RANGE] = "OUT_OF_RANGE",
      [PK_GRPC_UNIMPLEMENTED] = "UNIMPLEMENTED",
      [PK_GRPC_INTERNAL] = "INTERNAL",
      [PK_GRPC_UNAVAILABLE] = "UNAVAILABLE",
      [PK_GRPC_DATA_LOSS] = "DATA_LOSS",
      [PK_GRPC_UNAUTHENTICATED] = "UNAUTHENTICATED",
  };
  if (code < 0 || code >= PK_GRPC_CODE_COUNT)
    return "UNKNOWN";
  return names[code];
}

#endif
