/* The integer gRPC channel argument that the C client library
 * (client/c/pk_client.c) and the server (server/grpc_server.c) both build,
 * written once. Header only, beside grpc_status_names.h, the other piece
 * of the gRPC C core the two share; the codec itself does not use gRPC. */
#ifndef PK_GRPC_INT_ARG_H
#define PK_GRPC_INT_ARG_H

#include <string.h>

#include <grpc/grpc.h>

/* A GRPC_ARG_INTEGER argument; key must outlive the channel's creation. */
static inline grpc_arg pk_grpc_int_arg(const char *key, int value) {
  grpc_arg a;
  memset(&a, 0, sizeof a);
  a.type = GRPC_ARG_INTEGER;
  a.key = (char *)key;
  a.value.integer = value;
  return a;
}

#endif
