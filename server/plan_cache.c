/* The plan cache (see plan_cache.h): a chained hash table keyed by plan_id
 * plus a doubly linked list in recency order (head: most recent). */
#include "plan_cache.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "pk_error.h"

typedef struct entry {
  struct entry *next_in_bucket;
  struct entry *prev, *next; /* Recency list. */
  uint64_t hash;
  double stored_at;
  size_t bytes; /* What this entry adds to the cache's byte count. */
  uint8_t *data;
  uint32_t nranks;
  char *id;         /* Points into this allocation, after offsets. */
  size_t offsets[]; /* nranks + 1. */
} entry_t;

struct pk_plan_cache {
  pthread_mutex_t mu;
  entry_t **buckets;
  size_t nbuckets; /* A power of two. */
  entry_t *head, *tail;
  uint64_t max_bytes;
  double ttl;
  pk_cache_stats_t st;
};

static uint64_t hash_id(const char *id) {
  return XXH3_64bits(id, strlen(id));
}

int pk_plan_cache_create(uint64_t max_bytes, double ttl_seconds, pk_plan_cache_t **out) {
  *out = NULL;
  pk_plan_cache_t *c = calloc(1, sizeof *c);
  if (c == NULL)
    return PK_ENOMEM;
  c->nbuckets = 64;
  c->buckets = calloc(c->nbuckets, sizeof *c->buckets);
  if (c->buckets == NULL) {
    free(c);
    return PK_ENOMEM;
  }
  pthread_mutex_init(&c->mu, NULL);
  c->max_bytes = max_bytes;
  c->ttl = ttl_seconds;
  c->st.max_bytes = max_bytes;
  *out = c;
  return PK_OK;
}

static void free_entry(entry_t *e) {
  free(e->data);
  free(e);
}

void pk_plan_cache_destroy(pk_plan_cache_t *c) {
  if (c == NULL)
    return;
  entry_t *e = c->head;
  while (e != NULL) {
    entry_t *n = e->next;
    free_entry(e);
    e = n;
  }
  free(c->buckets);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

static void list_unlink(pk_plan_cache_t *c, entry_t *e) {
  if (e->prev)
    e->prev->next = e->next;
  else
    c->head = e->next;
  if (e->next)
    e->next->prev = e->prev;
  else
    c->tail = e->prev;
  e->prev = e->next = NULL;
}

static void list_push_front(pk_plan_cache_t *c, entry_t *e) {
  e->prev = NULL;
  e->next = c->head;
  if (c->head)
    c->head->prev = e;
  c->head = e;
  if (c->tail == NULL)
    c->tail = e;
}

static entry_t **find_slot(pk_plan_cache_t *c, const char *id, uint64_t h) {
  entry_t **slot = &c->buckets[h & (c->nbuckets - 1)];
  while (*slot != NULL && !((*slot)->hash == h && strcmp((*slot)->id, id) == 0))
    slot = &(*slot)->next_in_bucket;
  return slot;
}

/* Unlinks e from its bucket and the list, fixes the counters and frees it. */
static void remove_entry(pk_plan_cache_t *c, entry_t *e) {
  entry_t **slot = find_slot(c, e->id, e->hash);
  *slot = e->next_in_bucket;
  list_unlink(c, e);
  c->st.entries--;
  c->st.bytes -= e->bytes;
  free_entry(e);
}

/* Doubles the bucket array; on allocation failure the table stays as it is
 * (longer chains, still correct). */
static void maybe_grow(pk_plan_cache_t *c) {
  if (c->st.entries < c->nbuckets)
    return;
  size_t nb = c->nbuckets * 2;
  entry_t **b = calloc(nb, sizeof *b);
  if (b == NULL)
    return;
  for (size_t i = 0; i < c->nbuckets; i++) {
    entry_t *e = c->buckets[i];
    while (e != NULL) {
      entry_t *n = e->next_in_bucket;
      e->next_in_bucket = b[e->hash & (nb - 1)];
      b[e->hash & (nb - 1)] = e;
      e = n;
    }
  }
  free(c->buckets);
  c->buckets = b;
  c->nbuckets = nb;
}

static bool is_expired(const pk_plan_cache_t *c, const entry_t *e, double now) {
  return now - e->stored_at > c->ttl;
}

int pk_plan_cache_put(pk_plan_cache_t *c, const char *plan_id, uint32_t nranks, uint8_t *data,
                      const size_t *offsets, double now) {
  if (c == NULL || plan_id == NULL || offsets == NULL || (data == NULL && offsets[nranks] > 0)) {
    free(data);
    return PK_EINVAL;
  }
  size_t idlen = strlen(plan_id);
  size_t header = sizeof(entry_t) + (size_t)(nranks + 1) * sizeof(size_t) + idlen + 1;
  size_t bytes = header + offsets[nranks];
  if (bytes > c->max_bytes) {
    free(data);
    return PK_ENOMEM;
  }
  entry_t *e = malloc(header);
  if (e == NULL) {
    free(data);
    return PK_ENOMEM;
  }
  memset(e, 0, sizeof *e);
  memcpy(e->offsets, offsets, (size_t)(nranks + 1) * sizeof(size_t));
  e->id = (char *)&e->offsets[nranks + 1];
  memcpy(e->id, plan_id, idlen + 1);
  e->hash = hash_id(plan_id);
  e->stored_at = now;
  e->bytes = bytes;
  e->data = data;
  e->nranks = nranks;

  pthread_mutex_lock(&c->mu);
  entry_t **slot = find_slot(c, plan_id, e->hash);
  if (*slot != NULL)
    remove_entry(c, *slot);
  /* Make room: least recently used entries leave first. */
  while (c->tail != NULL && c->st.bytes + bytes > c->max_bytes) {
    remove_entry(c, c->tail);
    c->st.evictions++;
  }
  maybe_grow(c);
  slot = &c->buckets[e->hash & (c->nbuckets - 1)];
  e->next_in_bucket = *slot;
  *slot = e;
  list_push_front(c, e);
  c->st.entries++;
  c->st.bytes += bytes;
  pthread_mutex_unlock(&c->mu);
  return PK_OK;
}

int pk_plan_cache_get_rank(pk_plan_cache_t *c, const char *plan_id, uint32_t rank, double now,
                           pk_cache_sink_fn sink, void *user, uint32_t *nranks) {
  if (c == NULL || plan_id == NULL)
    return PK_EINVAL;
  uint64_t h = hash_id(plan_id);
  int rc = PK_OK;
  pthread_mutex_lock(&c->mu);
  entry_t *e = *find_slot(c, plan_id, h);
  if (e != NULL && is_expired(c, e, now)) {
    remove_entry(c, e);
    c->st.expired++;
    e = NULL;
  }
  if (e == NULL) {
    c->st.misses++;
    rc = PK_ENOTFOUND;
  } else if (rank >= e->nranks) {
    /* The plan exists; the rank does not. Not a miss of the cache. */
    if (nranks != NULL)
      *nranks = e->nranks;
    rc = PK_EINVAL;
  } else {
    c->st.hits++;
    list_unlink(c, e);
    list_push_front(c, e);
    if (nranks != NULL)
      *nranks = e->nranks;
    sink(user, e->data + e->offsets[rank], e->offsets[rank + 1] - e->offsets[rank]);
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

size_t pk_plan_cache_expire(pk_plan_cache_t *c, double now) {
  size_t removed = 0;
  pthread_mutex_lock(&c->mu);
  entry_t *e = c->head;
  while (e != NULL) {
    entry_t *n = e->next;
    if (is_expired(c, e, now)) {
      remove_entry(c, e);
      c->st.expired++;
      removed++;
    }
    e = n;
  }
  pthread_mutex_unlock(&c->mu);
  return removed;
}

void pk_plan_cache_stats(pk_plan_cache_t *c, pk_cache_stats_t *out) {
  pthread_mutex_lock(&c->mu);
  *out = c->st;
  pthread_mutex_unlock(&c->mu);
}
