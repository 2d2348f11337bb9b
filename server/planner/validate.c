/* Request validation: every field checked, defaults applied, and the
 * effective configuration computed (alignment A, token cap, micro-batch
 * group). Messages name the field and the value.
 *
 * Error classes: a field with a bad value on its own is PK_EINVAL; valid
 * fields that cannot be met together (a sequence that cannot fit alone, too
 * few sequences, num_heads vs CP*TP) are PK_EPRECOND; a request too large to
 * plan is PK_ENOMEM. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "pk_internal.h"

/* Request limits, all in one place. Every product and sum of request
 * fields is computed in 64 bits and checked against these before it is
 * stored in a 32-bit field or used as a divisor. */
/* Sequences per request: indices and counts fit uint32 with room to spare. */
#define PK_MAX_SEQUENCES (1u << 25) /* 33,554,432 sequences */
/* Tokens per sequence: an aligned slot (+ at most one alignment unit) stays
 * below INT32_MAX, the type of cu_seqlens. */
#define PK_MAX_LENGTH ((uint32_t)INT32_MAX / 2) /* 1,073,741,823 tokens */
/* DP ranks: dp x micro-batch counts stay far below 2^64, and a plan of
 * more ranks than 2^20 would not fit any message anyway. */
#define PK_MAX_PARALLEL (1u << 20) /* ranks */
/* Each of tp, cp, pp, vpp, microbatch_group, round, align and pad_multiple. */
#define PK_MAX_DEGREE 65536u /* ranks or tokens */
/* The alignment A = lcm(2*CP*TP or CP*TP or TP, pad_multiple) and the PADDED
 * row multiple lcm(round, A), in tokens: a slot is a length rounded up to
 * it, so length + multiple stays below INT32_MAX. */
#define PK_MAX_ALIGN 65536u            /* tokens */
#define PK_MAX_ROW_MULTIPLE (1u << 20) /* tokens */
/* total_multiple and lcm(total_multiple, A), in tokens: the padding of one
 * micro-batch; 1 Mi tokens is beyond any real pad and keeps it in 32 bits. */
#define PK_MAX_TOTAL_MULTIPLE (1u << 20) /* tokens */
/* max_tokens x CP, in tokens: the cap on a micro-batch summed over CP ranks,
 * which is cu_seqlens_padded's last entry, an int32. */
#define PK_MAX_CAP ((uint64_t)INT32_MAX) /* tokens */
/* Each cost coefficient, in cost units per token^k: the sum of the costs of
 * 2^25 slots of < 2^31 tokens, (1 + 2^31 + 2^62) x 2^25 x 1e200 ~ 1e227,
 * stays finite with 80 orders of magnitude to spare. */
#define PK_MAX_COST_COEFFICIENT 1e200
/* The smallest nonzero cost coefficient: below it costs are denormal, sums
 * lose all precision and the PADDED search for an equal target cost never
 * closes its interval. */
#define PK_MIN_COST_COEFFICIENT 1e-200

uint64_t pk_item_size(const pk_cfg_t *cfg, uint32_t len) {
  if (cfg->mode == PK_MODE_PADDED)
    return pk_round_up(len, pk_lcm(cfg->round, cfg->align));
  return pk_round_up(len, cfg->align);
}

static int check_degree(const char *field, uint32_t v, uint32_t *out, char *err, size_t errlen) {
  if (v > PK_MAX_DEGREE)
    return pk_fail(err, errlen, PK_EINVAL, "%s: %" PRIu32 " is above the limit %u", field, v,
                   PK_MAX_DEGREE);
  *out = v == 0 ? 1 : v;
  return 0;
}

static int check_enum(const char *field, uint32_t v, uint32_t count, const char *(*name)(uint32_t),
                      char *err, size_t errlen) {
  if (v < count)
    return 0;
  char names[160];
  size_t off = 0;
  for (uint32_t i = 0; i < count && off < sizeof names; i++)
    off += (size_t)snprintf(names + off, sizeof names - off, "%s%u=%s", i ? ", " : "", i, name(i));
  return pk_fail(err, errlen, PK_EINVAL, "%s: %" PRIu32 " is not a known value (%s)", field, v,
                 names);
}

static int check_coefficient(const char *field, double v, char *err, size_t errlen) {
  /* !(v <= max) also catches NaN. */
  if (!isfinite(v) || v < 0 || !(v <= PK_MAX_COST_COEFFICIENT) ||
      (v != 0 && v < PK_MIN_COST_COEFFICIENT))
    return pk_fail(err, errlen, PK_EINVAL, "%s: %g (must be 0 or finite within [%g, %g])", field, v,
                   PK_MIN_COST_COEFFICIENT, PK_MAX_COST_COEFFICIENT);
  return 0;
}

static int check_cost(const pk_cost_model_t *c, pk_cfg_t *cfg, char *err, size_t errlen) {
  int rc;
  if ((rc = check_coefficient("cost.linear", c->linear, err, errlen)) != 0 ||
      (rc = check_coefficient("cost.quadratic", c->quadratic, err, errlen)) != 0 ||
      (rc = check_coefficient("cost.per_sequence", c->per_sequence, err, errlen)) != 0 ||
      (rc = check_coefficient("cost.per_micro_batch", c->per_micro_batch, err, errlen)) != 0)
    return rc;
  /* The default of linear and quadratic does not depend on the other two:
   * proto3 cannot tell an unset field from 0. */
  cfg->seq = c->per_sequence;
  cfg->micro = c->per_micro_batch;
  if (c->linear == 0 && c->quadratic == 0) {
    cfg->lin = 1.0;
    cfg->quad = 1.0 / 24576.0;
  } else {
    cfg->lin = c->linear;
    cfg->quad = c->quadratic;
  }
  return 0;
}

/* The default alignment, and the smallest one correctness needs
 * (the zigzag split needs 2*CP equal chunks, Ulysses CP equal shards, and
 * sequence parallelism TP). */
static void base_alignment(const pk_cfg_t *cfg, bool sp, uint64_t *def, uint64_t *need) {
  /* 64 bits: 2 x CP x TP reaches 2^33 under PK_MAX_DEGREE. */
  uint64_t tp_part = sp ? cfg->tp : 1;
  if (cfg->cp > 1 && cfg->cp_algo == PK_CP_ZIGZAG) {
    *def = 2 * (uint64_t)cfg->cp * cfg->tp;
    *need = 2 * (uint64_t)cfg->cp * tp_part;
  } else if (cfg->cp > 1) {
    *def = (uint64_t)cfg->cp * cfg->tp;
    *need = (uint64_t)cfg->cp * tp_part;
  } else {
    *def = sp ? cfg->tp : 1;
    *need = tp_part;
  }
}

int pk_validate(const pk_request_t *req, pk_cfg_t *cfg, char *err, size_t errlen) {
  int rc;
  if (req == NULL || cfg == NULL)
    return pk_fail(err, errlen, PK_EINVAL, "request: missing");
  *cfg = (pk_cfg_t){0};

  /* Sequences. */
  if (req->n == 0 || req->lengths == NULL)
    return pk_fail(err, errlen, PK_EINVAL, "lengths: empty (at least one sequence is required)");
  if (req->n > PK_MAX_SEQUENCES)
    return pk_fail(err, errlen, PK_ENOMEM, "lengths: %zu sequences exceed the limit of %u", req->n,
                   PK_MAX_SEQUENCES);
  if (req->n_loss_tokens != 0 && (req->n_loss_tokens != req->n || req->loss_tokens == NULL))
    return pk_fail(err, errlen, PK_EINVAL,
                   "loss_tokens: %zu entries for %zu lengths (must be empty or the same size)",
                   req->n_loss_tokens, req->n);
  if (req->n_groups != 0 && (req->n_groups != req->n || req->groups == NULL))
    return pk_fail(err, errlen, PK_EINVAL,
                   "groups: %zu entries for %zu lengths (must be empty or the same size)",
                   req->n_groups, req->n);
  for (size_t i = 0; i < req->n; i++) {
    if (req->lengths[i] > PK_MAX_LENGTH)
      return pk_fail(err, errlen, PK_EINVAL,
                     "lengths[%zu]: %" PRIu32 " is above the limit %" PRIu32, i, req->lengths[i],
                     PK_MAX_LENGTH);
    if (req->n_loss_tokens != 0 && req->loss_tokens[i] > req->lengths[i])
      return pk_fail(err, errlen, PK_EINVAL,
                     "loss_tokens[%zu]: %" PRIu32 " is more than lengths[%zu] = %" PRIu32, i,
                     req->loss_tokens[i], i, req->lengths[i]);
  }

  /* Parallel layout. */
  const pk_parallel_t *p = &req->parallel;
  if (p->dp == 0)
    return pk_fail(err, errlen, PK_EINVAL, "parallel.dp: 0 (must be >= 1)");
  if (p->dp > PK_MAX_PARALLEL)
    return pk_fail(err, errlen, PK_EINVAL, "parallel.dp: %" PRIu32 " is above the limit %u", p->dp,
                   PK_MAX_PARALLEL);
  cfg->dp = p->dp;
  if ((rc = check_degree("parallel.tp", p->tp, &cfg->tp, err, errlen)) != 0 ||
      (rc = check_degree("parallel.cp", p->cp, &cfg->cp, err, errlen)) != 0 ||
      (rc = check_degree("parallel.pp", p->pp, &cfg->pp, err, errlen)) != 0 ||
      (rc = check_degree("parallel.vpp", p->vpp, &cfg->vpp, err, errlen)) != 0)
    return rc;
  if ((rc = check_enum("parallel.cp_algo", p->cp_algo, 2, pk_cp_algo_name, err, errlen)) != 0)
    return rc;
  cfg->cp_algo = p->cp_algo;
  uint64_t cp_tp = (uint64_t)cfg->cp * cfg->tp; /* Up to 2^32: 64 bits. */
  if (p->cp_algo == PK_CP_ULYSSES && p->num_heads != 0 && cp_tp > 1 && p->num_heads % cp_tp != 0)
    return pk_fail(err, errlen, PK_EPRECOND,
                   "parallel.num_heads: %" PRIu32 " is not divisible by cp*tp = %" PRIu64
                   " (Ulysses splits attention heads over CP and TP ranks)",
                   p->num_heads, cp_tp);
  if (p->microbatch_group > PK_MAX_DEGREE)
    return pk_fail(err, errlen, PK_EINVAL,
                   "parallel.microbatch_group: %" PRIu32 " is above the limit %u",
                   p->microbatch_group, PK_MAX_DEGREE);
  cfg->group = p->microbatch_group != 0 ? p->microbatch_group : (cfg->vpp > 1 ? cfg->pp : 1);

  /* Batching. */
  const pk_batching_t *b = &req->batching;
  if ((rc = check_enum("batching.dp_balance", b->dp_balance, PK_DP_BALANCE_COUNT,
                       pk_dp_balance_name, err, errlen)) != 0 ||
      (rc = check_enum("batching.mode", b->mode, PK_MODE_COUNT, pk_mode_name, err, errlen)) != 0 ||
      (rc = check_enum("batching.micro_algo", b->micro_algo, PK_MICRO_ALGO_COUNT,
                       pk_micro_algo_name, err, errlen)) != 0 ||
      (rc = check_enum("batching.order", b->order, PK_ORDER_COUNT, pk_order_name, err, errlen)) !=
          0)
    return rc;
  cfg->dp_balance = b->dp_balance;
  cfg->mode = b->mode;
  cfg->micro_algo = b->micro_algo;
  cfg->order = b->order;
  cfg->equal_count = b->equal_count;
  cfg->shuffle = b->shuffle;
  cfg->keep_groups = b->keep_groups;
  cfg->groups_on_rank = b->groups_on_rank;
  /* SHARED_CUTS cuts the one boundary list of the sorted stride over PADDED
   * rows (compat_roll_cuts.c): dp_balance AUTO means that stride; any other
   * balance, any other mode and whole groups per rank are refused. */
  if (b->micro_algo == PK_MICRO_SHARED_CUTS) {
    if (b->dp_balance != PK_DP_AUTO && b->dp_balance != PK_DP_SORTED_STRIDE)
      return pk_fail(err, errlen, PK_EINVAL,
                     "batching.dp_balance: %s (batching.micro_algo shared_cuts cuts the sorted "
                     "stride: use sorted_stride or auto)",
                     pk_dp_balance_name(b->dp_balance));
    if (b->mode != PK_MODE_PADDED)
      return pk_fail(err, errlen, PK_EINVAL,
                     "batching.mode: %s (batching.micro_algo shared_cuts needs padded)",
                     pk_mode_name(b->mode));
    if (b->groups_on_rank)
      return pk_fail(err, errlen, PK_EINVAL,
                     "batching.groups_on_rank: set with batching.micro_algo shared_cuts (the "
                     "sorted stride deals sequences, not whole groups)");
    cfg->dp_balance = PK_DP_SORTED_STRIDE;
  }
  cfg->mini_batches = b->mini_batches == 0 ? 1 : b->mini_batches;
  if (cfg->mini_batches > req->n)
    return pk_fail(err, errlen, PK_EPRECOND,
                   "batching.mini_batches: %" PRIu32 " is more than the %zu sequences",
                   cfg->mini_batches, req->n);
  if (b->keep_groups && req->n_groups == 0)
    return pk_fail(err, errlen, PK_EINVAL,
                   "batching.keep_groups: set, but groups is empty (one group id per sequence is "
                   "needed)");
  /* groups_on_rank: the distinct-id counts against dp and mini_batches
   * are checked where the groups are sorted (planner.c). */
  if (b->groups_on_rank && req->n_groups == 0)
    return pk_fail(err, errlen, PK_EINVAL,
                   "batching.groups_on_rank: set, but groups is empty (one group id per sequence "
                   "is needed)");
  if (b->groups_on_rank && b->mode == PK_MODE_FIXED)
    return pk_fail(err, errlen, PK_EINVAL,
                   "batching.groups_on_rank: not available with batching.mode FIXED (its "
                   "micro-batches hold micro_batch_size sequences, not whole groups); use PACKED "
                   "or PADDED");
  if (b->groups_on_rank && b->dp_balance != PK_DP_AUTO)
    return pk_fail(err, errlen, PK_EINVAL,
                   "batching.groups_on_rank: set with batching.dp_balance %s (groups_on_rank "
                   "balances whole groups itself; leave dp_balance AUTO)",
                   pk_dp_balance_name(b->dp_balance));
  if (b->max_tokens > PK_MAX_CAP)
    return pk_fail(err, errlen, PK_EINVAL,
                   "batching.max_tokens: %" PRIu64 " is above the int32 limit of cu_seqlens",
                   b->max_tokens);
  /* max_tokens <= 2^31 and cp <= 2^16: the product fits 64 bits. */
  if (b->max_tokens * cfg->cp > PK_MAX_CAP)
    return pk_fail(err, errlen, PK_EINVAL,
                   "batching.max_tokens: %" PRIu64 " x parallel.cp %" PRIu32 " = %" PRIu64
                   " tokens per micro-batch is above the int32 limit %" PRIu64
                   " of cu_seqlens_padded",
                   b->max_tokens, cfg->cp, b->max_tokens * cfg->cp, PK_MAX_CAP);
  cfg->max_seqs = b->max_seqs == 0 ? UINT32_MAX : b->max_seqs;
  cfg->min_micro = b->min_micro_batches == 0 ? 1 : b->min_micro_batches;
  if (b->min_micro_batches > req->n)
    return pk_fail(err, errlen, PK_EPRECOND,
                   "batching.min_micro_batches: %" PRIu32 " is more than the %zu sequences",
                   b->min_micro_batches, req->n);
  if (b->round > PK_MAX_DEGREE)
    return pk_fail(err, errlen, PK_EINVAL, "batching.round: %" PRIu32 " is above the limit %u",
                   b->round, PK_MAX_DEGREE);
  cfg->round = b->round == 0 ? 1 : b->round;
  if (b->mode == PK_MODE_FIXED && b->micro_batch_size == 0)
    return pk_fail(err, errlen, PK_EINVAL,
                   "batching.micro_batch_size: 0 (required, >= 1, with mode FIXED)");
  if (b->mode != PK_MODE_FIXED && b->micro_batch_size != 0)
    return pk_fail(err, errlen, PK_EINVAL,
                   "batching.micro_batch_size: %" PRIu32
                   " is only used with mode FIXED (mode is %s)",
                   b->micro_batch_size, pk_mode_name(b->mode));
  cfg->micro_batch_size = b->micro_batch_size;

  if ((rc = check_cost(&req->cost, cfg, err, errlen)) != 0)
    return rc;

  /* Layout. */
  const pk_layout_opts_t *l = &req->layout;
  uint64_t def, need;
  base_alignment(cfg, p->sequence_parallel, &def, &need);
  if (l->align > PK_MAX_DEGREE)
    return pk_fail(err, errlen, PK_EINVAL, "layout.align: %" PRIu32 " is above the limit %u",
                   l->align, PK_MAX_DEGREE);
  if (l->align != 0 && l->align % need != 0)
    return pk_fail(err, errlen, PK_EPRECOND,
                   "layout.align: %" PRIu32 " is not a multiple of %" PRIu64
                   " (required by cp=%" PRIu32 ", cp_algo=%s, tp=%" PRIu32
                   ", sequence_parallel=%s)",
                   l->align, need, cfg->cp, pk_cp_algo_name(cfg->cp_algo), cfg->tp,
                   p->sequence_parallel ? "true" : "false");
  if (l->align == 0 && def > PK_MAX_ALIGN)
    return pk_fail(err, errlen, PK_EINVAL,
                   "parallel.cp: %" PRIu32 " x parallel.tp %" PRIu32 " (cp_algo=%s, "
                   "sequence_parallel=%s) gives an alignment of %" PRIu64
                   " tokens, above the limit %u",
                   cfg->cp, cfg->tp, pk_cp_algo_name(cfg->cp_algo),
                   p->sequence_parallel ? "true" : "false", def, PK_MAX_ALIGN);
  if (l->pad_multiple > PK_MAX_DEGREE)
    return pk_fail(err, errlen, PK_EINVAL, "layout.pad_multiple: %" PRIu32 " is above the limit %u",
                   l->pad_multiple, PK_MAX_DEGREE);
  if (l->total_multiple > PK_MAX_TOTAL_MULTIPLE)
    return pk_fail(err, errlen, PK_EINVAL,
                   "layout.total_multiple: %" PRIu32 " is above the limit %u", l->total_multiple,
                   PK_MAX_TOTAL_MULTIPLE);
  /* Both <= PK_MAX_DEGREE, so the lcm is below 2^32. */
  uint64_t a = pk_lcm(l->align != 0 ? l->align : def, l->pad_multiple == 0 ? 1 : l->pad_multiple);
  if (a == 0 || a > PK_MAX_ALIGN)
    return pk_fail(err, errlen, PK_EINVAL,
                   "layout.pad_multiple: %" PRIu32 " gives an alignment of %" PRIu64
                   " (above the limit %u)",
                   l->pad_multiple, a, PK_MAX_ALIGN);
  cfg->align = (uint32_t)a;
  uint64_t row = pk_lcm(cfg->round, a);
  if (b->mode == PK_MODE_PADDED && row > PK_MAX_ROW_MULTIPLE)
    return pk_fail(err, errlen, PK_EINVAL,
                   "batching.round: %" PRIu32 " with alignment %" PRIu64
                   " gives a row multiple of %" PRIu64 " tokens, above the limit %u",
                   cfg->round, a, row, PK_MAX_ROW_MULTIPLE);
  uint64_t tm = pk_lcm(l->total_multiple == 0 ? 1 : l->total_multiple, a);
  if (tm > PK_MAX_TOTAL_MULTIPLE)
    return pk_fail(err, errlen, PK_EINVAL,
                   "layout.total_multiple: %" PRIu32 " with alignment %" PRIu64
                   " gives a multiple of %" PRIu64 " tokens, above the limit %u",
                   l->total_multiple, a, tm, PK_MAX_TOTAL_MULTIPLE);
  cfg->total_multiple = (uint32_t)tm;
  cfg->fixed_shape = l->fixed_shape;
  cfg->seed = req->seed;
  if (b->mode == PK_MODE_PADDED && (l->fixed_shape || l->total_multiple > 1))
    return pk_fail(err, errlen, PK_EINVAL,
                   "layout.%s: only for packed layouts (mode PACKED or FIXED), mode is PADDED",
                   l->fixed_shape ? "fixed_shape" : "total_multiple");

  /* The cap, summed over CP ranks, and sequences that cannot fit alone. */
  cfg->cap = b->max_tokens == 0 ? UINT64_MAX : b->max_tokens * cfg->cp;
  /* The packed total is rounded up to total_multiple after packing, so pack
   * under the largest multiple of it that the cap allows. */
  if (cfg->cap != UINT64_MAX && cfg->total_multiple > 1) {
    cfg->cap = cfg->cap / cfg->total_multiple * cfg->total_multiple;
    if (cfg->cap == 0)
      return pk_fail(err, errlen, PK_EPRECOND,
                     "layout.total_multiple: %" PRIu32 " (with alignment %" PRIu32
                     ") is larger than batching.max_tokens %" PRIu64 " x cp %" PRIu32,
                     l->total_multiple, cfg->align, b->max_tokens, cfg->cp);
  }
  if (b->max_tokens != 0) {
    for (size_t i = 0; i < req->n; i++) {
      uint64_t s = pk_item_size(cfg, req->lengths[i]);
      if (s <= cfg->cap)
        continue;
      /* PADDED rounds a row to lcm(round, alignment): the message names the
       * round, which is what a user set, not only the alignment. */
      if (cfg->mode == PK_MODE_PADDED && cfg->round > 1)
        return pk_fail(err, errlen, PK_EPRECOND,
                       "lengths[%zu]: %" PRIu32 " tokens (a row of %" PRIu64
                       " after rounding up to batching.round %" PRIu32 " with alignment %" PRIu32
                       ") cannot fit alone under batching.max_tokens %" PRIu64
                       " per CP rank x cp %" PRIu32 " (usable %" PRIu64 ")",
                       i, req->lengths[i], s, cfg->round, cfg->align, b->max_tokens, cfg->cp,
                       cfg->cap);
      return pk_fail(err, errlen, PK_EPRECOND,
                     "lengths[%zu]: %" PRIu32 " tokens (%" PRIu64 " after alignment to %" PRIu64
                     ") cannot fit alone under batching.max_tokens %" PRIu64
                     " per CP rank x cp %" PRIu32 " (usable %" PRIu64 ")",
                     i, req->lengths[i], s,
                     cfg->mode == PK_MODE_PADDED ? pk_lcm(cfg->round, cfg->align)
                                                 : (uint64_t)cfg->align,
                     b->max_tokens, cfg->cp, cfg->cap);
    }
  }
  return 0;
}
