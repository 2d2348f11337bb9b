/* The exact search: the least micro-batch count on small, tight batches.
 *
 * The concern. AUTO packs at the proven count bound (bounds.c) with greedy
 * packings (first fit, the column packings, completion, the repair). On a
 * few dozen sequences filling their micro-batches to 90-99.5 %, the slack
 * is a few tokens per micro-batch, and a packing at the bound, where one
 * exists, is often one that no greedy rule builds: 20 lengths of 54 to 88
 * tokens under a cap of 300 fit in 5 micro-batches (1468 of 1500 tokens),
 * and every greedy packing needs 6. One micro-batch more is a whole
 * forward and backward pass more for the step. There the batch is small
 * enough to search: this file decides, within a budget, whether the items
 * fit into m x dp micro-batches, and packs them when they do. AUTO calls it
 * only where its packings missed a count (driver.c), PACKED mode only (the
 * PADDED count bound is met by the greedy grouping itself).
 *
 * The search is bin completion. Micro-batches ("bins", m x dp of them,
 * pooled over the ranks: the columns are dealt from them afterwards, as
 * from first fit's) are filled one at a time; a bin is opened by the
 * largest item left and completed by a set of the other items left, chosen
 * as counts per distinct size (equal sizes are never told apart), largest
 * sizes first and more of a size before fewer. Every set tried keeps the
 * cap (sum of aligned sizes) and max_seqs, and:
 *  - slack: the room all bins leave is fixed, m x dp x cap - the sizes,
 *    so a bin may leave at most what the bins before it left unused; with
 *    max_seqs, the same for slots (m x dp x max_seqs - the items). A set
 *    that cannot reach that load or count with the items after its last
 *    choice (Fenwick trees over the sizes by position) is cut, with every
 *    set after it in the order (they reach no more);
 *  - maximal sets: a bin closes only when no item left fits (or it holds
 *    max_seqs items): moving such an item in keeps every bin feasible.
 *    Without max_seqs, an item left out that fits raises the least load
 *    the bin may close at above cap - its size, which cuts sets early;
 *  - exchanges (Martello and Toth's dominance): a bin does not close where
 *    one of its items can be exchanged for a larger item left that fits in
 *    its place, nor, without max_seqs and equal_count (the counts change),
 *    two of its items for one left at least as large as both that fits;
 *  - equal openings: where two consecutive bins are opened by one size, the
 *    second's counts are at most the first's, compared lexicographically;
 *  - at every opening: the items above half the cap, one per bin, and the
 *    items left against the slots left.
 * The packing that is lexicographically greatest, bin after bin, among
 * those that open each bin with the largest item left, obeys every rule
 * (a move, an exchange or a swap of two bins that broke one would give a
 * greater packing), so where a packing exists the search finds one: the
 * rules only cut duplicates and dead ends.
 *
 * The order. A pass first tries each bin's sets in classes of the room
 * they leave (at most the slack's share per bin left, then twice that plus
 * one, and so on to the whole slack): the fullest bins first, so that the
 * slack is not spent on early bins (in plain order, 80 items of 54 to 88
 * tokens in 20 bins of 300 tokens with 128 to spare were not packed in 100
 * million steps; by classes in 115). The classes are disjoint, so each set
 * is tried once, but every class walks the set prefixes again, so proofs
 * of infeasibility cost more; that pass gets a quarter of the steps and the
 * plain order the rest (the half, the quarter and the eighth were measured:
 * the quarter left the fewest searches out of steps).
 *
 * Zero-size items cost no room: without max_seqs and equal_count they stay
 * out of the search and join the first bin. With max_seqs they take a
 * slot, and they are searched like any size.
 *
 * equal_count with dp > 1: AUTO keeps every column's micro-batches at one
 * count (the tier packing), so every rank holds the same number of items.
 * The search then needs exactly m x dp non-empty bins, and the number of
 * bins of every count a multiple of dp (the bins are dealt into columns by
 * count); it does not ask for maximal sets (a move changes the counts), and
 * prunes on the bins the counts still have to make up.
 *
 * Invariants. The search state (the items left per size, the trees, the
 * bitset of sizes left, the slacks) always matches the frames on the
 * stack; the stack is explicit (the planner also runs on threads with
 * small stacks) and holds at most one frame per item placed plus two per
 * bin, so it is sized up front. Every step counts against the budget; out
 * of budget, the search gives up and the caller keeps what the greedy
 * packings gave (never worse than without it). Deterministic: no
 * randomness, a fixed order of everything.
 *
 * The budget. PK_EXACT_STEPS (knobs.h) bounds the steps (one
 * option of one set tried, or a bin closed and the next opened; 25 to 60
 * ns each on the 2-core development VM) of all the searches of one
 * mini-batch. At 2^17 steps (4 to 8 ms of CPU out of steps),
 * measured on random tight batches (90 to 99.5 % of the bound's tokens,
 * DP 1, 2 and 4, half of them under max_seqs), where AUTO's packings missed
 * the bound the search packed at it, proved it infeasible, or ran out:
 *   10-40 items:   192 of 1847 batches searched: 119 packed, 73 proved, 0
 *                  out (at most 39413 steps, 1.9 ms);
 *   41-100 items:  133 of 1419: 76 packed, 49 proved, 8 out (0.6 %);
 *   101-160 items: 70 of 844: 37 packed, 22 proved, 11 out (1.3 %);
 *   161-256 items: 56 of 524: 36 packed, 10 proved, 10 out (1.9 %).
 * Twice the steps packed no more of these 4634 batches (it proved 6 more
 * infeasible, which changes no plan); half packed 2 fewer. Batches of a
 * few dozen lengths in a narrow band, filled to 99 % and more, need more:
 * the budget is 2^22 (knobs.h says where it was measured). PK_EXACT_MAX_ITEMS
 * (256) stops where the searches out of steps near 2 % of the tight
 * batches; the bench's batches (512 items and up) reach the bound
 * greedily. */
#include <stdlib.h>
#include <string.h>

#include "auto.h"

#define EX_NONE UINT32_MAX

/* What a set frame has chosen: nothing yet, t items at position p, or to
 * close the bin (the last option); DONE: no option left. */
enum { EX_FRESH, EX_TAKE, EX_STOP, EX_DONE, EX_OPEN };

/* One frame: a bin's opening item (EX_OPEN), or one choice of the set
 * completing a bin: t items of the size at position p, taken after the
 * bin held `load` tokens in `count` items. Every frame below the top has
 * its choice applied; the top's is not applied yet. */
typedef struct ex_frame {
  uint64_t load;   /* The bin's load before this choice. */
  uint64_t need;   /* The least load the bin may close at (this option). */
  uint32_t need_n; /* The least count it may close at (max_seqs). */
  /* Set frames: loads must stay below it (the waste class, see open_bin).
   * OPEN: the most room its bin may leave in the class tried now. */
  uint64_t floor;
  uint32_t count; /* The bin's items before this choice. */
  uint32_t from;  /* The first position this frame may take from. */
  uint32_t p, t;  /* The option: t items at position p (OPEN: p opened). */
  uint32_t full;  /* The most items of position p the bin takes. */
  uint32_t fit;   /* The first position whose size fits the bin's room. */
  /* Set frames: the previous bin's frame this one is compared with while
   * the two bins tie (EX_NONE: no tie). OPEN: the previous OPEN frame. */
  uint32_t cmp;
  uint32_t state;
} ex_frame_t;

typedef struct ex_search {
  uint64_t cap, slack; /* Slack: room the bins left to close may leave. */
  uint32_t max_seqs, dp, nbins;
  bool ec;         /* Equal counts per column (see the top). */
  bool leftover;   /* An item left out that fits raises need. */
  uint32_t nsizes; /* Distinct sizes searched. */
  uint64_t *u;     /* nsizes sizes, descending. */
  uint32_t *first; /* nsizes + 1: position p is order[first[p] ..). */
  uint32_t *avail; /* Items left per position. */
  uint64_t *fen;   /* Fenwick tree of avail x u, nsizes + 1. */
  uint32_t *fen_n; /* Fenwick tree of avail (max_seqs), nsizes + 1. */
  uint64_t cslack; /* max_seqs: slots the bins left to close may leave. */
  uint64_t *bits;  /* Positions with items left. */
  uint32_t words;
  uint32_t *mult;   /* ec: closed bins per count, n + 1. */
  uint32_t deficit; /* ec: bins the counts still need. */
  uint64_t left_size;
  uint32_t left_items, big_left, bins_done;
  ex_frame_t *stack;
  uint32_t depth, open_at; /* open_at: the current bin's OPEN frame. */
  uint64_t steps;          /* Steps left. */
  bool classes;            /* Sets tried in classes of room (open_bin). */
  pk_auto_stop_t *stop;    /* The state's stop poll (NULL: never stops). */
} ex_search_t;

static void fen_add(ex_search_t *x, uint32_t p, uint64_t delta, uint32_t count) {
  for (uint32_t i = p + 1; i <= x->nsizes; i += i & (0u - i)) {
    x->fen[i] += delta; /* Wraps for negative deltas: sums stay exact. */
    x->fen_n[i] += count;
  }
}

/* The sizes left at positions >= p. */
static uint64_t size_from(const ex_search_t *x, uint32_t p) {
  uint64_t before = 0;
  for (uint32_t i = p; i > 0; i -= i & (0u - i))
    before += x->fen[i];
  return x->left_size - before;
}

/* The items left at positions >= p. */
static uint32_t items_from(const ex_search_t *x, uint32_t p) {
  uint32_t before = 0;
  for (uint32_t i = p; i > 0; i -= i & (0u - i))
    before += x->fen_n[i];
  return x->left_items - before;
}

static void take(ex_search_t *x, uint32_t p, uint32_t t) {
  if (x->avail[p] == t)
    x->bits[p / 64] &= ~(1ull << (p % 64));
  x->avail[p] -= t;
  fen_add(x, p, (uint64_t)0 - x->u[p] * t, 0u - t);
  x->left_size -= x->u[p] * t;
  x->left_items -= t;
  if (2 * x->u[p] > x->cap)
    x->big_left -= t;
}

static void untake(ex_search_t *x, uint32_t p, uint32_t t) {
  x->bits[p / 64] |= 1ull << (p % 64);
  x->avail[p] += t;
  fen_add(x, p, x->u[p] * t, t);
  x->left_size += x->u[p] * t;
  x->left_items += t;
  if (2 * x->u[p] > x->cap)
    x->big_left += t;
}

/* The first position >= from with items left, or EX_NONE. */
static uint32_t next_left(const ex_search_t *x, uint32_t from) {
  for (uint32_t w = from / 64; w < x->words; w++) {
    uint64_t b = x->bits[w];
    if (w == from / 64)
      b &= ~0ull << (from % 64);
    if (b != 0)
      return w * 64 + (uint32_t)__builtin_ctzll(b);
  }
  return EX_NONE;
}

/* The last position with items left, or EX_NONE. */
static uint32_t last_left(const ex_search_t *x) {
  for (uint32_t w = x->words; w-- > 0;)
    if (x->bits[w] != 0)
      return w * 64 + 63 - (uint32_t)__builtin_clzll(x->bits[w]);
  return EX_NONE;
}

/* The first position whose size fits `room` (the sizes descend). */
static uint32_t first_fit(const ex_search_t *x, uint64_t room) {
  uint32_t lo = 0, hi = x->nsizes;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (x->u[mid] <= room)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/* The most items of position p a bin at `load`, `count` takes. */
static uint32_t most(const ex_search_t *x, uint32_t p, uint64_t load, uint32_t count) {
  uint64_t t = x->avail[p];
  uint64_t by_count = count >= x->max_seqs ? 0 : (uint64_t)x->max_seqs - count;
  t = PK_MIN(t, by_count);
  if (x->u[p] > 0)
    t = PK_MIN(t, (x->cap - load) / x->u[p]);
  return (uint32_t)t;
}

/* Whether the bin of the top frame may close at `load`, `count`: the
 * slack allows it; where maximal sets are asked for, no item left fits;
 * and no item of it can be exchanged for a larger item left that fits in
 * its place, nor (without max_seqs and equal_count) two of its items for
 * one left that is at least as large as both together and fits in their
 * place. Each exchange keeps both bins feasible and makes the packing
 * lexicographically greater (see the top). */
static bool may_close(const ex_search_t *x, const ex_frame_t *f) {
  uint64_t load = f->load;
  uint32_t count = f->count;
  if (load < f->need || load >= f->floor || count < f->need_n)
    return false;
  uint64_t room = x->cap - load;
  if (!x->ec && count < x->max_seqs) {
    uint32_t last = last_left(x);
    if (last != EX_NONE && x->u[last] <= room)
      return false;
  }
  uint32_t first = x->open_at + 1, end = x->depth - 1;
  for (uint32_t i = first; i < end; i++) {
    uint32_t p = x->stack[i].p;
    uint32_t q = next_left(x, first_fit(x, x->u[p] + room));
    if (q < p)
      return false;
  }
  if (!x->leftover)
    return true;
  /* Pairs: the set's items by position (a position twice where the set
   * holds two of it). An item left in [a + b, a + b + room] is the first
   * left at or after first_fit(a + b + room) when it is not below a + b. */
  for (uint32_t i = first; i < end; i++) {
    const ex_frame_t *a = &x->stack[i];
    for (uint32_t j = a->t >= 2 ? i : i + 1; j < end; j++) {
      uint64_t pair = x->u[a->p] + x->u[x->stack[j].p];
      uint32_t q = next_left(x, first_fit(x, pair + room));
      if (q != EX_NONE && x->u[q] >= pair)
        return false;
    }
  }
  return true;
}

/* The least load after leaving out items of position p that still fit. */
static uint64_t raise_need(const ex_search_t *x, uint64_t need, uint32_t p) {
  if (!x->leftover || x->u[p] == 0)
    return need;
  return PK_MAX(need, x->cap - x->u[p] + 1);
}

/* The top frame's first option at a position >= from: p (EX_NONE for
 * none) with t = full, the most the bin takes. */
static uint32_t option_at(ex_search_t *x, ex_frame_t *f, uint32_t from) {
  uint32_t p = next_left(x, PK_MAX(from, f->fit));
  f->full = f->t = p == EX_NONE ? 0 : most(x, p, f->load, f->count);
  return f->t == 0 ? EX_NONE : p;
}

/* Moves the top frame to its next option; false when none is left. */
static bool choose(ex_search_t *x) {
  ex_frame_t *f = &x->stack[x->depth - 1];
  uint32_t p;
  if (f->state == EX_FRESH && f->load >= f->floor) {
    f->state = EX_DONE;
    return false;
  } else if (f->state == EX_FRESH) {
    f->fit = f->count >= x->max_seqs ? x->nsizes : first_fit(x, x->cap - f->load);
    p = option_at(x, f, f->from);
  } else if (f->state == EX_TAKE && f->t > 1) {
    p = f->p;
    f->t--;
  } else if (f->state == EX_TAKE) {
    f->need = raise_need(x, f->need, f->p);
    p = option_at(x, f, f->p + 1);
  } else {
    f->state = EX_DONE;
    return false;
  }
  for (;;) {
    if (p == EX_NONE) {
      f->state = may_close(x, f) ? EX_STOP : EX_DONE;
      f->t = 0;
      return f->state == EX_STOP;
    }
    if (f->cmp != EX_NONE) {
      /* Tied with the previous bin: no count above its count. */
      const ex_frame_t *g = &x->stack[f->cmp];
      if (g->state != EX_TAKE) {
        p = EX_NONE; /* It closed here: so does this one. */
        continue;
      }
      if (p < g->p) {
        f->need = raise_need(x, f->need, p);
        p = option_at(x, f, p + 1);
        continue;
      }
      if (p == g->p)
        f->t = PK_MIN(f->t, g->t);
    }
    if (x->u[p] > 0 && f->load + x->u[p] * f->t >= f->floor) {
      /* Above the class: fewer of this size. */
      f->t = (uint32_t)((f->floor - 1 - f->load) / x->u[p]);
      if (f->t == 0) {
        f->need = raise_need(x, f->need, p);
        p = option_at(x, f, p + 1);
        continue;
      }
    }
    uint64_t child_need = f->t < f->full ? raise_need(x, f->need, p) : f->need;
    if (f->load + x->u[p] * f->t + size_from(x, p + 1) < child_need ||
        f->count + f->t + items_from(x, p + 1) < f->need_n) {
      /* Fewer items, or later sizes, reach no more tokens and items:
       * only closing is left. */
      p = EX_NONE;
      continue;
    }
    f->p = p;
    f->state = EX_TAKE;
    return true;
  }
}

static void push(ex_search_t *x, ex_frame_t f) {
  x->stack[x->depth++] = f;
}

static void close_bin(ex_search_t *x, const ex_frame_t *f, int dir) {
  uint64_t unused = x->max_seqs == UINT32_MAX ? 0 : x->max_seqs - f->count;
  if (dir > 0) {
    x->slack -= x->cap - f->load;
    x->cslack -= unused;
    x->bins_done++;
  } else {
    x->slack += x->cap - f->load;
    x->cslack += unused;
    x->bins_done--;
  }
  if (!x->ec)
    return;
  uint32_t dp = x->dp, before = x->mult[f->count] % dp;
  x->mult[f->count] = dir > 0 ? x->mult[f->count] + 1 : x->mult[f->count] - 1;
  uint32_t after = x->mult[f->count] % dp;
  x->deficit = x->deficit - (dp - before) % dp + (dp - after) % dp;
}

enum { EX_PUSHED, EX_DEAD, EX_FOUND };

/* Pushes the first set frame of the bin opened at x->open_at, for the
 * sets leaving room in (low, high] (low EX_ALL: from 0). */
#define EX_ALL UINT64_MAX
static void push_first(ex_search_t *x, uint64_t low, uint64_t high) {
  const ex_frame_t *o = &x->stack[x->open_at];
  uint32_t d = o->p;
  uint32_t cmp = o->cmp != EX_NONE && x->stack[o->cmp].p == d ? o->cmp + 1 : EX_NONE;
  push(x, (ex_frame_t){.load = x->u[d],
                       .need = high >= x->cap ? 0 : x->cap - high,
                       .need_n = x->cslack >= x->max_seqs ? 0 : (uint32_t)(x->max_seqs - x->cslack),
                       .floor = low == EX_ALL ? EX_ALL : x->cap - low,
                       .count = 1,
                       .from = d,
                       .cmp = cmp,
                       .state = EX_FRESH});
}

/* Opens the next bin with the largest item left. Its sets are tried in
 * classes of the room they leave: first at most the slack's share per bin
 * left, then up to twice that plus one, and so on to the whole slack (the
 * fullest bins first, so that the slack is not spent early). The classes
 * are disjoint, so every set is still tried once. */
static int open_bin(ex_search_t *x) {
  if (x->left_items == 0)
    return !x->ec || (x->bins_done == x->nbins && x->deficit == 0) ? EX_FOUND : EX_DEAD;
  uint32_t bins_left = x->nbins - x->bins_done;
  if (bins_left == 0 || x->big_left > bins_left)
    return EX_DEAD;
  if (x->max_seqs != UINT32_MAX && x->left_items > (uint64_t)bins_left * x->max_seqs)
    return EX_DEAD;
  if (x->ec && (x->left_items < bins_left || x->deficit > bins_left))
    return EX_DEAD;
  uint32_t d = next_left(x, 0);
  uint64_t high = x->classes ? x->slack / bins_left : x->slack;
  push(x, (ex_frame_t){.p = d, .t = 1, .cmp = x->open_at, .floor = high, .state = EX_OPEN});
  x->open_at = x->depth - 1;
  take(x, d, 1);
  push_first(x, EX_ALL, high);
  return EX_PUSHED;
}

/* Applies the top frame's option. */
static int apply(ex_search_t *x) {
  ex_frame_t *f = &x->stack[x->depth - 1];
  if (f->state == EX_TAKE) {
    uint64_t need = f->t < f->full ? raise_need(x, f->need, f->p) : f->need;
    uint32_t cmp = EX_NONE;
    if (f->cmp != EX_NONE && x->stack[f->cmp].p == f->p && x->stack[f->cmp].t == f->t)
      cmp = f->cmp + 1;
    take(x, f->p, f->t);
    push(x, (ex_frame_t){.load = f->load + x->u[f->p] * f->t,
                         .need = need,
                         .need_n = f->need_n,
                         .floor = f->floor,
                         .count = f->count + f->t,
                         .from = f->p + 1,
                         .cmp = cmp,
                         .state = EX_FRESH});
    return EX_PUSHED;
  }
  close_bin(x, f, 1);
  int rc = open_bin(x);
  if (rc == EX_DEAD) {
    close_bin(x, f, -1);
    f->state = EX_DONE;
  }
  return rc;
}

/* Pops the exhausted top frame and takes back the choice of the frame
 * below (reopening the previous bin where it is an opening). False when
 * the stack is empty: no packing exists. */
static bool backtrack(ex_search_t *x) {
  x->depth--;
  if (x->depth == 0)
    return false;
  ex_frame_t *f = &x->stack[x->depth - 1];
  if (f->state == EX_TAKE) {
    untake(x, f->p, f->t);
    return true;
  }
  /* An opening: its next class of sets, or the bin below it reopens. */
  if (x->classes && f->floor < x->slack) {
    uint64_t low = f->floor;
    f->floor = PK_MIN(x->slack, 2 * low + 1);
    push_first(x, low, f->floor);
    return true;
  }
  untake(x, f->p, 1);
  x->open_at = f->cmp;
  x->depth--;
  if (x->depth == 0)
    return false;
  close_bin(x, &x->stack[x->depth - 1], -1);
  return true;
}

/* The search stopped by the caller (run_pass, run). */
#define EX_STOPPED (-2)

/* Runs the search; EX_FOUND (the stack holds the packing), EX_DEAD (none
 * exists), -1 (out of steps) or EX_STOPPED. */
static int run_pass(ex_search_t *x, uint64_t steps) {
  int rc = open_bin(x);
  if (rc != EX_PUSHED)
    return rc;
  for (; steps > 0; steps--) {
    if (pk_auto_tick(x->stop, 1))
      return EX_STOPPED;
    x->steps--;
    if (choose(x)) {
      rc = apply(x);
      if (rc == EX_FOUND)
        return rc;
    } else if (!backtrack(x)) {
      return EX_DEAD;
    }
  }
  return -1;
}

/* The fullest-first order (classes) finds packings far sooner where the
 * batch is loose enough for early bins to spend the slack; it proves
 * infeasibility later (every class walks the set prefixes again). So it
 * gets a quarter of the steps, and the plain order the rest (measured best
 * of a half, a quarter and an eighth; see the top). */
static int run(ex_search_t *x) {
  x->classes = true;
  int rc = run_pass(x, x->steps / PK_EXACT_CLASS_SHARE);
  if (rc != -1)
    return rc;
  x->classes = false;
  while (backtrack(x))
    ;
  return run_pass(x, x->steps);
}

/* Orders bins by count, then cost, descending (equal_count columns). */
static bool bin_before(const void *arg, uint32_t a, uint32_t b) {
  const pk_bin_t *bins = arg;
  if (bins[a].count != bins[b].count)
    return bins[a].count > bins[b].count;
  return bins[a].cost > bins[b].cost;
}

/* Writes the packing on the stack into s (m x dp bins) and deals it into
 * columns. */
static int adopt(const ex_search_t *x, auto_state_t *s, const uint32_t *order, uint32_t m,
                 uint32_t nitems) {
  const pk_ctx_t *ctx = s->ctx;
  uint32_t n = ctx->n, nbins = x->nbins;
  uint32_t *next = pk_malloc_array(x->nsizes, sizeof *next);
  if (next == NULL)
    return PK_ENOMEM;
  memcpy(next, x->first, x->nsizes * sizeof *next);
  memset(s->bins, 0, (size_t)nbins * sizeof *s->bins);
  uint32_t bin = 0;
  for (uint32_t i = 0; i < x->depth; i++) {
    const ex_frame_t *f = &x->stack[i];
    if (f->state == EX_OPEN)
      bin = i == 0 ? 0 : bin + 1;
    if (f->state != EX_OPEN && f->state != EX_TAKE)
      continue;
    for (uint32_t q = 0; q < f->t; q++) {
      uint32_t k = order[next[f->p]++];
      pk_bin_add(ctx, &s->bins[bin], k);
      s->item_bin[k] = bin;
    }
  }
  free(next);
  /* Zero-size items outside the search join the first bin. */
  for (uint32_t j = nitems; j < n; j++) {
    pk_bin_add(ctx, &s->bins[0], order[j]);
    s->item_bin[order[j]] = 0;
  }
  s->m = m;
  if (!x->ec)
    return pk_auto_bins_finish(s, order);
  uint32_t *perm = pk_malloc_array(nbins, sizeof *perm);
  uint32_t *tmp = pk_malloc_array(nbins, sizeof *tmp);
  pk_bin_t *moved = pk_malloc_array(nbins, sizeof *moved);
  int rc = 0;
  if (perm == NULL || tmp == NULL || moved == NULL) {
    rc = PK_ENOMEM;
  } else {
    for (uint32_t i = 0; i < nbins; i++)
      perm[i] = i;
    pk_merge_sort_u32(perm, tmp, nbins, bin_before, s->bins);
    pk_auto_permute_bins(s, perm, nbins, tmp, moved);
  }
  free(perm);
  free(tmp);
  free(moved);
  return rc;
}

int pk_auto_exact(auto_state_t *s, const uint32_t *order, uint32_t m, pk_exact_budget_t *budget) {
  const pk_ctx_t *ctx = s->ctx;
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t n = ctx->n, dp = s->dp;
  uint64_t nbins = (uint64_t)m * dp;
  if (cfg->mode != PK_MODE_PACKED || cfg->cap == UINT64_MAX || n > PK_EXACT_MAX_ITEMS ||
      nbins == 0 || nbins > n || budget->steps == 0)
    return PK_EPRECOND;
  ex_search_t x = {.cap = cfg->cap,
                   .max_seqs = cfg->max_seqs,
                   .dp = dp,
                   .nbins = (uint32_t)nbins,
                   .ec = cfg->equal_count && dp > 1,
                   .open_at = EX_NONE,
                   .steps = budget->steps,
                   .stop = s->stop};
  x.leftover = !x.ec && x.max_seqs == UINT32_MAX;
  /* Zero-size items are searched only where they take a slot. */
  uint32_t nitems = n;
  if (!x.ec && x.max_seqs == UINT32_MAX)
    while (nitems > 0 && ctx->size[order[nitems - 1]] == 0)
      nitems--;
  uint64_t total = 0;
  for (uint32_t j = 0; j < nitems; j++)
    total += ctx->size[order[j]];
  if (total > nbins * x.cap || (x.max_seqs != UINT32_MAX && nitems > nbins * x.max_seqs))
    return PK_EPRECOND;
  x.slack = nbins * x.cap - total;
  x.cslack = x.max_seqs == UINT32_MAX ? UINT64_MAX : nbins * x.max_seqs - nitems;
  x.u = pk_malloc_array(nitems + 1, sizeof *x.u);
  x.first = pk_malloc_array(nitems + 1, sizeof *x.first);
  x.avail = pk_malloc_array(nitems + 1, sizeof *x.avail);
  x.fen = pk_calloc(nitems + 1, sizeof *x.fen);
  x.fen_n = pk_calloc(nitems + 1, sizeof *x.fen_n);
  x.words = (nitems + 63) / 64 + 1;
  x.bits = pk_calloc(x.words, sizeof *x.bits);
  x.mult = pk_calloc((size_t)n + 1, sizeof *x.mult);
  x.stack = pk_malloc_array((size_t)nitems + nbins + 2, sizeof *x.stack);
  int rc = 0;
  if (x.u == NULL || x.first == NULL || x.avail == NULL || x.fen == NULL || x.fen_n == NULL ||
      x.bits == NULL || x.mult == NULL || x.stack == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  for (uint32_t j = 0; j < nitems; j++) {
    uint64_t size = ctx->size[order[j]];
    if (x.nsizes == 0 || x.u[x.nsizes - 1] != size) {
      x.u[x.nsizes] = size;
      x.first[x.nsizes] = j;
      x.avail[x.nsizes++] = 0;
    }
  }
  x.first[x.nsizes] = nitems;
  for (uint32_t p = 0; p < x.nsizes; p++)
    untake(&x, p, x.first[p + 1] - x.first[p]);
  budget->runs++;
  int found = run(&x);
  budget->steps = x.steps;
  if (found == -1)
    budget->exhausted++;
  rc = found == EX_FOUND     ? adopt(&x, s, order, m, nitems)
       : found == EX_STOPPED ? PK_ECANCELED
                             : PK_EPRECOND;
done:
  free(x.u);
  free(x.first);
  free(x.avail);
  free(x.fen);
  free(x.fen_n);
  free(x.bits);
  free(x.mult);
  free(x.stack);
  return rc;
}
