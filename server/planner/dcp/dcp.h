/* Internal interfaces of the dynamic context-parallel planner (pk_dcp.h).
 *
 * Pipeline (plan.c): validate (validate.c: the effective configuration and
 * the table of allowed group sizes) -> per sequence, the smallest size it
 * fits alone (validate.c; costs at any size on demand) -> an assignment of
 * sequences to groups and of groups to slots -> the plan and its bounds
 * (plan.c, cost.c). AUTO (auto.c) keeps the cheapest of its candidates:
 * packd's fixed-CP AUTO at one size, shelf plans (shelf.c), class plans
 * (auto.c, slots.c) and Megatron-Core's balanced scheduler (megatron.c),
 * each with idle GPUs given work (slots.c) and groups split into halves
 * (split.c); the winner is levelled (level.c) and set beside Megatron-Core's
 * packing-aware scheduler (packaware.c), levelled where it wins. Sorts:
 * order.c. Tunables: knobs.h. */
#ifndef PK_DCP_INTERNAL_H
#define PK_DCP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pk_dcp.h"
#include "pk_internal.h"

/* Limits validation enforces, so that every product below fits 64 bits. */
#define DCP_MAX_POOL 65536u
#define DCP_MAX_TP 1024u
#define DCP_MAX_TOKENS (1ull << 40)
/* The most (slot, GPU) pairs a plan may have: its gpu_group array and the
 * answer (an entry per GPU and slot) grow with them; 2^26 are 256 MiB of
 * the array alone. A plan past it is refused (PK_ELIMIT) instead of built. */
#define DCP_MAX_GPU_SLOTS (1ull << 26)

/* The effective, validated configuration. */
typedef struct dcp_cfg {
  uint32_t pool;
  uint32_t tp;
  uint32_t cp_algo;
  bool sp;
  uint32_t sizes; /* pk_dcp_sizes_t. */
  uint32_t algo;
  uint64_t cap;      /* Per GPU and slot. */
  uint32_t max_seqs; /* Per group; UINT32_MAX when none. */
  /* The cost's linear, quadratic, per_sequence and per_micro_batch terms in
   * the planner's own configuration, so that pk_token_cost prices a
   * group's stream exactly as it prices a micro-batch. */
  pk_cfg_t base;
  double cp_token, cp_group;
  /* The allowed group sizes, ascending, nsize of them. */
  uint32_t *size;
  uint32_t nsize;
} dcp_cfg_t;

/* Validates a request and fills cfg (cfg->size allocated; free it with
 * dcp_cfg_free). PK_EINVAL / PK_ENOMEM with a message naming the field. */
int dcp_validate(const pk_dcp_request_t *req, dcp_cfg_t *cfg, char *err, size_t errlen);
void dcp_cfg_free(dcp_cfg_t *cfg);

/* The alignment of a group of c GPUs: 2 c tp (zigzag, c > 1), c tp
 * (Ulysses, c > 1), tp with sequence parallelism at c = 1, else 1. */
static inline uint64_t dcp_align(const dcp_cfg_t *cfg, uint32_t c) {
  if (c == 1)
    return cfg->sp ? cfg->tp : 1;
  return (uint64_t)c * cfg->tp * (cfg->cp_algo == PK_CP_ZIGZAG ? 2u : 1u);
}

/* Every cost below starts here, so the usual power-of-two alignment rounds
 * with a mask instead of a division. */
static inline uint64_t dcp_aligned(const dcp_cfg_t *cfg, uint32_t c, uint32_t len) {
  uint64_t a = dcp_align(cfg, c);
  if ((a & (a - 1)) == 0)
    return ((uint64_t)len + a - 1) & ~(a - 1);
  return pk_round_up(len, a);
}

/* A sequence's cost per GPU in a group of c GPUs (without the group's own
 * per_micro_batch and cp_group terms). */
static inline double dcp_seq_cost(const dcp_cfg_t *cfg, uint32_t c, uint64_t aligned) {
  double a = (double)aligned;
  return cfg->base.seq + pk_token_cost(&cfg->base, aligned) / c +
         cfg->cp_token * a * (double)(c - 1) / c;
}

/* The group's own terms: per_micro_batch plus cp_group (c - 1). */
static inline double dcp_group_base(const dcp_cfg_t *cfg, uint32_t c) {
  return cfg->base.micro + cfg->cp_group * (double)(c - 1);
}

/* Per sequence facts: kmin[i] is the smallest size index at which sequence
 * i fits a group alone (aligned length within c x cap). Costs at other
 * sizes are computed on demand (a few operations), never tabulated: with
 * any-size groups the table would be n x pool. */
typedef struct dcp_items {
  uint32_t n;
  const uint32_t *len;
  uint32_t *kmin;
} dcp_items_t;

/* Fills items; PK_EPRECOND naming the first sequence that fits in no
 * allowed group. */
int dcp_items_init(const dcp_cfg_t *cfg, const uint32_t *len, uint32_t n, dcp_items_t *it,
                   char *err, size_t errlen);
void dcp_items_free(dcp_items_t *it);

static inline uint64_t dcp_item_aligned(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t i,
                                        uint32_t k) {
  return dcp_aligned(cfg, cfg->size[k], it->len[i]);
}
static inline double dcp_item_cost(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t i,
                                   uint32_t k) {
  return dcp_seq_cost(cfg, cfg->size[k], dcp_item_aligned(cfg, it, i, k));
}
/* Whether sequence i may join a group of size index k that already holds
 * `sum` aligned tokens and `count` sequences. */
static inline bool dcp_item_fits(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t i,
                                 uint32_t k, uint64_t sum, uint32_t count) {
  return k >= it->kmin[i] && count < cfg->max_seqs &&
         sum + dcp_item_aligned(cfg, it, i, k) <= (uint64_t)cfg->size[k] * cfg->cap;
}

/* The bounds (cost.c): the fewest slots any plan needs, and the least step
 * of any plan (pool work at each sequence's cheapest size over the pool
 * plus the slots' per_micro_batch; the costliest sequence alone in its
 * cheapest group). */
uint32_t dcp_slots_lower_bound(const dcp_cfg_t *cfg, const dcp_items_t *it);
double dcp_step_lower_bound(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t slots);

/* An assignment: every sequence's group, every group's size index, slot and
 * first GPU. Groups are numbered 0 .. ngroups - 1 in any order; build.c
 * sorts them. */
typedef struct dcp_assign {
  uint32_t *seq_group; /* n */
  uint32_t ngroups, cap_groups;
  uint32_t *gk;    /* Size index. */
  uint32_t *slot;  /* Slot. */
  uint32_t *first; /* First GPU. */
  uint32_t slots;
} dcp_assign_t;

int dcp_assign_init(dcp_assign_t *a, uint32_t n, uint32_t cap_groups);
/* Adds a group, growing the arrays; returns its number or UINT32_MAX when
 * out of memory. */
uint32_t dcp_assign_add(dcp_assign_t *a, uint32_t k, uint32_t slot, uint32_t first);
void dcp_assign_free(dcp_assign_t *a);

/* The algorithms. Both return 0, PK_ENOMEM, PK_ECANCELED, or PK_EPRECOND
 * with a message. */
int dcp_auto(const dcp_cfg_t *cfg, const dcp_items_t *it, const pk_limits_t *limits,
             dcp_assign_t *out, char *err, size_t errlen);
int dcp_megatron(const dcp_cfg_t *cfg, const dcp_items_t *it, const pk_limits_t *limits,
                 dcp_assign_t *out, char *err, size_t errlen);
int dcp_megatron_packing(const dcp_cfg_t *cfg, const dcp_items_t *it, const pk_limits_t *limits,
                         dcp_assign_t *out, char *err, size_t errlen);
/* The signature the reproductions share (AUTO takes each as a candidate). */
typedef int (*dcp_algo_fn)(const dcp_cfg_t *cfg, const dcp_items_t *it, const pk_limits_t *limits,
                           dcp_assign_t *out, char *err, size_t errlen);

/* out[0 .. n): 0 .. n - 1 by key descending, ties by index (order.c;
 * scratch: 2 n entries). Keys finite. */
typedef struct dcp_rank {
  uint64_t key;
  uint32_t idx;
} dcp_rank_t;
void dcp_order_desc(const double *key, uint32_t n, uint32_t *out, dcp_rank_t *scratch);

/* A sort key: major ascending, then minor descending, then idx ascending
 * (order.c). dcp_sort_keys sorts a[0 .. n) (tmp: n scratch entries) with
 * the comparisons inline, for the many short sorts of one plan. */
typedef struct dcp_key {
  uint32_t major, idx;
  double minor;
} dcp_key_t;
void dcp_sort_keys(dcp_key_t *a, dcp_key_t *tmp, uint32_t n);

/* The size index of group size c, or UINT32_MAX when c is not allowed. */
uint32_t dcp_size_index(const dcp_cfg_t *cfg, uint32_t c);

/* Whether a group of size index k may start at GPU `first`. */
static inline bool dcp_start_ok(const dcp_cfg_t *cfg, uint32_t k, uint32_t first) {
  uint32_t c = cfg->size[k];
  if (first + c > cfg->pool)
    return false;
  if (cfg->sizes == PK_DCP_SIZES_ANY)
    return true;
  return c == cfg->pool ? first == 0 : first % c == 0;
}

/* Builds the plan from an assignment (build.c). */
int dcp_build(const pk_dcp_request_t *req, const dcp_cfg_t *cfg, const dcp_items_t *it,
              const dcp_assign_t *a, pk_dcp_plan_t **out, char *err, size_t errlen);

#endif
