/* Micro-batching of one rank's items by the peers' algorithms (as verl,
 * ROLL, NeMo-RL, MindSpeed-RL and slime run them), always under the plan
 * rules of docs/design.md: every
 * micro-batch fits the token cap and max_seqs (pk_bin_fits), none is empty,
 * and the count is at least min_count (when there are that many items).
 *
 *   NEXT_FIT  next fit in the given order (ROLL and NeMo-RL dynamic
 *             batching, on sorted data); min_count is met by splitting the
 *             largest-footprint multi-item micro-batches at their midpoint,
 *             each at most once per pass (ROLL's split);
 *   FFD       first fit decreasing by size (NeMo-RL first_fit_decreasing);
 *   MFFD      Johnson and Garey's modified first fit decreasing as NeMo-RL
 *             runs it (see mffd() below);
 *             FFD and MFFD meet min_count by moving the smallest item of the
 *             micro-batch with the most items into a new micro-batch, one at a
 *             time (NeMo-RL _adjust_bin_count);
 *   KK_COUNT  count = max(min_count, ceil(sum size / cap)), then KK on costs
 *             into that many parts (verl, ROLL packing); while a part breaks
 *             the cap the count is raised by one and KK repeated (the rule
 *             verl PR #7553 added later);
 *   LPT_CAP   MindSpeed-RL: LPT by size over ceil(sum / cap) groups where a
 *             group that cannot take an item is closed and a new one opened;
 *             the group count (at least min_count) then feeds a final KK on
 *             sizes, raised like KK_COUNT while a part breaks the cap. */
#include <stdlib.h>
#include <string.h>

#include "compat_kk.h"
#include "pk_internal.h"

#define MB_NONE UINT32_MAX

/* The largest item size that can still join bin b (PACKED: what is left of
 * the cap; PADDED: cap / (rows + 1) provided the current width fits it).
 * Returns false when no item can join (max_seqs reached or no room). An item
 * of size s fits exactly when s <= *room (the same test as pk_bin_fits). */
static bool bin_room(const pk_ctx_t *ctx, const pk_bin_t *b, uint64_t *room) {
  const pk_cfg_t *cfg = ctx->cfg;
  if (b->count >= cfg->max_seqs)
    return false;
  if (cfg->mode == PK_MODE_PADDED) {
    uint64_t lim = cfg->cap / ((uint64_t)b->count + 1);
    if (b->width > lim)
      return false;
    *room = lim;
    return true;
  }
  if (b->sum > cfg->cap)
    return false;
  *room = cfg->cap - b->sum;
  return true;
}

static uint64_t ceil_div(uint64_t a, uint64_t b) {
  return a == 0 ? 0 : (a - 1) / b + 1;
}

typedef struct size_key {
  uint64_t size;
  uint32_t j;
} size_key_t;

/* Size descending, then position ascending. */
static int size_key_cmp(const void *pa, const void *pb) {
  const size_key_t *a = pa, *b = pb;
  if (a->size != b->size)
    return a->size > b->size ? -1 : 1;
  return a->j < b->j ? -1 : (a->j > b->j ? 1 : 0);
}

/* ord[t] = the position j of the t-th largest item. */
static int sort_desc(const pk_ctx_t *ctx, const uint32_t *items, uint32_t m, uint32_t *ord) {
  size_key_t *keys = pk_malloc_array(m, sizeof(size_key_t));
  if (keys == NULL)
    return PK_ENOMEM;
  for (uint32_t j = 0; j < m; j++)
    keys[j] = (size_key_t){.size = ctx->size[items[j]], .j = j};
  qsort(keys, m, sizeof(size_key_t), size_key_cmp);
  for (uint32_t t = 0; t < m; t++)
    ord[t] = keys[t].j;
  free(keys);
  return 0;
}

/* ---- NEXT_FIT ------------------------------------------------------------ */

static uint32_t next_fit(const pk_ctx_t *ctx, const uint32_t *items, uint32_t m, uint32_t *micro) {
  pk_bin_t bin = {0};
  uint32_t nb = 1;
  for (uint32_t j = 0; j < m; j++) {
    if (bin.count > 0 && !pk_bin_fits(ctx, &bin, items[j])) {
      bin = (pk_bin_t){0};
      nb++;
    }
    pk_bin_add(ctx, &bin, items[j]);
    micro[j] = nb - 1;
  }
  return nb;
}

static uint64_t range_footprint(const pk_ctx_t *ctx, const uint32_t *items, uint32_t a,
                                uint32_t b) {
  pk_bin_t bin = {0};
  for (uint32_t j = a; j < b; j++)
    pk_bin_add(ctx, &bin, items[j]);
  return pk_bin_footprint(ctx->cfg, &bin);
}

typedef struct range_key {
  uint64_t foot;
  uint32_t r;
} range_key_t;

static int range_key_cmp(const void *pa, const void *pb) {
  const range_key_t *a = pa, *b = pb;
  if (a->foot != b->foot)
    return a->foot > b->foot ? -1 : 1;
  return a->r < b->r ? -1 : (a->r > b->r ? 1 : 0);
}

/* Splits contiguous micro-batches (micro[] nondecreasing along positions)
 * until there are `target` of them: per pass, the largest-footprint ranges
 * with more than one item are cut at their midpoint, each at most once,
 * until the pass has made enough cuts. */
static int split_ranges(const pk_ctx_t *ctx, const uint32_t *items, uint32_t m, uint32_t *micro,
                        uint32_t *nb, uint32_t target) {
  int rc = PK_ENOMEM;
  uint32_t *start = pk_malloc_array((size_t)target + 1, sizeof(uint32_t));
  uint32_t *nstart = pk_malloc_array((size_t)target + 1, sizeof(uint32_t));
  uint8_t *cut = pk_calloc(target, 1);
  range_key_t *keys = pk_malloc_array(target, sizeof(range_key_t));
  if (start == NULL || nstart == NULL || cut == NULL || keys == NULL)
    goto done;
  uint32_t n = *nb;
  for (uint32_t r = 0, j = 0; r < n; r++) {
    start[r] = j;
    while (j < m && micro[j] == r)
      j++;
  }
  start[n] = m;
  while (n < target) {
    uint32_t nk = 0;
    for (uint32_t r = 0; r < n; r++)
      if (start[r + 1] - start[r] > 1)
        keys[nk++] = (range_key_t){range_footprint(ctx, items, start[r], start[r + 1]), r};
    if (nk == 0) {
      rc = PK_EINTERNAL;
      goto done;
    }
    qsort(keys, nk, sizeof(range_key_t), range_key_cmp);
    uint32_t cuts = PK_MIN(nk, target - n);
    memset(cut, 0, n);
    for (uint32_t i = 0; i < cuts; i++)
      cut[keys[i].r] = 1;
    uint32_t o = 0;
    for (uint32_t r = 0; r < n; r++) {
      nstart[o++] = start[r];
      if (cut[r])
        nstart[o++] = start[r] + (start[r + 1] - start[r]) / 2;
    }
    nstart[o] = m;
    n = o;
    memcpy(start, nstart, ((size_t)n + 1) * sizeof(uint32_t));
  }
  for (uint32_t r = 0; r < n; r++)
    for (uint32_t j = start[r]; j < start[r + 1]; j++)
      micro[j] = r;
  *nb = n;
  rc = 0;
done:
  free(start);
  free(nstart);
  free(cut);
  free(keys);
  return rc;
}

/* ---- Moving single items (NeMo-RL's count adjustment) -------------------- */

/* Raises the count to `target` by moving, one at a time, the smallest item
 * (last in ord) of the micro-batch with the most items (ties: the lower
 * number) into a new micro-batch. Removing an item never breaks the cap. */
static int split_move(uint32_t m, const uint32_t *ord, uint32_t *micro, uint32_t *nb,
                      uint32_t target) {
  int rc = PK_ENOMEM;
  uint32_t n = *nb;
  uint32_t *cnt = pk_calloc(target, sizeof(uint32_t));
  uint32_t *end = pk_malloc_array(target, sizeof(uint32_t));
  uint32_t *lst = pk_malloc_array(m, sizeof(uint32_t));
  if (cnt == NULL || end == NULL || lst == NULL)
    goto done;
  for (uint32_t j = 0; j < m; j++)
    cnt[micro[j]]++;
  /* lst: the positions of each micro-batch in size-descending order. */
  for (uint32_t b = 0, off = 0; b < n; b++) {
    end[b] = off;
    off += cnt[b];
  }
  for (uint32_t t = 0; t < m; t++)
    lst[end[micro[ord[t]]]++] = ord[t];
  while (n < target) {
    uint32_t best = 0;
    for (uint32_t b = 1; b < n; b++)
      if (cnt[b] > cnt[best])
        best = b;
    if (cnt[best] < 2) {
      rc = PK_EINTERNAL;
      goto done;
    }
    uint32_t j = lst[--end[best]];
    cnt[best]--;
    micro[j] = n;
    cnt[n] = 1;
    end[n] = 0; /* Never chosen again: it holds a single item. */
    n++;
  }
  *nb = n;
  rc = 0;
done:
  free(cnt);
  free(end);
  free(lst);
  return rc;
}

/* ---- FFD ----------------------------------------------------------------- */

/* First fit decreasing with a segment tree over the bins' rooms (stored as
 * room + 1, 0 = closed), so each item finds the first bin that fits in
 * O(log bins). */
static int ffd(const pk_ctx_t *ctx, const uint32_t *items, uint32_t m, const uint32_t *ord,
               uint32_t *micro, uint32_t *nbins) {
  uint32_t leaves = 1;
  while (leaves < m)
    leaves *= 2;
  uint64_t *tree = pk_calloc(2 * (size_t)leaves, sizeof(uint64_t));
  pk_bin_t *bins = pk_calloc(m, sizeof(pk_bin_t));
  if (tree == NULL || bins == NULL) {
    free(tree);
    free(bins);
    return PK_ENOMEM;
  }
  uint32_t nb = 0, tick = 0;
  for (uint32_t t = 0; t < m; t++) {
    if (pk_stop_tick(ctx, &tick)) {
      free(tree);
      free(bins);
      return PK_ECANCELED;
    }
    uint32_t j = ord[t];
    uint64_t s = ctx->size[items[j]];
    uint32_t b;
    if (tree[1] > s) {
      uint32_t node = 1;
      while (node < leaves)
        node = tree[2 * node] > s ? 2 * node : 2 * node + 1;
      b = node - leaves;
    } else {
      b = nb++;
    }
    pk_bin_add(ctx, &bins[b], items[j]);
    micro[j] = b;
    uint64_t room;
    uint64_t v = bin_room(ctx, &bins[b], &room) ? (room == UINT64_MAX ? room : room + 1) : 0;
    uint32_t node = b + leaves;
    tree[node] = v;
    for (node /= 2; node >= 1; node /= 2)
      tree[node] = PK_MAX(tree[2 * node], tree[2 * node + 1]);
  }
  *nbins = nb;
  free(tree);
  free(bins);
  return 0;
}

/* ---- MFFD ---------------------------------------------------------------- */

typedef struct mffd {
  const pk_ctx_t *ctx;
  const uint32_t *items;
  const uint32_t *ord;
  uint64_t *sz;  /* sz[t]: size of the t-th largest item. */
  uint32_t *nxt; /* Union-find: the first untaken rank >= t. */
  uint32_t m;
} mffd_t;

static uint32_t uf_find(uint32_t *nxt, uint32_t t) {
  while (nxt[t] != t) {
    nxt[t] = nxt[nxt[t]];
    t = nxt[t];
  }
  return t;
}

/* The rank of the largest untaken item in ranks [lo, hi) with size <= room,
 * or MB_NONE. */
static uint32_t largest_fit(mffd_t *s, uint32_t lo, uint32_t hi, uint64_t room) {
  uint32_t a = lo, b = hi;
  while (a < b) {
    uint32_t mid = a + (b - a) / 2;
    if (s->sz[mid] <= room)
      b = mid;
    else
      a = mid + 1;
  }
  if (a >= hi)
    return MB_NONE;
  uint32_t t = uf_find(s->nxt, a);
  return t < hi ? t : MB_NONE;
}

static void take(mffd_t *s, pk_bin_t *bin, uint32_t b, uint32_t t, uint32_t *micro) {
  s->nxt[t] = t + 1;
  pk_bin_add(s->ctx, bin, s->items[s->ord[t]]);
  micro[s->ord[t]] = b;
}

static inline uint64_t bin_load(const pk_ctx_t *ctx, const pk_bin_t *b) {
  return pk_bin_footprint(ctx->cfg, b);
}

/* Least-loaded order: footprint, then item count, then bin number (the key
 * (sum, count, id) of MindSpeed-RL's heap). */
typedef struct load_order {
  const pk_ctx_t *ctx;
  const pk_bin_t *bins;
} load_order_t;

static bool load_before(const void *arg, uint32_t a, uint32_t b) {
  const load_order_t *o = arg;
  const pk_bin_t *bins = o->bins;
  uint64_t la = bin_load(o->ctx, &bins[a]), lb = bin_load(o->ctx, &bins[b]);
  if (la != lb)
    return la < lb;
  if (bins[a].count != bins[b].count)
    return bins[a].count < bins[b].count;
  return a < b;
}

/* Johnson and Garey's modified first fit decreasing, as NeMo-RL describes it.
 * With C the cap, items are large (> C/2), medium (> C/3), small (> C/6) or
 * tiny. (1) Every large item opens a bin. (2) Going through the large bins
 * from the largest item, each takes the largest medium item that fits.
 * (3) Going backwards through the large bins without a medium item: when the
 * two smallest small items fit together, the bin takes the smallest one and
 * then the largest small item that fits. (4) Every bin, in order, takes the
 * largest remaining item that fits until none does. (5) The remaining items,
 * largest first, try only the least-loaded bin and open a new bin when they do
 * not fit (NeMo-RL's variant, not a true first fit). */
static int mffd(const pk_ctx_t *ctx, const uint32_t *items, uint32_t m, const uint32_t *ord,
                uint32_t *micro, uint32_t *nbins) {
  const pk_cfg_t *cfg = ctx->cfg;
  int rc = PK_ENOMEM;
  mffd_t s = {.ctx = ctx, .items = items, .ord = ord, .m = m};
  pk_bin_t *bins = pk_calloc(m, sizeof(pk_bin_t));
  uint8_t *has_medium = pk_calloc(m, 1);
  uint32_t *heap = pk_malloc_array(m, sizeof(uint32_t));
  s.sz = pk_malloc_array(m, sizeof(uint64_t));
  s.nxt = pk_malloc_array((size_t)m + 1, sizeof(uint32_t));
  if (bins == NULL || has_medium == NULL || heap == NULL || s.sz == NULL || s.nxt == NULL)
    goto done;
  for (uint32_t t = 0; t < m; t++) {
    s.sz[t] = ctx->size[items[ord[t]]];
    s.nxt[t] = t;
  }
  s.nxt[m] = m;

  /* Class boundaries in rank order: [0, nl) large, [nl, nm) medium,
   * [nm, ns) small, [ns, m) tiny. x > C/d exactly when x > floor(C/d). */
  uint64_t c = cfg->cap;
  uint32_t nl = 0, nm, ns;
  while (nl < m && s.sz[nl] > c / 2)
    nl++;
  nm = nl;
  while (nm < m && s.sz[nm] > c / 3)
    nm++;
  ns = nm;
  while (ns < m && s.sz[ns] > c / 6)
    ns++;

  uint32_t nb = 0;
  uint64_t room;
  /* (1) */
  for (uint32_t t = 0; t < nl; t++) {
    take(&s, &bins[nb], nb, t, micro);
    nb++;
  }
  /* (2) */
  for (uint32_t b = 0; b < nl; b++) {
    if (!bin_room(ctx, &bins[b], &room))
      continue;
    uint32_t t = largest_fit(&s, nl, nm, room);
    if (t != MB_NONE) {
      take(&s, &bins[b], b, t, micro);
      has_medium[b] = 1;
    }
  }
  /* (3) */
  uint32_t sp = ns; /* Smallest untaken small item: the last untaken below sp. */
  for (uint32_t b = nl; b-- > 0;) {
    if (has_medium[b])
      continue;
    while (sp > nm && s.nxt[sp - 1] != sp - 1)
      sp--;
    if (sp <= nm)
      break;
    uint32_t s1 = sp - 1, s2 = s1;
    while (s2 > nm && s.nxt[s2 - 1] != s2 - 1)
      s2--;
    if (s2 <= nm)
      break;
    s2--;
    pk_bin_t trial = bins[b];
    if (!pk_bin_fits(ctx, &trial, items[ord[s1]]))
      continue;
    pk_bin_add(ctx, &trial, items[ord[s1]]);
    if (!pk_bin_fits(ctx, &trial, items[ord[s2]]))
      continue;
    take(&s, &bins[b], b, s1, micro);
    if (bin_room(ctx, &bins[b], &room)) {
      uint32_t t = largest_fit(&s, nm, ns, room);
      if (t != MB_NONE)
        take(&s, &bins[b], b, t, micro);
    }
  }
  /* (4) */
  uint32_t tick = 0;
  for (uint32_t b = 0; b < nb; b++) {
    if (pk_stop_tick(ctx, &tick)) {
      rc = PK_ECANCELED;
      goto done;
    }
    while (bin_room(ctx, &bins[b], &room)) {
      uint32_t t = largest_fit(&s, 0, m, room);
      if (t == MB_NONE)
        break;
      take(&s, &bins[b], b, t, micro);
    }
  }
  /* (5) */
  load_order_t lo = {ctx, bins};
  uint32_t nh = 0;
  for (uint32_t b = 0; b < nb; b++)
    heap[nh++] = b;
  for (uint32_t i = nh / 2; i-- > 0;)
    pk_heap_down(heap, nh, i, load_before, &lo);
  for (uint32_t t = uf_find(s.nxt, 0); t < m; t = uf_find(s.nxt, t)) {
    if (pk_stop_tick(ctx, &tick)) {
      rc = PK_ECANCELED;
      goto done;
    }
    uint32_t k = items[ord[t]];
    if (nh > 0 && pk_bin_fits(ctx, &bins[heap[0]], k)) {
      uint32_t b = heap[0];
      take(&s, &bins[b], b, t, micro);
      pk_heap_down(heap, nh, 0, load_before, &lo);
    } else {
      uint32_t b = nb++;
      take(&s, &bins[b], b, t, micro);
      heap[nh] = b;
      pk_heap_up(heap, nh++, load_before, &lo);
    }
  }
  *nbins = nb;
  rc = 0;
done:
  free(bins);
  free(has_medium);
  free(heap);
  free(s.sz);
  free(s.nxt);
  return rc;
}

/* ---- KK with a raised count ---------------------------------------------- */

/* Whether every part fits the cap and max_seqs and none is empty. */
static int parts_fit(const pk_ctx_t *ctx, const uint32_t *items, uint32_t m, const uint32_t *micro,
                     uint32_t count, pk_bin_t *bins) {
  memset(bins, 0, (size_t)count * sizeof(pk_bin_t));
  for (uint32_t j = 0; j < m; j++) {
    pk_bin_t *b = &bins[micro[j]];
    if (b->count > 0 && !pk_bin_fits(ctx, b, items[j]))
      return 0;
    pk_bin_add(ctx, b, items[j]);
  }
  for (uint32_t b = 0; b < count; b++)
    if (bins[b].count == 0)
      return 0;
  return 1;
}

/* One KK attempt into `count` parts: 1 when every part fits, 0 when not,
 * or a negative error. */
static int kk_try(const pk_ctx_t *ctx, const uint32_t *items, uint32_t m, const double *val,
                  uint32_t count, uint32_t *part, pk_bin_t *bins) {
  int rc = pk_kk_partition(val, m, count, false, part);
  if (rc != 0)
    return rc == PK_EINVAL ? PK_EINTERNAL : rc;
  return parts_fit(ctx, items, m, part, count, bins);
}

/* KK (free counts) of val into `count` parts; while a part breaks the cap the
 * count is raised by one (verl PR #7553's rule). With count == m every part
 * holds one item, which fits, so the search ends. After KK_RAISE_STEPS
 * single steps have failed, the count grows by doubling steps and the
 * boundary is bisected, so a cap far below what KK's balance needs costs
 * O(log m) KK runs instead of O(m); the count returned always fits and the
 * count one below it was tried and does not. */
#define KK_RAISE_STEPS 8
static int kk_raise(const pk_ctx_t *ctx, const uint32_t *items, uint32_t m, const double *val,
                    uint32_t count, uint32_t *micro, uint32_t *nmicro) {
  pk_bin_t *bins = pk_malloc_array(m, sizeof(pk_bin_t));
  uint32_t *part = pk_malloc_array(m, sizeof(uint32_t));
  int rc = PK_ENOMEM;
  if (bins == NULL || part == NULL)
    goto done;
  uint32_t fail = 0, fit = 0; /* 0: none known (counts are >= 1). */
  for (uint32_t step = 0; step < KK_RAISE_STEPS && count <= m; step++, count++) {
    rc = kk_try(ctx, items, m, val, count, micro, bins);
    if (rc < 0)
      goto done;
    if (rc == 1) {
      fit = count;
      break;
    }
    fail = count;
  }
  for (uint32_t d = 2; fit == 0; d = d > UINT32_MAX / 2 ? UINT32_MAX : d * 2) {
    if (fail >= m) {
      rc = PK_EINTERNAL; /* Single items always fit: a bug. */
      goto done;
    }
    uint32_t t = m - fail < d ? m : fail + d;
    rc = kk_try(ctx, items, m, val, t, micro, bins);
    if (rc < 0)
      goto done;
    if (rc == 1)
      fit = t;
    else
      fail = t;
  }
  while (fit - fail > 1 && fail > 0) {
    uint32_t mid = fail + (fit - fail) / 2;
    rc = kk_try(ctx, items, m, val, mid, part, bins);
    if (rc < 0)
      goto done;
    if (rc == 1) {
      fit = mid;
      memcpy(micro, part, (size_t)m * sizeof(uint32_t));
    } else {
      fail = mid;
    }
  }
  *nmicro = fit;
  rc = 0;
done:
  free(bins);
  free(part);
  return rc;
}

/* MindSpeed-RL heapq_partition_with_max: the number of groups that LPT by
 * size needs when it starts with max(1, ceil(sum / cap)) groups and closes a
 * group (opening a new one) whenever the least-loaded group cannot take the
 * next item. */
static int lpt_cap_count(const pk_ctx_t *ctx, const uint32_t *items, uint32_t m,
                         const uint32_t *ord, uint64_t sum, uint32_t *count) {
  uint64_t k0 = ctx->cfg->cap == UINT64_MAX ? 1 : ceil_div(sum, ctx->cfg->cap);
  k0 = PK_MAX(k0, 1);
  k0 = PK_MIN(k0, m);
  /* Empty groups come first in the heap, so a group is only opened when all
   * are in use and at most m groups exist; k0 + m bounds it regardless. */
  pk_bin_t *bins = pk_calloc((size_t)k0 + m, sizeof(pk_bin_t));
  uint32_t *heap = pk_malloc_array(k0, sizeof(uint32_t));
  if (bins == NULL || heap == NULL) {
    free(bins);
    free(heap);
    return PK_ENOMEM;
  }
  load_order_t lo = {ctx, bins};
  uint32_t nb = (uint32_t)k0, nh = nb;
  for (uint32_t b = 0; b < nb; b++)
    heap[b] = b;
  for (uint32_t t = 0; t < m; t++) {
    uint32_t k = items[ord[t]];
    uint32_t b = heap[0];
    if (bins[b].count == 0 || pk_bin_fits(ctx, &bins[b], k)) {
      pk_bin_add(ctx, &bins[b], k);
      pk_heap_down(heap, nh, 0, load_before, &lo);
    } else {
      /* Close b: it leaves the heap; a new group takes the item. */
      uint32_t nbin = nb++;
      pk_bin_add(ctx, &bins[nbin], k);
      heap[0] = nbin;
      pk_heap_down(heap, nh, 0, load_before, &lo);
    }
  }
  *count = nb;
  free(bins);
  free(heap);
  return 0;
}

/* ---- Entry point --------------------------------------------------------- */

int pk_compat_micro(const pk_ctx_t *ctx, uint32_t algo, const uint32_t *items, uint32_t nitems,
                    uint32_t min_count, uint32_t *micro, uint32_t *nmicro) {
  const pk_cfg_t *cfg = ctx->cfg;
  *nmicro = 0;
  if (nitems == 0)
    return 0;
  uint64_t sum = 0;
  for (uint32_t j = 0; j < nitems; j++) {
    pk_bin_t empty = {0};
    if (!pk_bin_fits(ctx, &empty, items[j]))
      return PK_EPRECOND; /* Validation rejects this first. */
    sum += ctx->size[items[j]];
  }
  uint32_t target = PK_MIN(PK_MAX(min_count, 1), nitems);

  int rc = PK_ENOMEM;
  uint32_t nb = 0;
  uint32_t *ord = NULL;
  double *val = NULL;
  switch (algo) {
  case PK_MICRO_NEXT_FIT:
    nb = next_fit(ctx, items, nitems, micro);
    rc = nb < target ? split_ranges(ctx, items, nitems, micro, &nb, target) : 0;
    break;
  case PK_MICRO_FFD:
  case PK_MICRO_MFFD:
    ord = pk_malloc_array(nitems, sizeof(uint32_t));
    if (ord == NULL || (rc = sort_desc(ctx, items, nitems, ord)) != 0)
      break;
    rc = algo == PK_MICRO_FFD ? ffd(ctx, items, nitems, ord, micro, &nb)
                              : mffd(ctx, items, nitems, ord, micro, &nb);
    if (rc == 0 && nb < target)
      rc = split_move(nitems, ord, micro, &nb, target);
    break;
  case PK_MICRO_KK_COUNT: {
    val = pk_malloc_array(nitems, sizeof(double));
    if (val == NULL)
      break;
    for (uint32_t j = 0; j < nitems; j++)
      val[j] = ctx->cost[items[j]];
    /* Counts below these bounds cannot fit, so starting here gives the
     * same result as raising from ceil(sum / cap): the token bound, one
     * micro-batch per item above half the cap, and max_seqs. */
    uint64_t count = cfg->cap == UINT64_MAX ? 1 : ceil_div(sum, cfg->cap);
    uint64_t large = 0;
    for (uint32_t j = 0; j < nitems; j++)
      large += ctx->size[items[j]] > cfg->cap / 2;
    count = PK_MAX(count, large);
    count = PK_MAX(count, target);
    if (cfg->max_seqs != UINT32_MAX)
      count = PK_MAX(count, ceil_div(nitems, cfg->max_seqs));
    count = PK_MIN(count, nitems);
    rc = kk_raise(ctx, items, nitems, val, (uint32_t)count, micro, &nb);
    break;
  }
  case PK_MICRO_LPT_CAP: {
    ord = pk_malloc_array(nitems, sizeof(uint32_t));
    val = pk_malloc_array(nitems, sizeof(double));
    if (ord == NULL || val == NULL || (rc = sort_desc(ctx, items, nitems, ord)) != 0)
      break;
    uint32_t count;
    if ((rc = lpt_cap_count(ctx, items, nitems, ord, sum, &count)) != 0)
      break;
    for (uint32_t j = 0; j < nitems; j++)
      val[j] = (double)ctx->size[items[j]];
    rc = kk_raise(ctx, items, nitems, val, PK_MAX(count, target), micro, &nb);
    break;
  }
  default:
    /* AUTO is planned by auto/driver.c and never reaches this function. */
    rc = PK_EINTERNAL;
    break;
  }
  free(ord);
  free(val);
  if (rc == 0)
    *nmicro = nb;
  return rc;
}
