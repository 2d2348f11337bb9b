/* From assignments to a plan: micro-batch order, packed layouts, loss scales
 * and the figures (docs/design.md, "What \"better\" means"). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pk_plan_build.h"

/* Everything a plan owns, in one block per array. */
typedef struct pk_storage {
  pk_cell_t *cells;
  pk_micro_t *micros;
  uint32_t *seqs;
  int32_t *cu;
  int32_t *cu_pad;
} pk_storage_t;

int pk_build_init(pk_build_t *b, const pk_request_t *req, const pk_cfg_t *cfg) {
  memset(b, 0, sizeof *b);
  b->req = req;
  b->cfg = cfg;
  uint32_t nb = cfg->mini_batches;
  b->mini_m = pk_calloc(nb, sizeof *b->mini_m);
  b->mini_lb = pk_calloc(nb, sizeof *b->mini_lb);
  b->mini_off = pk_calloc(nb, sizeof *b->mini_off);
  b->seqs = pk_malloc_array(req->n, sizeof *b->seqs);
  b->scratch = pk_malloc_array(req->n, sizeof *b->scratch);
  if (b->mini_m == NULL || b->mini_lb == NULL || b->mini_off == NULL || b->seqs == NULL ||
      b->scratch == NULL)
    return PK_ENOMEM;
  return 0;
}

void pk_build_cleanup(pk_build_t *b) {
  free(b->mini_m);
  free(b->mini_lb);
  free(b->mini_off);
  free(b->recs);
  free(b->seqs);
  free(b->scratch);
  free(b->bin_count);
  memset(b, 0, sizeof *b);
}

static bool key_greater(const void *arg, uint32_t x, uint32_t y) {
  const double *keys = arg;
  return keys[x] > keys[y];
}

/* Sorts keys[0..m) descending into perm (stable on ties), then applies the
 * requested order. perm[new position] = old position. */
static void order_perm(uint32_t order, const double *keys, uint32_t m, uint32_t *perm,
                       uint32_t *tmp) {
  for (uint32_t j = 0; j < m; j++)
    perm[j] = j;
  if (order == PK_ORDER_ORIGINAL)
    return;
  pk_merge_sort_u32(perm, tmp, m, key_greater, keys);
  if (order == PK_ORDER_HEAVY_MIDDLE) {
    /* Heaviest in the middle: the even positions of the descending list in
     * reverse, then the odd positions. */
    uint32_t k = 0;
    uint32_t last_even = (m - 1) & ~1u;
    for (int64_t j = last_even; j >= 0; j -= 2)
      tmp[k++] = perm[j];
    for (uint32_t j = 1; j < m; j += 2)
      tmp[k++] = perm[j];
    memcpy(perm, tmp, (size_t)m * sizeof *perm);
  }
}

static int grow_recs(pk_build_t *b, size_t need) {
  if (b->nrecs + need <= b->caprecs)
    return 0;
  size_t cap = b->caprecs ? b->caprecs : 64;
  while (cap < b->nrecs + need)
    cap *= 2;
  pk_rec_t *r = realloc(b->recs, cap * sizeof *r);
  if (r == NULL)
    return PK_ENOMEM;
  b->recs = r;
  b->caprecs = cap;
  return 0;
}

int pk_build_add_mini_batch(pk_build_t *b, const pk_ctx_t *ctx, const pk_assign_t *a, uint32_t lb) {
  const pk_cfg_t *cfg = b->cfg;
  uint32_t dp = cfg->dp, m = a->nmicro, n = ctx->n;
  size_t nbins = (size_t)dp * m;
  if (m == 0 || nbins > n)
    return PK_EINTERNAL;
  if (grow_recs(b, nbins) != 0)
    return PK_ENOMEM;
  if (nbins + 1 > b->bin_cap) {
    free(b->bin_count);
    b->bin_count = pk_malloc_array(nbins + 1, sizeof *b->bin_count);
    if (b->bin_count == NULL) {
      b->bin_cap = 0;
      return PK_ENOMEM;
    }
    b->bin_cap = nbins + 1;
  }
  uint32_t *cnt = b->bin_count;
  uint32_t *inv = b->scratch; /* pos -> item */
  memset(cnt, 0, (nbins + 1) * sizeof *cnt);
  for (uint32_t k = 0; k < n; k++)
    inv[k] = UINT32_MAX;
  for (uint32_t k = 0; k < n; k++) {
    if (a->rank[k] >= dp || a->micro[k] >= m || a->pos[k] >= n || inv[a->pos[k]] != UINT32_MAX)
      return PK_EINTERNAL;
    inv[a->pos[k]] = k;
    cnt[(size_t)a->rank[k] * m + a->micro[k] + 1]++;
  }
  for (size_t i = 0; i < nbins; i++) {
    if (cnt[i + 1] == 0)
      return PK_EINTERNAL; /* An empty micro-batch: the algorithms never make one. */
    cnt[i + 1] += cnt[i];
  }
  /* Sequences grouped by bin, in pos order; cnt[i] becomes bin i's end. */
  uint32_t *seqs = b->seqs + b->nseqs;
  uint32_t first_bin_start[1];
  (void)first_bin_start;
  for (uint32_t p = 0; p < n; p++) {
    uint32_t k = inv[p];
    if (k == UINT32_MAX)
      continue;
    size_t bin = (size_t)a->rank[k] * m + a->micro[k];
    seqs[cnt[bin]++] = k; /* item number for now */
  }
  /* cnt[i] is now the end of bin i; its start is cnt[i-1] (0 for i = 0). */
  double *bin_cost = malloc(nbins * sizeof *bin_cost);
  uint32_t *bin_width = malloc(nbins * sizeof *bin_width);
  double *keys = malloc((size_t)m * sizeof *keys);
  uint32_t *perm = malloc((size_t)m * sizeof *perm);
  uint32_t *tmp = malloc((size_t)m * sizeof *tmp);
  int rc = 0;
  if (bin_cost == NULL || bin_width == NULL || keys == NULL || perm == NULL || tmp == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  for (size_t i = 0; i < nbins; i++) {
    uint32_t s = i == 0 ? 0 : cnt[i - 1], e = cnt[i];
    double c = 0;
    uint64_t w = 0;
    for (uint32_t q = s; q < e; q++) {
      uint32_t k = seqs[q];
      c += ctx->cost[k];
      if (ctx->size[k] > w)
        w = ctx->size[k];
    }
    if (cfg->mode == PK_MODE_PADDED) {
      c = (double)(e - s) * pk_slot_cost(cfg, w);
      bin_width[i] = (uint32_t)w;
    } else {
      bin_width[i] = 0;
    }
    bin_cost[i] = c;
  }
  /* Step-cost lower bound for plans with m micro-batches per rank
   * (bounds.c; it includes the mean rank load and the costliest item),
   * told this plan's step when its columns stay aligned. */
  double plan_step = INFINITY;
  if (a->columns) {
    plan_step = 0;
    for (uint32_t j = 0; j < m; j++) {
      double mx = 0;
      for (uint32_t q = 0; q < dp; q++)
        mx = PK_MAX(mx, bin_cost[(size_t)q * m + j]);
      plan_step += mx;
    }
  }
  /* The bound and plan_step leave per_micro_batch out: every rank has m
   * non-empty micro-batches, so each of the m columns pays it once, on
   * every plan alike. */
  b->step_lb += pk_step_lower_bound(ctx, m, plan_step) + (double)m * cfg->micro;
  if (pk_stopped(ctx)) {
    rc = PK_ECANCELED;
    goto done;
  }

  size_t off = b->nrecs;
  for (uint32_t r = 0; r < dp; r++) {
    if (a->columns) {
      if (r == 0) {
        for (uint32_t j = 0; j < m; j++) {
          double mx = 0;
          for (uint32_t q = 0; q < dp; q++)
            mx = PK_MAX(mx, bin_cost[(size_t)q * m + j]);
          keys[j] = mx;
        }
        order_perm(cfg->order, keys, m, perm, tmp);
      }
    } else {
      for (uint32_t j = 0; j < m; j++)
        keys[j] = bin_cost[(size_t)r * m + j];
      order_perm(cfg->order, keys, m, perm, tmp);
    }
    for (uint32_t j = 0; j < m; j++) {
      size_t bin = (size_t)r * m + perm[j];
      uint32_t s = bin == 0 ? 0 : cnt[bin - 1];
      pk_rec_t *rec = &b->recs[off + (size_t)r * m + j];
      rec->seq_off = b->nseqs + s;
      rec->nseqs = cnt[bin] - s;
      rec->width = bin_width[bin];
      rec->base_cost = bin_cost[bin];
    }
  }
  /* Item numbers to sequence indices. */
  for (uint32_t q = 0; q < n; q++)
    seqs[q] = ctx->idx[seqs[q]];
  b->mini_off[b->nb] = off;
  b->mini_m[b->nb] = m;
  b->mini_lb[b->nb] = lb;
  b->nb++;
  b->nrecs += nbins;
  b->nseqs += n;
done:
  free(bin_cost);
  free(bin_width);
  free(keys);
  free(perm);
  free(tmp);
  return rc;
}

void pk_plan_free(pk_plan_t *plan) {
  if (plan == NULL)
    return;
  pk_storage_t *s = plan->storage_;
  if (s != NULL) {
    free(s->cells);
    free(s->micros);
    free(s->seqs);
    free(s->cu);
    free(s->cu_pad);
    free(s);
  }
  free(plan);
}

/* The packed total of a record before fixed_shape: aligned slots plus the
 * total_multiple padding of the last slot. */
static uint64_t packed_total(const pk_build_t *b, const pk_rec_t *rec) {
  const pk_cfg_t *cfg = b->cfg;
  if (cfg->mode == PK_MODE_PADDED)
    return (uint64_t)rec->nseqs * rec->width;
  uint64_t t = 0;
  for (uint32_t q = 0; q < rec->nseqs; q++)
    t += pk_item_size(cfg, b->req->lengths[b->seqs[rec->seq_off + q]]);
  return pk_round_up(t, cfg->total_multiple);
}

int pk_build_finish(pk_build_t *b, pk_plan_t **out, char *err, size_t errlen) {
  const pk_cfg_t *cfg = b->cfg;
  const pk_request_t *req = b->req;
  uint32_t dp = cfg->dp, nb = b->nb;
  size_t nrecs = b->nrecs, n = req->n;
  pk_plan_t *plan = calloc(1, sizeof *plan);
  pk_storage_t *st = calloc(1, sizeof *st);
  double *rank_cost = pk_calloc(dp, sizeof *rank_cost);
  double *loss_total = pk_calloc(nb, sizeof *loss_total);
  if (plan == NULL || st == NULL || rank_cost == NULL || loss_total == NULL)
    goto nomem;
  plan->storage_ = st;
  st->cells = pk_calloc((size_t)dp * nb, sizeof *st->cells);
  st->micros = pk_calloc(nrecs, sizeof *st->micros);
  st->seqs = pk_malloc_array(n, sizeof *st->seqs);
  st->cu = pk_malloc_array(n + nrecs, sizeof *st->cu);
  st->cu_pad = pk_malloc_array(n + nrecs, sizeof *st->cu_pad);
  if (st->cells == NULL || st->micros == NULL || st->seqs == NULL || st->cu == NULL ||
      st->cu_pad == NULL)
    goto nomem;
  plan->dp = dp;
  plan->mini_batches = nb;
  plan->cells = st->cells;

  /* Loss tokens per mini-batch, over all ranks. */
  for (uint32_t m = 0; m < nb; m++) {
    size_t first = b->mini_off[m], last = first + (size_t)dp * b->mini_m[m];
    for (size_t i = first; i < last; i++)
      for (uint32_t q = 0; q < b->recs[i].nseqs; q++) {
        uint32_t s = b->seqs[b->recs[i].seq_off + q];
        loss_total[m] += req->n_loss_tokens ? req->loss_tokens[s] : req->lengths[s];
      }
  }

  pk_stats_t *stats = &plan->stats;
  size_t mi = 0, so = 0, co = 0;
  uint32_t tick = 0;
  for (uint32_t r = 0; r < dp; r++) {
    /* fixed_shape: every micro-batch of the rank as long as its longest. */
    uint64_t shape = 0;
    if (cfg->fixed_shape && cfg->mode != PK_MODE_PADDED)
      for (uint32_t m = 0; m < nb; m++)
        for (uint32_t j = 0; j < b->mini_m[m]; j++)
          shape = PK_MAX(shape,
                         packed_total(b, &b->recs[b->mini_off[m] + (size_t)r * b->mini_m[m] + j]));
    for (uint32_t m = 0; m < nb; m++) {
      pk_cell_t *cell = &st->cells[(size_t)r * nb + m];
      cell->micros = &st->micros[mi];
      cell->nmicros = b->mini_m[m];
      for (uint32_t j = 0; j < b->mini_m[m]; j++) {
        const pk_rec_t *rec = &b->recs[b->mini_off[m] + (size_t)r * b->mini_m[m] + j];
        pk_micro_t *mb = &st->micros[mi++];
        uint32_t *seqs = &st->seqs[so];
        int32_t *cu = &st->cu[co], *cu_pad = &st->cu_pad[co];
        uint64_t t = 0, tp = 0, loss = 0, maxslot = 0;
        double cost = 0;
        cu[0] = 0;
        cu_pad[0] = 0;
        for (uint32_t q = 0; q < rec->nseqs; q++) {
          uint32_t s = b->seqs[rec->seq_off + q];
          uint32_t len = req->lengths[s];
          uint64_t slot = cfg->mode == PK_MODE_PADDED ? rec->width : pk_item_size(cfg, len);
          seqs[q] = s;
          t += len;
          tp += slot;
          loss += req->n_loss_tokens ? req->loss_tokens[s] : len;
          cu[q + 1] = (int32_t)t;
          cu_pad[q + 1] = (int32_t)tp;
        }
        /* total_multiple and fixed_shape pad the last slot. */
        if (cfg->mode != PK_MODE_PADDED && rec->nseqs > 0) {
          uint64_t target = PK_MAX(pk_round_up(tp, cfg->total_multiple), shape);
          tp = target;
          cu_pad[rec->nseqs] = (int32_t)tp;
        }
        /* Without a cap (max_tokens 0) nothing else bounds a micro-batch:
         * refuse it before anything reads its int32 offsets back (t <= tp, and
         * every offset is at most tp, so all of them are exact below). */
        if (tp > (uint64_t)INT32_MAX) {
          pk_plan_free(plan);
          free(rank_cost);
          free(loss_total);
          return pk_fail(err, errlen, PK_EPRECOND,
                         "batching.max_tokens: a micro-batch of %llu packed tokens does not fit "
                         "int32 cu_seqlens; set a token cap",
                         (unsigned long long)tp);
        }
        /* A micro-batch's cost: per_micro_batch plus its slots' costs. */
        cost = cfg->micro;
        for (uint32_t q = 0; q < rec->nseqs; q++) {
          uint64_t slot = (uint64_t)(cu_pad[q + 1] - cu_pad[q]);
          maxslot = PK_MAX(maxslot, slot);
          cost += pk_slot_cost(cfg, slot);
        }
        mb->seqs = seqs;
        mb->cu_seqlens = cu;
        mb->cu_seqlens_padded = cu_pad;
        mb->nseqs = rec->nseqs;
        mb->max_seqlen = (uint32_t)maxslot;
        mb->padded_width = cfg->mode == PK_MODE_PADDED ? rec->width : 0;
        mb->tokens = t;
        mb->padded_tokens = tp;
        mb->cost = cost;
        mb->loss_scale = loss_total[m] > 0 ? (double)loss / loss_total[m] : 0.0;
        so += rec->nseqs;
        co += (size_t)rec->nseqs + 1;
        /* A poll per 64 micro-batches (a few thousand sequences). */
        if ((++tick % 64u) == 0 && pk_limits_stopped(b->limits)) {
          pk_plan_free(plan);
          free(rank_cost);
          free(loss_total);
          return pk_fail(err, errlen, PK_ECANCELED,
                         "planning stopped by the caller while laying out the plan");
        }

        rank_cost[r] += cost;
        stats->tokens += t;
        stats->padded_tokens += tp;
        stats->total_cost += cost;
        uint64_t per_cp = tp / cfg->cp;
        stats->max_micro_tokens = PK_MAX(stats->max_micro_tokens, per_cp);
        if ((req->batching.max_tokens != 0 && per_cp > req->batching.max_tokens) ||
            rec->nseqs > cfg->max_seqs)
          stats->cap_violations++;
      }
    }
  }

  /* Step cost: for every mini-batch and micro-batch slot, the costliest rank. */
  for (uint32_t m = 0; m < nb; m++) {
    for (uint32_t j = 0; j < b->mini_m[m]; j++) {
      double mx = 0;
      for (uint32_t r = 0; r < dp; r++)
        mx = PK_MAX(mx, pk_plan_cell(plan, r, m)->micros[j].cost);
      stats->step_cost += mx;
    }
    stats->micro_batches_per_rank += b->mini_m[m];
    stats->micro_batches_lower_bound += b->mini_lb[m];
  }
  for (size_t s = 0; s < n; s++)
    if (req->lengths[s] == 0)
      stats->zero_length++;
  double mean = stats->total_cost / dp, mx = 0;
  for (uint32_t r = 0; r < dp; r++)
    mx = PK_MAX(mx, rank_cost[r]);
  stats->sequences = (uint32_t)n;
  stats->mini_batches = nb;
  stats->plan_micros = (uint32_t)nrecs;
  stats->alignment = cfg->align;
  stats->pad_fraction = stats->padded_tokens
                            ? (double)(stats->padded_tokens - stats->tokens) / stats->padded_tokens
                            : 0.0;
  stats->step_cost_lower_bound = b->step_lb;
  stats->lockstep_efficiency = stats->step_cost > 0 ? mean / stats->step_cost : 1.0;
  stats->lockstep_efficiency_bound = b->step_lb > 0 ? PK_MIN(1.0, mean / b->step_lb) : 1.0;
  stats->dp_imbalance = mean > 0 ? mx / mean : 1.0;
  free(rank_cost);
  free(loss_total);
  *out = plan;
  return 0;
nomem:
  free(rank_cost);
  free(loss_total);
  pk_plan_free(plan);
  if (plan == NULL)
    free(st);
  return pk_fail(err, errlen, PK_ENOMEM, "plan of %zu micro-batches: out of memory", nrecs);
}
