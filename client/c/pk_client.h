/* The packd C client library on the gRPC C core API: a channel to one packd
 * server and blocking calls of Plan, GetRankPlan and grpc.health.v1 Check.
 *
 * Threads: a pk_client_t is used by one thread at a time (it owns one
 * completion queue that its calls pluck); open one client per thread for
 * concurrent calls. pk_client_open calls grpc_init and pk_client_close calls
 * grpc_shutdown, so clients may come and go freely.
 *
 * Errors: every call returns 0 when the RPC finished with status OK, or a
 * negative pk_error code (pk_error.h) mapped from the gRPC status
 * (INVALID_ARGUMENT -> PK_EINVAL, FAILED_PRECONDITION -> PK_EPRECOND,
 * RESOURCE_EXHAUSTED -> PK_ENOMEM, NOT_FOUND -> PK_ENOTFOUND, an undecodable
 * answer -> PK_EDECODE, anything else -> PK_EINTERNAL). The gRPC status code
 * and the server's message are always in *status when status is not NULL.
 *
 * Security: with tls_ca or tls_cert set the channel uses TLS (tls_ca: the
 * CAs that signed the server's certificate; without it gRPC's default
 * roots); tls_cert and tls_key add a client certificate for servers that
 * require one (--tls-client-ca). With token_file every call carries
 * "authorization: Bearer <token>", the first token line of the file. The
 * files are read by pk_client_open, which names the option and the file
 * when one cannot be used.
 *
 * Ownership: messages returned through pointers are protobuf-c messages;
 * free them with their free_unpacked function and a NULL allocator. Byte
 * buffers returned by pk_client_call are freed with free(). */
#ifndef PK_CLIENT_H
#define PK_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grpc/health/v1/health.pb-c.h"
#include "packd/v1/packd.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pk_client pk_client_t;

typedef struct pk_client_options {
  double timeout_s;          /* Deadline of each call in seconds; <= 0: none. */
  int64_t max_message_bytes; /* Largest message sent or received; <= 0: 64 MiB. */
  bool wait_for_ready;       /* Wait (up to the deadline) for the server to come up
                              * instead of failing with UNAVAILABLE at once. */
  /* Connection security; NULL or "" = off. The strings are the caller's and
   * only read by pk_client_open. */
  const char *tls_ca;     /* PEM CA certificates that verify the server. */
  const char *tls_cert;   /* PEM client certificate (mTLS); needs tls_key. */
  const char *tls_key;    /* PEM private key of tls_cert. */
  const char *token_file; /* File whose first token line is the bearer token. */
} pk_client_options_t;

/* The status of one finished call. */
typedef struct pk_rpc_status {
  int code;          /* gRPC status code; 0 is OK. */
  char message[512]; /* The server's status message, or the transport's. */
} pk_rpc_status_t;

/* The method paths. */
#define PK_METHOD_PLAN_PATH "/packd.v1.Planner/Plan"
#define PK_METHOD_GET_RANK_PLAN_PATH "/packd.v1.Planner/GetRankPlan"
#define PK_METHOD_HEALTH_CHECK_PATH "/grpc.health.v1.Health/Check"

/* Defaults: timeout 30 s, 64 MiB messages, no wait for ready. */
void pk_client_options_default(pk_client_options_t *opts);

/* Sets one connection option by its flag name ("tls-ca", "tls-cert",
 * "tls-key", "token-file"); value is kept by pointer. Returns 1 when name is
 * one of them, 0 when it is not (the caller parses it), or PK_EINVAL with a
 * message in err for an empty value. */
int pk_client_options_set(pk_client_options_t *opts, const char *name, const char *value, char *err,
                          size_t errlen);

/* Fills the connection options still unset from PACKD_TLS_CA,
 * PACKD_TLS_CLIENT_CERT, PACKD_TLS_CLIENT_KEY and PACKD_TOKEN_FILE. */
void pk_client_options_from_env(pk_client_options_t *opts);

/* Opens a channel to target ("HOST:PORT", or any gRPC target such as
 * "unix:/path"). The connection is made lazily by the first call. opts may be
 * NULL for the defaults. Returns 0 and a new client in *out (close it with
 * pk_client_close), or PK_EINVAL / PK_ENOMEM with a message in err. */
int pk_client_open(const char *target, const pk_client_options_t *opts, pk_client_t **out,
                   char *err, size_t errlen);

/* Closes the channel and frees the client. NULL is allowed. */
void pk_client_close(pk_client_t *c);

/* Changes the deadline of later calls. */
void pk_client_set_timeout(pk_client_t *c, double timeout_s);

/* One unary call on raw bytes: sends req (len bytes) to `method` (a path such
 * as PK_METHOD_PLAN_PATH) and, when the status is OK, stores the answer in
 * *resp (malloc'd; free with free()) and its length in *resp_len. The request
 * bytes are only read. */
int pk_client_call(pk_client_t *c, const char *method, const uint8_t *req, size_t len,
                   uint8_t **resp, size_t *resp_len, pk_rpc_status_t *status);

/* packd.v1.Planner/Plan. On success *resp is a new message. */
int pk_client_plan(pk_client_t *c, const Packd__V1__PlanRequest *req,
                   Packd__V1__PlanResponse **resp, pk_rpc_status_t *status);

/* packd.v1.Planner/GetRankPlan. On success *out is a new message. */
int pk_client_get_rank_plan(pk_client_t *c, const char *plan_id, uint32_t dp_rank,
                            Packd__V1__RankPlan **out, pk_rpc_status_t *status);

/* grpc.health.v1.Health/Check of `service` ("" for the whole server). On
 * success *serving holds the ServingStatus (1 SERVING, 2 NOT_SERVING). */
int pk_client_health(pk_client_t *c, const char *service, int *serving, pk_rpc_status_t *status);

/* The canonical name of a gRPC status code ("OK", "UNAVAILABLE"). */
const char *pk_client_status_name(int code);

/* The pk_error code that pk_client_* returns for a gRPC status code. */
int pk_client_error_from_status(int code);

#ifdef __cplusplus
}
#endif

#endif
