/* AUTO: packd's own DP balancing and micro-batching, planned jointly, as a
 * pipeline. Read this header top to bottom: the code runs in this order.
 *
 * Ranks run micro-batch j at the same time (lock step), so what costs time is
 * the costliest rank of every micro-batch slot ("column"): the step cost is
 * the sum of the column levels. AUTO builds M columns of dp micro-batches
 * and makes every column level. A packing is `bins` (M x dp micro-batches,
 * bin = column x dp + slot) and `item_bin` (n entries); every stage reads
 * and writes it through the helpers of bins.c, which keep each micro-batch
 * under the cap and max_seqs (pk_bin_fits) and its cost exact (pk_bin_add).
 *
 * Stage 0, init (driver.c). The items in size-descending order (the
 * pipeline's radix sort, ctx->by_size, or a sort here); M starts at
 * pk_micro_lower_bound (bounds.c: the fewest micro-batches per rank the cap,
 * max_seqs, min_micro_batches and microbatch_group allow); scratch for up to
 * n / dp columns. Contract: no packing yet; everything allocated here is
 * freed on every exit, PK_ECANCELED included.
 *
 * Stage 1, count (driver.c). The least M, from the bound up in steps of
 * microbatch_group, at which one of the candidate packers of stage 2 fits.
 * PACKED: where the batch nearly fills M columns (PK_AUTO_FULL_FILL), one
 * first fit pass over every micro-batch tells the count first fit needs;
 * above the bound, micro-batch completion and repair (complete.c,
 * repair.c) and the exact search (exact.c, small batches) try fewer. Under
 * max_seqs, where completion needs far more than M, the least count is
 * bisected. PADDED: runs of like width are cut at each M until they fit.
 * Contract: the count is never below the bound, and the step bound
 * (bounds.c) is computed for the count reached.
 *
 * Stage 2, candidate packers, as tables: {name, worth, run} entries
 * (packed_best.c for PACKED, padded_best.c for PADDED; each packer in its
 * own file). A loop runs the entries worth running, keeps the best packing
 * and records every candidate's fate in the trace (pk_auto_trace_t below):
 * best so far, fitted but not kept, did not fit, or skipped with why.
 *   PACKED, nearly full: "first-fit" (packed.c: first fit decreasing,
 *   micro-batches sorted by cost and dealt in tiers of dp), after the
 *   count stage's "tighten" and "exact-below" where first fit needs more
 *   than the bound; then, unless first fit is within PK_AUTO_GOOD_ENOUGH
 *   of the step bound or the count was tightened, the column packers below,
 *   and one that fits is kept over first fit (its columns refine better).
 *   PACKED otherwise: the column packers "level-columns" (packed.c: each
 *   column's level set by its largest item, items placed without raising
 *   levels) and "tier-columns" (like items dealt in tiers of dp): the
 *   first, and the second unless the first is within PK_AUTO_CLOSE of the
 *   step bound, the lower step kept; where neither fits, "first-fit", then
 *   under max_seqs "completion" (complete.c), then "exact" (exact.c). With
 *   equal_count only "tier-columns", then "exact".
 *   PADDED: "halved", then each entry of padded_candidates whose worth()
 *   says it may pay ("even-band", "levels", "cap-levels", "cut-search" in
 *   runs.c, "level-search" in levels.c); the lowest step is kept. With
 *   equal_count only whole tiers per column ("padded-tiers").
 * Contract: a packer returns 0 with every item placed under the cap and
 * max_seqs, or PK_EPRECOND (does not fit at this count; the state may hold
 * anything), PK_ENOMEM or PK_ECANCELED.
 *
 * Stage 3, improvers. PACKED: "refine" (packed.c: moves and swaps inside a
 * column between its costliest and cheapest micro-batches) and "lower"
 * (lower.c: items leave each column's costliest micro-batches for
 * micro-batches of other columns that stay at or below their own level).
 * PADDED: "lower-padded" (padded_lower.c), not with equal_count.
 * Contract: an improver never raises the step cost and keeps the count.
 *
 * Stage 4, deal (deal.c): each column's micro-batches go to ranks,
 * costliest to the rank with the least total so far. Contract: any
 * permutation inside a column leaves the step cost unchanged, so the deal
 * only balances the ranks' totals.
 *
 * Stopping. The driver polls the caller's stop callback (pk_stopped)
 * between stages, and every loop that can run long ticks a counter
 * (pk_auto_tick) that polls every PK_AUTO_POLL_EVERY work units. Once the
 * callback said stop it is never called again, and PK_ECANCELED goes up the
 * stack with every scratch buffer freed.
 *
 * Checks. Debug builds run pk_packing_check after every stage and test the
 * improvers' contract (driver.c); a broken contract is PK_EINTERNAL naming
 * the stage.
 *
 * Knobs. Every threshold and budget is in knobs.h with its unit and reason.
 * Shared structures that know nothing of AUTO are in rooms.h (room and
 * head trees). Costs: one O(n) radix sort (pipeline), O(n log dp) per
 * packing try, and bounded refinement per column.
 *
 * Not part of the planner's API. */
#ifndef PK_AUTO_H
#define PK_AUTO_H

#include "knobs.h"
#include "pk_internal.h"
#include "rooms.h"

/* ---- Stopping (see the overview) ------------------------------------------ */

typedef struct pk_auto_stop {
  const pk_ctx_t *ctx; /* Its limits hold the callback (may be NULL). */
  uint32_t ticks;      /* Work units since the last poll. */
  bool stopped;        /* The callback said stop: never called again. */
} pk_auto_stop_t;

/* Polls now (between stages). NULL: never stops. */
static inline bool pk_auto_poll(pk_auto_stop_t *st) {
  if (st == NULL)
    return false;
  if (!st->stopped) {
    st->ticks = 0;
    st->stopped = pk_stopped(st->ctx);
  }
  return st->stopped;
}

/* Counts `work` units and polls once PK_AUTO_POLL_EVERY have gone by: a
 * counter and a branch per call, so long loops may call it every
 * iteration. NULL: never stops. */
static inline bool pk_auto_tick(pk_auto_stop_t *st, uint32_t work) {
  if (st == NULL)
    return false;
  if (st->stopped)
    return true;
  st->ticks += work;
  if (st->ticks < PK_AUTO_POLL_EVERY)
    return false;
  return pk_auto_poll(st);
}

/* For the body of a cheap loop with counter i: ticks PK_AUTO_TICK_BATCH
 * units once every PK_AUTO_TICK_BATCH iterations (at i = 0 too). */
static inline bool pk_auto_tick_loop(pk_auto_stop_t *st, uint64_t i) {
  return (i & (PK_AUTO_TICK_BATCH - 1)) == 0 && pk_auto_tick(st, PK_AUTO_TICK_BATCH);
}

/* A cost no level reaches: the sentinel of unset levels and heads. */
#define PK_AUTO_NO_LEVEL 1e308

/* Whether a stop was seen already (never calls the callback). */
static inline bool pk_auto_stopped(const pk_auto_stop_t *st) {
  return st != NULL && st->stopped;
}

/* ---- The trace: which candidate won, what each stage gained ---------------- */

/* Records past this many are dropped (the count search may try many
 * counts); a structural size, not a tuning value. */
#define PK_AUTO_TRACE_STAGES 32

/* What became of a stage: an improver ran; a candidate packer's packing
 * was the best so far, fitted but was not kept, did not fit, or the packer
 * was not run (its record's `why` says why). */
typedef enum pk_auto_fate {
  PK_FATE_RAN = 0,
  PK_FATE_BEST,
  PK_FATE_WORSE,
  PK_FATE_NO_FIT,
  PK_FATE_SKIPPED,
} pk_auto_fate_t;

typedef struct pk_auto_stage_rec {
  const char *name;    /* A packer or improver name (the overview's). */
  pk_auto_fate_t fate; /* See pk_auto_fate_t. */
  const char *why;     /* PK_FATE_SKIPPED: the reason; else NULL. */
  uint32_t m;          /* The count it ran at. */
  double before;       /* Step cost before it (the best so far; 0: none). */
  double after;        /* Its packing's step cost (0 where it did not fit). */
  double us;           /* Its wall-clock time, microseconds. */
} pk_auto_stage_rec_t;

/* One AUTO mini-batch's trace. It lives in the run (driver.c) and is
 * copied to the caller's pk_limits_t.trace at the end, so that planning
 * keeps no state outside the caller's structs. */
typedef struct pk_auto_trace {
  const char *winner; /* The candidate packer whose packing was kept. */
  uint32_t m;         /* The count reached. */
  double step;        /* The final step cost. */
  uint32_t nstages;
  pk_auto_stage_rec_t stage[PK_AUTO_TRACE_STAGES];
} pk_auto_trace_t;

/* Appends a record (dropped past PK_AUTO_TRACE_STAGES); t may be NULL. */
void pk_auto_trace_add(pk_auto_trace_t *t, pk_auto_stage_rec_t rec);
/* The fate's name ("ran", "best", "worse", "no-fit", "skipped"). */
const char *pk_auto_fate_name(pk_auto_fate_t fate);
/* Microseconds of a monotonic clock. */
double pk_auto_now_us(void);

/* ---- The state every stage shares -------------------------------------- */

/* The sort keys of a column's micro-batch (pk_auto_sort_slots). */
typedef struct slot_key {
  double cost;
  uint64_t foot;
} slot_key_t;

typedef struct auto_state {
  const pk_ctx_t *ctx;
  uint32_t dp, m;
  pk_bin_t *bins;         /* m * dp, bin = column * dp + slot. */
  uint64_t *col_foot;     /* Largest micro-batch footprint of the column. */
  uint32_t *slots;        /* dp scratch. */
  uint32_t *tmp;          /* dp scratch. */
  slot_key_t *keys;       /* dp scratch (pk_auto_sort_slots). */
  uint32_t *item_bin;     /* n */
  room_tree_t cols;       /* Per column: room of its fullest micro-batch (tiers)
                           * or of its roomiest one plus one (level packing). */
  room_tree_t bins_rt;    /* Room of each micro-batch (first fit). */
  room_tree_t col_room;   /* Token room left per column (level packing). */
  pk_auto_stop_t *stop;   /* The stop poll (NULL: never stops); a pointer so
                           * that stages given a const state may tick it. */
  pk_auto_trace_t *trace; /* The run's trace (never NULL in a run). */
} auto_state_t;

/* ---- Packings (bins.c) -------------------------------------------------- */

/* A packing: micro-batches and the micro-batch of every item. The state's
 * own (pk_auto_packing) is a view; packings kept aside own their arrays. */
typedef struct pk_packing {
  pk_bin_t *bins;
  uint32_t *item_bin;
} pk_packing_t;

/* 0 when the state's packing is whole: every item in one of its m x dp
 * micro-batches, none empty, each within the cap and max_seqs, and each
 * micro-batch's count, tokens, cost (within rounding) and, in PADDED mode,
 * width those of its items; PK_EINTERNAL otherwise, PK_ENOMEM. O(n + m x
 * dp). Debug builds run it after every stage (driver.c). */
int pk_packing_check(const auto_state_t *s);
/* Arrays for nbins micro-batches and n items. 0 or PK_ENOMEM (then nothing
 * is held); pk_packing_free frees either way. */
int pk_packing_alloc(pk_packing_t *p, size_t nbins, uint32_t n);
void pk_packing_free(pk_packing_t *p);
/* dst = src over the first nbins micro-batches and all n items. */
void pk_packing_copy(pk_packing_t *dst, const pk_packing_t *src, size_t nbins, uint32_t n);
/* The state's packing, as a view (nothing to free). */
static inline pk_packing_t pk_auto_packing(auto_state_t *s) {
  return (pk_packing_t){.bins = s->bins, .item_bin = s->item_bin};
}

/* ---- Packing helpers (bins.c) ----------------------------------------- */
/* Empties the first `count` micro-batches of the state, polling the stop
 * between chunks; false when stopped (then partly cleared). */
bool pk_auto_clear_bins(auto_state_t *s, size_t count);
/* The room micro-batch i has left (0 when it holds max_seqs items). */
uint64_t pk_auto_bin_room(const auto_state_t *s, uint32_t i);
/* Column c's level: the cost of its costliest micro-batch (in PADDED
 * mode rows x c(widest row), pk_padded_cost). */
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
/* Reorders the first nbins micro-batches: new bin q is old bin perm[q];
 * item_bin follows. tmp (nbins) and moved (nbins) are the caller's
 * scratch. */
void pk_auto_permute_bins(auto_state_t *s, const uint32_t *perm, uint32_t nbins, uint32_t *tmp,
                          pk_bin_t *moved);

/* PACKED (packed.c): the column packers and first fit, each packing the
 * state at s->m (0 or PK_EPRECOND: does not fit there). */
int pk_auto_pack_levels(auto_state_t *s, const uint32_t *order);
int pk_auto_pack_bins_first(auto_state_t *s, const uint32_t *order);
/* The second half of pk_auto_pack_bins_first, after first fit placed every
 * item into the first s->m x dp micro-batches: fills empty micro-batches
 * and sorts the micro-batches into columns. */
int pk_auto_bins_finish(auto_state_t *s, const uint32_t *order);
int pk_auto_pack_tiers(auto_state_t *s, const uint32_t *order);
int pk_auto_refine_columns(auto_state_t *s);
/* Moves items from the costliest micro-batches of each column into
 * micro-batches of other columns below their level (lower.c). */
int pk_auto_lower_columns(auto_state_t *s);

/* First fit repair (repair.c). On entry s->bins and s->item_bin hold
 * a packing over `top` x dp micro-batches with every item placed (first fit
 * decreasing, or micro-batch completion).
 * Tries top - group, top - 2 group, ... (not below lo): each count takes the
 * items of the micro-batches beyond it and places them into the others
 * (swaps gather room); stops at the first count that fails. *count is the
 * lowest count reached (top when none), and s->bins, s->item_bin hold its
 * packing (micro-batches beyond it empty). `save` is scratch for top x dp
 * micro-batches and n items. Returns 0 or PK_ENOMEM. */
int pk_auto_repair_down(auto_state_t *s, const uint32_t *order, uint32_t lo, uint32_t top,
                        uint32_t group, pk_packing_t save, uint32_t *count);

/* Micro-batch completion (complete.c), PACKED: fills micro-batches
 * one at a time, the largest item left first, then the largest that fits;
 * where more room is left than the micro-batch's share of the room
 * `target` micro-batches would leave (target 0: wherever room is left), its
 * last k <= 4 items are exchanged for the k smallest items left and the
 * largest beside them, where that fills more. With max_seqs, also three
 * packings that keep room for later slots (up to max_seqs at the smallest
 * size left, up to the items left per micro-batch left to `target`, and for
 * the smallest items left as they are), the one needing the fewest
 * micro-batches kept. `order` is size-descending.
 * Writes out's bins[0 .. nbins) (zeroed first) and item_bin; *used is the number
 * of micro-batches filled, in front. PK_EPRECOND when the items need more
 * than nbins; PK_ENOMEM. */
int pk_auto_pack_complete(const auto_state_t *s, const uint32_t *order, uint32_t target,
                          uint32_t nbins, pk_packing_t out, uint32_t *used);

/* Where first fit decreasing (s->bins, s->item_bin: every item placed in
 * `top` x dp micro-batches) needs more than lo columns: micro-batch
 * completion (aiming at lo x dp micro-batches, then half way to what the
 * last aim reached, at least a group more; at most 4 packings) where
 * it needs fewer than top, else first fit; either repaired down
 * (pk_auto_repair_down) towards lo. *count and s->bins,
 * s->item_bin as pk_auto_repair_down leaves them. `scratch` as `save`
 * there. Returns
 * 0 or PK_ENOMEM. */
int pk_auto_tighten(auto_state_t *s, const uint32_t *order, uint32_t lo, uint32_t top,
                    uint32_t group, pk_packing_t scratch, uint32_t *count);

/* The exact search (exact.c), PACKED; its budget is PK_EXACT_STEPS. */
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

/* The count search's memory across the counts it tries (driver.c; the
 * PACKED candidates read and update it). */
typedef struct pk_count_search {
  uint32_t max_m;          /* n / dp: every micro-batch needs an item. */
  uint64_t total_size;     /* The items' summed footprint. */
  pk_exact_budget_t exact; /* Shared by every count the search is tried at. */
  uint32_t exact_m;        /* The last count it was tried at (0: none). */
  uint32_t ffd_m;          /* First fit's least count (0: not probed). */
  uint32_t complete_m;     /* The count completion needed (max_seqs). */
  /* The bisection's ends: the last count that failed, the least that fit
   * (0: not bisecting). */
  uint32_t bis_lo, bis_hi;
} pk_count_search_t;

/* Stage 2, PACKED, at count *m (packed_best.c): the candidate table, the
 * best packing kept and every candidate's fate in the trace. *m may move
 * (first fit's count, tightening, completion's count); *again asks the
 * count search to try *m afresh. 0, PK_EPRECOND (none fits at *m),
 * PK_ENOMEM, PK_ECANCELED. `saved` holds max_m x dp micro-batches and n
 * items. */
int pk_auto_pack_packed_best(auto_state_t *s, const uint32_t *order, pk_count_search_t *cs,
                             pk_packing_t *saved, uint32_t *m, bool *again);

/* PADDED (padded.c). A run of the width-sorted order: a micro-batch
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
  pk_auto_stop_t *stop; /* The stop poll (NULL: never stops). */
} padded_rows_t;

int pk_padded_rows_init(padded_rows_t *rt, const pk_ctx_t *ctx, const uint32_t *order);
/* The same, polling `stop` (kept in rt->stop for the searches over rt):
 * PK_ECANCELED when stopped. pk_padded_rows_free frees either way. */
int pk_padded_rows_init_polled(padded_rows_t *rt, const pk_ctx_t *ctx, const uint32_t *order,
                               pk_auto_stop_t *stop);
void pk_padded_rows_free(padded_rows_t *rt);

/* The cut search (runs.c): `count` runs that cover positions [0,
 * rt->n), in any order, come back in position order with their step cost
 * (costs sorted descending, in tiers of dp, the sum of the tier tops) no
 * higher, every run within its first row's cap_rows. `moves` bounds the
 * work; seed makes it deterministic. Returns 0 or PK_ENOMEM (runs
 * unchanged). */
int pk_auto_search_runs(const padded_rows_t *rt, padded_group_t *runs, uint32_t count, uint32_t dp,
                        uint32_t moves, uint64_t seed);

/* Runs of the width order at a target cost (padded.c). The number of
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

/* The level search (levels.c): from `runs` (m x dp runs covering
 * positions [0, rt->n)), walks of the width order at moved column levels;
 * where one gives runs with a lower step cost than `runs` (costs sorted
 * descending, the sum of every dp-th), the best replace `runs` (0, in no
 * particular order). PK_EPRECOND: none found (runs unchanged); PK_ENOMEM.
 * `work` bounds the walks (about one unit per level read, batch of runs
 * or class counted). */
int pk_auto_level_search(const padded_rows_t *rt, padded_group_t *runs, uint32_t m, uint32_t dp,
                         uint64_t work);

/* The runs the PADDED candidates start from (padded.c). Each writes
 * target = m x dp runs covering every row into grp, or returns PK_EPRECOND
 * (none at this count), PK_ENOMEM. pk_padded_halved_runs: runs closed at
 * target cost t, the costliest halved until there are target of them
 * (*halvings: how many were). pk_padded_level_runs: column levels set by
 * the widest rows (cap_runs: by their full runs), the rest at their own
 * target. pk_padded_even_runs: runs with costs in one band as narrow as the
 * count allows, below hi_t. */
int pk_padded_halved_runs(const padded_rows_t *rt, uint32_t target, double t, padded_group_t *grp,
                          uint32_t *halvings);
int pk_padded_level_runs(const padded_rows_t *rt, uint32_t m, uint32_t dp, double t, bool cap_runs,
                         padded_group_t *grp);
int pk_padded_even_runs(const padded_rows_t *rt, uint32_t target, double hi_t, padded_group_t *grp);
/* Exactly m x dp runs, sorted by cost (descending, stable), into the state:
 * tier j is column j. 0, PK_ENOMEM, PK_ECANCELED. */
int pk_padded_deal_groups(auto_state_t *s, const uint32_t *order, const padded_group_t *grp,
                          uint32_t m);

/* PADDED (padded.c; the candidates in padded_best.c). */
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
 * (padded_lower.c). Never raises the step cost. */
int pk_auto_lower_padded(auto_state_t *s);
/* The PADDED packings without equal_count (runs of like width, halved, in
 * an even band or in column levels, then the cut search and the level
 * search from the best),
 * each refined; keeps the lowest step cost. PK_EPRECOND
 * when m columns cannot hold the items. `saved` holds m x dp micro-batches
 * and n items. */
int pk_auto_pack_padded_best(auto_state_t *s, const uint32_t *order, uint32_t m,
                             pk_packing_t *saved);

/* ---- Stage 4, the deal (deal.c) ------------------------------------------ */

/* Gives each column's micro-batches to ranks, costliest to the rank with
 * the least total so far, and writes the assignment. 0 or PK_ENOMEM. */
int pk_auto_deal(auto_state_t *s, pk_assign_t *out);

#endif
