/* Internals of the plan store shared by plan_store.c (the plan operations)
 * and plan_store_pool.c (connections, health, back-off, the prober). Not a
 * public interface: the rest of the server uses plan_store.h.
 *
 * Invariants, all under s->mu:
 *   - state is UNKNOWN until the first command succeeds or fails, UP after a
 *     success, DOWN after a failure. While DOWN no thread connects before
 *     retry_at, and then only one (`probing`), so an outage costs each call a
 *     refusal instead of a timeout; only the outcome of that caller's
 *     command, not its connect, can end the outage;
 *   - gen rises with every failure; an idle connection of an older
 *     generation is closed when found and never used, since whatever raised
 *     the generation (a restart, a network cut) likely broke it too;
 *   - a fetch in s->fetches is alive while refs > 0; once done it is never
 *     written again, so holders read it without the lock;
 *   - the replay queue (replay_head .. replay_tail, oldest first) holds the
 *     writes skipped while the store failed, replay_bytes in all, never
 *     more than T_REPLAY_BYTES: a new entry drops the oldest ones to fit.
 *     Only the prober takes entries out to write them.
 * No socket I/O happens under s->mu. */
#ifndef PK_PLAN_STORE_POOL_H
#define PK_PLAN_STORE_POOL_H

#include <pthread.h>
#include <stdint.h>

#include "config.h"
#include "plan_store.h"
#include "store_format.h"

/* Indexes into the tunables table (plan_store_pool.c). */
enum {
  T_CONNECT,
  T_COMMAND,
  T_BACKOFF_MIN,
  T_BACKOFF_MAX,
  T_PROBE,
  T_POOL_IDLE,
  T_REPLAY_BYTES,
  T_COUNT
};

/* Reads the tunables into v[T_COUNT] from their variables (fn NULL: the
 * process environment). Returns 0, or PK_EINVAL naming the variable. */
int pk_store_load_tunables(long *v, pk_getenv_fn fn, void *user, char *err, size_t errlen);

#ifdef PK_HAVE_HIREDIS
#include <hiredis/hiredis.h>

enum { ST_UNKNOWN, ST_UP, ST_DOWN };
enum { K_WRITE, K_READ, K_PROBE };

/* What one operation on a connection came to. */
typedef enum {
  R_OK,        /* Every reply read; the connection can be reused. */
  R_IO,        /* The connection failed (refused, closed, timed out). */
  R_STORE_ERR, /* The store answered with an error; the connection is dropped. */
} op_rc_t;

typedef struct conn {
  redisContext *rc;
  uint64_t gen;
  struct conn *next;
} conn_t;

typedef struct fetch {
  struct fetch *next;
  char plan_id[PK_STORE_ID_MAX + 1];
  int refs, done;
  pk_store_result_t rc;
  char msg[768];
  uint8_t *data; /* The plan in the plan cache's layout. */
  size_t *off;
  uint32_t nranks;
  double stored_at; /* Monotonic time the plan was written, from its TTL. */
  int cacheable;
} fetch_t;

/* A plan write the store missed, kept to be written when it is back: the
 * HSET arguments (argv[1] points to key) and the time the plan was made,
 * from which its remaining TTL is set. */
typedef struct replay {
  struct replay *next;
  double made_at;
  size_t bytes; /* What it counts against T_REPLAY_BYTES. */
  int argc;
  const char **argv;
  size_t *argvlen;
  char *fields;
  uint8_t *env;
  char key[PK_STORE_PREFIX_MAX + PK_STORE_ID_MAX + 1];
} replay_t;

struct pk_plan_store {
  pk_store_url_t url;
  char where[PK_STORE_HOST_MAX + 32];
  char prefix[PK_STORE_PREFIX_MAX];
  char version[PK_STORE_VERSION_MAX + 1];
  char ttl_ms[24];
  double ttl;
  long tun[T_COUNT];
  pk_plan_cache_t *cache;
  pthread_mutex_t mu;
  pthread_cond_t fetch_cv, probe_cv;
  conn_t *idle;
  int n_idle, max_idle;
  uint64_t gen;
  int state, probing, stopping;
  double backoff, retry_at, down_since, last_refusal_log;
  uint64_t skipped_in_outage;
  int auth_refused;        /* The store refused AUTH (or wanted one): a wrong password. */
  int64_t max_value_bytes; /* A plan's values above this are refused unread. */
  replay_t *replay_head, *replay_tail;
  size_t replay_bytes;
  char last_error[256];
  fetch_t *fetches;
  pk_store_stats_t st;
  pthread_t prober;
  int prober_started;
};

typedef op_rc_t (*op_fn)(pk_plan_store_t *s, redisContext *c, void *arg, char *why, size_t wl);

/* Runs op on a pooled or new connection (kind: K_WRITE, K_READ or
 * K_PROBE). A reused connection found closed is replaced once; a timeout is
 * not retried. Returns PK_STORE_OK when op ran to its end (its own result is
 * in arg), else PK_STORE_UNAVAILABLE with the reason in why. */
pk_store_result_t pk_store_run_op(pk_plan_store_t *s, int kind, op_fn op, void *arg, char *why,
                                  size_t wl);

/* The next reply of a pipeline; R_IO with the reason when none came. */
op_rc_t pk_store_next_reply(redisContext *c, redisReply **r, char *why, size_t wl);

/* PING, for the prober and the first connection. */
op_rc_t pk_store_op_ping(pk_plan_store_t *s, redisContext *c, void *arg, char *why, size_t wl);

void pk_store_conn_free(conn_t *c);

/* Copies at most n bytes of s, with anything but printable ASCII and '"'
 * replaced by '?', for messages that quote what the store holds. */
void pk_store_printable(const char *s, size_t n, char *out, size_t outlen);

#endif
#endif
