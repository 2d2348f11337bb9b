/* Repair of a first fit packing, to reach a count first fit cannot fill.
 *
 * When a batch nearly fills M x dp micro-batches, first fit decreasing
 * leaves a few items out ("leftovers") while the room left is spread over
 * many micro-batches in gaps each smaller than the leftovers. The repair
 * gathers room for one leftover x at a time: it takes the roomiest
 * micro-batch A and swaps an item a of A with a smaller item b of another
 * micro-batch B whose room takes the difference
 * (size a - size b <= room of B), so A gains that difference and B fills up.
 * Once A's room reaches x, x joins A. A swap keeps every item count, so
 * max_seqs holds; every step keeps every micro-batch under the cap.
 *
 * First fit over c x dp micro-batches is the first c x dp micro-batches of
 * first fit over more, with the items beyond them left out: first fit puts
 * an item into the first micro-batch with room, so micro-batches after the
 * first c x dp never change the choice among them. So one first fit pass
 * gives the leftovers of every count, and the repair walks the counts down
 * from the pass's own one. It takes any packing alike (micro-batch
 * completion, complete.c, fills its micro-batches in order too): the
 * leftovers of a count are the items beyond it.
 *
 * The work is bounded: the exchange searches of one repair read at most
 * PK_REPAIR_WORK_PER_ITEM item pairs per item of the batch, and the repair
 * stops at the count it has reached when that is spent. Where the room is
 * spread thin (a few tokens per micro-batch) a leftover may need hundreds
 * of exchanges, each searching hundreds of partners, and fail anyway: a
 * batch of 65536 random rollouts, cap 32768, one rank, read 73 million
 * pairs (36 ms) on one count and failed. On the bench's batches the
 * repairs that succeed read at most 0.6 million pairs but for one of 18
 * million (a count saved at DP 8, cap 16384), which the bound keeps. */
#include <stdlib.h>
#include <string.h>

#include "auto.h"

typedef struct repair {
  auto_state_t *s;
  uint32_t nbins;
  uint32_t *head; /* Per micro-batch: its first item (UINT32_MAX: none). */
  uint32_t *next; /* Per item: the next item of its micro-batch. */
  uint64_t work;  /* Item pairs the exchange searches may still read. */
} repair_t;

static void set_room(repair_t *r, uint32_t i) {
  pk_tree_set(&r->s->bins_rt, i, pk_auto_bin_room(r->s, i));
}

/* An exchange between micro-batch a_bin (gaining room) and b_bin: items
 * a[] go to b_bin, items b[] to a_bin (UINT32_MAX: none). */
typedef struct exchange {
  uint64_t gain; /* Room a_bin gains: size of a[] - size of b[]. */
  uint32_t a[2], b[2];
} exchange_t;

/* Keeps e when it is better than *best for a wanted gain: the smallest gain
 * >= want when there is one, else the largest. */
static void consider(exchange_t *best, uint64_t want, uint64_t in, uint64_t out, uint64_t room,
                     uint32_t a0, uint32_t a1, uint32_t b0, uint32_t b1) {
  if (in <= out || in - out > room)
    return;
  uint64_t gain = in - out;
  bool better = best->gain >= want ? gain >= want && gain < best->gain : gain > best->gain;
  if (better)
    *best = (exchange_t){gain, {a0, a1}, {b0, b1}};
}

/* The best exchange between a_bin and b_bin whose difference b_bin's room
 * takes: one item for one, or one item moved; with `wide`, also two items
 * for one and one for two, where max_seqs allows. */
static exchange_t best_exchange(const repair_t *r, uint32_t a_bin, uint32_t b_bin, uint64_t want,
                                bool wide) {
  const pk_ctx_t *ctx = r->s->ctx;
  const uint64_t *size = ctx->size;
  const uint32_t none = UINT32_MAX, max_seqs = ctx->cfg->max_seqs;
  const pk_bin_t *ab = &r->s->bins[a_bin], *bb = &r->s->bins[b_bin];
  uint64_t room = ctx->cfg->cap - bb->sum;
  bool b_grows = bb->count < max_seqs;
  /* a_bin takes the leftover afterwards, so it keeps one count spare. */
  bool a_grows = (uint64_t)ab->count + 2 <= max_seqs;
  exchange_t best = {0, {none, none}, {none, none}};
  for (uint32_t a = r->head[a_bin]; a != none; a = r->next[a]) {
    if (b_grows)
      consider(&best, want, size[a], 0, room, a, none, none, none);
    for (uint32_t b = r->head[b_bin]; b != none; b = r->next[b]) {
      consider(&best, want, size[a], size[b], room, a, none, b, none);
      if (!wide)
        continue;
      for (uint32_t a2 = r->next[a]; a2 != none && b_grows; a2 = r->next[a2])
        consider(&best, want, size[a] + size[a2], size[b], room, a, a2, b, none);
      for (uint32_t b2 = r->next[b]; b2 != none && a_grows; b2 = r->next[b2])
        consider(&best, want, size[a], size[b] + size[b2], room, a, none, b, b2);
    }
  }
  return best;
}

/* Makes room for `need` tokens in micro-batch a_bin by exchanges; false
 * when PK_REPAIR_SWAPS exchanges do not reach it. */
static bool gather_room(repair_t *r, uint32_t a_bin, uint64_t need) {
  auto_state_t *s = r->s;
  /* Partners are searched from a little before a_bin: first fit fills its
   * micro-batches in size order, so the neighbours hold items of like size,
   * the ones whose differences are small enough to swap. */
  uint32_t start = a_bin > PK_REPAIR_PARTNERS / 2 ? a_bin - PK_REPAIR_PARTNERS / 2 : 0;
  for (int swaps = 0; swaps < PK_REPAIR_SWAPS; swaps++) {
    uint64_t room = pk_auto_bin_room(s, a_bin);
    if (room >= need)
      return true;
    uint64_t want = need - room;
    /* Up to PK_REPAIR_PARTNERS micro-batches with room >= the threshold,
     * from start on, wrapping; the threshold halves while none has an
     * exchange. One-for-one first; the wide exchanges when none has one. */
    exchange_t best = {0, {0, 0}, {0, 0}};
    uint32_t b_best = UINT32_MAX;
    for (int wide = 0; wide < 2 && best.gain == 0; wide++) {
      for (uint64_t threshold = want; best.gain == 0 && threshold > 0; threshold /= 2) {
        uint32_t at = start, seen = 0;
        bool wrapped = false;
        while (seen < PK_REPAIR_PARTNERS && best.gain < want) {
          at = pk_tree_find(&s->bins_rt, at, threshold);
          if (at == UINT32_MAX || at >= r->nbins) {
            if (wrapped)
              break;
            wrapped = true;
            at = 0;
            continue;
          }
          if (wrapped && at >= start)
            break;
          seen++;
          if (at != a_bin) {
            /* The pairs this search reads (the wide one also reads a third
             * item per pair); out of work, the gathering fails. */
            uint64_t ca = s->bins[a_bin].count, cb = s->bins[at].count;
            uint64_t cost = ca * (cb + 1) * (wide == 1 ? ca + cb : 1);
            if (cost > r->work)
              return false;
            r->work -= cost;
            if (pk_auto_tick(s->stop, (uint32_t)PK_MIN(cost / PK_REPAIR_PAIRS_PER_TICK + 1,
                                                       PK_AUTO_POLL_EVERY)))
              return false; /* repair_down reads the stop. */
            exchange_t e = best_exchange(r, a_bin, at, want, wide == 1);
            if (best.gain >= want ? e.gain >= want && e.gain < best.gain : e.gain > best.gain) {
              best = e;
              b_best = at;
            }
          }
          at++;
        }
      }
    }
    if (best.gain == 0)
      return false;
    for (int q = 0; q < 2; q++) {
      if (best.a[q] != UINT32_MAX)
        pk_auto_move_item(s, r->head, r->next, best.a[q], b_best);
      if (best.b[q] != UINT32_MAX)
        pk_auto_move_item(s, r->head, r->next, best.b[q], a_bin);
    }
    set_room(r, a_bin);
    set_room(r, b_best);
  }
  return pk_auto_bin_room(s, a_bin) >= need;
}

/* Repairs first fit at count c: the items beyond c x dp micro-batches are
 * placed into the first c x dp. 0 when they all are, PK_EPRECOND when not
 * (s->bins and s->item_bin are then partly changed). */
static int repair_count(repair_t *r, const uint32_t *order, uint32_t *leftover) {
  auto_state_t *s = r->s;
  const pk_ctx_t *ctx = s->ctx;
  uint32_t n = ctx->n, nbins = r->nbins, nleft = 0;
  uint64_t left_size = 0, room = 0;
  for (uint32_t j = 0; j < n; j++) {
    if (pk_auto_tick_loop(s->stop, j))
      return PK_ECANCELED;
    uint32_t k = order[j];
    if (s->item_bin[k] >= nbins) {
      leftover[nleft++] = k;
      left_size += PK_MAX(ctx->size[k], 1);
    }
  }
  room_tree_t *rt = &s->bins_rt;
  for (uint32_t i = 0; i < rt->leaves; i++) {
    rt->t[rt->leaves + i] = i < nbins ? pk_auto_bin_room(s, i) : 0;
    room += rt->t[rt->leaves + i];
  }
  /* Worth trying only when the leftovers need a small share of the room:
   * with more, the exchanges run out of partners before every leftover is
   * placed, and the failed try costs as much as a whole plan. */
  if (left_size > room / PK_REPAIR_ROOM_SHARE)
    return PK_EPRECOND;
  pk_tree_rebuild(rt);
  for (uint32_t i = 0; i < nbins; i++)
    r->head[i] = UINT32_MAX;
  for (uint32_t j = n; j-- > 0;) {
    if (pk_auto_tick_loop(s->stop, j))
      return PK_ECANCELED;
    uint32_t k = order[j], b = s->item_bin[k];
    if (b < nbins) {
      r->next[k] = r->head[b];
      r->head[b] = k;
    }
  }
  /* Leftovers largest first (order is size-descending). */
  for (uint32_t j = 0; j < nleft; j++) {
    if (pk_auto_tick(s->stop, 1))
      return PK_ECANCELED;
    uint32_t k = leftover[j];
    uint64_t need = PK_MAX(ctx->size[k], 1);
    uint32_t at = pk_tree_find(rt, 0, need);
    if (at == UINT32_MAX || at >= nbins) {
      /* The roomiest micro-batch gathers the room; when it cannot, others
       * with at least half the room needed try. */
      if (rt->t[1] == 0)
        return PK_EPRECOND;
      at = pk_tree_find(rt, 0, rt->t[1]);
      bool ok = gather_room(r, at, need);
      uint32_t from = 0;
      for (int t = 0; !ok && t < PK_REPAIR_TARGETS; t++) {
        at = pk_tree_find(rt, from, (need + 1) / 2);
        if (at == UINT32_MAX || at >= nbins)
          break;
        ok = gather_room(r, at, need);
        from = at + 1;
      }
      if (!ok)
        return PK_EPRECOND;
    }
    pk_bin_add(ctx, &s->bins[at], k);
    s->item_bin[k] = at;
    r->next[k] = r->head[at];
    r->head[at] = k;
    set_room(r, at);
  }
  return 0;
}

int pk_auto_repair_down(auto_state_t *s, const uint32_t *order, uint32_t lo, uint32_t top,
                        uint32_t group, pk_packing_t save, uint32_t *count) {
  uint32_t n = s->ctx->n, dp = s->dp;
  int rc = 0;
  repair_t r = {.s = s, .work = (uint64_t)PK_REPAIR_WORK_PER_ITEM * n};
  r.head = pk_malloc_array((size_t)top * dp, sizeof *r.head);
  r.next = pk_malloc_array(n, sizeof *r.next);
  uint32_t *leftover = pk_malloc_array(n, sizeof *leftover);
  *count = top;
  if (r.head == NULL || r.next == NULL || leftover == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  pk_packing_t cur = pk_auto_packing(s);
  while (*count >= lo + group && !pk_auto_poll(s->stop)) {
    uint32_t c = *count - group;
    size_t kept = (size_t)*count * dp;
    pk_packing_copy(&save, &cur, kept, n);
    r.nbins = c * dp;
    if (repair_count(&r, order, leftover) != 0) {
      pk_packing_copy(&cur, &save, kept, n);
      break;
    }
    /* The micro-batches beyond c are empty now. */
    memset(s->bins + r.nbins, 0, (kept - r.nbins) * sizeof *s->bins);
    *count = c;
  }
  if (pk_auto_stopped(s->stop))
    rc = PK_ECANCELED;
done:
  free(r.head);
  free(r.next);
  free(leftover);
  return rc;
}
