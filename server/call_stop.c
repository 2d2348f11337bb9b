/* The per-call stop flag (see call_stop.h). */
#include "call_stop.h"

#include <math.h>
#include <time.h>

#include "clock.h"

void pk_server_stop_init(pk_server_stop_t *ss) {
  atomic_init(&ss->aborting, false);
  atomic_init(&ss->t_abort, 0.0);
}

bool pk_server_stop_abort(pk_server_stop_t *ss) {
  if (atomic_load(&ss->aborting))
    return false;
  /* The time first: a poll that sees the flag reads a time already set. */
  atomic_store(&ss->t_abort, pk_monotonic_seconds());
  atomic_store(&ss->aborting, true);
  return true;
}

bool pk_server_stop_aborting(pk_server_stop_t *ss) {
  return atomic_load_explicit(&ss->aborting, memory_order_relaxed);
}

void pk_call_stop_init(pk_call_stop_t *cs, pk_server_stop_t *server, double deadline) {
  atomic_init(&cs->reason, PK_STOP_NONE);
  atomic_init(&cs->t_stop, 0.0);
  cs->deadline = deadline;
  cs->server = server;
}

void pk_call_stop_set(pk_call_stop_t *cs, int reason, double when) {
  int none = PK_STOP_NONE;
  /* Only the reason that wins writes its time. A reader may see the reason
   * a moment before the time; it then takes the cause as just now. */
  if (atomic_compare_exchange_strong(&cs->reason, &none, reason))
    atomic_store(&cs->t_stop, when);
}

bool pk_call_stop_near_deadline(const pk_call_stop_t *cs, double now) {
  return cs->deadline != INFINITY && now >= cs->deadline - PK_DEADLINE_SLACK_S;
}

void pk_call_stop_client_left(pk_call_stop_t *cs, double now) {
  if (pk_call_stop_near_deadline(cs, now))
    pk_call_stop_set(cs, PK_STOP_DEADLINE, now);
  else if (cs->server != NULL && pk_server_stop_aborting(cs->server))
    pk_call_stop_set(cs, PK_STOP_SHUTDOWN, atomic_load(&cs->server->t_abort));
  else
    pk_call_stop_set(cs, PK_STOP_CANCELLED, now);
}

int pk_call_stop_poll(void *arg) {
  pk_call_stop_t *cs = arg;
  if (atomic_load_explicit(&cs->reason, memory_order_relaxed) != PK_STOP_NONE)
    return 1;
  if (cs->server != NULL && pk_server_stop_aborting(cs->server)) {
    pk_call_stop_set(cs, PK_STOP_SHUTDOWN, atomic_load(&cs->server->t_abort));
    return 1;
  }
  /* A vDSO clock read: cheap enough for a poll every few thousand
   * iterations of the planner's loops. */
  if (cs->deadline != INFINITY && pk_monotonic_seconds() >= cs->deadline) {
    pk_call_stop_set(cs, PK_STOP_DEADLINE, cs->deadline);
    return 1;
  }
  return 0;
}

int pk_call_stop_reason(pk_call_stop_t *cs) {
  return atomic_load(&cs->reason);
}

int pk_call_stop_code(int reason) {
  switch (reason) {
  case PK_STOP_DEADLINE:
    return PK_GRPC_DEADLINE_EXCEEDED;
  case PK_STOP_SHUTDOWN:
    return PK_GRPC_UNAVAILABLE;
  default:
    return PK_GRPC_CANCELLED;
  }
}

void pk_call_stop_reply(pk_call_stop_t *cs, pk_reply_t *reply, const char *where,
                        pk_metrics_t *metrics) {
  int reason = atomic_load(&cs->reason);
  double t = atomic_load(&cs->t_stop);
  double after = t > 0 ? (pk_monotonic_seconds() - t) * 1e3 : 0.0;
  if (after < 0)
    after = 0;
  switch (reason) {
  case PK_STOP_DEADLINE:
    pk_reply_error(reply, PK_GRPC_DEADLINE_EXCEEDED,
                   "the deadline passed %s; stopped %.1f ms after it", where, after);
    break;
  case PK_STOP_SHUTDOWN:
    pk_reply_error(reply, PK_GRPC_UNAVAILABLE,
                   "the server is shutting down: the grace period ended %s; stopped %.1f ms "
                   "after it; retry on another replica",
                   where, after);
    break;
  default:
    pk_reply_error(reply, PK_GRPC_CANCELLED, "the client went away %s; stopped %.1f ms after it",
                   where, after);
    break;
  }
  if (metrics != NULL && reason > PK_STOP_NONE && reason < PK_STOP_REASONS)
    atomic_fetch_add(&metrics->stopped[reason], 1);
}

void pk_call_stop_sleep(pk_call_stop_t *cs, int ms) {
  double until = pk_monotonic_seconds() + ms / 1000.0;
  while (!pk_call_stop_poll(cs)) {
    double left = until - pk_monotonic_seconds();
    if (left <= 0)
      break;
    double step = left < 0.005 ? left : 0.005;
    struct timespec ts = {0, (long)(step * 1e9)};
    nanosleep(&ts, NULL);
  }
}
