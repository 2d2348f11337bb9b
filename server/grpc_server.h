/* The gRPC side of packd on the gRPC C core API.
 *
 * Threads: two completion-queue threads poll the one completion queue (in
 * gRPC core they also drive the network I/O) and never plan: they accept
 * calls, authenticate them from their metadata before receiving their
 * message, answer Health/Check and unknown methods at once, learn when a
 * client goes away, and put Plan and GetRankPlan calls on the admission
 * queue (work_queue.h). A compressed message is inflated by packd, under
 * the decoded-bytes budget (request_body.h, decode_budget.h). --workers
 * planning threads take calls from that queue and run the handlers
 * (handlers.h); large Plans may use at most --large-workers of them. So
 * Health is answered while every worker plans, and small calls always find
 * a worker.
 *
 * Stopping a call: every call has a stop flag that the planner polls
 * (pk_limits_t.should_stop). It is set when the client goes away (the
 * RECV_CLOSE_ON_SERVER op, started as soon as the call arrives, reports it
 * on a completion-queue thread), when the call's deadline passes (checked
 * against the monotonic clock in the poll) and when the shutdown's grace
 * period ends (pk_grpc_server_abort). A stopped call is answered and
 * counted CANCELLED, DEADLINE_EXCEEDED or UNAVAILABLE, never as a request
 * error; a queued call whose client left is answered at once.
 *
 * Methods: packd.v1.Planner/Plan, packd.v1.Planner/GetRankPlan and
 * grpc.health.v1.Health/Check are registered; a generic request is always
 * pending so that any other method gets UNIMPLEMENTED at once (after the
 * token check: UNAUTHENTICATED without credentials).
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
#include <stdint.h>

#include "config.h"
#include "decode_budget.h"
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

/* The grace period is over: planning in flight stops (through the
 * planner's stop poll, within about 100 ms) and is answered UNAVAILABLE
 * ("the server is shutting down"), and every queued call is answered the
 * same at once. Answers already decided are still sent. */
void pk_grpc_server_abort(pk_grpc_server_t *s);

/* Cancels every call still in flight at the transport (the client sees
 * CANCELLED): the last resort after pk_grpc_server_abort, for answers that
 * cannot be delivered, and the second signal. */
void pk_grpc_server_cancel_all(pk_grpc_server_t *s);

/* The admission queue for /metrics: calls waiting per lane, large Plans
 * running. */
void pk_grpc_server_queue_stats(pk_grpc_server_t *s, int64_t *queued_small, int64_t *queued_large,
                                int64_t *running_large);

/* Re-reads the --auth-token-file (on SIGHUP): calls after it are checked
 * against the new tokens. Returns 0 with a log line in msg, or a negative
 * pk_error code with why in msg (the tokens loaded before stay). */
int pk_grpc_server_reload_auth(pk_grpc_server_t *s, char *msg, size_t msglen);

/* The budget of request bytes in flight, for /metrics. */
const pk_decode_budget_t *pk_grpc_server_decode_budget(const pk_grpc_server_t *s);

/* Joins the workers and frees the server. Call only after on_stopped ran. */
void pk_grpc_server_destroy(pk_grpc_server_t *s);

#endif
