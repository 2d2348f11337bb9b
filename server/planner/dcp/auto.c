/* Dynamic-CP AUTO: from the slot-count bound upward, at each count m:
 *
 * 1. size: every sequence takes the size at which its pool work is least
 *    (at least its kmin); a sequence whose per-GPU cost there is above the
 *    level a slot would have if the work were spread evenly (pool work /
 *    (m x pool)) takes the smallest size that brings it under that level,
 *    or the size at which it alone costs least: one long sequence must not
 *    set a slot's time for the whole pool.
 * 2. count: the sequences of one size form a class; each class gets as many
 *    groups as its work over the level asks for (at least what its tokens,
 *    the cap and max_seqs need), then the counts are trimmed or raised
 *    until the groups' GPUs fill the m x pool GPU-slots;
 * 3. pack: each class is dealt into its groups, costliest sequence first to
 *    the least loaded group with room (LPT under the cap, a heap);
 * 4. place (slots.c): groups into slots as aligned blocks, idle GPUs
 *    filled;
 * 5. level (level.c): sequences moved and swapped between groups while the
 *    step falls.
 *
 * The count with the least step wins; the search stops once the bound at
 * the next count (which grows with the count) is no better than the best
 * step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "knobs.h"
#include "state.h"

/* The size policies of step 1, each a full plan per count (the cheaper
 * step wins): every sequence at its cheapest size (spreading left to the
 * idle filling), or the costliest spread while it pays. The second wins
 * when long sequences would set their slots' times; the first when many
 * sequences are near the level and spreading them only adds CP cost. The
 * shelf plans try a third: spreading against the least height of the
 * costliest sequence instead of the mean level, for batches where that
 * sequence makes its slot tall anyway: the sequences under that height stay
 * at their cheapest size and fill the tall slot's other GPUs (up to the
 * cap), where spreading them against the mean level would only add CP
 * work. */
enum {
  DCP_SIZES_CHEAPEST = 0,
  DCP_SIZES_SPREAD = 1,
  DCP_SIZE_POLICIES = 2,
  DCP_SIZES_TALL = 2,
  DCP_SHELF_POLICIES = 3
};

typedef struct sort_arg {
  const uint32_t *k;
  const double *cost;
} sort_arg_t;

/* By size index descending, then cost descending, then index. */
static bool class_before(const void *arg, uint32_t x, uint32_t y) {
  const sort_arg_t *a = arg;
  if (a->k[x] != a->k[y])
    return a->k[x] > a->k[y];
  if (a->cost[x] != a->cost[y])
    return a->cost[x] > a->cost[y];
  return x < y;
}

/* Heap order of a class's groups: least load first, then fewest members. */
static bool lighter(const void *arg, uint32_t x, uint32_t y) {
  const dcp_grp_t *g = arg;
  if (g[x].load != g[y].load)
    return g[x].load < g[y].load;
  return x < y;
}

typedef struct scratch {
  uint32_t *k;      /* n: chosen size index. */
  double *cost;     /* n: per-GPU cost at it. */
  double *c0;       /* n: per-GPU cost at the cheapest size. */
  uint32_t *order;  /* n: by class, cost descending. */
  uint32_t *tmp;    /* n. */
  uint32_t *heap;   /* n. */
  uint32_t *room;   /* n: the dealt classes' room heaps (pack). */
  uint64_t *ngrp;   /* nsize: groups per class. */
  uint64_t *lo;     /* nsize: least groups per class. */
  uint64_t *cnt;    /* nsize. */
  double *work;     /* nsize. */
  double *top;      /* nsize: the costliest sequence of each class. */
  double *h;        /* n: heights (plan_shelf). */
  dcp_rank_t *rank; /* 2 n: dcp_order_desc's. */
} scratch_t;

/* The size at which sequence i's pool work is least (from kmin; with any
 * size allowed only kmin and the next few sizes are looked at, pool work
 * growing with c but for padding). */
static uint32_t cheapest(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t i) {
  uint32_t best = it->kmin[i];
  /* Every size a power of two: the alignments nest, so the pool work only
   * grows with the size (as the bound's least work, cost.c). */
  if (cfg->sizes == PK_DCP_SIZES_POW2 && (cfg->pool & (cfg->pool - 1)) == 0)
    return best;
  double bw = cfg->size[best] * dcp_item_cost(cfg, it, i, best);
  uint32_t end =
      cfg->sizes == PK_DCP_SIZES_ANY ? PK_MIN(cfg->nsize, best + DCP_ANY_CHEAPEST) : cfg->nsize;
  for (uint32_t k = best + 1; k < end; k++) {
    double w = cfg->size[k] * dcp_item_cost(cfg, it, i, k);
    if (w < bw) {
      bw = w;
      best = k;
    }
  }
  return best;
}

/* The size after q when looking for a sequence's size from k: every size
 * when they are powers of two (at most 18), else the eight after k and then
 * doublings, so that a pool of any-size groups costs O(log pool) per
 * sequence, not O(pool). */
static uint32_t next_size(const dcp_cfg_t *cfg, uint32_t k, uint32_t q) {
  if (cfg->sizes == PK_DCP_SIZES_POW2 || q < k + DCP_ANY_STEPS)
    return q + 1;
  uint32_t want = cfg->size[q] > cfg->pool / 2 ? cfg->pool : 2 * cfg->size[q];
  uint32_t next = dcp_size_index(cfg, want);
  return next == UINT32_MAX || next <= q ? q + 1 : next;
}

/* The least per-GPU cost of sequence i alone in a group, group terms
 * included, over the sizes from k0[i] that next_size visits. */
static double least_alone(const dcp_cfg_t *cfg, const dcp_items_t *it, const uint32_t *k0,
                          uint32_t i) {
  double h = INFINITY;
  for (uint32_t q = k0[i]; q < cfg->nsize; q = next_size(cfg, k0[i], q))
    h = fmin(h, dcp_group_base(cfg, cfg->size[q]) + dcp_item_cost(cfg, it, i, q));
  return h;
}

/* Step 1: sizes for slot count m. A slot costs at least the level (pool
 * work / (m x pool)); a sequence whose per-GPU cost u is above it raises its
 * slot by about u - level, and a larger size lowers u but adds its extra
 * pool work w over the pool to every plan's step (through the level). So
 * each sequence, costliest first, takes the size that minimises
 * max(u - level, 0) + (w - w at the cheapest size) / pool, and the level
 * rises by the extra work before the next one chooses: the costliest
 * sequences spread first, and spreading stops once it costs more than it
 * saves. by: the n sequence numbers, sorted here. Returns the level. */
static double choose_sizes(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t m, uint32_t policy,
                           const uint32_t *k0, const uint32_t *by, scratch_t *w) {
  double work = 0;
  for (uint32_t i = 0; i < it->n; i++)
    work += cfg->size[k0[i]] * w->c0[i];
  double slots_gpus = (double)m * cfg->pool;
  double level = work / slots_gpus;
  if (policy == DCP_SIZES_TALL && it->n > 0)
    level = fmax(level, least_alone(cfg, it, k0, by[0]));
  for (uint32_t x = 0; x < it->n; x++) {
    uint32_t i = by[x];
    uint32_t k = k0[i];
    double u0 = w->c0[i], w0 = cfg->size[k] * u0, c = u0;
    if (policy != DCP_SIZES_CHEAPEST && u0 + dcp_group_base(cfg, cfg->size[k]) > level) {
      double best = u0 + dcp_group_base(cfg, cfg->size[k]) - level, bw = w0;
      for (uint32_t q = k + 1; q < cfg->nsize; q = next_size(cfg, k, q)) {
        double uq = dcp_item_cost(cfg, it, i, q), wq = cfg->size[q] * uq;
        double g = fmax(uq + dcp_group_base(cfg, cfg->size[q]) - level, 0) + (wq - w0) / cfg->pool;
        if (g < best) {
          best = g;
          k = q;
          c = uq;
          bw = wq;
        }
      }
      level += (bw - w0) / slots_gpus;
    }
    w->k[i] = k;
    w->cost[i] = c;
  }
  return level;
}

/* Step 2: groups per class so that their GPUs fill m x pool. Returns false
 * when even the least counts need more GPUs. */
static bool count_groups(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t m, double level,
                         scratch_t *w) {
  uint32_t ns = cfg->nsize;
  uint64_t *vol = w->lo; /* Tokens first, then the least counts. */
  for (uint32_t k = 0; k < ns; k++) {
    w->cnt[k] = 0;
    w->work[k] = 0;
    w->top[k] = 0;
    vol[k] = 0;
  }
  for (uint32_t i = 0; i < it->n; i++) {
    uint32_t k = w->k[i];
    w->cnt[k]++;
    w->work[k] += cfg->size[k] * w->cost[i];
    w->top[k] = fmax(w->top[k], w->cost[i]);
    vol[k] += dcp_item_aligned(cfg, it, i, k);
  }
  uint64_t width = 0, room = (uint64_t)m * cfg->pool;
  for (uint32_t k = 0; k < ns; k++) {
    uint64_t c = cfg->size[k];
    if (w->cnt[k] == 0) {
      w->lo[k] = w->ngrp[k] = 0;
      continue;
    }
    uint64_t lo = (vol[k] + c * cfg->cap - 1) / (c * cfg->cap);
    if (cfg->max_seqs != UINT32_MAX)
      lo = PK_MAX(lo, (w->cnt[k] + cfg->max_seqs - 1) / cfg->max_seqs);
    lo = PK_MAX(lo, 1);
    double want = level > 0 ? w->work[k] / (c * level) : 1;
    uint64_t g = want >= (double)w->cnt[k] ? w->cnt[k] : (uint64_t)ceil(want);
    w->lo[k] = lo;
    w->ngrp[k] = PK_MIN(PK_MAX(g, lo), w->cnt[k]);
    width += w->ngrp[k] * c;
  }
  /* Too wide: drop a group from the class whose level rises least. A
   * class's level is its work per GPU of its groups, and at least its
   * costliest sequence: a class of a few long sequences keeps a group per
   * sequence while the many short ones give up GPUs (their level rises
   * little). */
  while (width > room) {
    uint32_t best = UINT32_MAX;
    double bl = INFINITY;
    for (uint32_t k = 0; k < ns; k++) {
      if (w->ngrp[k] <= w->lo[k])
        continue;
      double l = fmax(w->work[k] / ((double)(w->ngrp[k] - 1) * cfg->size[k]), w->top[k]);
      if (l < bl) {
        bl = l;
        best = k;
      }
    }
    if (best == UINT32_MAX)
      return false;
    w->ngrp[best]--;
    width -= cfg->size[best];
  }
  /* Room left: a group more for the class with the highest level that
   * still fits (idle GPUs left after this are filled by slots.c). */
  while (width < room) {
    uint32_t best = UINT32_MAX;
    double bl = -1;
    for (uint32_t k = 0; k < ns; k++) {
      if (w->ngrp[k] >= w->cnt[k] || width + cfg->size[k] > room)
        continue;
      double l = fmax(w->work[k] / ((double)w->ngrp[k] * cfg->size[k]), w->top[k]);
      if (l > bl) {
        bl = l;
        best = k;
      }
    }
    if (best == UINT32_MAX)
      break;
    w->ngrp[best]++;
    width += cfg->size[best];
  }
  return true;
}

/* Room-heap order: most free tokens first (then group number). */
static bool roomier(const void *arg, uint32_t x, uint32_t y) {
  const dcp_state_t *s = arg;
  uint64_t rx = (uint64_t)s->cfg->size[s->g[x].k] * s->cfg->cap - s->g[x].sum;
  uint64_t ry = (uint64_t)s->cfg->size[s->g[y].k] * s->cfg->cap - s->g[y].sum;
  if (rx != ry)
    return rx > ry;
  return x < y;
}

/* The classes dealt so far, each with its groups in a heap by free room
 * (w->room[first .. first + count), groups numbered first .. first + count
 * too): where a sequence that finds no room in its own class looks. */
typedef struct dealt {
  uint32_t k, first, count;
} dealt_t;

/* Deals one class, items[0 .. cnt) (costliest first), into its groups
 * first .. first + count by LPT under the cap (a heap of the groups, least
 * loaded first). A sequence that finds no room in its class goes to the
 * roomiest group of a class dealt before (larger sizes: classes are dealt
 * largest size first) that it may use, the least loaded of those that take
 * it: the small sequences fill what the large groups left, and bins of
 * several sizes waste less than one size alone. Returns 0, or 1 when a
 * sequence finds no room anywhere. */
static int pack_class(dcp_state_t *s, scratch_t *w, const uint32_t *items, uint32_t cnt, uint32_t k,
                      uint32_t first, uint32_t count, const dealt_t *dealt, uint32_t ndealt) {
  const dcp_cfg_t *cfg = s->cfg;
  const dcp_items_t *it = s->it;
  for (uint32_t q = 0; q < count; q++)
    w->heap[q] = first + q;
  for (uint32_t x = 0; x < cnt; x++) {
    uint32_t i = items[x];
    uint32_t grp = count > 0 ? w->heap[0] : UINT32_MAX;
    if (grp == UINT32_MAX || !dcp_item_fits(cfg, it, i, k, s->g[grp].sum, s->g[grp].count)) {
      /* The lightest group is full: the lightest of this class with room. */
      grp = UINT32_MAX;
      for (uint32_t q = first; q < first + count; q++)
        if (dcp_item_fits(cfg, it, i, k, s->g[q].sum, s->g[q].count) &&
            (grp == UINT32_MAX || s->g[q].load < s->g[grp].load))
          grp = q;
    }
    if (grp == UINT32_MAX) {
      uint32_t from = UINT32_MAX;
      for (uint32_t d = 0; d < ndealt; d++) {
        uint32_t top = w->room[dealt[d].first];
        if (dealt[d].k >= it->kmin[i] &&
            dcp_item_fits(cfg, it, i, dealt[d].k, s->g[top].sum, s->g[top].count) &&
            (grp == UINT32_MAX || s->g[top].load < s->g[grp].load)) {
          grp = top;
          from = d;
        }
      }
      if (grp == UINT32_MAX)
        return 1;
      dcp_state_add(s, grp, i);
      pk_heap_down(w->room + dealt[from].first, dealt[from].count, 0, roomier, s);
      continue;
    }
    dcp_state_add(s, grp, i);
    /* The group's load only rose: sift it down from where it is. */
    uint32_t q = 0;
    while (w->heap[q] != grp)
      q++;
    pk_heap_down(w->heap, count, q, lighter, s->g);
  }
  return 0;
}

/* Step 3: every class into its groups. Returns 0, 1 when a class does not
 * fit its groups, or PK_ENOMEM. */
static int pack(dcp_state_t *s, scratch_t *w) {
  const dcp_items_t *it = s->it;
  uint32_t n = it->n, ndealt = 0;
  dealt_t *dealt = pk_malloc_array(s->cfg->nsize, sizeof *dealt);
  if (dealt == NULL)
    return PK_ENOMEM;
  sort_arg_t arg = {.k = w->k, .cost = w->cost};
  for (uint32_t i = 0; i < n; i++)
    w->order[i] = i;
  pk_merge_sort_u32(w->order, w->tmp, n, class_before, &arg);
  int rc = 0;
  for (uint32_t j = 0; j < n && rc == 0;) {
    uint32_t k = w->k[w->order[j]], end = j;
    while (end < n && w->k[w->order[end]] == k)
      end++;
    uint32_t first = s->ng, count = (uint32_t)w->ngrp[k];
    for (uint32_t q = 0; q < count && rc == 0; q++)
      if (dcp_state_new_group(s, k) == UINT32_MAX)
        rc = PK_ENOMEM;
    if (rc == 0)
      rc = pack_class(s, w, w->order + j, end - j, k, first, count, dealt, ndealt);
    if (rc == 0) {
      for (uint32_t q = 0; q < count; q++)
        w->room[first + q] = first + q;
      for (uint32_t q = count / 2; q-- > 0;)
        pk_heap_down(w->room + first, count, q, roomier, s);
      dealt[ndealt++] = (dealt_t){.k = k, .first = first, .count = count};
    }
    j = end;
  }
  free(dealt);
  return rc;
}

static void scratch_free(scratch_t *w) {
  free(w->k);
  free(w->cost);
  free(w->c0);
  free(w->order);
  free(w->tmp);
  free(w->heap);
  free(w->room);
  free(w->ngrp);
  free(w->lo);
  free(w->cnt);
  free(w->work);
  free(w->top);
  free(w->h);
  free(w->rank);
}

/* One plan at m slots into s (initialised here). Returns 0, 1 when m slots
 * are too few for this way of planning, or a negative code. */
static int plan_at(const dcp_cfg_t *cfg, const dcp_items_t *it, const pk_limits_t *limits,
                   uint32_t m, uint32_t policy, const uint32_t *k0, const uint32_t *by,
                   scratch_t *w, dcp_state_t *s) {
  int rc = dcp_state_init(s, cfg, it, limits, m);
  if (rc != 0)
    return rc;
  double level = choose_sizes(cfg, it, m, policy, k0, by, w);
  if (!count_groups(cfg, it, m, level, w)) {
    return 1;
  }
  rc = pack(s, w);
  if (rc != 0) {
    return rc;
  }
  if (pk_limits_stopped(limits))
    return PK_ECANCELED;
  rc = dcp_place(s);
  if (rc != 0)
    return rc;
  return dcp_split(s);
}

/* One shelf plan (shelf.c) of a size policy, its level from m slots, then
 * the idle filling and levelling. beat: the step to beat, where a plan at
 * or above it cannot win (INFINITY: none); the plan stops in its packing
 * once it shows it cannot (dcp_shelf). Returns 0, 1 when it stopped so, or
 * a negative code. */
static int plan_shelf(const dcp_cfg_t *cfg, const dcp_items_t *it, const pk_limits_t *limits,
                      uint32_t m, uint32_t policy, const uint32_t *k0, const uint32_t *by,
                      double beat, scratch_t *w, dcp_state_t *s) {
  uint32_t n = it->n;
  choose_sizes(cfg, it, m, policy, k0, by, w);
  double *h = w->h;
  for (uint32_t i = 0; i < n; i++)
    h[i] = w->cost[i] + dcp_group_base(cfg, cfg->size[w->k[i]]);
  dcp_order_desc(h, n, w->order, w->rank);
  int rc = dcp_state_init(s, cfg, it, limits, n);
  if (rc == 0)
    rc = dcp_shelf(s, w->k, w->order, beat);
  if (rc == 1)
    return 1;
  if (rc == 0 && pk_limits_stopped(limits))
    rc = PK_ECANCELED;
  if (rc == 0)
    rc = dcp_fill(s);
  if (rc == 0)
    rc = dcp_split(s);
  return rc;
}

/* A fixed-CP plan as a candidate: the planner's own fixed-CP AUTO (pk_plan)
 * with every sequence at one size c (the smallest allowed size that takes
 * every sequence and divides the pool), dp = pool / c ranks, and its cost
 * model set so that it optimises the dynamic cost at c (every term x c:
 * linear + cp_token (c - 1), quadratic, per_sequence c, (per_micro_batch +
 * cp_group (c - 1)) c). Micro-batch j of rank r is the group of slot j at
 * GPU r c. Dynamic plans are then never worse than fixed CP at that size.
 * Returns 0, 1 when no such size exists or the fixed planner refuses, or a
 * negative code. */
static int plan_fixed(const dcp_cfg_t *cfg, const dcp_items_t *it, const pk_limits_t *limits,
                      dcp_state_t *s) {
  uint32_t n = it->n, kf = 0;
  for (uint32_t i = 0; i < n; i++)
    kf = PK_MAX(kf, it->kmin[i]);
  while (kf < cfg->nsize && cfg->pool % cfg->size[kf] != 0)
    kf++;
  if (kf == cfg->nsize)
    return 1;
  uint32_t c = cfg->size[kf];
  pk_request_t req = {.lengths = it->len, .n = n};
  req.parallel.dp = cfg->pool / c;
  req.parallel.cp = c;
  req.parallel.tp = cfg->tp;
  req.parallel.cp_algo = cfg->cp_algo;
  req.parallel.sequence_parallel = cfg->sp;
  req.batching.max_tokens = cfg->cap;
  req.batching.max_seqs = cfg->max_seqs == UINT32_MAX ? 0 : cfg->max_seqs;
  req.cost.linear = cfg->base.lin + cfg->cp_token * (c - 1);
  req.cost.quadratic = cfg->base.quad;
  req.cost.per_sequence = cfg->base.seq * c;
  req.cost.per_micro_batch = (cfg->base.micro + cfg->cp_group * (c - 1)) * c;
  pk_limits_t lim = {0};
  if (limits != NULL) {
    lim.should_stop = limits->should_stop;
    lim.stop_arg = limits->stop_arg;
  }
  pk_plan_t *plan = NULL;
  int rc = pk_plan_limited(&req, &lim, &plan, NULL, 0);
  if (rc == PK_ECANCELED || rc == PK_ENOMEM)
    return rc;
  if (rc != 0)
    return 1;
  uint32_t m = pk_plan_cell(plan, 0, 0)->nmicros;
  rc = dcp_state_init(s, cfg, it, limits, m);
  for (uint32_t r = 0; r < req.parallel.dp && rc == 0; r++) {
    const pk_cell_t *cell = pk_plan_cell(plan, r, 0);
    for (uint32_t j = 0; j < cell->nmicros && rc == 0; j++) {
      uint32_t q = dcp_state_new_group(s, kf);
      if (q == UINT32_MAX) {
        rc = PK_ENOMEM;
        break;
      }
      dcp_state_set_slot(s, q, j);
      s->g[q].first = r * c;
      for (uint32_t x = 0; x < cell->micros[j].nseqs; x++)
        dcp_state_add(s, q, cell->micros[j].seqs[x]);
    }
  }
  pk_plan_free(plan);
  if (rc == 0)
    rc = dcp_fill(s);
  if (rc == 0)
    rc = dcp_split(s);
  return rc;
}

/* One of Megatron-Core's schedulers, reproduced under the cap (algo:
 * megatron.c's or packaware.c's), as a candidate: on the batches where its
 * greedy happens to do well, AUTO is then at least as good. Returns 0 or a
 * negative code. */
static int plan_megatron(const dcp_cfg_t *cfg, const dcp_items_t *it, const pk_limits_t *limits,
                         dcp_algo_fn algo, dcp_state_t *s) {
  dcp_assign_t a;
  int rc = dcp_assign_init(&a, it->n, 64);
  if (rc == 0)
    rc = algo(cfg, it, limits, &a, NULL, 0);
  if (rc == 0)
    rc = dcp_state_init(s, cfg, it, limits, a.slots);
  for (uint32_t q = 0; q < a.ngroups && rc == 0; q++) {
    if (dcp_state_new_group(s, a.gk[q]) != q) {
      rc = PK_ENOMEM;
      break;
    }
    dcp_state_set_slot(s, q, a.slot[q]);
    s->g[q].first = a.first[q];
  }
  for (uint32_t i = 0; i < it->n && rc == 0; i++)
    dcp_state_add(s, a.seq_group[i], i);
  dcp_assign_free(&a);
  /* The original leaves GPUs idle when no group can double into them; AUTO
   * gives them work where a group can split or grow. */
  if (rc == 0)
    rc = dcp_fill(s);
  if (rc == 0)
    rc = dcp_split(s);
  return rc;
}

/* GPU-slots in no group. */
static uint64_t idle_of(const dcp_state_t *s) {
  uint64_t idle = 0;
  for (uint32_t j = 0; j < s->m; j++)
    idle += s->cfg->pool - s->used[j];
  return idle;
}

/* Keeps cur when it leaves fewer GPUs idle than *best, or as many at a
 * lower step (cur is emptied then): a plan leaves a GPU idle only when no
 * candidate could avoid it. On batches of up to DCP_LEVEL_ALL_MAX_N
 * sequences a candidate within DCP_LEVEL_ALL_SLACK of the best step so far
 * is levelled first: one whose groups are right but whose sequences are
 * dealt badly (two long ones sharing a group while another group has room)
 * often levels to the best plan. Returns 0 or the levelling's error. */
static int keep_better(dcp_state_t *best, dcp_state_t *cur, double *best_step) {
  if (cur->it->n <= DCP_LEVEL_ALL_MAX_N &&
      dcp_state_step(cur) < *best_step * (1 + DCP_LEVEL_ALL_SLACK)) {
    int rc = dcp_level(cur);
    if (rc != 0)
      return rc;
  }
  double step = dcp_state_step(cur);
  uint64_t idle = idle_of(cur), best_idle = best->g != NULL ? idle_of(best) : UINT64_MAX;
  if (idle < best_idle || (idle == best_idle && step < *best_step)) {
    *best_step = step;
    dcp_state_free(best);
    *best = *cur;
    memset(cur, 0, sizeof *cur);
  }
  return 0;
}

int dcp_auto(const dcp_cfg_t *cfg, const dcp_items_t *it, const pk_limits_t *limits,
             dcp_assign_t *out, char *err, size_t errlen) {
  uint32_t n = it->n, ns = cfg->nsize;
  scratch_t w = {0};
  uint32_t *k0 = pk_malloc_array(n, sizeof *k0);
  uint32_t *by = pk_malloc_array(n, sizeof *by);
  w.k = pk_malloc_array(n, sizeof *w.k);
  w.cost = pk_malloc_array(n, sizeof *w.cost);
  w.c0 = pk_malloc_array(n, sizeof *w.c0);
  w.order = pk_malloc_array(n, sizeof *w.order);
  w.tmp = pk_malloc_array(n, sizeof *w.tmp);
  w.heap = pk_malloc_array(n, sizeof *w.heap);
  w.room = pk_malloc_array(n, sizeof *w.room);
  w.ngrp = pk_malloc_array(ns, sizeof *w.ngrp);
  w.lo = pk_malloc_array(ns, sizeof *w.lo);
  w.cnt = pk_malloc_array(ns, sizeof *w.cnt);
  w.work = pk_malloc_array(ns, sizeof *w.work);
  w.top = pk_malloc_array(ns, sizeof *w.top);
  w.h = pk_malloc_array(n, sizeof *w.h);
  w.rank = pk_malloc_array(2 * (size_t)n, sizeof *w.rank);
  dcp_state_t best = {0}, cur = {0};
  double best_step = INFINITY;
  int rc = 0;
  if (k0 == NULL || by == NULL || w.k == NULL || w.cost == NULL || w.c0 == NULL ||
      w.order == NULL || w.tmp == NULL || w.heap == NULL || w.room == NULL || w.ngrp == NULL ||
      w.lo == NULL || w.cnt == NULL || w.work == NULL || w.h == NULL || w.rank == NULL ||
      w.top == NULL) {
    rc = pk_fail(err, errlen, PK_ENOMEM, "lengths: out of memory for %u sequences", n);
    goto done;
  }
  for (uint32_t i = 0; i < n; i++) {
    k0[i] = cheapest(cfg, it, i);
    w.c0[i] = dcp_item_cost(cfg, it, i, k0[i]);
  }
  dcp_order_desc(w.c0, n, by, w.rank);
  /* Shelf plans: every sequence at its cheapest size, then spread with the
   * level of the slot count the first plan used. */
  uint32_t m_lb = dcp_slots_lower_bound(cfg, it), m_shelf = m_lb;
  /* The third policy only where the costliest sequence's slot is a fair
   * share of the step (its least height against the pool work over the
   * pool): with hundreds of slots one tall slot hardly matters. */
  double pool_work = 0;
  for (uint32_t i = 0; i < n; i++)
    pool_work += cfg->size[k0[i]] * w.c0[i];
  uint32_t shelves = DCP_SHELF_POLICIES;
  if (n == 0 || least_alone(cfg, it, k0, by[0]) < DCP_TALL_MIN_SHARE * pool_work / cfg->pool)
    shelves = DCP_SIZE_POLICIES;
  for (uint32_t policy = 0; policy < shelves; policy++) {
    /* Only a plan with fewer idle GPUs could win at a higher step. */
    double beat = best.g != NULL && idle_of(&best) == 0 ? best_step : INFINITY;
    rc = plan_shelf(cfg, it, limits, m_shelf, policy, k0, by, beat, &w, &cur);
    if (rc < 0)
      goto fail;
    if (policy == DCP_SIZES_CHEAPEST)
      m_shelf = cur.m;
    if (rc == 0)
      rc = keep_better(&best, &cur, &best_step);
    if (rc < 0)
      goto fail;
    rc = 0;
    dcp_state_free(&cur);
  }
  rc = plan_fixed(cfg, it, limits, &cur);
  if (rc < 0)
    goto fail;
  if (rc == 0)
    rc = keep_better(&best, &cur, &best_step);
  if (rc < 0)
    goto fail;
  dcp_state_free(&cur);
  if (n <= DCP_CLASS_MAX_N) {
    rc = plan_megatron(cfg, it, limits, dcp_megatron, &cur);
    if (rc == 0)
      rc = keep_better(&best, &cur, &best_step);
    if (rc < 0)
      goto fail;
    dcp_state_free(&cur);
  }
  /* Class plans at counts from the bound up, on batches small enough for
   * their quadratic packing. */
  /* Counts that do not pack are skipped in growing steps (1, 2, 4, ...):
   * near the bound a class packing often misses by a few slots, and each
   * miss costs a packing. */
  uint32_t m = m_lb, extra = 0, step = 1;
  for (; n <= DCP_CLASS_MAX_N && m <= n && extra <= DCP_EXTRA_COUNTS; m += step) {
    if (dcp_step_lower_bound(cfg, it, m) >= best_step * (1 - DCP_COUNT_STOP_TOL))
      break;
    bool packed = false;
    for (uint32_t policy = 0; policy < DCP_SIZE_POLICIES; policy++) {
      rc = plan_at(cfg, it, limits, m, policy, k0, by, &w, &cur);
      if (rc < 0)
        goto fail;
      if (rc == 0) {
        packed = true;
        rc = keep_better(&best, &cur, &best_step);
        if (rc < 0)
          goto fail;
      }
      dcp_state_free(&cur);
    }
    extra += packed;
    step = packed || step >= n ? 1 : 2 * step;
    rc = 0;
  }
  if (best.g == NULL) {
    rc = pk_fail(err, errlen, PK_EINTERNAL, "dynamic CP: no slot count up to %u packs", n);
    goto done;
  }
  /* Levelling, on the winner only on large batches (it is the costliest
   * stage); small ones levelled every candidate. */
  if (n > DCP_LEVEL_ALL_MAX_N)
    rc = dcp_level(&best);
  if (rc != 0)
    goto fail;
  /* Megatron-Core's packing-aware scheduler (packaware.c) against the
   * levelled winner (set beside the others before levelling, it could win
   * there and lose after), and levelled in turn where it wins (keep_better
   * levels it first on batches it levels every candidate of, else it is
   * levelled once kept; keep_better empties cur when it keeps it): AUTO is
   * at least as good as both. */
  if (n <= DCP_PA_MAX_N) {
    best_step = dcp_state_step(&best);
    rc = plan_megatron(cfg, it, limits, dcp_megatron_packing, &cur);
    if (rc == 0)
      rc = keep_better(&best, &cur, &best_step);
    if (rc == 0 && cur.g == NULL && n > DCP_LEVEL_ALL_MAX_N)
      rc = dcp_level(&best);
    if (rc < 0)
      goto fail;
    dcp_state_free(&cur);
  }
  rc = dcp_state_export(&best, out);
  if (rc != 0)
    pk_fail(err, errlen, rc, "lengths: out of memory for %u sequences", n);
  goto done;
fail:
  if (rc == PK_ENOMEM)
    pk_fail(err, errlen, rc, "lengths: out of memory for %u sequences", n);
  else if (rc == PK_ECANCELED)
    pk_fail(err, errlen, rc, "planning stopped by the caller");
  else
    pk_fail(err, errlen, rc, "dynamic CP: internal error %d", rc);
done:
  dcp_state_free(&best);
  dcp_state_free(&cur);
  free(k0);
  free(by);
  scratch_free(&w);
  return rc;
}
