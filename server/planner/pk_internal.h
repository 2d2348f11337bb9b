/* Internal interfaces of the planner, shared by its source files. Not part of
 * the public API and not installed.
 *
 * Pipeline (planner.c): validate -> items (aligned sizes and costs) ->
 * mini-batches -> per mini-batch: DP assignment and micro-batching (AUTO:
 * auto/, overview in auto/auto.h; compatibility algorithms: compat_dp.c, compat_micro.c,
 * compat_roll.c and compat_roll_cuts.c, driven by assign.c) -> order ->
 * layout and stats. */
#ifndef PK_INTERNAL_H
#define PK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pk_planner.h"

#define PK_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PK_MAX(a, b) ((a) > (b) ? (a) : (b))

/* The effective, validated configuration of one request. */
typedef struct pk_cfg {
  uint32_t dp, tp, cp, pp, vpp;
  uint32_t cp_algo;
  uint32_t align; /* A: every packed slot is a multiple of it. */
  uint32_t group; /* microbatch_group: micro counts are multiples of it. */
  uint32_t mode;
  uint32_t dp_balance, micro_algo, order;
  bool equal_count, shuffle, keep_groups, fixed_shape;
  bool groups_on_rank;
  uint32_t mini_batches;
  uint64_t cap;      /* Footprint cap summed over CP ranks (max_tokens * CP);
                      * UINT64_MAX when there is no cap. */
  uint32_t max_seqs; /* UINT32_MAX when there is no cap. */
  uint32_t micro_batch_size;
  uint32_t min_micro;
  uint32_t round; /* PADDED: row widths are multiples of lcm(round, A). */
  uint32_t total_multiple;
  /* The cost model (pk_slot_cost): linear, quadratic, per_sequence and
   * per_micro_batch, defaults applied. */
  double lin, quad, seq, micro;
  uint64_t seed;
} pk_cfg_t;

/* pk_step_lower_bound's last value outside PADDED mode, where it depends
 * on the items and m alone (m == 0: none yet). */
typedef struct pk_step_memo {
  uint32_t m;
  double bound;
} pk_step_memo_t;

/* What the partitioning algorithms see of a mini-batch: its items and the
 * rules a micro-batch must obey. Item k is sequence idx[k]. */
typedef struct pk_ctx {
  const pk_cfg_t *cfg;
  uint32_t n;           /* Items in this mini-batch. */
  const uint32_t *idx;  /* n sequence indices. */
  const uint64_t *size; /* n footprints: aligned length (PACKED/FIXED) or
                         * row width rounded to lcm(round, A) (PADDED). */
  const double *cost;   /* n costs: pk_slot_cost of the sizes (bounds.c
                         * splits them into per_sequence and pk_token_cost
                         * of the size). */
  const uint32_t *len;  /* n real lengths. */
  /* Optional, filled by the pipeline: the n item numbers by size
   * descending (ties by item number), pk_micro_lower_bound's value, and
   * a memo for pk_step_lower_bound (owned by the pipeline, one per
   * mini-batch; the packing, the cross-column pass and the plan's stats ask
   * for the same bound). NULL / 0: computed on demand. */
  const uint32_t *by_size;
  uint32_t micro_lb;
  pk_step_memo_t *step_memo;
  /* The request's group ids by sequence index (groups[idx[k]] is item k's),
   * or NULL when the request has none. */
  const uint64_t *groups;
  /* The caller's stop condition (pk_limits_t), or NULL: poll it with
   * pk_stopped() between stages and every few thousand iterations of a
   * long loop; on true, unwind and return PK_ECANCELED. */
  const pk_limits_t *limits;
  /* The caller's AUTO trace (pk_limits_t.trace), or NULL. */
  struct pk_auto_trace *trace;
} pk_ctx_t;

/* True when the caller asked the planner to stop (limits may be NULL). */
static inline bool pk_limits_stopped(const pk_limits_t *limits) {
  return limits != NULL && limits->should_stop != NULL &&
         limits->should_stop(limits->stop_arg) != 0;
}

/* True when the caller asked the planner to stop. */
static inline bool pk_stopped(const pk_ctx_t *ctx) {
  return pk_limits_stopped(ctx->limits);
}

/* For the body of a long loop: asks the caller once every PK_STOP_EVERY
 * iterations (counted in *tick, which the loop owns and starts at 0), so
 * that polling costs a counter increment per iteration. 4096 iterations of
 * the planner's loops take well under a millisecond. */
#define PK_STOP_EVERY 4096u
static inline bool pk_stop_tick(const pk_ctx_t *ctx, uint32_t *tick) {
  return (++*tick % PK_STOP_EVERY) == 0 && pk_stopped(ctx);
}

/* The running state of one micro-batch while it is being filled. */
typedef struct pk_bin {
  uint64_t sum;   /* Sum of item sizes. */
  uint64_t width; /* Largest item size (PADDED footprint = count * width). */
  uint32_t count;
  double cost;
} pk_bin_t;

/* The footprint of a bin (summed over CP ranks) in the ctx's mode. */
static inline uint64_t pk_bin_footprint(const pk_cfg_t *cfg, const pk_bin_t *b) {
  return cfg->mode == PK_MODE_PADDED ? (uint64_t)b->count * b->width : b->sum;
}

/* Whether item k can join bin b without breaking the token cap or max_seqs. */
static inline bool pk_bin_fits(const pk_ctx_t *ctx, const pk_bin_t *b, uint32_t k) {
  const pk_cfg_t *cfg = ctx->cfg;
  if (b->count + 1 > cfg->max_seqs)
    return false;
  uint64_t s = ctx->size[k];
  if (cfg->mode == PK_MODE_PADDED) {
    uint64_t w = s > b->width ? s : b->width;
    return (uint64_t)(b->count + 1) * w <= cfg->cap;
  }
  return b->sum + s <= cfg->cap;
}

static inline void pk_bin_add(const pk_ctx_t *ctx, pk_bin_t *b, uint32_t k) {
  b->sum += ctx->size[k];
  if (ctx->size[k] > b->width)
    b->width = ctx->size[k];
  b->count++;
  b->cost += ctx->cost[k];
}

/* A partition of a mini-batch's items: for every item k (0..n-1) its rank
 * and its micro-batch number within that rank. Micro numbers of a rank are
 * 0..nmicro-1, all used (no empty micro-batch). Every rank has the same
 * nmicro. Items of a micro-batch are emitted in increasing `pos` order;
 * pos values are distinct and below n. */
typedef struct pk_assign {
  uint32_t *rank;  /* n */
  uint32_t *micro; /* n */
  uint32_t *pos;   /* n: sort key inside the micro-batch (packed order). */
  uint32_t nmicro; /* Per rank. */
  /* True when micro-batch j of every rank was built as one lock-step column
   * (AUTO, FIXED): ordering then permutes columns, the same on every rank.
   * False: every rank orders its own micro-batches (the peers' way). */
  bool columns;
} pk_assign_t;

/* Partitions the mini-batch into ranks and micro-batches with the AUTO
 * algorithm (auto/driver.c; its stages are listed in auto/auto.h). Arrays of `out` are
 * caller-allocated with n entries. Returns 0, PK_EPRECOND (with a message), PK_ENOMEM or
 * PK_ECANCELED (the caller's stop). */
int pk_auto_assign(const pk_ctx_t *ctx, pk_assign_t *out, char *err, size_t errlen);

/* DP balancing by a compatibility algorithm (compat_dp.c): writes rank[k] for
 * every item. Rules: with equal_count every rank gets exactly n/dp items
 * (the caller checked n % dp == 0). Returns 0 or PK_ENOMEM. */
int pk_compat_dp(const pk_ctx_t *ctx, uint32_t algo, bool equal_count, uint32_t *rank);

/* Micro-batching of one rank's items by a compatibility algorithm
 * (compat_micro.c). `items` lists the rank's item numbers (into ctx) in the
 * rank's order; writes micro[j] for items[j] and returns the count in
 * *nmicro. The count is at least min_count (when min_count <= nitems) and
 * every micro-batch fits the cap and max_seqs; the count is raised until
 * it does. Returns 0, PK_EPRECOND or PK_ENOMEM. */
int pk_compat_micro(const pk_ctx_t *ctx, uint32_t algo, const uint32_t *items, uint32_t nitems,
                    uint32_t min_count, uint32_t *micro, uint32_t *nmicro);

/* ROLL dynamic batching (compat_roll.c): sorted stride over ranks plus one
 * shared next-fit boundary list in PADDED footprint, then the count raised to
 * a multiple of cfg->group by splitting the largest multi-row micro-batches;
 * with micro_algo SHARED_CUTS the boundaries come from
 * pk_roll_shared_cuts. Fills out (caller-allocated, n entries). */
int pk_roll_assign(const pk_ctx_t *ctx, pk_assign_t *out, char *err, size_t errlen);

/* micro_algo SHARED_CUTS (compat_roll_cuts.c): the boundary list over the s
 * slots of the sorted stride (width[]: nondecreasing slot widths, each
 * within the cap) with exactly t micro-batches (the fewest next-fit count
 * <= t <= s) of the least lock-step step cost sum_j rows_j x
 * pk_slot_cost(widest row of j) under the cap and max_seqs, found by
 * dynamic programming. Writes start[0 .. t] (start[0] = 0, start[t] = s)
 * and returns 0; returns 1 with start[] untouched when the work would be
 * above its bounds (PK_CUTS_ANY only), PK_ENOMEM, or PK_EINTERNAL when t is
 * out of range. `how` picks the scan or the Monge divide and conquer
 * (tests); PK_CUTS_ANY picks by the work. */
typedef enum { PK_CUTS_ANY = 0, PK_CUTS_SCAN = 1, PK_CUTS_MONGE = 2 } pk_cuts_how_t;
int pk_roll_shared_cuts(const pk_cfg_t *cfg, const uint64_t *width, uint32_t s, uint32_t t,
                        pk_cuts_how_t how, uint32_t *start);

/* batching.groups_on_rank (group_dp.c): whole groups to ranks, balanced by
 * cost, then every rank micro-batched with one common count. ctx->groups is
 * set and the mini-batch holds at least dp groups (a multiple of dp with
 * equal_count). Fills out (caller-allocated, n entries). */
int pk_group_assign(const pk_ctx_t *ctx, pk_assign_t *out, char *err, size_t errlen);

/* Drives a compatibility DP algorithm plus a micro algorithm into an
 * assignment with equal micro counts on every rank (assign.c). */
int pk_compat_assign(const pk_ctx_t *ctx, pk_assign_t *out, char *err, size_t errlen);

/* The shape of a validated request (shape.c). */
void pk_shape_of(const pk_request_t *req, const pk_cfg_t *cfg, pk_plan_shape_t *shape);

/* The caller's limits (shape.c; limits may be NULL): pk_limit_count
 * before validation (the sequence count, O(1)), pk_limit_admit after it
 * (the caller's admission check on the request's shape). */
int pk_limit_count(const pk_request_t *req, const pk_limits_t *limits, char *err, size_t errlen);
int pk_limit_admit(const pk_request_t *req, const pk_cfg_t *cfg, const pk_limits_t *limits,
                   char *err, size_t errlen);

/* Validates a request and fills the effective configuration (validate.c).
 * Returns 0, PK_EINVAL or PK_EPRECOND with a message naming the field and
 * the value, or PK_ENOMEM when the request is too large to plan. */
int pk_validate(const pk_request_t *req, pk_cfg_t *cfg, char *err, size_t errlen);

/* The footprint of sequence length len in the cfg's mode: the aligned length
 * (PACKED, FIXED) or the row width rounded to lcm(round, A) (PADDED). */
uint64_t pk_item_size(const pk_cfg_t *cfg, uint32_t len);
/* PADDED: the most rows a micro-batch whose widest row is w may hold under
 * the cap and max_seqs, at least one (validation rejects rows above the
 * cap). */
static inline uint64_t pk_padded_cap_rows(const pk_cfg_t *cfg, uint64_t w) {
  uint64_t rows = cfg->max_seqs;
  if (w > 0 && cfg->cap / w < rows)
    rows = cfg->cap / w;
  return rows > 0 ? rows : 1;
}

/* The token part of a sequence's cost: linear a + quadratic a^2 for a slot
 * of `aligned` tokens. It is 0 at a = 0 and its cost per token, linear +
 * quadratic a, never falls as a grows (the bounds rely on both). */
static inline double pk_token_cost(const pk_cfg_t *cfg, uint64_t aligned) {
  double a = (double)aligned;
  return cfg->lin * a + cfg->quad * a * a;
}

/* The cost of a sequence in a slot of `aligned` tokens: per_sequence plus
 * the token part. Every item cost (ctx->cost) and every micro-batch cost is
 * made of it: a micro-batch costs per_micro_batch plus the sum of its
 * sequences' slot costs (PADDED: rows x pk_slot_cost(width)). Nondecreasing
 * in a; per_sequence is paid at a = 0 too, so a zero-length sequence costs
 * per_sequence. */
static inline double pk_slot_cost(const pk_cfg_t *cfg, uint64_t aligned) {
  return cfg->seq + pk_token_cost(cfg, aligned);
}

/* The DP part of AUTO on its own (auto/deal.c): items dealt in tiers of dp by cost
 * with equal counts (+-1), each tier matched to the lightest ranks. */
int pk_auto_dp(const pk_ctx_t *ctx, uint32_t *rank);

/* AUTO micro-batching of one rank's items into exactly `count` micro-batches
 * (auto/deal.c): cost LPT under the cap. Returns PK_EPRECOND when they do not fit
 * (the caller raises the count). */
int pk_auto_micro(const pk_ctx_t *ctx, const uint32_t *items, uint32_t nitems, uint32_t count,
                  uint32_t *micro);

/* FIXED mode (assign.c): micro_batch_size sequences per micro-batch. */
int pk_fixed_assign(const pk_ctx_t *ctx, pk_assign_t *out, char *err, size_t errlen);

/* Proven lower bounds (bounds.c). The micro-batch count per rank of a
 * mini-batch: max(min_micro, ceil(n / (dp * max_seqs)), ceil(G / dp)) rounded
 * up to cfg->group, where G bounds the fewest micro-batches pooled over all
 * ranks (PADDED: exact greedy grouping; PACKED: Martello-Toth L2, at least
 * ceil(sum size / cap)). Returns ctx->micro_lb when it is set. */
uint32_t pk_micro_lower_bound(const pk_ctx_t *ctx);
/* A lower bound on the least step cost (sum over micro-batch slots of the
 * costliest rank) of any plan of the mini-batch with m micro-batches per
 * rank. known_step is the step cost of a plan at hand (INFINITY when none):
 * the costlier sharpenings stop once the bound is within 0.5 % of it (the
 * tolerance the planner is judged by). */
double pk_step_lower_bound(const pk_ctx_t *ctx, uint32_t m, double known_step);
/* Small utilities (util.c). */
uint64_t pk_round_up(uint64_t x, uint64_t m);
uint64_t pk_gcd(uint64_t a, uint64_t b);
uint64_t pk_lcm(uint64_t a, uint64_t b);
/* The number of entries of the descending array a[0..n) above v (a binary
 * search). */
uint32_t pk_count_above(const double *a, uint32_t n, double v);
/* A checked allocation: NULL when count * size overflows or malloc fails. */
void *pk_calloc(size_t count, size_t size);
void *pk_malloc_array(size_t count, size_t size);
/* Writes a formatted message into err (errlen bytes, NUL-terminated) and
 * returns code. */
int pk_fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Sorts item numbers by cost descending, ties by size descending, then by
 * item number ascending (a total order: results are deterministic). */
void pk_sort_by_cost_desc(const pk_ctx_t *ctx, uint32_t *items, uint32_t n);

/* A stable bottom-up merge sort of n values (tmp: n scratch entries):
 * before(arg, x, y) is true when x must come before y; equal values keep
 * their order, so results never depend on a library sort. */
typedef bool (*pk_before_fn)(const void *arg, uint32_t x, uint32_t y);
void pk_merge_sort_u32(uint32_t *a, uint32_t *tmp, uint32_t n, pk_before_fn before,
                       const void *arg);
/* A binary heap of values heap[0 .. size), heap[0] the first under
 * before(arg, x, y): pk_heap_down restores it below position i (after
 * heap[i] changed or was replaced), pk_heap_up above position i (after a
 * value was put there). */
void pk_heap_down(uint32_t *heap, uint32_t size, uint32_t i, pk_before_fn before, const void *arg);
void pk_heap_up(uint32_t *heap, uint32_t i, pk_before_fn before, const void *arg);

/* A deterministic pseudo-random generator (splitmix64) for shuffles. */
typedef struct pk_rng {
  uint64_t state;
} pk_rng_t;
uint64_t pk_rng_next(pk_rng_t *rng);
/* Uniform in [0, bound). */
uint64_t pk_rng_below(pk_rng_t *rng, uint64_t bound);

#endif
