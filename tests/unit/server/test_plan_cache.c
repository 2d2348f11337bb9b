/* Unit tests of server/plan_cache.c: LRU order, the byte bound, the age
 * bound, replacement, rank lookups, and a property test that runs random
 * operations against a simple reference model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pk_error.h"
#include "plan_cache.h"

/* Makes the rank data of a plan: rank r holds r+1 copies of byte `tag`. */
static uint8_t *make_data(uint32_t nranks, uint8_t tag, size_t *offsets) {
  offsets[0] = 0;
  for (uint32_t r = 0; r < nranks; r++)
    offsets[r + 1] = offsets[r] + r + 1;
  uint8_t *d = malloc(offsets[nranks] + 1);
  memset(d, tag, offsets[nranks] + 1);
  return d;
}

typedef struct got {
  uint8_t buf[64];
  size_t len;
} got_t;

static void sink(void *user, const uint8_t *bytes, size_t len) {
  got_t *g = user;
  assert_true(len <= sizeof g->buf);
  memcpy(g->buf, bytes, len);
  g->len = len;
}

static int put(pk_plan_cache_t *c, const char *id, uint32_t nranks, uint8_t tag, double now) {
  size_t off[17];
  assert_true(nranks <= 16);
  uint8_t *d = make_data(nranks, tag, off);
  return pk_plan_cache_put(c, id, nranks, d, off, now);
}

static int get(pk_plan_cache_t *c, const char *id, uint32_t rank, double now, got_t *g) {
  memset(g, 0, sizeof *g);
  return pk_plan_cache_get_rank(c, id, rank, now, sink, g, NULL);
}

/* The accounted size of one entry; measured from the cache itself. */
static uint64_t entry_bytes(uint32_t nranks, const char *id) {
  pk_plan_cache_t *c;
  assert_int_equal(pk_plan_cache_create(1 << 20, 100, &c), PK_OK);
  assert_int_equal(put(c, id, nranks, 1, 0), PK_OK);
  pk_cache_stats_t st;
  pk_plan_cache_stats(c, &st);
  pk_plan_cache_destroy(c);
  return st.bytes;
}

static void test_hit_returns_rank_bytes(void **state) {
  (void)state;
  pk_plan_cache_t *c;
  assert_int_equal(pk_plan_cache_create(1 << 20, 60, &c), PK_OK);
  assert_int_equal(put(c, "aaaa", 4, 7, 0), PK_OK);
  got_t g;
  for (uint32_t r = 0; r < 4; r++) {
    assert_int_equal(get(c, "aaaa", r, 1, &g), PK_OK);
    assert_int_equal(g.len, r + 1);
    for (size_t i = 0; i < g.len; i++)
      assert_int_equal(g.buf[i], 7);
  }
  uint32_t n = 0;
  assert_int_equal(pk_plan_cache_get_rank(c, "aaaa", 4, 1, sink, &g, &n), PK_EINVAL);
  assert_int_equal(n, 4);
  assert_int_equal(get(c, "bbbb", 0, 1, &g), PK_ENOTFOUND);
  pk_cache_stats_t st;
  pk_plan_cache_stats(c, &st);
  assert_int_equal(st.hits, 4);
  assert_int_equal(st.misses, 1);
  assert_int_equal(st.entries, 1);
  pk_plan_cache_destroy(c);
}

static void test_lru_eviction_by_bytes(void **state) {
  (void)state;
  uint64_t one = entry_bytes(2, "p0");
  pk_plan_cache_t *c;
  /* Room for exactly three entries of this size. */
  assert_int_equal(pk_plan_cache_create(3 * one, 60, &c), PK_OK);
  assert_int_equal(put(c, "p0", 2, 0, 0), PK_OK);
  assert_int_equal(put(c, "p1", 2, 1, 0), PK_OK);
  assert_int_equal(put(c, "p2", 2, 2, 0), PK_OK);
  got_t g;
  /* Touch p0 so that p1 is now the least recently used. */
  assert_int_equal(get(c, "p0", 0, 1, &g), PK_OK);
  assert_int_equal(put(c, "p3", 2, 3, 1), PK_OK);
  assert_int_equal(get(c, "p1", 0, 1, &g), PK_ENOTFOUND);
  assert_int_equal(get(c, "p0", 0, 1, &g), PK_OK);
  assert_int_equal(get(c, "p2", 0, 1, &g), PK_OK);
  assert_int_equal(get(c, "p3", 1, 1, &g), PK_OK);
  assert_int_equal(g.buf[0], 3);
  pk_cache_stats_t st;
  pk_plan_cache_stats(c, &st);
  assert_int_equal(st.entries, 3);
  assert_int_equal(st.evictions, 1);
  assert_true(st.bytes <= 3 * one);
  pk_plan_cache_destroy(c);
}

static void test_entry_larger_than_bound_is_refused(void **state) {
  (void)state;
  pk_plan_cache_t *c;
  assert_int_equal(pk_plan_cache_create(16, 60, &c), PK_OK);
  assert_int_equal(put(c, "big", 8, 1, 0), PK_ENOMEM);
  pk_cache_stats_t st;
  pk_plan_cache_stats(c, &st);
  assert_int_equal(st.entries, 0);
  assert_int_equal(st.bytes, 0);
  pk_plan_cache_destroy(c);
  /* A zero-byte cache stores nothing and still answers lookups. */
  assert_int_equal(pk_plan_cache_create(0, 60, &c), PK_OK);
  assert_int_equal(put(c, "x", 1, 1, 0), PK_ENOMEM);
  got_t g;
  assert_int_equal(get(c, "x", 0, 0, &g), PK_ENOTFOUND);
  pk_plan_cache_destroy(c);
}

static void test_expiry_by_age(void **state) {
  (void)state;
  pk_plan_cache_t *c;
  assert_int_equal(pk_plan_cache_create(1 << 20, 10, &c), PK_OK);
  assert_int_equal(put(c, "old", 1, 1, 100), PK_OK);
  assert_int_equal(put(c, "new", 1, 2, 105), PK_OK);
  got_t g;
  assert_int_equal(get(c, "old", 0, 110, &g), PK_OK); /* Exactly the TTL: still there. */
  assert_int_equal(get(c, "old", 0, 110.5, &g), PK_ENOTFOUND);
  /* A hit does not extend the age: only a new put does. */
  assert_int_equal(get(c, "new", 0, 114, &g), PK_OK);
  assert_int_equal(pk_plan_cache_expire(c, 115.5), 1);
  pk_cache_stats_t st;
  pk_plan_cache_stats(c, &st);
  assert_int_equal(st.entries, 0);
  assert_int_equal(st.bytes, 0);
  assert_int_equal(st.expired, 2);
  pk_plan_cache_destroy(c);
}

static void test_replace_same_id(void **state) {
  (void)state;
  pk_plan_cache_t *c;
  assert_int_equal(pk_plan_cache_create(1 << 20, 10, &c), PK_OK);
  assert_int_equal(put(c, "same", 2, 1, 0), PK_OK);
  assert_int_equal(put(c, "same", 3, 9, 8), PK_OK);
  got_t g;
  assert_int_equal(get(c, "same", 2, 15, &g), PK_OK); /* Age restarts at the second put. */
  assert_int_equal(g.buf[0], 9);
  pk_cache_stats_t st;
  pk_plan_cache_stats(c, &st);
  assert_int_equal(st.entries, 1);
  assert_int_equal(st.bytes, entry_bytes(3, "same"));
  pk_plan_cache_destroy(c);
}

/* The reference model: entries in recency order (index 0 most recent). */
typedef struct model_entry {
  char id[16];
  uint32_t nranks;
  uint8_t tag;
  double at;
  uint64_t bytes;
} model_entry_t;

static uint64_t xorshift(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

static void model_remove(model_entry_t *m, size_t *n, size_t k) {
  memmove(&m[k], &m[k + 1], (*n - k - 1) * sizeof *m);
  (*n)--;
}

static void test_random_operations_match_model(void **state) {
  (void)state;
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (int round = 0; round < 40; round++) {
    uint64_t max_bytes = 200 + xorshift(&seed) % 2000;
    double ttl = 1 + (double)(xorshift(&seed) % 20);
    pk_plan_cache_t *c;
    assert_int_equal(pk_plan_cache_create(max_bytes, ttl, &c), PK_OK);
    model_entry_t m[256];
    size_t n = 0;
    double now = 0;
    for (int op = 0; op < 400; op++) {
      now += (double)(xorshift(&seed) % 100) / 100.0;
      char id[16];
      snprintf(id, sizeof id, "id%u", (unsigned)(xorshift(&seed) % 24));
      size_t k = 0;
      while (k < n && strcmp(m[k].id, id) != 0)
        k++;
      if (xorshift(&seed) % 2 == 0) {
        uint32_t nr = 1 + (uint32_t)(xorshift(&seed) % 8);
        uint8_t tag = (uint8_t)(xorshift(&seed) % 250);
        uint64_t b = entry_bytes(nr, id);
        int rc = put(c, id, nr, tag, now);
        if (k < n)
          model_remove(m, &n, k);
        if (b > max_bytes) {
          assert_int_equal(rc, PK_ENOMEM);
        } else {
          assert_int_equal(rc, PK_OK);
          uint64_t total = b;
          for (size_t i = 0; i < n; i++)
            total += m[i].bytes;
          while (total > max_bytes) {
            total -= m[n - 1].bytes; /* The least recently used goes first. */
            n--;
          }
          memmove(&m[1], &m[0], n * sizeof *m);
          snprintf(m[0].id, sizeof m[0].id, "%s", id);
          m[0].nranks = nr;
          m[0].tag = tag;
          m[0].at = now;
          m[0].bytes = b;
          n++;
        }
      } else {
        uint32_t rank = (uint32_t)(xorshift(&seed) % 9);
        got_t g;
        int rc = get(c, id, rank, now, &g);
        if (k < n && now - m[k].at > ttl) {
          model_remove(m, &n, k);
          k = n;
        }
        if (k == n) {
          assert_int_equal(rc, PK_ENOTFOUND);
        } else if (rank >= m[k].nranks) {
          assert_int_equal(rc, PK_EINVAL);
        } else {
          assert_int_equal(rc, PK_OK);
          assert_int_equal(g.len, rank + 1);
          assert_int_equal(g.buf[0], m[k].tag);
          model_entry_t e = m[k];
          memmove(&m[1], &m[0], k * sizeof *m);
          m[0] = e;
        }
      }
      pk_cache_stats_t st;
      pk_plan_cache_stats(c, &st);
      uint64_t total = 0;
      for (size_t i = 0; i < n; i++)
        total += m[i].bytes;
      assert_true(st.bytes <= max_bytes);
      assert_int_equal(st.entries, n);
      assert_int_equal(st.bytes, total);
    }
    pk_plan_cache_destroy(c);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hit_returns_rank_bytes),
      cmocka_unit_test(test_lru_eviction_by_bytes),
      cmocka_unit_test(test_entry_larger_than_bound_is_refused),
      cmocka_unit_test(test_expiry_by_age),
      cmocka_unit_test(test_replace_same_id),
      cmocka_unit_test(test_random_operations_match_model),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
