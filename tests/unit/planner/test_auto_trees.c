/* The room tree and the room-and-headroom search of the level packing
 * (auto/rooms.c) against a linear scan over random entries: the first entry at or
 * after `from` that passes, or none. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "auto/auto.h"

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static uint64_t next_u64(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint32_t scan_room(const uint64_t *room, uint32_t size, uint32_t from, uint64_t need) {
  for (uint32_t i = from; i < size; i++)
    if (room[i] >= need)
      return i;
  return UINT32_MAX;
}

static uint32_t scan_room_head(const uint64_t *room, const double *head, uint32_t size,
                               uint32_t from, uint64_t need, double cost) {
  for (uint32_t i = from; i < size; i++)
    if (room[i] >= need && head[i] >= cost)
      return i;
  return UINT32_MAX;
}

/* Random sizes (not powers of two too), values set one by one (the
 * incremental updates) and queries after each batch of updates. */
static void test_trees_random(void **state) {
  (void)state;
  for (int round = 0; round < 300; round++) {
    uint32_t size = 1 + (uint32_t)(next_u64() % 150);
    room_tree_t rt;
    assert_int_equal(pk_tree_init(&rt, size), 0);
    head_tree_t ht = {.leaves = rt.leaves, .t = calloc((size_t)rt.leaves * 2, sizeof(double))};
    assert_non_null(ht.t);
    uint64_t *room = calloc(size, sizeof *room);
    double *head = calloc(size, sizeof *head);
    assert_non_null(room);
    assert_non_null(head);
    /* Unused leaves: room 0 and head -1 (never found). */
    for (uint32_t i = 0; i < rt.leaves; i++)
      ht.t[ht.leaves + i] = -1.0;
    for (uint32_t p = ht.leaves - 1; p >= 1; p--)
      ht.t[p] = ht.t[2 * p] > ht.t[2 * p + 1] ? ht.t[2 * p] : ht.t[2 * p + 1];
    for (int batch = 0; batch < 8; batch++) {
      uint32_t updates = 1 + (uint32_t)(next_u64() % (2 * size));
      for (uint32_t u = 0; u < updates; u++) {
        uint32_t i = (uint32_t)(next_u64() % size);
        /* Small ranges, so that ties and equal thresholds occur. */
        room[i] = next_u64() % 20;
        head[i] = (double)(next_u64() % 40) - 10.0;
        pk_tree_set(&rt, i, room[i]);
        pk_head_set(&ht, i, head[i]);
      }
      for (int query = 0; query < 40; query++) {
        uint32_t from = (uint32_t)(next_u64() % (rt.leaves + 2));
        /* need >= 1: the unused leaves (room 0) never pass, as in the
         * planner, where every item needs at least 1. */
        uint64_t need = 1 + next_u64() % 21;
        double cost = (double)(next_u64() % 44) - 12.0;
        assert_int_equal(pk_tree_find(&rt, from, need), scan_room(room, size, from, need));
        assert_int_equal(pk_find_room_head(&rt, &ht, from, need, cost),
                         scan_room_head(room, head, size, from, need, cost));
      }
    }
    free(room);
    free(head);
    free(ht.t);
    free(rt.t);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_trees_random),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
