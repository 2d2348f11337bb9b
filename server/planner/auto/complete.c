/* Micro-batch completion: a PACKED packing for batches that nearly fill
 * their micro-batches, where first fit decreasing ends above the bound.
 *
 * First fit decreasing places items largest first into the first
 * micro-batch with room, so its late micro-batches hold items of nearly one
 * size (seven of 2322 tokens and 131 left, while no item left is that
 * small), and those remainders add up to micro-batches beyond the bound.
 * This packing fills one micro-batch at a time instead: the largest item
 * left opens it, then the largest item left that fits joins, while one
 * fits. When room is left, the last k items (k <= 4, never the first) are
 * exchanged for the k smallest items left and the largest item left that
 * fits beside them, with the k that leaves the least room, where that
 * fills more. While items of many sizes are left this fills the
 * micro-batch nearly exactly; where only items of one size class are left
 * (eight of about 1000 tokens under a cap of 8192), k > 1 mixes the larger
 * and the smaller ones, which no single exchange can.
 *
 * The exchanges spend the smallest items, which later micro-batches need
 * as much: a micro-batch tries them only where its room left exceeds its
 * share of the room all micro-batches may leave at the count aimed at
 * (the budget: count x cap - tokens, less what earlier micro-batches
 * left). pk_auto_tighten aims at the bound first, then half way to what
 * each aim reached (see there).
 *
 * With max_seqs a micro-batch can run out of slots before tokens (the
 * largest items first leave no slots for the small ones, which then fill
 * micro-batches of their own far below the cap), so three more packings
 * keep room for later slots: after the largest item left has opened the
 * micro-batch, each item is the largest that leaves (slots - 1) x the
 * smallest size left, slots counted up to max_seqs in the one and up to
 * the pace in the other: the items left over the micro-batches left to the
 * count aimed at, rounded up (so the small items are spent evenly instead
 * of all at the end, where max_seqs of them fill a micro-batch far below
 * the cap). The third keeps room for the smallest items left as they are,
 * as many as fit up to max_seqs (keep_room): where count, not tokens,
 * decides (max_seqs 4, RL rollouts), the micro-batches of the widest
 * sequences then hold two or three short ones where their room allows,
 * instead of the one largest that fits (the bench's max_seqs 4 rows: DP 1
 * LB+148 -> LB+47, DP 8 LB+19 -> LB+6; bench/planner/README.md). The
 * packing needing the fewest micro-batches is kept. The opening item is
 * never held back by the room kept: held back, the largest items (those
 * above cap - (slots - 1) x smallest) waited to the end and filled
 * micro-batches of their own with room left.
 *
 * The items are kept as counts per distinct size: the largest size left
 * that fits a room is a lookup in an index by size (a binary search within
 * one of its buckets when the cap is above 2^16) and a next-set-bit query
 * over the sizes with items left (a bit set with summary words), so a
 * micro-batch costs O(items x log sizes). */
#include <stdlib.h>
#include <string.h>

#include "auto.h"

/* Levels of the bit set: 64^5 bits cover any item count the planner takes. */
#define PK_SET_LEVELS 5
#define PK_NONE UINT32_MAX

/* A set of integers in [0, size) with next and previous queries: level 0
 * has one bit per integer, each higher level one bit per nonzero word of
 * the level below; the top level is one word. */
typedef struct rank_set {
  uint32_t levels;
  uint32_t words[PK_SET_LEVELS];
  uint64_t *w[PK_SET_LEVELS];
} rank_set_t;

static int set_init(rank_set_t *rs, uint32_t size) {
  memset(rs, 0, sizeof *rs);
  uint32_t bits = size;
  do {
    uint32_t words = (bits + 63) / 64;
    rs->words[rs->levels] = words;
    rs->w[rs->levels] = pk_calloc(words, sizeof(uint64_t));
    if (rs->w[rs->levels] == NULL)
      return PK_ENOMEM;
    rs->levels++;
    bits = words;
  } while (bits > 1 && rs->levels < PK_SET_LEVELS);
  return 0;
}

static void set_free(rank_set_t *rs) {
  for (uint32_t l = 0; l < rs->levels; l++)
    free(rs->w[l]);
}

static void set_add(rank_set_t *rs, uint32_t i) {
  for (uint32_t l = 0; l < rs->levels; l++, i >>= 6) {
    uint64_t *word = &rs->w[l][i >> 6];
    bool was_empty = *word == 0;
    *word |= 1ull << (i & 63);
    if (!was_empty)
      return;
  }
}

static void set_remove(rank_set_t *rs, uint32_t i) {
  for (uint32_t l = 0; l < rs->levels; l++, i >>= 6) {
    uint64_t *word = &rs->w[l][i >> 6];
    *word &= ~(1ull << (i & 63));
    if (*word != 0)
      return;
  }
}

/* The least member >= i, or PK_NONE. */
static uint32_t set_next(const rank_set_t *rs, uint32_t i) {
  for (uint32_t l = 0; l < rs->levels; l++) {
    uint32_t wi = i >> 6;
    if (wi >= rs->words[l])
      return PK_NONE;
    uint64_t bits = rs->w[l][wi] & (~0ull << (i & 63));
    if (bits != 0) {
      i = wi * 64 + (uint32_t)__builtin_ctzll(bits);
      while (l-- > 0)
        i = i * 64 + (uint32_t)__builtin_ctzll(rs->w[l][i]);
      return i;
    }
    i = wi + 1;
  }
  return PK_NONE;
}

/* The greatest member <= i, or PK_NONE. */
static uint32_t set_prev(const rank_set_t *rs, uint32_t i) {
  for (uint32_t l = 0; l < rs->levels; l++) {
    uint32_t wi = i >> 6;
    uint64_t bits = rs->w[l][wi] & (~0ull >> (63 - (i & 63)));
    if (bits != 0) {
      i = wi * 64 + 63 - (uint32_t)__builtin_clzll(bits);
      while (l-- > 0)
        i = i * 64 + 63 - (uint32_t)__builtin_clzll(rs->w[l][i]);
      return i;
    }
    if (wi == 0)
      return PK_NONE;
    i = wi - 1;
  }
  return PK_NONE;
}

/* The items by distinct size. Rank r is the r-th largest size; its items
 * are order[first[r] .. first[r + 1]), taken front to back: taken[r] of
 * them are placed. `left` holds the ranks with items not placed. */
typedef struct size_pool {
  const uint32_t *order;
  uint32_t ranks;
  uint64_t *size;  /* Per rank. */
  double *cost;    /* Per rank: the cost of one item of that size. */
  uint32_t *first; /* ranks + 1 entries. */
  uint32_t *taken; /* Per rank. */
  rank_set_t left;
  /* A search index: le[i] is the first rank whose size is <= i << shift,
   * for i in [0, cap >> shift] (p->ranks when none is). */
  uint32_t *le;
  uint32_t shift;
  uint64_t le_last;
} size_pool_t;

/* Entries of the search index at most: 2^16 (256 KiB). */
#define PK_POOL_INDEX_BITS 16

static int pool_index(size_pool_t *p, uint64_t cap) {
  while ((cap >> p->shift) >> PK_POOL_INDEX_BITS != 0)
    p->shift++;
  p->le_last = cap >> p->shift;
  p->le = pk_malloc_array(p->le_last + 1, sizeof *p->le);
  if (p->le == NULL)
    return PK_ENOMEM;
  uint32_t r = p->ranks;
  for (uint64_t i = 0; i <= p->le_last; i++) {
    uint64_t x = i << p->shift;
    while (r > 0 && p->size[r - 1] <= x)
      r--;
    p->le[i] = r;
  }
  return 0;
}

/* The rank of the largest size left that is <= room (room <= cap), or
 * PK_NONE. */
static uint32_t pool_best(const size_pool_t *p, uint64_t room) {
  uint64_t i = room >> p->shift;
  uint32_t hi = p->le[i];
  uint32_t lo = i < p->le_last ? p->le[i + 1] : 0;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (p->size[mid] <= room)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo == p->ranks ? PK_NONE : set_next(&p->left, lo);
}

/* Takes the next item of rank r; returns its item number. */
static uint32_t pool_take(size_pool_t *p, uint32_t r) {
  uint32_t k = p->order[p->first[r] + p->taken[r]++];
  if (p->first[r] + p->taken[r] == p->first[r + 1])
    set_remove(&p->left, r);
  return k;
}

/* Puts back the item of rank r taken last. */
static void pool_put(size_pool_t *p, uint32_t r) {
  if (p->first[r] + p->taken[r] == p->first[r + 1])
    set_add(&p->left, r);
  p->taken[r]--;
}

/* Exchanges the last k items of the micro-batch being filled (items and
 * their ranks, *top of them, `room` left) for the k smallest items left and
 * the largest item left that fits beside them. Returns the room the
 * exchange leaves, or UINT64_MAX where it does not fill more than the k
 * items did. With `apply` the exchange is made where it fills more
 * (items, ranks and *top updated); otherwise the pool and the micro-batch
 * are left as they were (the pool takes and puts back in LIFO order per
 * size, so the same items come back). */
static uint64_t exchange(size_pool_t *p, uint32_t *items, uint32_t *ranks, uint32_t *top,
                         uint32_t k, uint64_t room, bool apply) {
  uint32_t t = *top, small_rank[PK_EXCHANGE_MAX], small_item[PK_EXCHANGE_MAX], taken = 0;
  uint64_t with = room;
  for (uint32_t q = t; q-- > t - k;) {
    with += p->size[ranks[q]];
    pool_put(p, ranks[q]);
  }
  uint64_t out = with - room, in = 0;
  bool fits = true;
  for (; taken < k; taken++) {
    uint32_t r = set_prev(&p->left, p->ranks - 1);
    if (r == PK_NONE || in + p->size[r] > with) {
      fits = false;
      break;
    }
    small_item[taken] = pool_take(p, r);
    small_rank[taken] = r;
    in += p->size[r];
  }
  uint32_t rx = fits ? pool_best(p, with - in) : PK_NONE;
  uint64_t left = UINT64_MAX;
  if (rx != PK_NONE && in + p->size[rx] > out)
    left = with - in - p->size[rx];
  if (apply && left != UINT64_MAX) {
    for (uint32_t q = 0; q < k; q++) {
      items[t - k + q] = small_item[q];
      ranks[t - k + q] = small_rank[q];
    }
    ranks[t] = rx;
    items[t] = pool_take(p, rx);
    *top = t + 1;
    return left;
  }
  while (taken-- > 0)
    pool_put(p, small_rank[taken]);
  for (uint32_t q = t - k; q < t; q++)
    items[q] = pool_take(p, ranks[q]);
  return left;
}

/* The room to keep beside the next item of a micro-batch with `room` left
 * and `slots` slots to keep after it: the sum of the c - 1 smallest items
 * left, c the most of the smallest items left (at most slots + 1) whose
 * sizes add up to at most room, so the largest item that fits in room less
 * that still leaves room for them (it is at least the c-th smallest). 0
 * where not even one fits. The walk reads at most PK_KEEP_RANKS sizes; the
 * slots beyond are kept at the last size read (less room: looser, never
 * more than the sum). Counting the items as they are, not as slots x the
 * smallest size, a wide item's room that holds two small items but not
 * three takes two, not the one largest that fits. */
static uint64_t keep_room(const size_pool_t *p, uint64_t room, uint64_t slots) {
  uint64_t want = slots + 1, got = 0, sum = 0, size = 0, largest = 0;
  uint32_t r = p->ranks;
  for (uint32_t read = 0; got < want; read++) {
    uint64_t have = want - got; /* Beyond PK_KEEP_RANKS: at the last size. */
    if (read < PK_KEEP_RANKS) {
      r = r == 0 ? PK_NONE : set_prev(&p->left, r - 1);
      if (r == PK_NONE)
        break;
      size = p->size[r];
      have = p->first[r + 1] - p->first[r] - p->taken[r];
    }
    uint64_t take = PK_MIN(have, want - got);
    bool short_of_room = size > 0 && take > (room - sum) / size;
    if (short_of_room)
      take = (room - sum) / size;
    if (take > 0)
      largest = size;
    sum += take * size;
    got += take;
    if (short_of_room)
      break;
  }
  /* sum holds the c smallest: keep it less the largest of them, whose
   * place the next item takes. */
  return got == 0 ? 0 : sum - largest;
}

/* Fills one micro-batch from the pool into items[] (their ranks in
 * ranks[]); returns its count and leaves the room it has left in *left.
 * With `keep` > 0, after the first item room is kept for the slots up to
 * `keep` (at most max_seqs): with `by_items` for the smallest items left as
 * they are, as many as fit (keep_room), else at the smallest size left
 * (all the slots, or none where they do not fit). The exchanges are tried
 * only where more than `allow` tokens of room are left. */
static uint32_t fill_one(size_pool_t *p, uint64_t cap, uint32_t max_seqs, uint32_t keep,
                         bool by_items, double allow, uint32_t *items, uint32_t *ranks,
                         uint64_t *left) {
  uint64_t room = cap;
  uint32_t top = 0;
  keep = PK_MIN(keep, max_seqs);
  while (top < max_seqs) {
    uint32_t r = PK_NONE;
    uint64_t slots = top > 0 && top + 1 < keep ? (uint64_t)keep - top - 1 : 0;
    if (slots > 0 && by_items) {
      r = pool_best(p, room - keep_room(p, room, slots));
    } else if (slots > 0) {
      /* The largest item that leaves room for the slots after it at the
       * smallest size left. */
      uint32_t smallest = set_prev(&p->left, p->ranks - 1);
      uint64_t size = smallest == PK_NONE ? 0 : p->size[smallest];
      if (size == 0)
        r = pool_best(p, room);
      else if (room > 0 && slots <= (room - 1) / size)
        r = pool_best(p, room - slots * size);
    }
    if (r == PK_NONE)
      r = pool_best(p, room);
    if (r == PK_NONE)
      break;
    ranks[top] = r;
    items[top++] = pool_take(p, r);
    room -= p->size[r];
  }
  /* Room left: the last k items (k < top, so not the largest) for the k
   * smallest items left and the largest that fits beside them, the k that
   * leaves the least room. One exchange per micro-batch. */
  *left = room;
  if (room == 0 || (double)room <= allow || top < 2 || top >= max_seqs)
    return top;
  uint32_t best_k = 0;
  uint64_t best_left = room;
  for (uint32_t k = 1; k <= PK_EXCHANGE_MAX && k < top && best_left != 0; k++) {
    uint64_t l = exchange(p, items, ranks, &top, k, room, false);
    if (l < best_left) {
      best_left = l;
      best_k = k;
    }
  }
  if (best_k != 0)
    *left = exchange(p, items, ranks, &top, best_k, room, true);
  return top;
}

/* How a completion packing keeps room for later slots (max_seqs). */
typedef enum keep_mode { KEEP_NONE, KEEP_MAX_SEQS, KEEP_PACE, KEEP_SMALLEST } keep_mode_t;

/* The items of a batch as a size pool, with the scratch arrays of one
 * micro-batch; built once for all the packings of one
 * pk_auto_pack_complete or pk_auto_tighten call (the build reads every
 * item's size where it lies in memory: a cache miss each, a fifth of a
 * packing's time at n = 65536 under perf)
 * and reset before each. */
typedef struct complete_pool {
  size_pool_t p;
  uint64_t total;       /* The sum of the sizes. */
  uint32_t *items;      /* The items of the micro-batch being filled. */
  uint32_t *ranks;      /* Their ranks. */
  pk_auto_stop_t *stop; /* The state's stop poll (NULL: never stops). */
} complete_pool_t;

static void complete_pool_free(complete_pool_t *cp) {
  /* The set first: its level pointers are read from the pool, and GCC 12
   * at -O3 cannot tell them from the pool's other freed arrays. */
  set_free(&cp->p.left);
  free(cp->items);
  free(cp->ranks);
  free(cp->p.size);
  free(cp->p.cost);
  free(cp->p.first);
  free(cp->p.taken);
  free(cp->p.le);
}

static int complete_pool_build(const pk_ctx_t *ctx, const uint32_t *order, complete_pool_t *cp,
                               pk_auto_stop_t *stop) {
  uint32_t n = ctx->n;
  size_pool_t *p = &cp->p;
  memset(cp, 0, sizeof *cp);
  cp->stop = stop;
  p->order = order;
  cp->items = pk_malloc_array(n, sizeof *cp->items);
  cp->ranks = pk_malloc_array(n, sizeof *cp->ranks);
  p->size = pk_malloc_array(n, sizeof *p->size);
  p->cost = pk_malloc_array(n, sizeof *p->cost);
  p->first = pk_malloc_array((size_t)n + 1, sizeof *p->first);
  p->taken = pk_calloc(n, sizeof *p->taken);
  if (cp->items == NULL || cp->ranks == NULL || p->size == NULL || p->cost == NULL ||
      p->first == NULL || p->taken == NULL || set_init(&p->left, n) != 0)
    return PK_ENOMEM;
  for (uint32_t j = 0; j < n; j++) {
    if (pk_auto_tick_loop(stop, j))
      return PK_ECANCELED;
    uint64_t size = ctx->size[order[j]];
    cp->total += size;
    if (j == 0 || size != p->size[p->ranks - 1]) {
      p->size[p->ranks] = size;
      p->cost[p->ranks] = ctx->cost[order[j]]; /* A function of the size. */
      p->first[p->ranks] = j;
      p->ranks++;
    }
  }
  p->first[p->ranks] = n;
  return pool_index(p, ctx->cfg->cap);
}

/* Every item back in the pool. */
static void complete_pool_reset(complete_pool_t *cp) {
  size_pool_t *p = &cp->p;
  memset(p->taken, 0, (size_t)p->ranks * sizeof *p->taken);
  for (uint32_t r = 0; r < p->ranks; r++)
    set_add(&p->left, r);
}

/* One completion packing (pk_auto_pack_complete). */
static int complete_once(const pk_ctx_t *ctx, complete_pool_t *cp, uint32_t target,
                         keep_mode_t mode, uint32_t nbins, pk_packing_t out, uint32_t *used) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t n = ctx->n;
  size_pool_t *p = &cp->p;
  uint32_t *items = cp->items, *ranks = cp->ranks;
  complete_pool_reset(cp);
  /* The room the micro-batches may leave in all, were they target (exact:
   * integers below 2^53). */
  double budget = (double)target * (double)cfg->cap - (double)cp->total;
  memset(out.bins, 0, (size_t)nbins * sizeof *out.bins);

  uint32_t placed = 0, b = 0;
  for (; placed < n; b++) {
    if (b == nbins)
      return PK_EPRECOND;
    if (pk_auto_tick(cp->stop, cfg->max_seqs == UINT32_MAX
                                   ? PK_COMPLETE_TICK
                                   : PK_MIN(cfg->max_seqs, PK_COMPLETE_TICK_MAX)))
      return PK_ECANCELED;
    /* The exchange only where the room left exceeds this micro-batch's
     * share of the budget left (see the top of this file). */
    double allow = b < target ? budget / (double)(target - b) : 0;
    uint64_t left = 0;
    uint32_t keep = mode == KEEP_MAX_SEQS || mode == KEEP_SMALLEST ? cfg->max_seqs : 0;
    if (mode == KEEP_PACE)
      keep =
          b < target ? (uint32_t)((n - placed + (target - b) - 1) / (target - b)) : cfg->max_seqs;
    uint32_t top = fill_one(p, cfg->cap, cfg->max_seqs, keep, mode == KEEP_SMALLEST, allow, items,
                            ranks, &left);
    budget -= (double)left;
    /* pk_bin_add, with the size and cost read by rank (the items' own
     * entries lie scattered in memory). */
    pk_bin_t *bin = &out.bins[b];
    for (uint32_t q = 0; q < top; q++) {
      uint64_t size = p->size[ranks[q]];
      bin->sum += size;
      bin->width = PK_MAX(bin->width, size);
      bin->count++;
      bin->cost += p->cost[ranks[q]];
      out.item_bin[items[q]] = b;
    }
    placed += top;
  }
  *used = b;
  return 0;
}

/* pk_auto_pack_complete over a pool built already. */
static int pack_complete(const pk_ctx_t *ctx, complete_pool_t *cp, uint32_t target, uint32_t nbins,
                         pk_packing_t out, uint32_t *used) {
  int rc = complete_once(ctx, cp, target, KEEP_NONE, nbins, out, used);
  if (ctx->cfg->max_seqs == UINT32_MAX || (rc != 0 && rc != PK_EPRECOND))
    return rc;
  /* max_seqs: also the packings that keep room for later slots, each kept
   * where it needs fewer micro-batches than the best so far (it is given
   * one fewer to use). */
  uint32_t n = ctx->n;
  pk_packing_t alt = {0};
  if (pk_packing_alloc(&alt, nbins > 0 ? nbins : 1, n) != 0)
    rc = PK_ENOMEM;
  for (keep_mode_t mode = KEEP_MAX_SEQS; mode <= KEEP_SMALLEST && (rc == 0 || rc == PK_EPRECOND);
       mode++) {
    uint32_t fewer = rc == 0 ? *used : nbins + 1, got = 0;
    if (fewer <= 1)
      break;
    if (pk_auto_poll(cp->stop)) {
      rc = PK_ECANCELED;
      break;
    }
    int alt_rc = complete_once(ctx, cp, target, mode, fewer - 1, alt, &got);
    if (alt_rc == 0) {
      pk_packing_copy(&out, &alt, got, n);
      memset(out.bins + got, 0, (size_t)(nbins - got) * sizeof *out.bins);
      *used = got;
      rc = 0;
    } else if (alt_rc != PK_EPRECOND) {
      rc = alt_rc; /* PK_ENOMEM or PK_ECANCELED. */
    }
  }
  pk_packing_free(&alt);
  return rc;
}

int pk_auto_pack_complete(const auto_state_t *s, const uint32_t *order, uint32_t target,
                          uint32_t nbins, pk_packing_t out, uint32_t *used) {
  complete_pool_t cp;
  int rc = complete_pool_build(s->ctx, order, &cp, s->stop);
  if (rc == 0)
    rc = pack_complete(s->ctx, &cp, target, nbins, out, used);
  complete_pool_free(&cp);
  return rc;
}

/* Moves the packing `from` (count x dp micro-batches, from
 * pk_auto_pack_complete) into s, over `top` x dp micro-batches. */
static void adopt(auto_state_t *s, uint32_t count, uint32_t top, const pk_packing_t *from) {
  size_t dp = s->dp;
  pk_packing_t cur = pk_auto_packing(s);
  pk_packing_copy(&cur, from, count * dp, s->ctx->n);
  memset(s->bins + count * dp, 0, (top - count) * dp * sizeof *s->bins);
}

int pk_auto_tighten(auto_state_t *s, const uint32_t *order, uint32_t lo, uint32_t top,
                    uint32_t group, pk_packing_t scratch, uint32_t *count) {
  uint32_t dp = s->dp, best = top;
  /* Completion first (it reaches lower counts than the repair of first fit
   * on the bench's random rollout batches), at most PK_COMPLETE_TRIES times, then the repair of
   * first fit where completion needs top or more.
   *
   * The count aimed at sets the budget of room, and with it how freely
   * the exchanges spend the smallest items: aimed at the bound, the early
   * micro-batches spend them all and the last ones are left far from full.
   * Six batches of 65536 random rollouts, cap 8192, one rank, ended 33 or
   * 34 micro-batches above the bound aimed at it, 20 to 27 aimed 8 above
   * it, 6 to 9 aimed 16 above, 17 to 22 aimed 32 above. The best aim lies near the count it
   * reaches, so the first try aims at the bound and each next one half way between the last aim and
   * what that reached, in micro-batches (at least a group of columns more): with one rank a column
   * is one micro-batch, and steps of one group, as before, never got past the first few above the
   * bound. */
  uint32_t aim = lo * dp, tried[PK_COMPLETE_TRIES];
  complete_pool_t cp;
  int built = complete_pool_build(s->ctx, order, &cp, s->stop);
  if (built != 0) {
    complete_pool_free(&cp);
    return built;
  }
  for (int tries = 0; tries < PK_COMPLETE_TRIES; tries++) {
    for (int q = 0; q < tries; q++)
      if (tried[q] == aim)
        goto repair;
    tried[tries] = aim;
    uint32_t used = 0;
    int rc = pack_complete(s->ctx, &cp, aim, top * dp, scratch, &used);
    if (rc != 0 && rc != PK_EPRECOND) {
      complete_pool_free(&cp);
      return rc;
    }
    if (rc != 0)
      used = top * dp;
    uint32_t reached = (uint32_t)pk_round_up((used + dp - 1) / dp, group);
    if (rc == 0 && reached < best) {
      best = reached;
      adopt(s, best, top, &scratch);
    }
    if (pk_auto_poll(s->stop)) {
      complete_pool_free(&cp);
      return PK_ECANCELED;
    }
    if (best <= lo)
      break;
    /* Half way to what this aim reached, at least a group more. */
    if (used > aim)
      aim += PK_MAX((used - aim) / 2, group * dp);
    else
      aim -= (aim - used) / 2;
  }
repair:
  complete_pool_free(&cp);
  return pk_auto_repair_down(s, order, lo, best, group, scratch, count);
}
