/* The gRPC side of packd on the gRPC C core API: one completion queue served
 * by several worker threads that also run the handlers (handlers.h).
 *
 * Methods: packd.v1.Planner/Plan, packd.v1.Planner/GetRankPlan and
 * grpc.health.v1.Health/Check are registered; a generic request is always
 * pending so that any other method gets UNIMPLEMENTED at once.
 *
 * Lifecycle (all from one controlling thread, the libuv loop in main.c):
 *   pk_grpc_server_start -> ... -> pk_grpc_server_set_serving(false)
 *   -> pk_grpc_server_shutdown (listener closes, calls in flight finish)
 *   -> [pk_grpc_server_cancel_all after the grace period]
 *   -> on_stopped callback (from a worker thread) -> pk_grpc_server_destroy.
 * The caller owns the cache, the plan store (NULL: none) and the metrics
 * and keeps them alive until after pk_grpc_server_destroy; the server owns
 * everything else it creates. */
#ifndef PK_GRPC_SERVER_H
#define PK_GRPC_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "metrics.h"
#include "plan_cache.h"
#include "plan_store.h"

typedef struct pk_grpc_server pk_grpc_server_t;

/* Called once, from a worker thread, when the server has stopped: the
 * shutdown finished and no call or request context is left. It must only
 * hand the news to the controlling thread (e.g. uv_async_send). */
typedef void (*pk_stopped_fn)(void *user);

/* Creates the server, binds cfg->listen (port 0 picks one; the real port goes
 * to *bound_port), starts the worker threads and begins serving. grpc_init
 * must have been called. Returns 0, or a negative pk_error code with a
 * message in err (a port that is taken fails loudly: SO_REUSEPORT is off). */
int pk_grpc_server_start(const pk_server_config_t *cfg, pk_plan_cache_t *cache,
                         pk_plan_store_t *store, pk_metrics_t *metrics, pk_stopped_fn on_stopped,
                         void *user, pk_grpc_server_t **out, int *bound_port, char *err,
                         size_t errlen);

/* What Health/Check and /readyz report. */
void pk_grpc_server_set_serving(pk_grpc_server_t *s, bool serving);
bool pk_grpc_server_serving(const pk_grpc_server_t *s);

/* Stops accepting: the listener closes, new calls are refused, calls in
 * flight go on. Safe to call more than once. */
void pk_grpc_server_shutdown(pk_grpc_server_t *s);

/* Cancels every call still in flight (after the grace period). */
void pk_grpc_server_cancel_all(pk_grpc_server_t *s);

/* Re-reads the --auth-token-file (on SIGHUP): calls after it are checked
 * against the new tokens. Returns 0 with a log line in msg, or a negative
 * pk_error code with why in msg (the tokens loaded before stay). */
int pk_grpc_server_reload_auth(pk_grpc_server_t *s, char *msg, size_t msglen);

/* Joins the workers and frees the server. Call only after on_stopped ran. */
void pk_grpc_server_destroy(pk_grpc_server_t *s);

#endif
