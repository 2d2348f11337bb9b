/* Why and when a call stops before its answer is decided.
 *
 * Every call the server accepts has a stop flag. Three things set it: the
 * client leaving (the completion-queue thread learns it from the call's
 * close op), the call's deadline passing (compared with the monotonic
 * clock whenever the flag is polled), and the shutdown's grace period
 * ending (one flag for the whole server). The planner polls the flag
 * through pk_limits_t.should_stop; the debug delay and the queue check it
 * too. The first reason set wins and never changes, so the answer, the
 * metrics and the log line all name the same reason: CANCELLED,
 * DEADLINE_EXCEEDED or UNAVAILABLE, never the request's fault.
 *
 * The flag remembers when its cause arose, so the server can say how long
 * stopping took (the stop latency in the log line and the
 * packd_stop_latency_seconds histogram).
 *
 * Thread-safe: atomics only; nothing is allocated. */
#ifndef PK_CALL_STOP_H
#define PK_CALL_STOP_H

#include <stdatomic.h>
#include <stdbool.h>

#include "handlers.h"
#include "metrics.h"

/* A client cancels at its own deadline, which passes before the server's:
 * the client's clock started before the request was sent, the server's
 * when the request had arrived (a large request takes tens to hundreds of
 * milliseconds to arrive). A cancellation this close to the server's
 * deadline is counted as the deadline's. */
#define PK_DEADLINE_SLACK_S 1.0

/* The server's part: set once when the grace period ends. */
typedef struct pk_server_stop {
  atomic_bool aborting;
  _Atomic double t_abort; /* Monotonic seconds when it was set. */
} pk_server_stop_t;

typedef struct pk_call_stop {
  atomic_int reason;     /* pk_stop_reason_t; PK_STOP_NONE until stopped. */
  _Atomic double t_stop; /* When the cause arose (monotonic seconds). */
  double deadline;       /* The call's deadline (monotonic seconds); INFINITY: none. */
  pk_server_stop_t *server;
} pk_call_stop_t;

void pk_server_stop_init(pk_server_stop_t *ss);

/* The grace period is over: every call's poll says stop from now on.
 * Returns false when it had been set already. */
bool pk_server_stop_abort(pk_server_stop_t *ss);
bool pk_server_stop_aborting(pk_server_stop_t *ss);

void pk_call_stop_init(pk_call_stop_t *cs, pk_server_stop_t *server, double deadline);

/* Sets the flag unless it is set already (the first reason wins); `when`
 * is when the cause arose. */
void pk_call_stop_set(pk_call_stop_t *cs, int reason, double when);

/* The client's side of the call ended before the answer was decided (the
 * close op reported it cancelled) at monotonic time `now`: sets the flag
 * to DEADLINE when the deadline is within PK_DEADLINE_SLACK_S, to SHUTDOWN
 * during the end of a shutdown, else to CANCELLED. */
void pk_call_stop_client_left(pk_call_stop_t *cs, double now);

/* The planner's poll (pk_limits_t.should_stop; arg is the pk_call_stop_t):
 * nonzero once the flag is set, the server aborts or the deadline has
 * passed (the last two set the flag). One clock read when nothing is set. */
int pk_call_stop_poll(void *arg);

/* The reason, PK_STOP_NONE while the call runs on. */
int pk_call_stop_reason(pk_call_stop_t *cs);

/* Whether `now` is within PK_DEADLINE_SLACK_S of the deadline or past it. */
bool pk_call_stop_near_deadline(const pk_call_stop_t *cs, double now);

/* The gRPC status a stopped call is answered and counted with. */
int pk_call_stop_code(int reason);

/* Fills reply with that status and a message naming the reason, `where`
 * it struck ("while planning") and how long ago its cause arose; counts it
 * in metrics->stopped (metrics may be NULL). */
void pk_call_stop_reply(pk_call_stop_t *cs, pk_reply_t *reply, const char *where,
                        pk_metrics_t *metrics);

/* Sleeps ms milliseconds (the debug delay), in steps of at most 5 ms, and
 * returns early once the call is stopped. */
void pk_call_stop_sleep(pk_call_stop_t *cs, int ms);

#endif
