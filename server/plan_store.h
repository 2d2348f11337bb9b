/* The shared plan store: every replica of packd writes the rank plans of each
 * Plan to one Redis-protocol server, so that GetRankPlan on any replica (or
 * on any trainer's sidecar) can answer for a plan made on another.
 *
 * Threading. The handlers run synchronously on the gRPC worker threads, and a
 * GetRankPlan answer needs the store's data, so the worker has to wait for
 * the store either way. The store therefore uses hiredis's blocking API from
 * the calling worker through a small pool of connections (one per worker at
 * most), with socket timeouts on every connect and command: no hop to another
 * thread and back, and the number of waits is bounded by the worker count. A
 * background thread PINGs the store so that packd_plan_store_up is current
 * without traffic and reconnects after an outage.
 *
 * Data. One Redis hash per plan, key PREFIX + plan_id, field "R" for rank R
 * holding the rank's envelope (store_format.h), written as MULTI, DEL, HSET
 * of every rank, PEXPIRE (the plan cache TTL), EXEC in one pipelined round
 * trip. A hash rather than one key per rank because (1) MULTI/EXEC makes the
 * plan appear whole or not at all, so no reader sees some ranks and misses
 * others; (2) one key carries one expiry, so no rank outlives the others;
 * (3) a reader fetches the whole plan in one round trip (HGETALL) and puts it
 * into its own plan cache, so the ranks of one plan cost the store one read
 * per replica, not one per rank; (4) all of a plan lives in one slot of a
 * Redis Cluster should a proxy shard the keys.
 *
 * Outages. A store that does not answer in time is marked down, logged once,
 * and not contacted again until a back-off passes (doubling from
 * backoff_min to backoff_max); meanwhile Plan answers without writing (the
 * plan stays in this server's cache) and GetRankPlan answers UNAVAILABLE for
 * a plan this server does not hold. NOT_FOUND is answered only when the store
 * answered and has no such plan. */
#ifndef PK_PLAN_STORE_H
#define PK_PLAN_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "plan_cache.h"

typedef struct pk_plan_store pk_plan_store_t;

typedef struct pk_plan_store_options {
  const char *url;        /* redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] */
  const char *password;   /* From --plan-store-password-file; NULL or "": none. */
  const char *prefix;     /* Key prefix, e.g. "packd:". */
  const char *version;    /* packd version written into every value. */
  double ttl;             /* Seconds a plan stays in the store (--cache-ttl). */
  int workers;            /* --workers: sizes the connection pool. */
  pk_plan_cache_t *cache; /* Receives plans read from the store; may be NULL. */
  pk_getenv_fn getenv_fn; /* Reads the tunables; NULL: the process environment. */
  void *getenv_user;
  /* A plan's values larger than this (plus their envelopes) are refused
   * unread as corrupt: --max-message-bytes. 0: INT64_MAX. */
  int64_t max_value_bytes;
  /* --plan-store-optional: a store that refuses authentication at
   * start-up only logs an error; without it, start-up fails. */
  bool optional;
} pk_plan_store_options_t;

typedef enum pk_store_result {
  PK_STORE_OK = 0,
  PK_STORE_ABSENT,      /* The store answered: no such plan. */
  PK_STORE_BAD_RANK,    /* The plan exists; the rank is out of range. */
  PK_STORE_UNAVAILABLE, /* Down, slow, refused, or a plan of another version. */
  PK_STORE_CORRUPT,     /* A value failed verification; the key is not used. */
  PK_STORE_NOMEM,
} pk_store_result_t;

/* Counters for /metrics; a consistent snapshot. */
typedef struct pk_store_stats {
  const char *where; /* "redis://HOST:PORT/DB", static for the store's life. */
  bool up;           /* The last connection or command succeeded. */
  uint64_t errors_write, errors_read, errors_probe; /* Failed connects and commands. */
  uint64_t writes_ok, writes_skipped;               /* Plans written; Plans answered without. */
  uint64_t reads_hit, reads_absent, reads_unavailable, reads_corrupt; /* Fetches. */
  uint64_t corrupt;   /* Values refused by the envelope check. */
  uint64_t coalesced; /* GetRankPlan calls served by another call's fetch. */
  uint64_t connects;  /* Connections opened. */
  uint64_t outages;   /* Times the store was marked down. */
  /* Writes the store missed, kept and written when it is back. */
  uint64_t replay_queued, replay_queued_bytes; /* Waiting now. */
  uint64_t replayed;                           /* Written later. */
  uint64_t replay_dropped; /* Dropped for room (oldest first) or larger than the queue. */
  uint64_t replay_expired; /* Older than the TTL when the store was back. */
} pk_store_stats_t;

/* Parses the URL and the tunables, connects once (a store that is down at
 * start-up is not an error: packd serves and retries), and starts the
 * prober. A store that answers but refuses the password (or wants one
 * packd was not given) is a configuration error unless opt->optional.
 * Returns 0, or PK_EINVAL with a message (a bad URL or tunable, a refused
 * password), or PK_ENOMEM. Free with pk_plan_store_close. */
int pk_plan_store_open(const pk_plan_store_options_t *opt, pk_plan_store_t **out, char *err,
                       size_t errlen);

/* Stops the prober and closes every connection. Call only when no handler
 * runs any more. NULL is allowed. */
void pk_plan_store_close(pk_plan_store_t *s);

/* Writes every rank of a plan (the plan cache's layout: rank r at
 * data[off[r], off[r+1])). Returns PK_STORE_OK, PK_STORE_UNAVAILABLE (the
 * store is down or failed: the write is kept in the replay queue, within
 * PACKD_PLAN_STORE_REPLAY_BYTES, and written by the prober when the store
 * is back, with the expiry it would have had) or PK_STORE_NOMEM, with a
 * message in msg. Never blocks longer than about connect_timeout + 2 x
 * command_timeout. */
pk_store_result_t pk_plan_store_put(pk_plan_store_t *s, const char *plan_id, uint32_t nranks,
                                    const uint8_t *data, const size_t *off, char *msg,
                                    size_t msglen);

/* One rank of a plan from the store. Calls for the same plan that overlap
 * share one fetch; the fetched plan goes into the plan cache with the
 * store's remaining TTL. On PK_STORE_OK *bytes (malloc'd; the caller frees
 * it) and *len hold the packed RankPlan; *nranks is set on OK and
 * BAD_RANK. Any other result has a message in msg that names the store
 * (and the key, where one was read). */
pk_store_result_t pk_plan_store_get_rank(pk_plan_store_t *s, const char *plan_id, uint32_t rank,
                                         uint8_t **bytes, size_t *len, uint32_t *nranks, char *msg,
                                         size_t msglen);

void pk_plan_store_stats(pk_plan_store_t *s, pk_store_stats_t *out);

/* Prints the tunables: name, variable, default, unit and why. */
void pk_plan_store_usage(FILE *out);

#endif
