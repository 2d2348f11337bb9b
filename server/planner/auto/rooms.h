/* Room trees and head trees (rooms.c): max trees over plain arrays, shared
 * by AUTO's packers. They depend on nothing in AUTO. */
#ifndef PK_AUTO_ROOMS_H
#define PK_AUTO_ROOMS_H

#include <stdint.h>

/* A max segment tree over room left, to find the first column or
 * micro-batch with at least a given room in O(log size). */
typedef struct room_tree {
  uint32_t leaves; /* A power of two >= size. */
  uint64_t *t;     /* 2 * leaves; t[leaves + i] is the room of entry i. */
} room_tree_t;

/* Leaves for `size` entries, all 0. Returns 0 or PK_ENOMEM; free rt->t. */
int pk_tree_init(room_tree_t *rt, uint32_t size);
void pk_tree_set(room_tree_t *rt, uint32_t i, uint64_t room);
void pk_tree_rebuild(room_tree_t *rt);
/* The first entry at or after `from` with room >= need, or UINT32_MAX. */
uint32_t pk_tree_find(const room_tree_t *rt, uint32_t from, uint64_t need);

/* A max tree of doubles beside a room tree with the same leaves (the level
 * packing's headroom per column: the cost an item may add to the column's
 * cheapest micro-batch without raising its level). */
typedef struct head_tree {
  uint32_t leaves; /* The room tree's. */
  double *t;       /* 2 * leaves; t[leaves + i] is the value of entry i. */
} head_tree_t;
/* Sets entry i and walks up while the maxima change. */
void pk_head_set(head_tree_t *ht, uint32_t i, double head);
/* The first entry at or after `from` with room >= need in rt and head >=
 * cost in ht, or UINT32_MAX. */
uint32_t pk_find_room_head(const room_tree_t *rt, const head_tree_t *ht, uint32_t from,
                           uint64_t need, double cost);

#endif
