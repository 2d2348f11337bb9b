/* The shared plan store's operations over hiredis (see plan_store.h for the
 * design, plan_store_pool.h for the state and its invariants): writing a
 * plan (MULTI, DEL, HSET, PEXPIRE, EXEC), reading one (HGETALL and PTTL) and
 * checking every value of it, the single flight that lets overlapping
 * GetRankPlan calls for one plan share one read, and opening and closing
 * the store. Connections, health and back-off are in plan_store_pool.c. */
#include "plan_store.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "log.h"
#include "pk_error.h"
#include "plan_store_pool.h"
#include "store_format.h"

#ifdef PK_HAVE_HIREDIS

/* More fields than any plan has ranks: refused without reading them. */
#define PK_STORE_MAX_RANKS (1LL << 20)

typedef struct write_arg {
  const char *key;
  int argc;
  const char **argv;
  const size_t *argvlen;
  const char *ttl_ms; /* PEXPIRE's argument. */
} write_arg_t;

/* MULTI, DEL, HSET (every rank), PEXPIRE, EXEC: one round trip; the plan
 * appears whole with its expiry, or not at all. */
static op_rc_t op_write(pk_plan_store_t *s, redisContext *c, void *arg, char *why, size_t wl) {
  write_arg_t *w = arg;
  const char *del[2] = {"DEL", w->key};
  const char *exp[3] = {"PEXPIRE", w->key, w->ttl_ms};
  if (redisAppendCommand(c, "MULTI") != REDIS_OK ||
      redisAppendCommandArgv(c, 2, del, NULL) != REDIS_OK ||
      redisAppendCommandArgv(c, w->argc, w->argv, w->argvlen) != REDIS_OK ||
      redisAppendCommandArgv(c, 3, exp, NULL) != REDIS_OK ||
      redisAppendCommand(c, "EXEC") != REDIS_OK) {
    snprintf(why, wl, "cannot build the commands: %s", c->errstr);
    return R_IO;
  }
  op_rc_t rc = R_OK;
  for (int i = 0; i < 5; i++) {
    redisReply *r;
    op_rc_t got = pk_store_next_reply(c, &r, why, wl);
    if (got != R_OK)
      return got;
    if (rc == R_OK && r->type == REDIS_REPLY_ERROR) {
      static const char *const names[5] = {"MULTI", "DEL", "HSET", "PEXPIRE", "EXEC"};
      snprintf(why, wl, "%s: %.200s", names[i], r->str);
      rc = R_STORE_ERR;
    } else if (rc == R_OK && i == 4 && (r->type != REDIS_REPLY_ARRAY || r->elements != 3)) {
      snprintf(why, wl, "EXEC: the transaction was not run");
      rc = R_STORE_ERR;
    }
    freeReplyObject(r);
  }
  return rc;
}

static void replay_free(replay_t *r) {
  if (r == NULL)
    return;
  free(r->argv);
  free(r->argvlen);
  free(r->fields);
  free(r->env);
  free(r);
}

/* Keeps a write the store missed, dropping the oldest ones to stay within
 * T_REPLAY_BYTES. Returns true when the entry took the buffers. */
static bool enqueue_replay(pk_plan_store_t *s, const char *key, int argc, const char **argv,
                           size_t *argvlen, char *fields, uint8_t *env, size_t env_bytes) {
  size_t bytes = env_bytes + (size_t)argc * (sizeof *argv + sizeof *argvlen + 6) + sizeof(replay_t);
  if (s->tun[T_REPLAY_BYTES] <= 0 || bytes > (size_t)s->tun[T_REPLAY_BYTES]) {
    pthread_mutex_lock(&s->mu);
    s->st.replay_dropped++;
    pthread_mutex_unlock(&s->mu);
    return false;
  }
  replay_t *r = calloc(1, sizeof *r);
  if (r == NULL)
    return false;
  snprintf(r->key, sizeof r->key, "%s", key);
  argv[1] = r->key;
  r->made_at = pk_monotonic_seconds();
  r->bytes = bytes;
  r->argc = argc;
  r->argv = argv;
  r->argvlen = argvlen;
  r->fields = fields;
  r->env = env;
  replay_t *dropped = NULL;
  pthread_mutex_lock(&s->mu);
  while (s->replay_head != NULL && s->replay_bytes + bytes > (size_t)s->tun[T_REPLAY_BYTES]) {
    replay_t *old = s->replay_head;
    s->replay_head = old->next;
    if (s->replay_head == NULL)
      s->replay_tail = NULL;
    s->replay_bytes -= old->bytes;
    s->st.replay_queued--;
    s->st.replay_dropped++;
    old->next = dropped;
    dropped = old;
  }
  if (s->replay_tail != NULL)
    s->replay_tail->next = r;
  else
    s->replay_head = r;
  s->replay_tail = r;
  s->replay_bytes += bytes;
  s->st.replay_queued++;
  s->st.replay_queued_bytes = s->replay_bytes;
  pthread_mutex_unlock(&s->mu);
  while (dropped != NULL) {
    replay_t *n = dropped->next;
    replay_free(dropped);
    dropped = n;
  }
  return true;
}

/* Puts an entry the store did not take back at the front of the queue. */
static void requeue_front(pk_plan_store_t *s, replay_t *r) {
  pthread_mutex_lock(&s->mu);
  r->next = s->replay_head;
  s->replay_head = r;
  if (s->replay_tail == NULL)
    s->replay_tail = r;
  s->replay_bytes += r->bytes;
  s->st.replay_queued++;
  s->st.replay_queued_bytes = s->replay_bytes;
  pthread_mutex_unlock(&s->mu);
}

/* Writes the queued writes, oldest first, while the store takes them; on
 * the prober thread. */
static void store_replay(pk_plan_store_t *s) {
  uint64_t written = 0, expired = 0;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    replay_t *r = s->state == ST_UP && !s->stopping ? s->replay_head : NULL;
    if (r != NULL) {
      s->replay_head = r->next;
      if (s->replay_head == NULL)
        s->replay_tail = NULL;
      s->replay_bytes -= r->bytes;
      s->st.replay_queued--;
      s->st.replay_queued_bytes = s->replay_bytes;
    }
    pthread_mutex_unlock(&s->mu);
    if (r == NULL)
      break;
    /* The plan keeps the expiry it would have had: the TTL from when it
     * was made. */
    double left = s->ttl - (pk_monotonic_seconds() - r->made_at);
    if (left < 0.001) {
      expired++;
      pthread_mutex_lock(&s->mu);
      s->st.replay_expired++;
      pthread_mutex_unlock(&s->mu);
      replay_free(r);
      continue;
    }
    char ttl_ms[24], why[300];
    snprintf(ttl_ms, sizeof ttl_ms, "%lld", (long long)ceil(left * 1000.0));
    write_arg_t w = {r->key, r->argc, r->argv, r->argvlen, ttl_ms};
    if (pk_store_run_op(s, K_WRITE, op_write, &w, why, sizeof why) != PK_STORE_OK) {
      /* Down again: kept, for the next time it is up. */
      requeue_front(s, r);
      break;
    }
    written++;
    pthread_mutex_lock(&s->mu);
    s->st.replayed++;
    pthread_mutex_unlock(&s->mu);
    replay_free(r);
  }
  if (written > 0 || expired > 0)
    PK_LOG_INFO("plan store %s: wrote %llu plans it missed while it failed (%llu had expired "
                "before it was back)",
                s->where, (unsigned long long)written, (unsigned long long)expired);
}

/* The prober thread: it pings a store that is down (or every probe
 * interval when up) and, once the store answers, writes what the replay
 * queue holds. It lives at this level, above the pool, because the
 * replay is a store operation: the pool never calls back up. */
static void *store_prober(void *arg) {
  pk_plan_store_t *s = arg;
  pthread_mutex_lock(&s->mu);
  while (!s->stopping) {
    double wait = (double)s->tun[T_PROBE] / 1000.0;
    if (s->state == ST_DOWN)
      wait = fmin(wait, fmax(0.001, s->retry_at - pk_monotonic_seconds()));
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double at = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + wait;
    ts.tv_sec = (time_t)at;
    ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&s->probe_cv, &s->mu, &ts);
    if (s->stopping)
      break;
    pthread_mutex_unlock(&s->mu);
    char why[300];
    (void)pk_store_run_op(s, K_PROBE, pk_store_op_ping, NULL, why, sizeof why);
    store_replay(s);
    pthread_mutex_lock(&s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

pk_store_result_t pk_plan_store_put(pk_plan_store_t *s, const char *plan_id, uint32_t nranks,
                                    const uint8_t *data, const size_t *off, char *msg,
                                    size_t msglen) {
  char key[PK_STORE_PREFIX_MAX + PK_STORE_ID_MAX + 1];
  msg[0] = '\0';
  if (pk_store_key(key, sizeof key, s->prefix, plan_id) == 0 || nranks == 0) {
    snprintf(msg, msglen, "plan id \"%.80s\" cannot be a key", plan_id);
    return PK_STORE_UNAVAILABLE;
  }
  /* argv: HSET key, then field and envelope per rank; one buffer holds the
   * field names and one the envelopes. */
  size_t argc = 2 + 2 * (size_t)nranks;
  size_t total = 0;
  for (uint32_t r = 0; r < nranks; r++)
    total += pk_store_envelope_size(plan_id, s->version, off[r + 1] - off[r]);
  const char **argv = malloc(argc * sizeof *argv);
  size_t *argvlen = malloc(argc * sizeof *argvlen);
  char *fields = malloc((size_t)nranks * 11);
  uint8_t *env = malloc(total > 0 ? total : 1);
  pk_store_result_t res = PK_STORE_NOMEM;
  if (argv == NULL || argvlen == NULL || fields == NULL || env == NULL || argc > INT32_MAX) {
    snprintf(msg, msglen, "cannot allocate %zu bytes for the store write", total);
    goto out;
  }
  argv[0] = "HSET";
  argvlen[0] = 4;
  argv[1] = key;
  argvlen[1] = strlen(key);
  uint8_t *p = env;
  for (uint32_t r = 0; r < nranks; r++) {
    char *f = fields + (size_t)r * 11;
    argv[2 + 2 * r] = f;
    argvlen[2 + 2 * r] = (size_t)snprintf(f, 11, "%u", r);
    size_t n = pk_store_envelope_write(p, plan_id, s->version, r, nranks, data + off[r],
                                       off[r + 1] - off[r]);
    argv[3 + 2 * r] = (const char *)p;
    argvlen[3 + 2 * r] = n;
    p += n;
  }
  write_arg_t w = {key, (int)argc, argv, argvlen, s->ttl_ms};
  char why[300];
  res = pk_store_run_op(s, K_WRITE, op_write, &w, why, sizeof why);
  pthread_mutex_lock(&s->mu);
  if (res == PK_STORE_OK) {
    s->st.writes_ok++;
  } else {
    s->st.writes_skipped++;
    s->skipped_in_outage++;
  }
  pthread_mutex_unlock(&s->mu);
  if (res != PK_STORE_OK) {
    snprintf(msg, msglen, "plan store %s: %s", s->where, why);
    /* The queue takes the buffers. */
    if (enqueue_replay(s, key, (int)argc, argv, argvlen, fields, env, total)) {
      argv = NULL;
      argvlen = NULL;
      fields = NULL;
      env = NULL;
    }
  }
out:
  free(argv);
  free(argvlen);
  free(fields);
  free(env);
  return res;
}

typedef struct read_arg {
  const char *key;
  fetch_t *f;
} read_arg_t;

/* Checks a whole plan read with HGETALL and lays it out for the plan cache.
 * Any value that fails verification refuses the whole key: a plan with one
 * damaged rank is not a plan. */
static void parse_plan(pk_plan_store_t *s, const char *key, redisReply *h, fetch_t *f) {
  size_t n = h->elements / 2;
  const uint8_t **pay = calloc(n, sizeof *pay);
  size_t *plen = calloc(n, sizeof *plen);
  char why[256] = "", field[24];
  f->rc = PK_STORE_CORRUPT;
  if (pay == NULL || plen == NULL) {
    f->rc = PK_STORE_NOMEM;
    snprintf(f->msg, sizeof f->msg, "cannot allocate the index of a %zu-rank plan", n);
    goto out;
  }
  for (size_t i = 0; i < n && why[0] == '\0'; i++) {
    redisReply *fr = h->element[2 * i], *vr = h->element[2 * i + 1];
    pk_store_printable(fr->str ? fr->str : "", fr->str ? fr->len : 0, field, sizeof field);
    char *end = NULL;
    int digits = fr->type == REDIS_REPLY_STRING && fr->len > 0 && fr->len < 11 &&
                 fr->str[0] >= '0' && fr->str[0] <= '9';
    unsigned long r = digits ? strtoul(fr->str, &end, 10) : n;
    pk_store_envelope_t e;
    char ewhy[160];
    if (vr->type != REDIS_REPLY_STRING || r >= n || end != fr->str + fr->len || pay[r] != NULL)
      snprintf(why, sizeof why, "field \"%s\" is not a rank of a %zu-rank plan", field, n);
    else if (pk_store_envelope_open((const uint8_t *)vr->str, vr->len, f->plan_id, &e, ewhy,
                                    sizeof ewhy) != 0)
      snprintf(why, sizeof why, "field \"%s\" is damaged (%s)", field, ewhy);
    else if (e.rank != r || e.nranks != n)
      snprintf(why, sizeof why, "field \"%s\" holds rank %u of %u, the hash holds %zu ranks", field,
               e.rank, e.nranks, n);
    else if (strcmp(e.version, s->version) != 0) {
      f->rc = PK_STORE_UNAVAILABLE;
      snprintf(f->msg, sizeof f->msg,
               "plan store %.120s: key \"%.130s\" holds a plan made by packd %s, and this "
               "server is packd %s (versions may plan one request differently); retry against "
               "a packd %s server, or plan again",
               s->where, key, e.version, s->version, e.version);
      goto out;
    } else {
      pay[r] = e.payload;
      plen[r] = e.payload_len;
    }
  }
  if (why[0] != '\0') {
    snprintf(f->msg, sizeof f->msg,
             "plan store %s: key \"%s\" %s; the value is refused and the plan is not served "
             "(plan the same request again to rewrite it)",
             s->where, key, why);
    PK_LOG_ERROR("%s", f->msg);
    goto out;
  }
  f->off = malloc((n + 1) * sizeof *f->off);
  size_t total = 0;
  for (size_t r = 0; r < n; r++)
    total += plen[r];
  f->data = malloc(total > 0 ? total : 1);
  if (f->off == NULL || f->data == NULL) {
    f->rc = PK_STORE_NOMEM;
    snprintf(f->msg, sizeof f->msg, "cannot allocate %zu bytes for a plan", total);
    goto out;
  }
  f->off[0] = 0;
  for (size_t r = 0; r < n; r++) {
    memcpy(f->data + f->off[r], pay[r], plen[r]);
    f->off[r + 1] = f->off[r] + plen[r];
  }
  f->nranks = (uint32_t)n;
  f->rc = PK_STORE_OK;
out:
  free(pay);
  free(plen);
}

/* A reply that refuses the key as corrupt: f->rc and f->msg say why, and
 * the error is logged. */
static void refuse_key(pk_plan_store_t *s, fetch_t *f, const char *key, const char *why) {
  f->rc = PK_STORE_CORRUPT;
  snprintf(f->msg, sizeof f->msg,
           "plan store %s: key \"%s\" %s; the value is refused and the plan is not served "
           "(plan the same request again to rewrite it)",
           s->where, key, why);
  PK_LOG_ERROR("%s", f->msg);
}

/* The sizes of a plan's n values (fields "0" .. "n-1"), pipelined HSTRLEN,
 * before anything is read: a value larger than a plan this server could
 * have written is refused unread, so a planted or damaged huge value costs
 * one round trip, not a read that outlasts the command timeout (which
 * would mark the store down). Returns R_OK with *ok false when refused. */
static op_rc_t check_sizes(pk_plan_store_t *s, redisContext *c, const char *key, fetch_t *f,
                           long long n, bool *ok, char *why, size_t wl) {
  *ok = false;
  /* The envelope around each rank's plan, and a RankPlan's own fields. */
  int64_t per_value = (int64_t)pk_store_envelope_size(f->plan_id, s->version, 0) + 256;
  int64_t limit = s->max_value_bytes + (int64_t)n * per_value;
  for (long long i = 0; i < n; i++) {
    char field[24];
    snprintf(field, sizeof field, "%lld", i);
    const char *argv[3] = {"HSTRLEN", key, field};
    if (redisAppendCommandArgv(c, 3, argv, NULL) != REDIS_OK) {
      snprintf(why, wl, "cannot build the commands: %s", c->errstr);
      return R_IO;
    }
  }
  int64_t total = 0;
  char bad[200] = "";
  op_rc_t rc = R_OK;
  for (long long i = 0; i < n; i++) {
    redisReply *r;
    op_rc_t got = pk_store_next_reply(c, &r, why, wl);
    if (got != R_OK)
      return got; /* The connection is dropped: unread replies go with it. */
    if (rc == R_OK && r->type == REDIS_REPLY_ERROR) {
      snprintf(why, wl, "HSTRLEN: %.200s", r->str);
      rc = R_STORE_ERR;
    } else if (bad[0] == '\0' && (r->type != REDIS_REPLY_INTEGER || r->integer <= 0)) {
      snprintf(bad, sizeof bad, "has no value for rank %lld of %lld", i, n);
    } else if (bad[0] == '\0') {
      total += r->integer;
      if (total > limit)
        snprintf(bad, sizeof bad,
                 "holds more than %" PRId64 " bytes (rank %lld alone is %lld), more than a plan "
                 "within --max-message-bytes; not read",
                 limit, i, r->integer);
    }
    freeReplyObject(r);
  }
  if (rc == R_OK && bad[0] != '\0')
    refuse_key(s, f, key, bad);
  *ok = rc == R_OK && bad[0] == '\0';
  return rc;
}

/* HLEN and PTTL of the plan's key, the sizes of its values (check_sizes),
 * then HGETALL: three round trips on a cache miss, so that nothing larger
 * than a plan is ever read. */
static op_rc_t op_read(pk_plan_store_t *s, redisContext *c, void *arg, char *why, size_t wl) {
  read_arg_t *a = arg;
  fetch_t *f = a->f;
  const char *hl[2] = {"HLEN", a->key};
  const char *pt[2] = {"PTTL", a->key};
  if (redisAppendCommandArgv(c, 2, hl, NULL) != REDIS_OK ||
      redisAppendCommandArgv(c, 2, pt, NULL) != REDIS_OK) {
    snprintf(why, wl, "cannot build the commands: %s", c->errstr);
    return R_IO;
  }
  redisReply *h, *t;
  op_rc_t rc = pk_store_next_reply(c, &h, why, wl);
  if (rc != R_OK)
    return rc;
  rc = pk_store_next_reply(c, &t, why, wl);
  if (rc != R_OK) {
    freeReplyObject(h);
    return rc;
  }
  double now = pk_monotonic_seconds();
  long long n = h->type == REDIS_REPLY_INTEGER ? h->integer : -1;
  long long left = t->type == REDIS_REPLY_INTEGER ? t->integer : -2;
  if (h->type == REDIS_REPLY_ERROR && strncmp(h->str, "WRONGTYPE", 9) != 0) {
    snprintf(why, wl, "HLEN: %.200s", h->str);
    rc = R_STORE_ERR;
  } else if (n < 0) {
    refuse_key(s, f, a->key, "holds something other than a packd plan hash");
  } else if (n == 0) {
    f->rc = PK_STORE_ABSENT;
  } else if (n > PK_STORE_MAX_RANKS) {
    refuse_key(s, f, a->key, "has too many fields for a plan");
  }
  freeReplyObject(h);
  freeReplyObject(t);
  if (rc != R_OK || n <= 0 || n > PK_STORE_MAX_RANKS)
    return rc;
  bool ok;
  rc = check_sizes(s, c, a->key, f, n, &ok, why, wl);
  if (rc != R_OK || !ok)
    return rc;
  const char *hg[2] = {"HGETALL", a->key};
  if (redisAppendCommandArgv(c, 2, hg, NULL) != REDIS_OK) {
    snprintf(why, wl, "cannot build the commands: %s", c->errstr);
    return R_IO;
  }
  rc = pk_store_next_reply(c, &h, why, wl);
  if (rc != R_OK)
    return rc;
  if (h->type == REDIS_REPLY_ERROR && strncmp(h->str, "WRONGTYPE", 9) != 0) {
    snprintf(why, wl, "HGETALL: %.200s", h->str);
    rc = R_STORE_ERR;
  } else if (h->type != REDIS_REPLY_ARRAY || h->elements % 2 != 0) {
    refuse_key(s, f, a->key, "holds something other than a packd plan hash");
  } else if (h->elements == 0) {
    f->rc = PK_STORE_ABSENT; /* Expired between the two reads. */
  } else {
    parse_plan(s, a->key, h, f);
    /* Cached only as long as the store keeps it: PTTL -1 (no expiry) counts
     * as just written, -2 (expired since) is served once, not cached. */
    f->cacheable = left != -2;
    double age = left >= 0 ? fmax(0.0, s->ttl - (double)left / 1000.0) : 0.0;
    f->stored_at = now - age;
  }
  freeReplyObject(h);
  return rc;
}

/* Fetches the plan of f from the store; fills f->rc and f->msg. */
static void do_fetch(pk_plan_store_t *s, fetch_t *f) {
  char key[PK_STORE_PREFIX_MAX + PK_STORE_ID_MAX + 1], why[300];
  if (pk_store_key(key, sizeof key, s->prefix, f->plan_id) == 0) {
    f->rc = PK_STORE_ABSENT;
    return;
  }
  read_arg_t a = {key, f};
  f->rc = PK_STORE_UNAVAILABLE;
  if (pk_store_run_op(s, K_READ, op_read, &a, why, sizeof why) != PK_STORE_OK) {
    f->rc = PK_STORE_UNAVAILABLE;
    snprintf(f->msg, sizeof f->msg,
             "plan store %.120s: %.260s; plan_id \"%s\" is not held by this server: retry in "
             "a few seconds, or plan again",
             s->where, why, f->plan_id);
    pthread_mutex_lock(&s->mu);
    s->st.reads_unavailable++;
    pthread_mutex_unlock(&s->mu);
    return;
  }
  pthread_mutex_lock(&s->mu);
  if (f->rc == PK_STORE_OK)
    s->st.reads_hit++;
  else if (f->rc == PK_STORE_ABSENT)
    s->st.reads_absent++;
  else if (f->rc == PK_STORE_CORRUPT) {
    s->st.reads_corrupt++;
    s->st.corrupt++;
  } else {
    s->st.reads_unavailable++;
  }
  pthread_mutex_unlock(&s->mu);
}

pk_store_result_t pk_plan_store_get_rank(pk_plan_store_t *s, const char *plan_id, uint32_t rank,
                                         uint8_t **bytes, size_t *len, uint32_t *nranks, char *msg,
                                         size_t msglen) {
  *bytes = NULL;
  *len = 0;
  msg[0] = '\0';
  if (strlen(plan_id) > PK_STORE_ID_MAX) {
    snprintf(msg, msglen, "plan store %s has no such plan (no plan id is that long)", s->where);
    return PK_STORE_ABSENT;
  }
  pthread_mutex_lock(&s->mu);
  fetch_t *f = s->fetches;
  while (f != NULL && strcmp(f->plan_id, plan_id) != 0)
    f = f->next;
  int fetcher = f == NULL;
  if (fetcher) {
    f = calloc(1, sizeof *f);
    if (f == NULL) {
      pthread_mutex_unlock(&s->mu);
      snprintf(msg, msglen, "cannot allocate a fetch");
      return PK_STORE_NOMEM;
    }
    snprintf(f->plan_id, sizeof f->plan_id, "%s", plan_id);
    f->next = s->fetches;
    s->fetches = f;
  } else {
    s->st.coalesced++;
  }
  f->refs++;
  pthread_mutex_unlock(&s->mu);

  if (fetcher) {
    do_fetch(s, f);
    pthread_mutex_lock(&s->mu);
    f->done = 1;
    pthread_cond_broadcast(&s->fetch_cv);
    pthread_mutex_unlock(&s->mu);
  } else {
    pthread_mutex_lock(&s->mu);
    while (!f->done)
      pthread_cond_wait(&s->fetch_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
  }

  /* The fetch is done and immutable; the reference keeps it alive. */
  pk_store_result_t res = f->rc;
  if (res == PK_STORE_OK) {
    *nranks = f->nranks;
    if (rank >= f->nranks) {
      res = PK_STORE_BAD_RANK;
    } else {
      *len = f->off[rank + 1] - f->off[rank];
      *bytes = malloc(*len > 0 ? *len : 1);
      if (*bytes == NULL)
        res = PK_STORE_NOMEM;
      else
        memcpy(*bytes, f->data + f->off[rank], *len);
    }
  } else if (res == PK_STORE_ABSENT) {
    snprintf(msg, msglen, "plan store %s has no such plan (expired, or never planned)", s->where);
  } else {
    snprintf(msg, msglen, "%s", f->msg);
  }

  pthread_mutex_lock(&s->mu);
  int last = --f->refs == 0;
  if (last) {
    fetch_t **pp = &s->fetches;
    while (*pp != f)
      pp = &(*pp)->next;
    *pp = f->next;
  }
  pthread_mutex_unlock(&s->mu);
  if (last) {
    /* The cache takes the data (and frees it if it does not fit). */
    if (f->rc == PK_STORE_OK && f->cacheable && s->cache != NULL) {
      pk_plan_cache_put(s->cache, f->plan_id, f->nranks, f->data, f->off, f->stored_at);
      f->data = NULL;
    }
    free(f->data);
    free(f->off);
    free(f);
  }
  return res;
}

int pk_plan_store_open(const pk_plan_store_options_t *o, pk_plan_store_t **out, char *err,
                       size_t errlen) {
  *out = NULL;
  pk_plan_store_t *s = calloc(1, sizeof *s);
  if (s == NULL)
    return PK_ENOMEM;
  char uerr[400];
  int rc = pk_store_url_parse(o->url, &s->url, uerr, sizeof uerr);
  if (rc == PK_OK)
    rc = pk_store_load_tunables(s->tun, o->getenv_fn, o->getenv_user, err, errlen);
  else
    snprintf(err, errlen, "--plan-store: %s", uerr);
  if (rc == PK_OK && pk_store_prefix_check(o->prefix) != PK_OK) {
    snprintf(err, errlen, "--plan-store-prefix: \"%.80s\" is not 1 to %d printable characters",
             o->prefix, PK_STORE_PREFIX_MAX - 1);
    rc = PK_EINVAL;
  }
  if (rc != PK_OK) {
    free(s);
    return rc;
  }
  if (o->password != NULL && o->password[0] != '\0') {
    snprintf(s->url.password, sizeof s->url.password, "%s", o->password);
    s->url.has_password = 1;
  }
  pk_store_url_describe(&s->url, s->where, sizeof s->where);
  snprintf(s->prefix, sizeof s->prefix, "%s", o->prefix);
  snprintf(s->version, sizeof s->version, "%s", o->version ? o->version : "");
  s->ttl = o->ttl;
  snprintf(s->ttl_ms, sizeof s->ttl_ms, "%lld", (long long)fmax(1.0, ceil(o->ttl * 1000.0)));
  s->cache = o->cache;
  s->max_idle =
      s->tun[T_POOL_IDLE] > 0 ? (int)s->tun[T_POOL_IDLE] : (o->workers > 0 ? o->workers : 1);
  s->st.where = s->where;
  s->max_value_bytes = o->max_value_bytes > 0 ? o->max_value_bytes : INT64_MAX / 2;
  pthread_mutex_init(&s->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->probe_cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_cond_init(&s->fetch_cv, NULL);
  /* One connection now, so the start-up log says where the store stands;
   * a store that is down is retried by the prober. */
  char why[300];
  (void)pk_store_run_op(s, K_PROBE, pk_store_op_ping, NULL, why, sizeof why);
  if (s->auth_refused && !o->optional) {
    snprintf(err, errlen,
             "--plan-store %s refused authentication (%s): fix the password "
             "(--plan-store-password-file or the URL), or pass --plan-store-optional to serve "
             "without the store until it accepts",
             s->where, why);
    pk_plan_store_close(s);
    return PK_EINVAL;
  }
  if (s->auth_refused)
    PK_LOG_ERROR("plan store %s refused authentication (%s); serving without it "
                 "(--plan-store-optional) and retrying",
                 s->where, why);
  if (pthread_create(&s->prober, NULL, store_prober, s) == 0)
    s->prober_started = 1;
  else
    PK_LOG_WARN("plan store %s: no prober thread; reconnecting on calls only", s->where);
  *out = s;
  return PK_OK;
}

void pk_plan_store_close(pk_plan_store_t *s) {
  if (s == NULL)
    return;
  pthread_mutex_lock(&s->mu);
  s->stopping = 1;
  pthread_cond_broadcast(&s->probe_cv);
  pthread_mutex_unlock(&s->mu);
  if (s->prober_started)
    pthread_join(s->prober, NULL);
  while (s->idle != NULL) {
    conn_t *n = s->idle->next;
    pk_store_conn_free(s->idle);
    s->idle = n;
  }
  while (s->replay_head != NULL) {
    replay_t *n = s->replay_head->next;
    replay_free(s->replay_head);
    s->replay_head = n;
  }
  pthread_cond_destroy(&s->probe_cv);
  pthread_cond_destroy(&s->fetch_cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

void pk_plan_store_stats(pk_plan_store_t *s, pk_store_stats_t *out) {
  pthread_mutex_lock(&s->mu);
  *out = s->st;
  pthread_mutex_unlock(&s->mu);
}

#else /* !PK_HAVE_HIREDIS */

/* Built without libhiredis-dev: --plan-store refuses to start, everything
 * else works. */
int pk_plan_store_open(const pk_plan_store_options_t *o, pk_plan_store_t **out, char *err,
                       size_t errlen) {
  (void)o;
  *out = NULL;
  snprintf(err, errlen,
           "--plan-store: this packd was built without hiredis; install libhiredis-dev and "
           "rebuild");
  return PK_EINVAL;
}

void pk_plan_store_close(pk_plan_store_t *s) {
  (void)s;
}

pk_store_result_t pk_plan_store_put(pk_plan_store_t *s, const char *plan_id, uint32_t nranks,
                                    const uint8_t *data, const size_t *off, char *msg,
                                    size_t msglen) {
  (void)s, (void)plan_id, (void)nranks, (void)data, (void)off;
  snprintf(msg, msglen, "no plan store");
  return PK_STORE_UNAVAILABLE;
}

pk_store_result_t pk_plan_store_get_rank(pk_plan_store_t *s, const char *plan_id, uint32_t rank,
                                         uint8_t **bytes, size_t *len, uint32_t *nranks, char *msg,
                                         size_t msglen) {
  (void)s, (void)plan_id, (void)rank, (void)nranks;
  *bytes = NULL;
  *len = 0;
  snprintf(msg, msglen, "no plan store");
  return PK_STORE_UNAVAILABLE;
}

void pk_plan_store_stats(pk_plan_store_t *s, pk_store_stats_t *out) {
  (void)s;
  memset(out, 0, sizeof *out);
}

#endif
