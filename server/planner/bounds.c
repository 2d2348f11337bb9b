/* Proven lower bounds of a mini-batch: the fewest micro-batches per rank any
 * plan needs, and the least step cost any plan with a given micro-batch
 * count can have. The planner reports them in the stats; AUTO starts from
 * the first and is judged against the second.
 *
 * Both bounds read the items in size-descending order (ctx->by_size when
 * the pipeline sorted them already). Costs are pk_slot_cost of the sizes,
 * so that order is also cost-descending, and the token part of the costs
 * (pk_token_cost, per_sequence left out) is cost-per-token-descending
 * (token part / size = linear + quadratic * size grows with size). The
 * whole cost per token does not: per_sequence weighs most on the smallest
 * items, so what micro-batches hold is bounded in two parts (see (h) at
 * pk_step_lower_bound). */
#include <math.h>
#include <stdlib.h>

#include "bounds_internal.h"

/* Stopping: the O(n) passes poll the caller's stop (pk_stop_tick). A stopped
 * pass returns what it has (a smaller count or cost is still a lower bound);
 * every caller polls again before anything computed from it leaves the
 * planner (the stop is sticky), so a weakened bound is never reported, nor
 * memoised. */

/* The work the stair bound (f) may do per call, in elementary steps of its
 * recursion (a few nanoseconds each; a level is budgeted 16 n (k + 1) of
 * them, k its count of big runs): the first three levels at n = 512, dp 8;
 * the first level only at n = 4096 (a walk over the runs); none from n =
 * 16384. */
#define PK_STAIR_BUDGET (1u << 18)

/* The slots count of packed_count_bound costs O(n (max_seqs - 1)): done up
 * to this max_seqs (beyond it a wide item's room is rarely what limits the
 * items it holds). */
#define PK_SLOT_BOUND_MAX_SEQS 32u

/* Fills order with the items sorted by size descending (ties by item
 * number), reusing ctx->by_size when present. Returns the array to read
 * (order or ctx->by_size), or NULL when out of memory. */
static const uint32_t *sorted_items(const pk_ctx_t *ctx, uint32_t **owned) {
  *owned = NULL;
  if (ctx->by_size != NULL)
    return ctx->by_size;
  uint32_t *order = pk_malloc_array(ctx->n, sizeof *order);
  if (order == NULL)
    return NULL;
  for (uint32_t k = 0; k < ctx->n; k++)
    order[k] = k;
  pk_sort_by_cost_desc(ctx, order, ctx->n);
  *owned = order;
  return order;
}

/* PADDED: the fewest groups (micro-batches pooled over all ranks) any
 * grouping of the items needs, exactly. A group costs rows x its widest row.
 * Walking the widths in descending order, the widest remaining item opens a
 * group and the group takes the min(cap / width, max_seqs) widest remaining
 * items. Exchange argument: some optimal grouping puts the widest item w in
 * a group of at most that many rows; swapping wider remaining items into
 * that group keeps it within the cap (its widest row stays w) and keeps the
 * other groups within it (they lose width or keep it), so some optimal
 * grouping starts like the greedy one; induction on the rest. */
static uint64_t padded_groups(const pk_ctx_t *ctx, const uint32_t *by_size) {
  uint64_t groups = 0;
  uint32_t tick = 0;
  for (uint32_t i = 0; i < ctx->n; i = pk_run_end(ctx, by_size, i)) {
    if (pk_stop_tick(ctx, &tick))
      break; /* The groups so far: still a bound. */
    groups++;
  }
  return groups;
}

/* PACKED: Martello and Toth's bound L2 on the fewest bins of capacity cap:
 * for a in [0, cap/2], the items above cap - a (J1) and those in
 * (cap/2, cap - a] (J2) each need their own bin, no two of them share one,
 * and the items in [a, cap/2] (J3) fit only into the J2 bins' free room or
 * further bins: |J1| + |J2| + max(0, ceil((sum J3 - (|J2| cap - sum J2)) /
 * cap)). a = 0 gives ceil(sum / cap). Only a = 0 and a = the sizes at most
 * cap/2 need checking (the bound is a step function changing there); with
 * a increasing, the J1 boundary moves right and the J3 end moves left, so
 * two pointers make it O(n). */
static uint64_t packed_bins_l2(const pk_ctx_t *ctx, const uint32_t *by_size) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t n = ctx->n;
  uint64_t cap = cfg->cap;
  uint64_t *pre = pk_malloc_array((size_t)n + 1, sizeof *pre);
  if (pre == NULL)
    return 0;
  pre[0] = 0;
  uint32_t tick = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (pk_stop_tick(ctx, &tick)) {
      free(pre);
      return 0;
    }
    pre[i + 1] = pre[i] + ctx->size[by_size[i]];
  }
#define SZ(i) (ctx->size[by_size[i]])
  /* [0, half): sizes above cap / 2. */
  uint32_t half = 0;
  while (half < n && SZ(half) * 2 > cap)
    half++;
  uint64_t best = (pre[n] + cap - 1) / cap;
  /* a runs over the distinct sizes in [1, cap/2], ascending: from index n-1
   * down to half. */
  uint32_t j1 = 0;    /* [0, j1): size > cap - a. */
  uint32_t j3end = n; /* [half, j3end): size >= a. */
  for (uint32_t t = n; t-- > half;) {
    if (pk_stop_tick(ctx, &tick))
      break; /* The best so far: still a bound. */
    uint64_t a = SZ(t);
    if (a == 0 || (t + 1 < n && SZ(t + 1) == a))
      continue;
    while (j1 < half && SZ(j1) > cap - a)
      j1++;
    while (j3end > half && SZ(j3end - 1) < a)
      j3end--;
    uint64_t n2 = half - j1, s2 = pre[half] - pre[j1];
    uint64_t s3 = pre[j3end] - pre[half];
    uint64_t free2 = n2 * cap - s2;
    uint64_t extra = s3 > free2 ? (s3 - free2 + cap - 1) / cap : 0;
    best = PK_MAX(best, (uint64_t)j1 + n2 + extra);
  }
#undef SZ
  free(pre);
  return best;
}

/* The most items of the batch that the rooms r_0 <= ... <= r_{t-1} of the t
 * wide items (all above cap / 2) can hold, at most q_i in room i: a bin
 * holding c others, sorted by size descending a_1 >= ... >= a_c, has
 * m a_m <= a_1 + ... + a_m <= r_i, so its m-th largest is at most r_i / m
 * (a "slot" (i, m), m <= q_i). The held items thus go one to a slot whose
 * threshold floor(r_i / m) is at least their size; an item fitting a slot
 * fits every slot with a larger threshold, so (Hall) the k smallest items
 * fit distinct slots if and only if, for every j <= k, the k - j + 1
 * largest of them, all at least s_j (the j-th smallest size), are at most
 * S(s_j) = the slots of threshold >= s_j; the most held is the largest such
 * k. S(x) = sum over m of the rooms with q_i >= m and floor(r_i / m) >= x,
 * one pointer per m moving down the rooms as x grows: O((n + t) (per - 1)).
 * Adding a room adds at most per - 1 slots, so t + ceil((n - t - held) /
 * per) never falls as t grows: t = all wide items is the best. q[i] is
 * the q of room i, rooms ascending. Returns UINT64_MAX when out of
 * memory. */
static uint64_t slots_held(const pk_ctx_t *ctx, const uint32_t *by_size, const uint64_t *rooms,
                           const uint32_t *q, uint32_t t, uint64_t per) {
  uint32_t n = ctx->n, mmax = (uint32_t)(per - 1);
  /* first[m - 1]: the first room (ascending) of list m whose slot threshold
   * floor(r_i / m) is at least the current size; lists end at t. A room is
   * in list m when q_i >= m; q is non-decreasing in i, so list m is a
   * suffix of the rooms, and first[m - 1] starts at its first room. */
  uint32_t *first = pk_malloc_array(mmax, sizeof *first);
  if (first == NULL)
    return UINT64_MAX;
  uint32_t i0 = 0;
  for (uint32_t m = 1; m <= mmax; m++) {
    while (i0 < t && q[i0] < m)
      i0++;
    first[m - 1] = i0;
  }
  uint64_t held = 0, bound_k = UINT64_MAX; /* min over j of S(s_j) + j - 1. */
  for (uint32_t j = 1; j <= n && held < bound_k; j++) {
    uint64_t x = ctx->size[by_size[n - j]], slots = 0;
    for (uint32_t m = 1; m <= mmax; m++) {
      uint32_t *f = &first[m - 1];
      while (*f < t && rooms[*f] / m < x)
        (*f)++;
      slots += t - *f;
    }
    bound_k = PK_MIN(bound_k, slots + j - 1);
    if ((uint64_t)j <= bound_k)
      held = j;
  }
  free(first);
  return held;
}

/* PACKED with max_seqs: the fewest bins of capacity cap and at most
 * max_seqs items each. Take the t largest items, all above cap / 2: no two
 * share a bin, so they open t bins. The bin of such an item i (room r_i =
 * cap - its size) holds at most q_i others, q_i = min(max_seqs - 1, the
 * most of the smallest items of the batch whose sizes add up to at most
 * r_i: any j other items add up to at least the j smallest), and all
 * those others together fit into the sum of the rooms, so they are at most
 * the most smallest items that sum fits. The items left need bins of
 * max_seqs: t + ceil((n - t - held) / max_seqs) for every t, t = 0 being
 * the count bound. As t grows the rooms grow, so both counts of smallest
 * items move one way: two pointers over the ascending prefix sums, O(n).
 * Where the widest sequences leave little room (RL rollouts cut at the
 * length limit, cap the limit, max_seqs 4) the count bound alone takes
 * every micro-batch as holding max_seqs of them.
 *
 * Both counts of held items above let every room take the same smallest
 * items; slots_held (above) counts them as distinct items, and is taken at
 * t = all items above cap / 2, where it is largest (see there). */
static uint64_t packed_count_bound(const pk_ctx_t *ctx, const uint32_t *by_size) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t n = ctx->n;
  uint64_t cap = cfg->cap, per = cfg->max_seqs;
  uint64_t best = (n + per - 1) / per;
  /* asc[j]: the sum of the j smallest sizes. */
  uint64_t *asc = pk_malloc_array((size_t)n + 1, sizeof *asc);
  if (asc == NULL)
    return best;
  asc[0] = 0;
  for (uint32_t j = 0; j < n; j++)
    asc[j + 1] = asc[j] + ctx->size[by_size[n - 1 - j]];
  uint64_t held_each = 0, room_sum = 0, held = 0;
  uint32_t q = 0, fit_sum = 0; /* Smallest items fitting one room, the sum of rooms. */
  uint32_t wide = 0;
  uint64_t *rooms = pk_malloc_array((size_t)n, sizeof *rooms);
  uint32_t *qs = pk_malloc_array((size_t)n, sizeof *qs);
  for (; wide < n && ctx->size[by_size[wide]] * 2 > cap; wide++) {
    uint64_t room = cap - ctx->size[by_size[wide]];
    while (q < n && asc[q + 1] <= room)
      q++;
    if (rooms != NULL && qs != NULL) {
      rooms[wide] = room;
      qs[wide] = (uint32_t)PK_MIN((uint64_t)q, per - 1);
    }
    held_each += PK_MIN((uint64_t)q, per - 1);
    room_sum += room;
    while (fit_sum < n && asc[fit_sum + 1] <= room_sum)
      fit_sum++;
    held = PK_MIN(held_each, (uint64_t)fit_sum);
    uint64_t opened = (uint64_t)wide + 1, left = n - opened;
    left = left > held ? left - held : 0;
    best = PK_MAX(best, opened + (left + per - 1) / per);
  }
  /* The slots count (slots_held) where it is cheap: per - 1 pointers. */
  if (wide > 0 && per <= PK_SLOT_BOUND_MAX_SEQS && rooms != NULL && qs != NULL) {
    uint64_t slots = slots_held(ctx, by_size, rooms, qs, wide, per);
    if (slots != UINT64_MAX) {
      held = PK_MIN(held, slots);
      uint64_t left = n - wide;
      left = left > held ? left - held : 0;
      best = PK_MAX(best, wide + (left + per - 1) / per);
    }
  }
  free(rooms);
  free(qs);
  free(asc);
  return best;
}

/* PACKED: the fewest bins by count alone. No bin holds more items than
 * the most smallest items of the batch whose sizes add up to at most cap
 * (any j items add up to at least the j smallest), nor more than max_seqs,
 * so n items need ceil(n / that) bins. Where the lengths sit in a narrow
 * band just above cap / (j + 1) (verl's tests: 20 to 25 lengths of 50 to
 * 90 under a cap of 300), this is the bound that holds: a count that the
 * tokens allow but the items' number does not (25 items of 61 and up hold
 * at most 4 to a bin of 300, so they need 7 bins where 1790 tokens fill 6)
 * is then never searched for. O(n) on the sorted sizes. */
static uint64_t packed_count_by_items(const pk_ctx_t *ctx, const uint32_t *by_size) {
  uint64_t cap = ctx->cfg->cap, sum = 0, per = 0;
  for (uint32_t j = ctx->n; j > 0 && per < ctx->cfg->max_seqs; j--) {
    sum += ctx->size[by_size[j - 1]];
    if (sum > cap)
      break;
    per++;
  }
  return per == 0 ? ctx->n : (ctx->n + per - 1) / per;
}

uint32_t pk_micro_lower_bound(const pk_ctx_t *ctx) {
  if (ctx->micro_lb != 0)
    return ctx->micro_lb;
  const pk_cfg_t *cfg = ctx->cfg;
  uint64_t dp = cfg->dp;
  uint64_t m = cfg->min_micro;
  if (cfg->max_seqs != UINT32_MAX)
    m = PK_MAX(m, ((uint64_t)ctx->n + dp * cfg->max_seqs - 1) / (dp * cfg->max_seqs));
  if (cfg->cap != UINT64_MAX && ctx->n > 0) {
    uint64_t sum = 0;
    for (uint32_t k = 0; k < ctx->n; k++)
      sum += ctx->size[k];
    m = PK_MAX(m, (sum + dp * cfg->cap - 1) / (dp * cfg->cap));
    /* Every plan's micro-batches, pooled over the ranks, group all items,
     * so dp x (micro-batches per rank) >= the fewest groups. */
    if (cfg->mode != PK_MODE_FIXED) {
      uint32_t *owned;
      const uint32_t *by_size = sorted_items(ctx, &owned);
      if (by_size != NULL) {
        uint64_t g = cfg->mode == PK_MODE_PADDED ? padded_groups(ctx, by_size)
                                                 : packed_bins_l2(ctx, by_size);
        if (cfg->mode == PK_MODE_PACKED && cfg->max_seqs != UINT32_MAX)
          g = PK_MAX(g, packed_count_bound(ctx, by_size));
        if (cfg->mode == PK_MODE_PACKED)
          g = PK_MAX(g, packed_count_by_items(ctx, by_size));
        m = PK_MAX(m, (g + dp - 1) / dp);
      }
      free(owned);
    }
  }
  m = pk_round_up(m, cfg->group);
  return m > UINT32_MAX ? UINT32_MAX : (uint32_t)m;
}

/* The step cost lower bound for plans with m micro-batches per rank.
 *
 * Take any such plan; sort its m columns (micro-batch slot j over all
 * ranks) by level L (the costliest micro-batch of the column), descending:
 * L_1 >= ... >= L_m; the step cost is the sum of the L. Then:
 *
 *  (a) L_1 >= c_1, the costliest item, and for k >= 1, L_{k+1} >= l_{k+1} :=
 *      the cost of the first item (size-descending) that does not fit into
 *      k columns together with all larger ones (k x dp x cap tokens, k x dp
 *      x max_seqs items): items costlier than L_{k+1} can only be in the top
 *      k columns, and that many do not fit there.
 *  (b) Any k columns hold at most U_k cost: the costliest k x dp x cap tokens
 *      taken fractionally by cost per token (largest items first), and at
 *      most the k x dp x max_seqs costliest items. A column holds at most dp
 *      x L of cost, so the columns after the top k, holding the rest, have
 *      sum L >= (C - U_k) / dp, C the total cost.
 *  (c) Items wider than cap / 2 ("wide") never share a micro-batch: k
 *      columns hold at most k x dp of them, so in (a) l_{k+1} is also at
 *      least the cost of the (k x dp + 1)-th widest item when that one is
 *      wide, and in (b) U_k is also at most the k x dp costliest wide items
 *      plus the costliest tokens of the narrower ones in the room they
 *      leave (wide_hold).
 *  (d) The column holding the costliest item (cost c_1) has a level L >=
 *      c_1, and that item's micro-batch holds at most L of cost in all, so
 *      the column holds at most h(L) = min(U_1, dp x L, L + H), H what the
 *      other dp - 1 micro-batches hold (wide items and tokens as in (c)).
 *      The other columns' levels sum to at least max((C - h(L)) / dp, sum_{j
 *      > 1} l_j) (dropping any one l_j leaves at least the sum of those
 *      after l_1), and L - h(L) / dp never falls as L grows (h grows by at
 *      most dp x the growth of L), so step >= c_1 + max((C - h(c_1)) / dp,
 *      sum_{j > 1} l_j): the k = 1 term below with U_1 lowered to h(c_1)
 *      (first_column_hold). It decides where one long sequence sets the
 *      first column's level and leaves its micro-batch's tokens unused.
 *  (e) PADDED: the plan's total cost is at least the least padded total any
 *      grouping of the rows into m x dp micro-batches pays
 *      (pk_padded_least_total), and step >= total / dp.
 *  (f) PADDED: L_j >= y_j, the least cost the ((j - 1) dp + 1)-th costliest
 *      of m x dp micro-batches can have (pk_padded_stair), so (a)'s l_j
 *      rise to y_j (with U_1 for any column, as (d) holds only for the
 *      column of the costliest item). Levels are computed while a work
 *      budget lasts (PK_STAIR_BUDGET). (e) and (f) run only while the
 *      bound is more than 0.5 % below the plan at hand (known_step).
 *  (g) Cost per token (of token parts, (h)) bounds what a wide item's room
 *      holds: the other items of a micro-batch with wide item w are at most
 *      cap - w tokens and each at most that size, so they cost at most
 *      (cap - w) x D(cap - w), D(r) the highest cost per token of an item
 *      of size <= r; a micro-batch with no wide item costs at most cap x
 *      D(cap / 2) =: h. Distinct
 *      micro-batches hold distinct wide items, so k x dp micro-batches hold
 *      at most the largest k x dp of g(w) = c(w) + (cap - w) x D(cap - w)
 *      where above h, and h for the others (density_hold). (c) fills the
 *      rooms with the costliest narrow tokens, which need not fit there;
 *      (g) lowers U_k, and (d)'s H, where the rooms are small. Not in
 *      PADDED mode, where a wide row stands alone (padded_hold counts it
 *      so).
 *  (h) per_sequence: an item's cost is per_sequence plus its token part,
 *      and the token part per token grows with size where the whole cost
 *      per token need not (many small items may hold more per_sequence
 *      than a few large ones). So the holds of (b), (c), (d), (g) and
 *      padded_hold are taken over token parts, where their arguments hold,
 *      and k x dp micro-batches add per_sequence times the most items they
 *      can hold (items_held: max_seqs each, and the smallest items within
 *      k x dp x cap tokens). The levels of (a), the totals and (d)'s dp x L
 *      count whole costs; (e), (f) and the runs hold only need costs that
 *      grow with size, so they read whole costs too.
 *
 * So step >= sum_{j <= k} l_j + max((C - U_k) / dp, sum_{j > k} l_j) for
 * every k in 0..m; the bound is the largest. k = 0 is the plain bound
 * max(C / dp, sum l) >= max(C / dp, c_1). In PADDED mode a micro-batch costs
 * rows x c(width) >= the sum of its items' costs and holds at most cap of
 * item sizes, so the bound holds there too (it ignores padding), and (a) is
 * sharper: k columns are k x dp groups, and no k x dp groups hold more of
 * the largest items than the first k x dp groups of the exact greedy
 * grouping (pk_micro_lower_bound), so l_{k+1} is at least the cost of the
 * first item those groups leave out.
 *
 * PADDED also sharpens (b): a row wider than cap / 2 (every row when
 * max_seqs is 1) fills its micro-batch alone ("a single"), so k columns of
 * k x dp micro-batches with s singles among them hold the costs of at most
 * the s costliest singles plus what k x dp - s micro-batches of the other
 * items hold: F(k x dp - s), F(g) the costliest g x cap tokens of those
 * items, fractionally, and at most g x max_seqs of them. U_k is the largest
 * of these over s. A single's marginal worth (its cost) falls with s, and F
 * is concave (the minimum of the token-limited and the count-limited walks,
 * both concave as the items are read largest first), so the largest is
 * reached by handing the k x dp micro-batches out one at a time to
 * whichever is worth more, the next single or the next micro-batch of
 * others, and U_k grows from U_{k-1} by dp such steps. Tokens and singles
 * still let a micro-batch fill the whole cap; a micro-batch of rows of
 * width w holds at most cap / w of them, so runs of the size-descending
 * order bound U_k more tightly where the rows are coarse
 * (pk_padded_runs_sharpen, bounds_runs.c). */
static void padded_hold(const pk_ctx_t *ctx, const uint32_t *by, uint32_t wide, double *cap_cost,
                        uint32_t m);

/* Item k's token part: its cost without per_sequence. */
static inline double token_part(const pk_ctx_t *ctx, uint32_t k) {
  return pk_token_cost(ctx->cfg, ctx->size[k]);
}

/* A walk over by[from..n), largest first, taking whole items. */
typedef struct hold_walk {
  uint32_t from, at; /* Items [from, at) are taken. */
  uint64_t tokens;
  double cost;
} hold_walk_t;

/* Takes items while tok_lim tokens and cnt_lim items allow, and returns the
 * most token part (token_part) that many tokens and items hold: the items
 * taken plus the fitting fraction of the next one, unless the count limit
 * stopped it. Largest first is the order of falling token part per token,
 * which makes the fractional walk an upper bound; per_sequence is counted
 * apart (items_held). */
static double hold_walk_to(const pk_ctx_t *ctx, const uint32_t *by, hold_walk_t *w,
                           uint64_t tok_lim, uint64_t cnt_lim) {
  uint32_t n = ctx->n;
  while (w->at < n && w->tokens + ctx->size[by[w->at]] <= tok_lim && w->at - w->from < cnt_lim) {
    w->tokens += ctx->size[by[w->at]];
    w->cost += token_part(ctx, by[w->at]);
    w->at++;
  }
  double held = w->cost;
  if (w->at < n && w->at - w->from < cnt_lim && ctx->size[by[w->at]] > 0 && tok_lim != UINT64_MAX)
    held +=
        token_part(ctx, by[w->at]) * (double)(tok_lim - w->tokens) / (double)ctx->size[by[w->at]];
  return held;
}

/* A walk over the items from the smallest (the end of by) on. */
typedef struct count_walk {
  uint32_t taken;
  uint64_t tokens;
} count_walk_t;

/* The most items `bins` micro-batches hold ((h) at pk_step_lower_bound): at
 * most max_seqs each, and no more than the smallest items whose sizes add
 * up to at most bins x cap (any j items add up to at least the j smallest;
 * a PADDED micro-batch's rows too, rows x width being at least their
 * sizes). bins never falls between calls. */
static uint64_t items_held(const pk_ctx_t *ctx, const uint32_t *by, count_walk_t *w,
                           uint64_t bins) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t n = ctx->n;
  uint64_t most = n;
  if (cfg->max_seqs != UINT32_MAX && bins < n)
    most = PK_MIN(most, bins * cfg->max_seqs);
  if (cfg->cap == UINT64_MAX || bins > UINT64_MAX / cfg->cap)
    return most;
  uint64_t lim = bins * cfg->cap;
  while (w->taken < n && w->tokens + ctx->size[by[n - 1 - w->taken]] <= lim) {
    w->tokens += ctx->size[by[n - 1 - w->taken]];
    w->taken++;
  }
  return PK_MIN(most, (uint64_t)w->taken);
}

/* The token part micro-batches hold when no two items wider than cap / 2
 * ("wide", by[0 .. wide)) share one ((c) above): one wide item each, the
 * costliest (a costlier wide item in place of another gains at least what
 * the tokens it takes from the narrower items held, as token part per
 * token grows with size), plus the costliest tokens of the narrower items,
 * fractionally, in the room left (at most max_seqs items per micro-batch in
 * all). Reads the wide items from `next` on; the micro-batch count never
 * falls between calls. */
typedef struct wide_walk {
  uint32_t first, next, wide; /* Wide items [first, next) are taken. */
  uint64_t tokens;            /* Their sizes. */
  double cost;                /* Their costs. */
  hold_walk_t narrow;         /* The walk over by[wide ..). */
} wide_walk_t;

static wide_walk_t wide_walk_from(uint32_t first, uint32_t wide) {
  uint32_t from = PK_MAX(first, wide);
  return (wide_walk_t){.first = first, .next = first, .wide = wide, .narrow = {from, from, 0, 0}};
}

static double wide_walk_to(const pk_ctx_t *ctx, const uint32_t *by, wide_walk_t *w, uint64_t bins) {
  const pk_cfg_t *cfg = ctx->cfg;
  while (w->next < w->wide && w->next - w->first < bins) {
    w->tokens += ctx->size[by[w->next]];
    w->cost += token_part(ctx, by[w->next]);
    w->next++;
  }
  uint64_t taken = w->next - w->first;
  uint64_t count = cfg->max_seqs == UINT32_MAX ? UINT64_MAX : bins * cfg->max_seqs - taken;
  return w->cost + hold_walk_to(ctx, by, &w->narrow, bins * cfg->cap - w->tokens, count);
}

/* Lowers cap_cost[k] (U_k, for k = 1..m) to what k x dp micro-batches hold
 * with the wide items apart (wide_walk_to), where there are more than dp of
 * them (else the fractional walk over all items is as tight). */
static void wide_hold(const pk_ctx_t *ctx, const uint32_t *by, uint32_t wide, double *cap_cost,
                      uint32_t m) {
  uint64_t dp = ctx->cfg->dp;
  if (wide <= dp)
    return;
  wide_walk_t w = wide_walk_from(0, wide);
  for (uint32_t k = 1; k <= m; k++)
    cap_cost[k] = PK_MIN(cap_cost[k], wide_walk_to(ctx, by, &w, (uint64_t)k * dp));
}

/* What `slots` micro-batches hold by (g): the largest g values while
 * above h, h for the other slots. g is sorted descending and turned into
 * its prefix sums over the first `above` values (those above h) by
 * density_prefix; slots beyond them hold h each. */
static uint32_t density_prefix(double *g, uint32_t count, double h) {
  uint32_t above = 0;
  double sum = 0;
  for (; above < count && g[above] > h; above++) {
    sum += g[above];
    g[above] = sum;
  }
  return above;
}

static double density_slots(const double *prefix, uint32_t above, double h, uint64_t slots) {
  uint64_t t = PK_MIN(slots, (uint64_t)above);
  return (t > 0 ? prefix[t - 1] : 0) + (double)(slots - t) * h;
}

static int cmp_double_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? 1 : (x > y ? -1 : 0);
}

/* (g) above, on token parts: lowers cap_cost[k] (k = 1..m) to what k x dp
 * micro-batches hold by token part per token, and returns the same for the
 * dp - 1 micro-batches beside the costliest item's (by[0]; INFINITY when
 * (g) does not apply: no cap, or an empty item whose token part is not
 * 0). */
static double density_hold(const pk_ctx_t *ctx, const uint32_t *by, uint32_t wide, double *cap_cost,
                           uint32_t m) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t n = ctx->n;
  uint64_t cap = cfg->cap, dp = cfg->dp;
  double others = INFINITY;
  /* best[i]: the highest cost per token of by[i .. n) (sizes descending,
   * so of the items no larger than by[i]). */
  double *best = pk_malloc_array((size_t)n + 1, sizeof *best);
  double *g = pk_malloc_array(wide > 0 ? wide : 1, sizeof *g);
  if (cap == UINT64_MAX || best == NULL || g == NULL)
    goto done;
  best[n] = 0;
  uint32_t tick = 0;
  for (uint32_t i = n; i-- > 0;) {
    if (pk_stop_tick(ctx, &tick))
      goto done; /* cap_cost untouched: (g) not applied. */
    uint64_t size = ctx->size[by[i]];
    double c = token_part(ctx, by[i]);
    if (size == 0 && c > 0)
      goto done;
    best[i] = PK_MAX(best[i + 1], size == 0 ? 0 : c / (double)size);
  }
  double h = (double)cap * best[wide];
  for (uint32_t i = 0; i < wide; i++) {
    uint64_t room = cap - ctx->size[by[i]];
    /* The first item no larger than the room (room < cap / 2, so past the
     * wide ones). */
    uint32_t lo = wide, hi = n;
    while (lo < hi) {
      uint32_t mid = lo + (hi - lo) / 2;
      if (ctx->size[by[mid]] <= room)
        hi = mid;
      else
        lo = mid + 1;
    }
    g[i] = token_part(ctx, by[i]) + (double)room * best[lo];
  }
  /* Sorted, with by[0]'s value kept aside: the dp - 1 micro-batches
   * beside by[0]'s hold wide items other than by[0]. */
  double g0 = wide > 0 ? g[0] : 0;
  uint32_t rest = wide > 1 ? wide - 1 : 0;
  if (rest > 0)
    qsort(g + 1, rest, sizeof *g, cmp_double_desc);
  uint64_t t = 0;
  for (others = 0; t + 1 < dp && t < rest && g[1 + t] > h; t++)
    others += g[1 + t];
  others += (double)(dp - 1 - t) * h;
  /* Any k x dp micro-batches: g[0] merged into the sorted rest. */
  uint32_t at = 1;
  while (at < wide && g[at] > g0) {
    g[at - 1] = g[at];
    at++;
  }
  if (wide > 0)
    g[at - 1] = g0;
  uint32_t above = density_prefix(g, wide, h);
  for (uint32_t k = 1; k <= m; k++)
    cap_cost[k] = PK_MIN(cap_cost[k], density_slots(g, above, h, (uint64_t)k * dp));
done:
  free(best);
  free(g);
  return others;
}

/* The most cost the column holding the costliest item can hold when its
 * level is that item's cost c_1 (see (d) above): c_1 in that item's
 * micro-batch, and in the other dp - 1 micro-batches at most (dp - 1) x
 * c_1, and at most the token part they hold of the other items with the
 * wide items apart (wide_walk_to from item 1) or by token part per token
 * (by_density, (g): density_hold's value), plus per_sequence for every item
 * they hold ((h)). */
static double first_column_hold(const pk_ctx_t *ctx, const uint32_t *by, uint32_t wide, double c1,
                                double by_density) {
  uint64_t others = (uint64_t)ctx->cfg->dp - 1;
  if (others == 0)
    return c1;
  wide_walk_t w = wide_walk_from(1, wide);
  double held = PK_MIN(wide_walk_to(ctx, by, &w, others), by_density);
  if (ctx->cfg->seq > 0) {
    count_walk_t cw = {0};
    held += ctx->cfg->seq * (double)items_held(ctx, by, &cw, others);
  }
  return c1 + PK_MIN(held, (double)others * c1);
}

/* max over k in 0..m of sum_{j <= k} lvl[j] + max((total - cap_cost[k]) /
 * dp, sum_{j > k} lvl[j]), lvl[1 .. m] lower bounds on the sorted column
 * levels and cap_cost[k] on what any k columns hold. */
static double levels_bound(const double *lvl, const double *cap_cost, uint32_t m, double total,
                           double dp) {
  /* suffix = sum of l_j for j > k. */
  double best = 0, prefix = 0, suffix = 0;
  for (uint32_t j = 1; j <= m; j++)
    suffix += lvl[j];
  for (uint32_t k = 0; k <= m; k++) {
    if (k > 0) {
      prefix += lvl[k];
      suffix -= lvl[k];
    }
    double rest = (total - cap_cost[k]) / dp;
    best = PK_MAX(best, prefix + PK_MAX(rest, PK_MAX(suffix, 0.0)));
  }
  return best;
}

/* (f) The bound of levels_bound with l_j raised to the stair's y_j
 * (pk_padded_stair) for the levels its work budget reaches; cap_cost[1]
 * must hold for any column. 0 where nothing was computed. */
static double padded_stair_bound(const pk_ctx_t *ctx, const uint32_t *by, const double *lvl,
                                 const double *cap_cost, uint32_t m, double total) {
  double *y = pk_malloc_array(m, sizeof *y);
  double *raised = pk_malloc_array((size_t)m + 1, sizeof *raised);
  double best = 0;
  uint32_t got =
      y != NULL && raised != NULL ? pk_padded_stair(ctx, by, m, lvl + 1, y, PK_STAIR_BUDGET) : 0;
  if (got > 0) {
    for (uint32_t j = 1; j <= m; j++)
      raised[j] = j <= got ? PK_MAX(lvl[j], y[j - 1]) : lvl[j];
    /* Rounding in the sums must not lift the bound above the truth. */
    best = levels_bound(raised, cap_cost, m, total, ctx->cfg->dp) * (1 - 1e-12);
  }
  free(y);
  free(raised);
  return best;
}

double pk_step_lower_bound(const pk_ctx_t *ctx, uint32_t m, double known_step) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t n = ctx->n;
  if (n == 0 || m == 0)
    return 0;
  /* Outside PADDED mode nothing below reads known_step. */
  pk_step_memo_t *memo = cfg->mode == PK_MODE_PADDED ? NULL : ctx->step_memo;
  if (memo != NULL && memo->m == m)
    return memo->bound;
  double total = 0, biggest = 0;
  uint32_t tick = 0;
  for (uint32_t k = 0; k < n; k++) {
    if (pk_stop_tick(ctx, &tick))
      return 0;
    total += ctx->cost[k];
    biggest = PK_MAX(biggest, ctx->cost[k]);
  }
  double dp = cfg->dp;
  double plain = PK_MAX(total / dp, biggest);
  uint32_t *owned;
  const uint32_t *by = sorted_items(ctx, &owned);
  double *lvl = pk_malloc_array((size_t)m + 1, sizeof *lvl);
  double *cap_cost = pk_malloc_array((size_t)m + 1, sizeof *cap_cost);
  if (by == NULL || lvl == NULL || cap_cost == NULL) {
    free(owned);
    free(lvl);
    free(cap_cost);
    return plain;
  }
  /* One pass over the items, largest first, with the token and count
   * limits of k columns for k = 1..m. */
  uint64_t cap = cfg->cap;
  hold_walk_t walk = {0};
  /* PADDED: items covered by the first k x dp greedy groups (the most of
   * the largest items k columns can hold, by the exactness of the greedy
   * grouping on every prefix). */
  uint64_t groups = 0;
  uint32_t covered = 0;
  /* [0, wide): items wider than cap / 2; no two share a micro-batch. */
  uint32_t wide = 0;
  while (cap != UINT64_MAX && wide < n && ctx->size[by[wide]] > cap / 2)
    wide++;
  lvl[1] = ctx->cost[by[0]];
  cap_cost[0] = 0;
  for (uint32_t k = 1; k <= m; k++) {
    /* Each k walks on over about n / m items: poll every 64 columns. */
    if ((k & 63u) == 0 && pk_stopped(ctx))
      goto stopped;
    uint64_t tok_lim = cap == UINT64_MAX ? UINT64_MAX : (uint64_t)k * cfg->dp * cap;
    uint64_t cnt_lim =
        cfg->max_seqs == UINT32_MAX ? UINT64_MAX : (uint64_t)k * cfg->dp * cfg->max_seqs;
    cap_cost[k] = hold_walk_to(ctx, by, &walk, tok_lim, cnt_lim); /* U_k. */
    uint32_t first_out = walk.at;
    if (cfg->mode == PK_MODE_PADDED) {
      while (covered < n && groups < (uint64_t)k * cfg->dp) {
        covered = pk_run_end(ctx, by, covered);
        groups++;
      }
      first_out = PK_MIN(first_out, covered);
    }
    if ((uint64_t)k * cfg->dp < wide)
      first_out = PK_MIN(first_out, k * cfg->dp);
    if (k < m)
      lvl[k + 1] = first_out < n ? ctx->cost[by[first_out]] : 0;
  }
  if (pk_stopped(ctx))
    goto stopped;
  if (cfg->mode == PK_MODE_PADDED && cap != UINT64_MAX)
    padded_hold(ctx, by, wide, cap_cost, m);
  double beside_first = INFINITY; /* (g)'s H for (d). */
  if (cap != UINT64_MAX) {
    wide_hold(ctx, by, wide, cap_cost, m);
    if (cfg->mode != PK_MODE_PADDED)
      beside_first = density_hold(ctx, by, wide, cap_cost, m);
  }
  if (pk_stopped(ctx))
    goto stopped;
  if (cfg->seq > 0) {
    /* (h) cap_cost holds token parts so far. */
    count_walk_t cw = {0};
    for (uint32_t k = 1; k <= m; k++)
      cap_cost[k] += cfg->seq * (double)items_held(ctx, by, &cw, (uint64_t)k * cfg->dp);
  }
  /* U_1 for any column; (d) lowers it for the column of the costliest
   * item only. */
  double any_column_hold = cap_cost[1];
  if (cap != UINT64_MAX)
    cap_cost[1] = PK_MIN(cap_cost[1], first_column_hold(ctx, by, wide, lvl[1], beside_first));
  double best = PK_MAX(plain, levels_bound(lvl, cap_cost, m, total, dp));
  if (pk_stopped(ctx))
    goto stopped;
  if (cfg->mode == PK_MODE_PADDED && cap != UINT64_MAX)
    best = pk_padded_runs_sharpen(ctx, by, lvl, cap_cost, m, total, best, known_step);
  if (cfg->mode == PK_MODE_PADDED && best * 1.005 < known_step && !pk_stopped(ctx)) {
    /* (e) Every plan pays the padding its micro-batch count forces. */
    double padded = pk_padded_least_total(ctx, by, (uint64_t)m * cfg->dp, total);
    best = PK_MAX(best, padded / dp);
  }
  if (cfg->mode == PK_MODE_PADDED && cap != UINT64_MAX && best * 1.005 < known_step &&
      !pk_stopped(ctx)) {
    /* (f) The stair: lvl[j] raised to y_j where the budget reaches. */
    cap_cost[1] = any_column_hold;
    best = PK_MAX(best, padded_stair_bound(ctx, by, lvl, cap_cost, m, total));
  }
  free(owned);
  free(lvl);
  free(cap_cost);
  if (memo != NULL && !pk_stopped(ctx))
    *memo = (pk_step_memo_t){m, best};
  return best;
stopped:
  free(owned);
  free(lvl);
  free(cap_cost);
  return plain;
}

/* F(g): the most token part g micro-batches hold of the items the walk
 * reads (g x cap tokens, g x max_seqs items); g never falls between
 * calls. */
static double others_hold(const pk_ctx_t *ctx, const uint32_t *by, hold_walk_t *walk, uint64_t g) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint64_t cnt_lim = cfg->max_seqs == UINT32_MAX ? UINT64_MAX : g * (uint64_t)cfg->max_seqs;
  return hold_walk_to(ctx, by, walk, g * cfg->cap, cnt_lim);
}

/* The most token part (per_sequence apart, (h)) the micro-batches of k
 * columns hold in PADDED mode, for k = 1..m, into cap_cost[k] (see
 * pk_step_lower_bound): singles (the prefix of
 * the size-descending order whose rows stand alone: the wide ones, or all
 * when max_seqs is 1) against micro-batches
 * of the other items, each worth the next cap tokens (at most max_seqs
 * items) of them, fractionally. Only ever lowers cap_cost[k]. */
static void padded_hold(const pk_ctx_t *ctx, const uint32_t *by, uint32_t wide, double *cap_cost,
                        uint32_t m) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t singles = cfg->max_seqs == 1 ? ctx->n : wide;
  /* The walk over the other items; F(g) and F(g + 1) for the g
   * micro-batches of them handed out so far. */
  hold_walk_t walk = {.from = singles, .at = singles};
  uint64_t g = 0;
  double f_prev = 0, f_next = others_hold(ctx, by, &walk, 1);
  uint32_t s = 0; /* Singles handed out. */
  double held = 0;
  uint64_t slots = 0;
  for (uint32_t k = 1; k <= m; k++) {
    uint64_t goal = (uint64_t)k * cfg->dp;
    while (slots < goal) {
      double single = s < singles ? token_part(ctx, by[s]) : 0;
      double other = f_next - f_prev;
      if (s < singles && single >= other) {
        held += single;
        s++;
      } else {
        held += other;
        g++;
        f_prev = f_next;
        f_next = others_hold(ctx, by, &walk, g + 1);
      }
      slots++;
    }
    if (held < cap_cost[k])
      cap_cost[k] = held;
  }
}
