/* Micro-batch helpers over AUTO's state: the room a micro-batch has left,
 * column levels and the step cost, a column's micro-batches sorted, whole
 * tiers and single items placed under the cap and max_seqs, and per-bin item
 * lists with single-item moves. Every stage reads and writes packings
 * through these, so the fit check (pk_bin_fits) and the cost bookkeeping
 * (pk_bin_add) live in one place. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "auto.h"

/* The room micro-batch i has left (0 when it holds max_seqs items). */
uint64_t pk_auto_bin_room(const auto_state_t *s, uint32_t i) {
  const pk_bin_t *b = &s->bins[i];
  const pk_cfg_t *cfg = s->ctx->cfg;
  if (b->count >= cfg->max_seqs)
    return 0;
  uint64_t f = pk_bin_footprint(cfg, b);
  return f >= cfg->cap ? 0 : cfg->cap - f;
}

double pk_auto_column_level(const auto_state_t *s, uint32_t c) {
  /* A PADDED micro-batch costs rows x c(widest row), which its PADDED
   * stages lower; b->cost, the sum of its rows' own costs, is what the
   * other modes pay. */
  const pk_cfg_t *cfg = s->ctx->cfg;
  bool padded = cfg->mode == PK_MODE_PADDED;
  double level = 0;
  for (uint32_t q = 0; q < s->dp; q++) {
    const pk_bin_t *b = &s->bins[(size_t)c * s->dp + q];
    level = PK_MAX(level, padded ? pk_padded_cost(cfg, b->count, b->width) : b->cost);
  }
  return level;
}

double pk_auto_step(const auto_state_t *s) {
  double step = 0;
  for (uint32_t c = 0; c < s->m; c++)
    step += pk_auto_column_level(s, c);
  return step;
}

/* An insertion sort: micro-batches are read only up to `limit` items. */
uint32_t pk_auto_sorted_items(const auto_state_t *s, const uint32_t *head, const uint32_t *next,
                              uint32_t bin, uint32_t limit, uint32_t *out) {
  const uint64_t *size = s->ctx->size;
  uint32_t count = 0;
  for (uint32_t b = head[bin]; b != UINT32_MAX && count < limit; b = next[b]) {
    uint32_t at = count++;
    while (at > 0 && size[out[at - 1]] > size[b]) {
      out[at] = out[at - 1];
      at--;
    }
    out[at] = b;
  }
  return count;
}

/* Orders the dp bins of a column (slot numbers in s->slots): by cost
 * ascending (by_foot false) or by footprint ascending (by_foot true), ties by
 * the other key, then slot. The keys are read once into s->keys; a merge
 * sort: deterministic and O(dp log dp). */
typedef struct slot_order {
  const slot_key_t *keys;
  bool by_foot;
} slot_order_t;

static bool slot_before(const void *arg, uint32_t a, uint32_t b) {
  const slot_order_t *o = arg;
  const slot_key_t *x = &o->keys[a], *y = &o->keys[b];
  if (o->by_foot && x->foot != y->foot)
    return x->foot < y->foot;
  if (x->cost != y->cost)
    return x->cost < y->cost;
  if (x->foot != y->foot)
    return x->foot < y->foot;
  return a < b;
}

void pk_auto_sort_slots(auto_state_t *s, uint32_t base, bool by_foot) {
  for (uint32_t i = 0; i < s->dp; i++) {
    const pk_bin_t *b = &s->bins[base + i];
    s->keys[i] = (slot_key_t){.cost = b->cost, .foot = pk_bin_footprint(s->ctx->cfg, b)};
    s->slots[i] = i;
  }
  slot_order_t o = {s->keys, by_foot};
  pk_merge_sort_u32(s->slots, s->tmp, s->dp, slot_before, &o);
}

/* Places a whole tier (dp items, costliest first) into column c, or returns
 * false and changes nothing. */
bool pk_auto_place_tier(auto_state_t *s, uint32_t c, const uint32_t *items) {
  uint32_t base = c * s->dp;
  for (int attempt = 0; attempt < 2; attempt++) {
    pk_auto_sort_slots(s, base, attempt == 1);
    bool ok = true;
    for (uint32_t i = 0; i < s->dp && ok; i++)
      ok = pk_bin_fits(s->ctx, &s->bins[base + s->slots[i]], items[i]);
    if (!ok)
      continue;
    uint64_t foot = s->col_foot[c];
    for (uint32_t i = 0; i < s->dp; i++) {
      pk_bin_t *b = &s->bins[base + s->slots[i]];
      pk_bin_add(s->ctx, b, items[i]);
      s->item_bin[items[i]] = base + s->slots[i];
      foot = PK_MAX(foot, pk_bin_footprint(s->ctx->cfg, b));
    }
    s->col_foot[c] = foot;
    /* A column with a full micro-batch (count or tokens) takes no tier. */
    uint64_t room = UINT64_MAX;
    for (uint32_t q = 0; q < s->dp; q++)
      room = PK_MIN(room, pk_auto_bin_room(s, base + q));
    pk_tree_set(&s->cols, c, room);
    return true;
  }
  return false;
}

/* First fit: items one by one, largest first, to the first micro-batch with
 * room. */
int pk_auto_place_rest(auto_state_t *s, const uint32_t *items, uint32_t count) {
  if (count == 0)
    return 0;
  uint32_t nbins = s->m * s->dp;
  for (uint32_t i = 0; i < s->bins_rt.leaves; i++) {
    /* Millions of leaves where the pass spans every possible count. */
    if (pk_auto_tick_loop(s->stop, i))
      return PK_ECANCELED;
    s->bins_rt.t[s->bins_rt.leaves + i] = i < nbins ? pk_auto_bin_room(s, i) : 0;
  }
  pk_tree_rebuild(&s->bins_rt);
  for (uint32_t j = 0; j < count; j++) {
    if (pk_auto_tick(s->stop, 1))
      return PK_ECANCELED;
    uint32_t k = items[j];
    uint64_t need = s->ctx->cfg->mode == PK_MODE_PADDED ? 1 : PK_MAX(s->ctx->size[k], 1);
    uint32_t at = 0, tries = 0;
    for (;;) {
      at = pk_tree_find(&s->bins_rt, at, need);
      if (at == UINT32_MAX || at >= nbins || tries++ >= PK_AUTO_TRIES)
        return PK_EPRECOND;
      if (pk_bin_fits(s->ctx, &s->bins[at], k))
        break;
      at++;
    }
    pk_bin_add(s->ctx, &s->bins[at], k);
    s->item_bin[k] = at;
    pk_tree_set(&s->bins_rt, at, pk_auto_bin_room(s, at));
  }
  return 0;
}

void pk_auto_bin_lists(const auto_state_t *s, uint32_t *head, uint32_t *next) {
  for (uint32_t i = 0; i < s->m * s->dp; i++)
    head[i] = UINT32_MAX;
  for (uint32_t k = s->ctx->n; k-- > 0;) {
    next[k] = head[s->item_bin[k]];
    head[s->item_bin[k]] = k;
  }
}

static void list_remove(uint32_t *head, uint32_t *next, uint32_t i, uint32_t k) {
  uint32_t *p = &head[i];
  while (*p != k)
    p = &next[*p];
  *p = next[k];
}

void pk_auto_move_item(auto_state_t *s, uint32_t *head, uint32_t *next, uint32_t k, uint32_t to) {
  const pk_ctx_t *ctx = s->ctx;
  uint32_t from = s->item_bin[k];
  list_remove(head, next, from, k);
  next[k] = head[to];
  head[to] = k;
  s->item_bin[k] = to;
  pk_bin_t *a = &s->bins[from];
  a->sum -= ctx->size[k];
  a->count--;
  a->cost -= ctx->cost[k];
  a->width = 0;
  for (uint32_t q = head[from]; q != UINT32_MAX; q = next[q])
    a->width = PK_MAX(a->width, ctx->size[q]);
  pk_bin_add(ctx, &s->bins[to], k);
}

bool pk_auto_clear_bins(auto_state_t *s, size_t count) {
  const size_t chunk = PK_AUTO_CLEAR_CHUNK;
  for (size_t at = 0; at < count; at += chunk) {
    if (pk_auto_tick(s->stop, PK_AUTO_POLL_EVERY))
      return false;
    memset(s->bins + at, 0, PK_MIN(chunk, count - at) * sizeof *s->bins);
  }
  return true;
}

int pk_packing_check(const auto_state_t *s) {
  const pk_ctx_t *ctx = s->ctx;
  const pk_cfg_t *cfg = ctx->cfg;
  size_t nbins = (size_t)s->m * s->dp;
  pk_bin_t *re = pk_calloc(nbins > 0 ? nbins : 1, sizeof *re);
  if (re == NULL)
    return PK_ENOMEM;
  int rc = 0;
  double total = 0;
  for (uint32_t k = 0; k < ctx->n && rc == 0; k++) {
    if (s->item_bin[k] >= nbins)
      rc = PK_EINTERNAL; /* An item outside the count. */
    else
      pk_bin_add(ctx, &re[s->item_bin[k]], k);
    total += ctx->cost[k] > 0 ? ctx->cost[k] : 0;
  }
  /* Costs are sums of doubles added in another order: equal within
   * rounding of the batch's total. */
  double slack = (total + 1) * PK_AUTO_REL_EPS;
  for (size_t i = 0; i < nbins && rc == 0; i++) {
    const pk_bin_t *b = &s->bins[i], *r = &re[i];
    bool same = b->sum == r->sum && b->count == r->count && fabs(b->cost - r->cost) <= slack &&
                (cfg->mode != PK_MODE_PADDED || b->width == r->width);
    bool within = r->count <= cfg->max_seqs && pk_bin_footprint(cfg, r) <= cfg->cap;
    if (!same || !within || r->count == 0)
      rc = PK_EINTERNAL;
  }
  free(re);
  return rc;
}

int pk_packing_alloc(pk_packing_t *p, size_t nbins, uint32_t n) {
  p->bins = pk_malloc_array(nbins, sizeof *p->bins);
  p->item_bin = pk_malloc_array(n, sizeof *p->item_bin);
  if (p->bins != NULL && p->item_bin != NULL)
    return 0;
  pk_packing_free(p);
  return PK_ENOMEM;
}

void pk_packing_free(pk_packing_t *p) {
  free(p->bins);
  free(p->item_bin);
  p->bins = NULL;
  p->item_bin = NULL;
}

void pk_packing_copy(pk_packing_t *dst, const pk_packing_t *src, size_t nbins, uint32_t n) {
  memcpy(dst->bins, src->bins, nbins * sizeof *dst->bins);
  memcpy(dst->item_bin, src->item_bin, (size_t)n * sizeof *dst->item_bin);
}

void pk_auto_permute_bins(auto_state_t *s, const uint32_t *perm, uint32_t nbins, uint32_t *tmp,
                          pk_bin_t *moved) {
  /* tmp: old bin -> new bin. */
  for (uint32_t q = 0; q < nbins; q++) {
    tmp[perm[q]] = q;
    moved[q] = s->bins[perm[q]];
  }
  memcpy(s->bins, moved, (size_t)nbins * sizeof *s->bins);
  for (uint32_t k = 0; k < s->ctx->n; k++)
    s->item_bin[k] = tmp[s->item_bin[k]];
}
