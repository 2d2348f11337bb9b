/* The plan cache behind GetRankPlan: recent plans by plan_id, each stored as
 * the packed bytes of its RankPlan messages. Bounded by total bytes (least
 * recently used entries leave first) and by age (an entry older than the TTL
 * is gone). Thread-safe: one mutex guards everything.
 *
 * Time is passed in by the caller (seconds on a monotonic clock) so that
 * tests can move it. The cache owns every entry; readers get bytes copied out
 * through a callback while the lock is held. */
#ifndef PK_PLAN_CACHE_H
#define PK_PLAN_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct pk_plan_cache pk_plan_cache_t;

typedef struct pk_cache_stats {
  uint64_t entries;
  uint64_t bytes; /* Accounted bytes: rank bytes, offsets, id and entry header. */
  uint64_t max_bytes;
  uint64_t hits;
  uint64_t misses;
  uint64_t evictions; /* Entries removed to respect the byte bound. */
  uint64_t expired;   /* Entries removed because they outlived the TTL. */
} pk_cache_stats_t;

/* Creates a cache. max_bytes 0 makes a cache that stores nothing. Returns 0
 * or PK_ENOMEM; free with pk_plan_cache_destroy. */
int pk_plan_cache_create(uint64_t max_bytes, double ttl_seconds, pk_plan_cache_t **out);

/* Frees the cache and every entry. NULL is allowed. */
void pk_plan_cache_destroy(pk_plan_cache_t *c);

/* Stores a plan. `data` holds the packed RankPlan of every rank back to back,
 * rank r at [offsets[r], offsets[r+1]); offsets has nranks + 1 entries and
 * offsets[nranks] is the length of data. The cache takes ownership of data
 * (malloc'd) in every case, also on failure; offsets are copied. A plan_id
 * already present is replaced and becomes the newest entry. Returns 0,
 * PK_EINVAL (bad arguments), or PK_ENOMEM when the entry alone is larger than
 * the byte bound or memory ran out (nothing is stored). */
int pk_plan_cache_put(pk_plan_cache_t *c, const char *plan_id, uint32_t nranks, uint8_t *data,
                      const size_t *offsets, double now);

/* Called with one rank's packed bytes while the cache lock is held; it must
 * copy what it needs and must not call back into the cache. */
typedef void (*pk_cache_sink_fn)(void *user, const uint8_t *bytes, size_t len);

/* Looks up one rank of a plan and hands its bytes to sink. Returns 0;
 * PK_ENOTFOUND when the plan is absent or expired (a miss); PK_EINVAL when
 * the rank is out of range (then *nranks, if not NULL, holds the plan's rank
 * count). A hit makes the entry the most recently used. */
int pk_plan_cache_get_rank(pk_plan_cache_t *c, const char *plan_id, uint32_t rank, double now,
                           pk_cache_sink_fn sink, void *user, uint32_t *nranks);

/* Removes every entry older than the TTL. Returns how many were removed. */
size_t pk_plan_cache_expire(pk_plan_cache_t *c, double now);

/* A consistent snapshot of the counters. */
void pk_plan_cache_stats(pk_plan_cache_t *c, pk_cache_stats_t *out);

#endif
