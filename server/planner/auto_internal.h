/* Internal interfaces of AUTO, shared by auto.c (state, helpers, the
 * driver and the deal to ranks), auto_packed.c (PACKED packings and their
 * refinement) and auto_padded.c (PADDED packings and their refinement).
 * Not part of the planner's API. Packers return 0, PK_EPRECOND (does not
 * fit: the driver tries another packer or one more group of columns) or
 * PK_ENOMEM. */
#ifndef PK_AUTO_INTERNAL_H
#define PK_AUTO_INTERNAL_H

#include "pk_internal.h"

/* A packing within this fraction of the step bound (bounds.c) is not
 * improved further: at most that much could be gained. */
#define PK_AUTO_GOOD_ENOUGH 1e-3

/* A packing within this fraction of the step bound is close: the second
 * column packing is not tried after it (auto_packed.c), and where first fit
 * is this close the tier packing goes first (auto.c). */
#define PK_AUTO_CLOSE 5e-3

/* Candidate columns or micro-batches tried for one tier or item. */
#define PK_AUTO_TRIES 16

/* A max segment tree over room left, to find the first column or
 * micro-batch with at least a given room in O(log size). */
typedef struct room_tree {
  uint32_t leaves; /* A power of two >= size. */
  uint64_t *t;     /* 2 * leaves; t[leaves + i] is the room of entry i. */
} room_tree_t;

/* The sort keys of a column's micro-batch (pk_auto_sort_slots). */
typedef struct slot_key {
  double cost;
  uint64_t foot;
} slot_key_t;

typedef struct auto_state {
  const pk_ctx_t *ctx;
  uint32_t dp, m;
  pk_bin_t *bins;       /* m * dp, bin = column * dp + slot. */
  uint64_t *col_foot;   /* Largest micro-batch footprint of the column. */
  uint32_t *slots;      /* dp scratch. */
  uint32_t *tmp;        /* dp scratch. */
  slot_key_t *keys;     /* dp scratch (pk_auto_sort_slots). */
  uint32_t *item_bin;   /* n */
  room_tree_t cols;     /* Per column: room of its fullest micro-batch (tiers)
                         * or of its roomiest one plus one (level packing). */
  room_tree_t bins_rt;  /* Room of each micro-batch (phase 3). */
  room_tree_t col_room; /* Token room left per column (level packing). */
} auto_state_t;

/* Room trees (auto.c). */
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

/* Shared helpers (auto.c). */
/* The room micro-batch i has left (0 when it holds max_seqs items). */
uint64_t pk_auto_bin_room(const auto_state_t *s, uint32_t i);
/* Column c's level: the cost of its costliest micro-batch. */
double pk_auto_column_level(const auto_state_t *s, uint32_t c);
/* The step cost of the state: the sum of its m column levels. */
double pk_auto_step(const auto_state_t *s);
/* The first `limit` items of micro-batch `bin` (lists head/next) into out,
 * by size ascending (so cost ascending); returns how many. */
uint32_t pk_auto_sorted_items(const auto_state_t *s, const uint32_t *head, const uint32_t *next,
                              uint32_t bin, uint32_t limit, uint32_t *out);
/* The dp micro-batches of the column at base into s->slots, by cost
 * ascending (or footprint first when by_foot). */
void pk_auto_sort_slots(auto_state_t *s, uint32_t base, bool by_foot);
/* A whole tier (dp items, costliest first) into column c, or false. */
bool pk_auto_place_tier(auto_state_t *s, uint32_t c, const uint32_t *items);
/* Items one by one to the first micro-batch with room. */
int pk_auto_place_rest(auto_state_t *s, const uint32_t *items, uint32_t count);
/* Per-bin lists of the items: head[i] is micro-batch i's first item (by
 * item number), next[k] the item after k (UINT32_MAX ends a list); head
 * holds m x dp entries, next n. */
void pk_auto_bin_lists(const auto_state_t *s, uint32_t *head, uint32_t *next);
/* Moves item k to micro-batch `to`, keeping the per-bin lists head/next. */
void pk_auto_move_item(auto_state_t *s, uint32_t *head, uint32_t *next, uint32_t k, uint32_t to);

/* PACKED (auto_packed.c). saved_* hold s->m x dp micro-batches and n items. */
int pk_auto_pack_levels(auto_state_t *s, const uint32_t *order);
int pk_auto_pack_bins_first(auto_state_t *s, const uint32_t *order);
/* The second half of pk_auto_pack_bins_first, after first fit placed every
 * item into the first s->m x dp micro-batches: fills empty micro-batches
 * and sorts the micro-batches into columns. */
int pk_auto_bins_finish(auto_state_t *s, const uint32_t *order);
int pk_auto_pack_tiers(auto_state_t *s, const uint32_t *order);
int pk_auto_pack_best(auto_state_t *s, const uint32_t *order, bool tiers_first,
                      pk_bin_t *saved_bins, uint32_t *saved_item_bin);
int pk_auto_refine_columns(auto_state_t *s);
/* Moves items from the costliest micro-batches of each column into
 * micro-batches of other columns below their level (auto_lower.c). */
int pk_auto_lower_columns(auto_state_t *s);

/* First fit repair (auto_repair.c). On entry s->bins and s->item_bin hold
 * a packing over `top` x dp micro-batches with every item placed (first fit
 * decreasing, or micro-batch completion).
 * Tries top - group, top - 2 group, ... (not below lo): each count takes the
 * items of the micro-batches beyond it and places them into the others
 * (swaps gather room); stops at the first count that fails. *count is the
 * lowest count reached (top when none), and s->bins, s->item_bin hold its
 * packing (micro-batches beyond it empty). save_* are scratch for top x dp
 * micro-batches and n items. Returns 0 or PK_ENOMEM. */
int pk_auto_repair_down(auto_state_t *s, const uint32_t *order, uint32_t lo, uint32_t top,
                        uint32_t group, pk_bin_t *save_bins, uint32_t *save_item_bin,
                        uint32_t *count);

/* Micro-batch completion (auto_complete.c), PACKED: fills micro-batches
 * one at a time, the largest item left first, then the largest that fits;
 * where more room is left than the micro-batch's share of the room
 * `target` micro-batches would leave (target 0: wherever room is left), its
 * last k <= 4 items are exchanged for the k smallest items left and the
 * largest beside them, where that fills more. With max_seqs, also three
 * packings that keep room for later slots (up to max_seqs at the smallest
 * size left, up to the items left per micro-batch left to `target`, and for
 * the smallest items left as they are), the one needing the fewest
 * micro-batches kept. `order` is size-descending.
 * Writes bins[0 .. nbins) (zeroed first) and item_bin; *used is the number
 * of micro-batches filled, in front. PK_EPRECOND when the items need more
 * than nbins; PK_ENOMEM. */
int pk_auto_pack_complete(const auto_state_t *s, const uint32_t *order, uint32_t target,
                          uint32_t nbins, pk_bin_t *bins, uint32_t *item_bin, uint32_t *used);

/* Where first fit decreasing (s->bins, s->item_bin: every item placed in
 * `top` x dp micro-batches) needs more than lo columns: micro-batch
 * completion (aiming at lo x dp micro-batches, then half way to what the
 * last aim reached, at least a group more; at most 4 packings) where
 * it needs fewer than top, else first fit; either repaired down
 * (pk_auto_repair_down) towards lo. *count and s->bins,
 * s->item_bin as pk_auto_repair_down leaves them. save_* as there. Returns
 * 0 or PK_ENOMEM. */
int pk_auto_tighten(auto_state_t *s, const uint32_t *order, uint32_t lo, uint32_t top,
                    uint32_t group, pk_bin_t *save_bins, uint32_t *save_item_bin, uint32_t *count);

/* The exact search (auto_exact.c), PACKED. Steps all the searches of one
 * mini-batch may take (a step: one option of a bin's set tried, or a bin
 * closed and the next opened, 25 to 60 ns): a search out of steps costs 4
 * to 8 ms, and twice as many packed no more batches (auto_exact.c). */
#define PK_EXACT_STEPS (1u << 17)
/* The most items of a mini-batch it searches: larger batches reach the
 * bound greedily (the bench's, from 512 up, all do), and their searches
 * run out of steps more often (auto_exact.c). */
#define PK_EXACT_MAX_ITEMS 256u

typedef struct pk_exact_budget {
  uint64_t steps;     /* Steps left. */
  uint32_t runs;      /* Searches run. */
  uint32_t exhausted; /* Searches that ran out of steps. */
} pk_exact_budget_t;

/* Whether the items fit into m x dp micro-batches (PACKED, at most
 * PK_EXACT_MAX_ITEMS items; with equal_count and dp > 1 also every
 * column at one count). 0: s->m = m and s->bins, s->item_bin hold such a
 * packing in columns (s->bins beyond m x dp untouched). PK_EPRECOND: none
 * exists, the search ran out of steps (budget->exhausted counts it) or it
 * does not apply; s unchanged. PK_ENOMEM. Deterministic. */
int pk_auto_exact(auto_state_t *s, const uint32_t *order, uint32_t m, pk_exact_budget_t *budget);

/* PADDED (auto_padded.c). A run of the width-sorted order: a micro-batch
 * whose widest row is the run's first. */
typedef struct padded_group {
  uint32_t first, rows; /* Positions [first, first + rows) of the order. */
  double cost;          /* rows x c(widest). */
} padded_group_t;

/* The width-sorted items by position in their order (no indirection
 * through the item numbers): each row's cost and the most rows a run it
 * opens takes under the cap and max_seqs (at least one, at most n). */
typedef struct padded_rows {
  uint32_t n;
  double *cost;
  uint32_t *cap_rows;
  /* The first position past each row's class (the span of rows with its
   * cost and cap_rows): runs opened inside a class at one target all take
   * the same rows, so counts move a class at a time. */
  uint32_t *class_end;
} padded_rows_t;

int pk_padded_rows_init(padded_rows_t *rt, const pk_ctx_t *ctx, const uint32_t *order);
void pk_padded_rows_free(padded_rows_t *rt);

/* The cut search (auto_runs.c): `count` runs that cover positions [0,
 * rt->n), in any order, come back in position order with their step cost
 * (costs sorted descending, in tiers of dp, the sum of the tier tops) no
 * higher, every run within its first row's cap_rows. `moves` bounds the
 * work; seed makes it deterministic. Returns 0 or PK_ENOMEM (runs
 * unchanged). */
int pk_auto_search_runs(const padded_rows_t *rt, padded_group_t *runs, uint32_t count, uint32_t dp,
                        uint32_t moves, uint64_t seed);

/* Runs of the width order at a target cost (auto_padded.c). The number of
 * runs of positions [from, n) at target t, at most limit + 1 (out, when
 * given, gets them); the least target at which there are at most `target`
 * (negative where none is; `fits`, when positive, is a target known to
 * fit); and the costliest multi-row runs of grp[from, g) halved until there
 * are `target` in grp (PK_EPRECOND where none is left to halve). */
/* Whether group x of a padded_group_t array costs more than group y (a
 * pk_before_fn: sorts runs by cost, descending). */
bool pk_padded_group_costlier(const void *arg, uint32_t x, uint32_t y);
uint32_t pk_padded_count_groups(const padded_rows_t *rt, uint32_t from, double t, uint32_t limit,
                                padded_group_t *out);
double pk_padded_least_target(const padded_rows_t *rt, uint32_t from, uint32_t target, double fits);
int pk_padded_halve_groups(const padded_rows_t *rt, padded_group_t *grp, uint32_t from, uint32_t g,
                           uint32_t target);

/* The level search (auto_levels.c): from `runs` (m x dp runs covering
 * positions [0, rt->n)), walks of the width order at moved column levels;
 * where one gives runs with a lower step cost than `runs` (costs sorted
 * descending, the sum of every dp-th), the best replace `runs` (0, in no
 * particular order). PK_EPRECOND: none found (runs unchanged); PK_ENOMEM.
 * `work` bounds the walks (about one unit per level read, batch of runs
 * or class counted). */
int pk_auto_level_search(const padded_rows_t *rt, padded_group_t *runs, uint32_t m, uint32_t dp,
                         uint64_t work);

/* PADDED (auto_padded.c). */
int pk_auto_pack_padded_tiers(auto_state_t *s, const uint32_t *order, uint32_t m, uint32_t max_m,
                              uint32_t *m_out);
int pk_auto_refine_padded(auto_state_t *s);
/* The PADDED cost of `count` rows padded to `width`: count x c(width). */
static inline double pk_padded_cost(const pk_cfg_t *cfg, uint32_t count, uint64_t width) {
  return (double)count * pk_slot_cost(cfg, width);
}
/* A PADDED micro-batch's narrowest and widest rows (items) and its width
 * without its widest row (lists head/next, pk_auto_bin_lists). */
typedef struct padded_rows_of {
  uint32_t narrow, wide;
  uint64_t second;
} padded_rows_of_t;
padded_rows_of_t pk_padded_rows_of(const pk_ctx_t *ctx, const uint32_t *head, const uint32_t *next,
                                   uint32_t bin);
/* PADDED: moves rows from each column's costliest micro-batch into
 * micro-batches of other columns that stay within their own column's level
 * (auto_padded_lower.c). Never raises the step cost. */
int pk_auto_lower_padded(auto_state_t *s);
/* The PADDED packings without equal_count (runs of like width, halved, in
 * an even band or in column levels, then the cut search and the level
 * search from the best),
 * each refined; keeps the lowest step cost. PK_EPRECOND
 * when m columns cannot hold the items. saved_* hold m x dp micro-batches
 * and n items. */
int pk_auto_pack_padded_best(auto_state_t *s, const uint32_t *order, uint32_t m,
                             pk_bin_t *saved_bins, uint32_t *saved_item_bin);

#endif
