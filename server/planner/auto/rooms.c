/* Room trees: the search structures AUTO's packers share.
 *
 * A room tree is a max segment tree over the room left in each column or
 * micro-batch; it answers "the first entry at or after i with room >= r" in
 * O(log size), which is what first fit needs to stay O(n log bins) on
 * millions of items. A head tree is a max tree of doubles beside a room tree
 * with the same leaves (the level packing's headroom per column), searched
 * together with it. Both take plain arrays and know nothing of packings, so
 * every stage may use them without depending on another stage. */
#include <stdlib.h>

#include "pk_internal.h"
#include "rooms.h"

int pk_tree_init(room_tree_t *rt, uint32_t size) {
  rt->leaves = 1;
  while (rt->leaves < size)
    rt->leaves *= 2;
  rt->t = pk_calloc((size_t)rt->leaves * 2, sizeof *rt->t);
  return rt->t == NULL ? PK_ENOMEM : 0;
}

/* Sets entry i and walks up while the maxima change: once a node keeps its
 * value, so do all above it. */
void pk_tree_set(room_tree_t *rt, uint32_t i, uint64_t room) {
  uint32_t p = rt->leaves + i;
  rt->t[p] = room;
  for (p /= 2; p >= 1; p /= 2) {
    uint64_t v = PK_MAX(rt->t[2 * p], rt->t[2 * p + 1]);
    if (rt->t[p] == v)
      break;
    rt->t[p] = v;
  }
}

/* Recomputes every inner node from the leaves (t[leaves + i], written by
 * the caller; unused leaves must hold 0) in O(leaves). */
void pk_tree_rebuild(room_tree_t *rt) {
  for (uint32_t p = rt->leaves - 1; p >= 1; p--)
    rt->t[p] = PK_MAX(rt->t[2 * p], rt->t[2 * p + 1]);
}

/* The first entry at or after `from` with room >= need, or UINT32_MAX. */
uint32_t pk_tree_find(const room_tree_t *rt, uint32_t from, uint64_t need) {
  if (from >= rt->leaves)
    return UINT32_MAX;
  uint32_t p = rt->leaves + from;
  if (rt->t[p] >= need)
    return from;
  /* Climb until a right sibling subtree holds a candidate. */
  for (;;) {
    if (p == 1)
      return UINT32_MAX;
    if ((p & 1) == 0 && rt->t[p + 1] >= need) {
      p = p + 1;
      break;
    }
    p /= 2;
  }
  while (p < rt->leaves)
    p = rt->t[2 * p] >= need ? 2 * p : 2 * p + 1;
  return p - rt->leaves;
}

void pk_head_set(head_tree_t *ht, uint32_t i, double head) {
  uint32_t p = ht->leaves + i;
  ht->t[p] = head;
  for (p /= 2; p >= 1; p /= 2) {
    double v = PK_MAX(ht->t[2 * p], ht->t[2 * p + 1]);
    if (ht->t[p] == v)
      break;
    ht->t[p] = v;
  }
}

/* The first leaf of subtree p with room >= need and head >= cost, or
 * UINT32_MAX: depth first, left to right, skipping every subtree whose
 * maxima fail either test. */
static uint32_t find_room_head_in(const room_tree_t *rt, const head_tree_t *ht, uint32_t p,
                                  uint64_t need, double cost) {
  uint32_t top = p;
  for (;;) {
    if (rt->t[p] >= need && ht->t[p] >= cost) {
      if (p >= rt->leaves)
        return p - rt->leaves;
      p = 2 * p;
      continue;
    }
    /* Next subtree to the right inside top's: up while p is a right child. */
    while (p != top && (p & 1) == 1)
      p /= 2;
    if (p == top)
      return UINT32_MAX;
    p++;
  }
}

/* From the leaf, climbs and searches each right sibling subtree. */
uint32_t pk_find_room_head(const room_tree_t *rt, const head_tree_t *ht, uint32_t from,
                           uint64_t need, double cost) {
  if (from >= rt->leaves)
    return UINT32_MAX;
  uint32_t p = rt->leaves + from;
  uint32_t c = find_room_head_in(rt, ht, p, need, cost);
  for (; c == UINT32_MAX && p > 1; p /= 2)
    if ((p & 1) == 0)
      c = find_room_head_in(rt, ht, p + 1, need, cost);
  return c;
}
