/* ROLL dynamic batching (ROLL's roll/utils/dynamic_batching.py), also what
 * NeMo-RL's dynamic batching does:
 *
 * 1. Sort the mini-batch by real length ascending (stable).
 * 2. Rank r gets sorted positions r, r + dp, r + 2 dp, ... (n % dp == 0, so
 *    every rank gets s = n / dp items; position q of every rank is one
 *    "row slot").
 * 3. One boundary list shared by all ranks: the width of slot q is the
 *    largest row width (ctx->size: the length rounded to lcm(round, A)) over
 *    the ranks at that slot; a micro-batch grows while rows x running max
 *    width <= cap (and rows <= max_seqs), otherwise a new one starts.
 * 4. The count is raised to min_micro and then to a multiple of cfg->group
 *    by splitting, per pass, the largest-footprint micro-batches with more
 *    than one row at their midpoint by rows, each at most once per pass.
 *
 * micro_algo SHARED_CUTS keeps steps 1-3's shape and sizes but chooses the
 * boundaries of step 3 and 4 by dynamic programming (compat_roll_cuts.c):
 * the fewest micro-batches (step 3's count, which next-fit already attains),
 * raised to min_micro and the group, at the least lock-step step cost.
 *
 * Every rank has the same micro-batch count by construction, and micro-batch
 * j of every rank covers the same slots (out->columns). Worked example
 * (seed 001, tests/unit/planner/test_compat_roll.c): lengths
 * [7,6,8,5,1,3,8,6], dp 2, round 2 -> shards [1,5,6,8] and [3,6,7,8]. */
#include <stdlib.h>
#include <string.h>

#include "pk_internal.h"

typedef struct roll_key {
  uint32_t len;
  uint32_t item;
} roll_key_t;

static int roll_key_cmp(const void *pa, const void *pb) {
  const roll_key_t *a = pa, *b = pb;
  if (a->len != b->len)
    return a->len < b->len ? -1 : 1;
  return a->item < b->item ? -1 : (a->item > b->item ? 1 : 0);
}

typedef struct roll_cand {
  uint64_t foot;
  uint32_t r;
} roll_cand_t;

static int roll_cand_cmp(const void *pa, const void *pb) {
  const roll_cand_t *a = pa, *b = pb;
  if (a->foot != b->foot)
    return a->foot > b->foot ? -1 : 1;
  return a->r < b->r ? -1 : (a->r > b->r ? 1 : 0);
}

/* The footprint of slots [a, b): rows x the largest slot width. */
static uint64_t slots_footprint(const uint64_t *width, uint32_t a, uint32_t b) {
  uint64_t w = 0;
  for (uint32_t q = a; q < b; q++)
    w = PK_MAX(w, width[q]);
  return (uint64_t)(b - a) * w;
}

/* Steps 1-2: keys[p] is the item at sorted position p (length ascending,
 * ties by item number, so the order is total and the plan deterministic). */
static void roll_sort(const pk_ctx_t *ctx, roll_key_t *keys) {
  for (uint32_t k = 0; k < ctx->n; k++)
    keys[k] = (roll_key_t){.len = ctx->len[k], .item = k};
  qsort(keys, ctx->n, sizeof(roll_key_t), roll_key_cmp);
}

/* Step 3's slot widths: width[q] = the widest row over the dp ranks at slot
 * q. Lengths ascend along sorted positions and sizes are monotone in the
 * length, so width[] is nondecreasing. PK_EPRECOND when a slot is wider
 * than the cap. */
static int roll_widths(const pk_ctx_t *ctx, const roll_key_t *keys, uint32_t s, uint64_t *width,
                       char *err, size_t errlen) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = cfg->dp;
  for (uint32_t q = 0; q < s; q++) {
    uint64_t wq = 0;
    uint32_t widest = keys[(size_t)q * dp].item;
    for (uint32_t r = 0; r < dp; r++) {
      uint32_t k = keys[(size_t)q * dp + r].item;
      if (ctx->size[k] > wq) {
        wq = ctx->size[k];
        widest = k;
      }
    }
    if (wq > cfg->cap)
      return pk_fail(err, errlen, PK_EPRECOND,
                     "sequence %u (length %u, padded width %llu) does not fit batching.max_tokens",
                     ctx->idx[widest], ctx->len[widest], (unsigned long long)wq);
    width[q] = wq;
  }
  return 0;
}

/* Step 3's shared next-fit boundaries: start[0 .. nm] with start[nm] = s;
 * returns nm. Every sub-range of a range that fits also fits (fewer rows,
 * no wider row), so growing each micro-batch as far as it fits gives the
 * fewest micro-batches of any boundary list. */
static uint32_t roll_next_fit(const pk_cfg_t *cfg, const uint64_t *width, uint32_t s,
                              uint32_t *start) {
  uint32_t nm = 0;
  uint64_t rows = 0, w = 0;
  for (uint32_t q = 0; q < s; q++) {
    uint64_t nw = PK_MAX(w, width[q]);
    if (rows == 0 || rows + 1 > cfg->max_seqs || (rows + 1) * nw > cfg->cap) {
      start[nm++] = q;
      rows = 1;
      w = width[q];
    } else {
      rows++;
      w = nw;
    }
  }
  start[nm] = s;
  return nm;
}

/* Step 4's count: nm raised to min_micro and to a multiple of the group;
 * PK_EPRECOND when it exceeds the s slots of a rank. */
static int roll_target(const pk_cfg_t *cfg, uint32_t nm, uint32_t s, uint32_t *target, char *err,
                       size_t errlen) {
  uint64_t t = PK_MAX(nm, cfg->min_micro);
  uint64_t group = cfg->group > 0 ? cfg->group : 1;
  t = (t + group - 1) / group * group;
  if (t > s)
    return pk_fail(err, errlen, PK_EPRECOND,
                   "sorted-stride dynamic batching needs %llu micro-batches per rank (a multiple "
                   "of microbatch_group %llu, at least min_micro_batches %u) but each of the %u "
                   "ranks has only %u sequences",
                   (unsigned long long)t, (unsigned long long)group, cfg->min_micro, cfg->dp, s);
  *target = (uint32_t)t;
  return 0;
}

/* Step 4's splits: raises the nm boundaries in start[] to target (<= s). */
static int roll_split(const uint64_t *width, uint32_t s, uint32_t nm, uint32_t target,
                      uint32_t *start) {
  int rc = PK_ENOMEM;
  uint32_t *nstart = pk_malloc_array((size_t)s + 1, sizeof(uint32_t));
  roll_cand_t *cand = pk_malloc_array(s, sizeof(roll_cand_t));
  uint8_t *cut = pk_calloc(s, 1);
  if (!nstart || !cand || !cut)
    goto done;
  while (nm < target) {
    uint32_t nc = 0;
    for (uint32_t r = 0; r < nm; r++)
      if (start[r + 1] - start[r] > 1)
        cand[nc++] = (roll_cand_t){slots_footprint(width, start[r], start[r + 1]), r};
    if (nc == 0) {
      rc = PK_EINTERNAL;
      goto done;
    }
    qsort(cand, nc, sizeof(roll_cand_t), roll_cand_cmp);
    uint32_t cuts = PK_MIN(nc, target - nm);
    memset(cut, 0, nm);
    for (uint32_t i = 0; i < cuts; i++)
      cut[cand[i].r] = 1;
    uint32_t o = 0;
    for (uint32_t r = 0; r < nm; r++) {
      nstart[o++] = start[r];
      if (cut[r])
        nstart[o++] = start[r] + (start[r + 1] - start[r]) / 2;
    }
    nstart[o] = s;
    nm = o;
    memcpy(start, nstart, ((size_t)nm + 1) * sizeof(uint32_t));
  }
  rc = 0;
done:
  free(nstart);
  free(cand);
  free(cut);
  return rc;
}

/* Writes the assignment: sorted position p goes to rank p % dp, in the
 * micro-batch whose slot range holds slot p / dp. */
static int roll_emit(const pk_ctx_t *ctx, const roll_key_t *keys, const uint32_t *start,
                     uint32_t nm, pk_assign_t *out) {
  uint32_t n = ctx->n, dp = ctx->cfg->dp, s = n / dp;
  uint32_t *slot_micro = pk_malloc_array(s, sizeof(uint32_t));
  if (slot_micro == NULL)
    return PK_ENOMEM;
  for (uint32_t r = 0; r < nm; r++)
    for (uint32_t q = start[r]; q < start[r + 1]; q++)
      slot_micro[q] = r;
  for (uint32_t p = 0; p < n; p++) {
    uint32_t k = keys[p].item;
    out->rank[k] = p % dp;
    out->micro[k] = slot_micro[p / dp];
    out->pos[k] = p;
  }
  out->nmicro = nm;
  /* Micro-batch j of every rank covers the same slots: the boundaries are
   * shared, so the micro-batches form lock-step columns. */
  out->columns = true;
  free(slot_micro);
  return 0;
}

int pk_roll_assign(const pk_ctx_t *ctx, pk_assign_t *out, char *err, size_t errlen) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t n = ctx->n, dp = cfg->dp;
  out->nmicro = 0;
  if (dp == 0)
    return pk_fail(err, errlen, PK_EINTERNAL, "ROLL dynamic batching called with dp 0");
  if (n % dp != 0)
    return pk_fail(err, errlen, PK_EPRECOND,
                   "sorted-stride dynamic batching needs the mini-batch size (%u sequences) to be "
                   "a multiple of parallel.dp (%u)",
                   n, dp);
  if (n == 0)
    return 0;
  uint32_t s = n / dp;

  int rc;
  roll_key_t *keys = pk_malloc_array(n, sizeof(roll_key_t));
  uint64_t *width = pk_malloc_array(s, sizeof(uint64_t));
  uint32_t *start = pk_malloc_array((size_t)s + 1, sizeof(uint32_t));
  if (!keys || !width || !start) {
    rc = PK_ENOMEM;
    goto done;
  }
  roll_sort(ctx, keys);
  if ((rc = roll_widths(ctx, keys, s, width, err, errlen)) != 0)
    goto done;
  uint32_t nm = roll_next_fit(cfg, width, s, start), target = 0;
  if ((rc = roll_target(cfg, nm, s, &target, err, errlen)) != 0)
    goto done;
  /* SHARED_CUTS answers 1 where its bounded work would be exceeded; the
   * next-fit boundaries and splits are the documented fallback. */
  rc = 1;
  if (cfg->micro_algo == PK_MICRO_SHARED_CUTS)
    rc = pk_roll_shared_cuts(cfg, width, s, target, PK_CUTS_ANY, start);
  if (rc == 1) {
    rc = roll_split(width, s, nm, target, start);
    if (rc == PK_EINTERNAL)
      pk_fail(err, errlen, rc, "no micro-batch left to split");
  } else if (rc == PK_EINTERNAL) {
    pk_fail(err, errlen, rc, "shared cuts: no boundary list of %u micro-batches over %u slots",
            target, s);
  }
  if (rc == 0)
    rc = roll_emit(ctx, keys, start, target, out);

done:
  if (rc == PK_ENOMEM)
    pk_fail(err, errlen, PK_ENOMEM, "out of memory planning %u sequences", n);
  free(keys);
  free(width);
  free(start);
  return rc;
}
