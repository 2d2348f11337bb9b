/* The plan store's connections (see plan_store_pool.h for the invariants):
 * the tunables, dialling with timeouts and AUTH/SELECT, the pool of idle
 * connections, the health state with its back-off, running one pipelined
 * operation with one retry on a connection that a restart closed, and the
 * prober thread.
 *
 * Why a pool of blocking connections: the handlers run on the gRPC worker
 * threads and must wait for the store's answer anyway, so each worker uses
 * one connection at a time, with socket timeouts bounding every wait. */
#include "plan_store_pool.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "pk_error.h"

/* The tunables, after NCCL's habit: one table, one variable each, read once
 * at start-up. Values outside [min, max] refuse to start. */

typedef struct tunable {
  const char *name, *env;
  long def, min, max;
  const char *unit, *why;
} tunable_t;

static const tunable_t k_tunables[T_COUNT] = {
    {"connect_timeout", "PACKD_PLAN_STORE_CONNECT_TIMEOUT_MS", 250, 1, 60000, "ms",
     "TCP connect plus AUTH and SELECT; a store in the same cluster answers in well under "
     "10 ms, and a Plan waits at most this long on a store that is gone"},
    {"command_timeout", "PACKD_PLAN_STORE_COMMAND_TIMEOUT_MS", 500, 1, 600000, "ms",
     "each socket send or receive of a command; a stopped store costs a call this much, "
     "not the client's whole deadline"},
    {"backoff_min", "PACKD_PLAN_STORE_BACKOFF_MIN_MS", 100, 1, 600000, "ms",
     "pause after the first failure before the next connection attempt; calls meanwhile "
     "are refused at once instead of each waiting for a timeout"},
    {"backoff_max", "PACKD_PLAN_STORE_BACKOFF_MAX_MS", 5000, 1, 3600000, "ms",
     "the pause doubles per failed attempt up to this, so a store that is back is used "
     "again within this time"},
    {"probe_interval", "PACKD_PLAN_STORE_PROBE_INTERVAL_MS", 2000, 10, 3600000, "ms",
     "a background PING keeps packd_plan_store_up true without traffic and finds an "
     "outage before a call does"},
    {"pool_idle", "PACKD_PLAN_STORE_POOL_IDLE", 0, 0, 4096, "connections",
     "idle connections kept open; 0 means --workers, since a worker thread uses at most "
     "one at a time"},
    {"replay_bytes", "PACKD_PLAN_STORE_REPLAY_BYTES", 64L << 20, 0, 1L << 40, "bytes",
     "plans whose write the store missed (down, stalled) are kept up to this size and "
     "written when it is back, oldest dropped first, so other replicas find them; 0 keeps "
     "none"},
};

void pk_plan_store_usage(FILE *out) {
  fprintf(out, "\nPlan store tunables (environment only; see docs/operators.md):\n");
  for (int i = 0; i < T_COUNT; i++)
    fprintf(out, "  %-38s %ld %s: %s\n", k_tunables[i].env, k_tunables[i].def, k_tunables[i].unit,
            k_tunables[i].why);
}

static const char *process_getenv(const char *name, void *user) {
  (void)user;
  return getenv(name);
}

int pk_store_load_tunables(long *v, pk_getenv_fn fn, void *user, char *err, size_t errlen) {
  if (fn == NULL)
    fn = process_getenv;
  for (int i = 0; i < T_COUNT; i++) {
    const tunable_t *t = &k_tunables[i];
    v[i] = t->def;
    const char *text = fn(t->env, user);
    if (text == NULL || *text == '\0')
      continue;
    char *end;
    errno = 0;
    long x = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || x < t->min || x > t->max) {
      snprintf(err, errlen, "%s: \"%s\" is not an integer from %ld to %ld (%s)", t->env, text,
               t->min, t->max, t->unit);
      return PK_EINVAL;
    }
    v[i] = x;
  }
  if (v[T_BACKOFF_MAX] < v[T_BACKOFF_MIN]) {
    snprintf(err, errlen, "%s (%ld) is below %s (%ld)", k_tunables[T_BACKOFF_MAX].env,
             v[T_BACKOFF_MAX], k_tunables[T_BACKOFF_MIN].env, v[T_BACKOFF_MIN]);
    return PK_EINVAL;
  }
  return PK_OK;
}

#ifdef PK_HAVE_HIREDIS

static const char *const k_op_names[] = {"write", "read", "probe"};

static struct timeval ms_tv(long ms) {
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
  return tv;
}

/* Replaces bytes a log line should not carry (a field name from the store
 * may be anything). */
void pk_store_printable(const char *s, size_t n, char *out, size_t outlen) {
  size_t o = 0;
  for (size_t i = 0; i < n && o + 1 < outlen; i++)
    out[o++] = (s[i] >= ' ' && s[i] <= '~' && s[i] != '"') ? s[i] : '?';
  out[o] = '\0';
}

void pk_store_conn_free(conn_t *c) {
  if (c != NULL) {
    redisFree(c->rc);
    free(c);
  }
}

/* Under s->mu: a success moves the store to UP and says so once. */
static void mark_up_locked(pk_plan_store_t *s) {
  if (s->state == ST_DOWN)
    PK_LOG_INFO("plan store %s is back after %.1fs; %llu Plans made meanwhile missed it (the "
                "replay queue writes those it holds)",
                s->where, pk_monotonic_seconds() - s->down_since,
                (unsigned long long)s->skipped_in_outage);
  else if (s->state == ST_UNKNOWN)
    PK_LOG_INFO("plan store %s: connected", s->where);
  s->state = ST_UP;
  s->st.up = true;
  s->probing = 0;
  /* The prober writes the missed plans now, not a probe interval later. */
  if (s->replay_head != NULL)
    pthread_cond_signal(&s->probe_cv);
}

/* A connection or command failed. The first failure of an outage logs it
 * and starts the back-off; later failures of calls that were already under
 * way only count, and only the probing attempt doubles the back-off, so a
 * burst of failing calls does not push the next attempt far out. */
static void mark_failure(pk_plan_store_t *s, int kind, int was_probing, const char *why) {
  double now = pk_monotonic_seconds();
  pthread_mutex_lock(&s->mu);
  if (kind == K_WRITE)
    s->st.errors_write++;
  else if (kind == K_READ)
    s->st.errors_read++;
  else
    s->st.errors_probe++;
  s->gen++;
  snprintf(s->last_error, sizeof s->last_error, "%s", why);
  if (s->state != ST_DOWN) {
    s->state = ST_DOWN;
    s->st.up = false;
    s->st.outages++;
    s->down_since = now;
    s->skipped_in_outage = 0;
    s->backoff = (double)s->tun[T_BACKOFF_MIN] / 1000.0;
    s->retry_at = now + s->backoff;
    PK_LOG_WARN("plan store %s is down: %s. Plans are answered without being shared (each "
                "stays on the server that made it) and GetRankPlan answers UNAVAILABLE for "
                "plans this server does not hold, until it is back; reconnecting with a "
                "back-off of %ld to %ld ms",
                s->where, why, s->tun[T_BACKOFF_MIN], s->tun[T_BACKOFF_MAX]);
    /* The prober may be asleep for a whole probe interval: wake it so it
     * reconnects after the back-off, with or without traffic. */
    pthread_cond_signal(&s->probe_cv);
  } else if (was_probing) {
    s->backoff = fmin(s->backoff * 2, (double)s->tun[T_BACKOFF_MAX] / 1000.0);
    s->retry_at = now + s->backoff;
  }
  if (was_probing)
    s->probing = 0;
  pthread_mutex_unlock(&s->mu);
}

/* Sends one handshake command (AUTH, SELECT) and wants a status reply. */
static int handshake(redisContext *c, int argc, const char **argv, const char *what, char *why,
                     size_t wl) {
  redisReply *r = redisCommandArgv(c, argc, argv, NULL);
  if (r == NULL) {
    snprintf(why, wl, "%s: %s", what, c->errstr[0] ? c->errstr : "no reply");
    return -1;
  }
  int ok = r->type == REDIS_REPLY_STATUS;
  if (!ok)
    snprintf(why, wl, "%s refused: %.200s", what,
             r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
  freeReplyObject(r);
  return ok ? 0 : -1;
}

/* Opens and prepares one connection: connect, AUTH, SELECT, timeouts. */
static redisContext *dial(pk_plan_store_t *s, char *why, size_t wl) {
  redisContext *c = redisConnectWithTimeout(s->url.host, s->url.port, ms_tv(s->tun[T_CONNECT]));
  if (c == NULL) {
    snprintf(why, wl, "cannot allocate a connection");
    return NULL;
  }
  if (c->err) {
    snprintf(why, wl, "connect: %s", c->errstr);
    redisFree(c);
    return NULL;
  }
  /* The handshake gets the connect budget; commands get theirs after. */
  if (redisSetTimeout(c, ms_tv(s->tun[T_CONNECT])) != REDIS_OK ||
      redisEnableKeepAlive(c) != REDIS_OK) {
    snprintf(why, wl, "socket options: %s", c->errstr);
    redisFree(c);
    return NULL;
  }
  if (s->url.has_password) {
    /* AUTH PASSWORD, or AUTH USER PASSWORD for a Redis 6 ACL user. */
    const char *argv[3];
    int argc = 0;
    argv[argc++] = "AUTH";
    if (s->url.user[0] != '\0')
      argv[argc++] = s->url.user;
    argv[argc++] = s->url.password;
    if (handshake(c, argc, argv, "AUTH", why, wl) != 0) {
      /* An answer that refuses (not a lost connection) is a wrong password
       * or user: pk_plan_store_open fails start-up on it. */
      int refused = c->err == 0;
      redisFree(c);
      if (refused) {
        pthread_mutex_lock(&s->mu);
        s->auth_refused = 1;
        pthread_mutex_unlock(&s->mu);
      }
      return NULL;
    }
  }
  if (s->url.db != 0) {
    char db[16];
    snprintf(db, sizeof db, "%d", s->url.db);
    if (handshake(c, 2, (const char *[]){"SELECT", db}, "SELECT", why, wl) != 0) {
      redisFree(c);
      return NULL;
    }
  }
  if (redisSetTimeout(c, ms_tv(s->tun[T_COMMAND])) != REDIS_OK) {
    snprintf(why, wl, "socket options: %s", c->errstr);
    redisFree(c);
    return NULL;
  }
  return c;
}

/* Takes an idle connection or dials one. Returns 0; 1 when refused without
 * trying (the store is down and backing off: why says so, nothing is
 * counted); -1 when dialling failed (counted, marked). *probing is set when
 * this call is the one attempt allowed while the store is down: only the
 * outcome of its command, not a connect that the kernel may accept for a
 * stopped server, decides whether the store is back. */
static int acquire(pk_plan_store_t *s, int kind, conn_t **out, int *reused, int *probing_out,
                   char *why, size_t wl) {
  double now = pk_monotonic_seconds();
  int probing = 0;
  conn_t *stale = NULL;
  *out = NULL;
  *reused = 0;
  *probing_out = 0;
  pthread_mutex_lock(&s->mu);
  if (s->state == ST_DOWN) {
    if (now < s->retry_at || s->probing) {
      snprintf(why, wl, "unreachable for %.1fs (%.200s); next connection attempt in %.1fs",
               now - s->down_since, s->last_error, fmax(0.0, s->retry_at - now));
      pthread_mutex_unlock(&s->mu);
      return 1;
    }
    s->probing = probing = 1;
  }
  /* A probe dials afresh: every idle connection predates the failure. */
  while (s->idle != NULL && !probing) {
    conn_t *c = s->idle;
    s->idle = c->next;
    s->n_idle--;
    if (c->gen == s->gen) {
      *out = c;
      *reused = 1;
      break;
    }
    c->next = stale;
    stale = c;
  }
  uint64_t gen = s->gen;
  pthread_mutex_unlock(&s->mu);
  while (stale != NULL) {
    conn_t *n = stale->next;
    pk_store_conn_free(stale);
    stale = n;
  }
  if (*out != NULL)
    return 0;
  conn_t *c = calloc(1, sizeof *c);
  if (c != NULL)
    c->rc = dial(s, why, wl);
  else
    snprintf(why, wl, "out of memory");
  if (c == NULL || c->rc == NULL) {
    free(c);
    mark_failure(s, kind, probing, why);
    return -1;
  }
  c->gen = gen;
  pthread_mutex_lock(&s->mu);
  s->st.connects++;
  pthread_mutex_unlock(&s->mu);
  *out = c;
  *probing_out = probing;
  return 0;
}

/* After a command that succeeded: the store is up. Gives the connection
 * back to the pool, or closes it. */
static void release(pk_plan_store_t *s, conn_t *c) {
  pthread_mutex_lock(&s->mu);
  if (s->state != ST_UP)
    mark_up_locked(s);
  if (c->gen == s->gen && s->n_idle < s->max_idle) {
    c->next = s->idle;
    s->idle = c;
    s->n_idle++;
    c = NULL;
  }
  pthread_mutex_unlock(&s->mu);
  pk_store_conn_free(c);
}

static int store_up(pk_plan_store_t *s) {
  pthread_mutex_lock(&s->mu);
  int up = s->state == ST_UP;
  pthread_mutex_unlock(&s->mu);
  return up;
}

/* errno of the last failed read or write of this thread's operation. */
static _Thread_local int t_errno;

/* Runs op on a connection. A reused connection that turns out closed (the
 * store restarted while it sat idle) is replaced once by a fresh one; a
 * timeout is not retried, since the store is then slow, not gone. Returns
 * PK_STORE_OK when op ran to its end (its own result is in arg), else
 * PK_STORE_UNAVAILABLE with the reason in why. */
pk_store_result_t pk_store_run_op(pk_plan_store_t *s, int kind, op_fn op, void *arg, char *why,
                                  size_t wl) {
  for (int attempt = 0; attempt < 2; attempt++) {
    conn_t *c;
    int reused, probing;
    if (acquire(s, kind, &c, &reused, &probing, why, wl) != 0)
      return PK_STORE_UNAVAILABLE;
    t_errno = 0;
    uint64_t gen = c->gen;
    op_rc_t r = op(s, c->rc, arg, why, wl);
    int err = c->rc->err, saved_errno = t_errno;
    if (r == R_OK) {
      release(s, c);
      return PK_STORE_OK;
    }
    pk_store_conn_free(c);
    if (r == R_IO) {
      int closed = err == REDIS_ERR_EOF ||
                   (err == REDIS_ERR_IO && (saved_errno == ECONNRESET || saved_errno == EPIPE));
      if (reused && attempt == 0 && closed) {
        /* Its idle siblings are likely closed too: retire them all, so the
         * second attempt dials instead of taking another dead one. */
        pthread_mutex_lock(&s->mu);
        if (gen == s->gen)
          s->gen++;
        pthread_mutex_unlock(&s->mu);
        continue;
      }
      if (err == REDIS_ERR_IO && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK))
        snprintf(why, wl, "no answer within %ld ms", s->tun[T_COMMAND]);
      mark_failure(s, kind, probing, why);
    } else if (probing || !store_up(s)) {
      /* A store that answers only errors (LOADING after a restart, say) is
       * not back yet. */
      mark_failure(s, kind, probing, why);
    } else {
      /* An error reply: the store is there but refuses (OOM, READONLY,
       * LOADING...). Counted, logged at most once a minute, not an outage. */
      double now = pk_monotonic_seconds();
      pthread_mutex_lock(&s->mu);
      if (kind == K_WRITE)
        s->st.errors_write++;
      else if (kind == K_READ)
        s->st.errors_read++;
      else
        s->st.errors_probe++;
      int log_it = now - s->last_refusal_log >= 60.0 || s->last_refusal_log == 0;
      if (log_it)
        s->last_refusal_log = now;
      pthread_mutex_unlock(&s->mu);
      if (log_it)
        PK_LOG_WARN("plan store %s refused a %s: %s (logged at most once a minute)", s->where,
                    k_op_names[kind], why);
    }
    return PK_STORE_UNAVAILABLE;
  }
  return PK_STORE_UNAVAILABLE;
}

/* Reads the next reply; R_IO with the connection's error when none came
 * (errno of the failed socket call in t_errno). */
op_rc_t pk_store_next_reply(redisContext *c, redisReply **r, char *why, size_t wl) {
  void *p = NULL;
  *r = NULL;
  if (redisGetReply(c, &p) != REDIS_OK || p == NULL) {
    t_errno = errno;
    snprintf(why, wl, "%s", c->errstr[0] ? c->errstr : "connection lost");
    return R_IO;
  }
  *r = p;
  return R_OK;
}

op_rc_t pk_store_op_ping(pk_plan_store_t *s, redisContext *c, void *arg, char *why, size_t wl) {
  (void)arg;
  if (redisAppendCommand(c, "PING") != REDIS_OK)
    return R_IO;
  redisReply *r;
  op_rc_t rc = pk_store_next_reply(c, &r, why, wl);
  if (rc != R_OK)
    return rc;
  if (r->type == REDIS_REPLY_ERROR) {
    snprintf(why, wl, "PING: %.200s", r->str);
    rc = R_STORE_ERR;
    /* A store with a password that packd was not given. */
    if (strncmp(r->str, "NOAUTH", 6) == 0) {
      pthread_mutex_lock(&s->mu);
      s->auth_refused = 1;
      pthread_mutex_unlock(&s->mu);
    }
  }
  freeReplyObject(r);
  return rc;
}

#endif
