/* Dynamic context parallelism: the planner gives every packed micro-batch
 * its own context-parallel group sizes. The dp x cp GPUs of a layout form
 * one pool, numbered in Megatron-Core's dp-cp order (the rank in the
 * data-parallel group with context parallelism). A plan is a count of
 * slots (micro-batches, the same on every GPU); in each slot the pool is
 * cut into groups of consecutive GPUs, and a group of c GPUs trains its
 * sequences as one packed stream split c ways (c = 1: plain data
 * parallelism for those sequences).
 *
 * Rules every plan obeys (tests/unit/planner/dcp_check.h checks them):
 * - every sequence is in exactly one group;
 * - every GPU of every slot is in at most one group, and in exactly one
 *   unless the plan reports idle GPUs (stats.idle_gpu_slots), which it does
 *   only when no allowed group can take the free GPUs;
 * - a group's size is allowed and its first GPU is aligned as the sizes
 *   say (PK_DCP_SIZES_POW2: a power of two c at a multiple of c, or the
 *   whole pool; PK_DCP_SIZES_ANY: any size at any start), and at least
 *   min_size;
 * - per GPU, the group's aligned stream over c is within max_tokens (hard)
 *   and a group holds at most max_seqs sequences;
 * - a sequence's group is at least the smallest allowed group it fits in
 *   alone.
 *
 * Cost, per GPU of a group of c GPUs in one slot, of sequences with aligned
 * lengths a_i (multiples of the group's alignment):
 *   per_micro_batch + cp_group (c - 1)
 *     + sum_i [ per_sequence + (linear a_i + quadratic a_i^2) / c
 *               + cp_token a_i (c - 1) / c ].
 * The token terms split evenly (zigzag gives every rank the same causal
 * work). The two CP terms are 0 at c = 1 and grow with c: cp_token prices
 * the ring's key/value traffic, which a GPU sends and receives for c - 1 of
 * its c steps, a_i (c - 1) / c tokens per sequence, and which short shards
 * cannot hide behind their attention; cp_group prices the c - 1 ring steps
 * themselves (a launch and a synchronisation each, per layer, whatever the
 * tokens), paid once per group and slot because the group's packed stream
 * runs its steps together. A slot costs its costliest GPU; the step is the
 * sum over slots. Under linear and quadratic alone a sequence's pool work
 * does not depend on c, so only the CP terms, padding and the balance of
 * the slots tell group sizes apart.
 *
 * Same ownership and purity as pk_planner.h: the caller owns the request,
 * pk_dcp_plan allocates the plan, pk_dcp_plan_free frees it. */
#ifndef PK_DCP_H
#define PK_DCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pk_planner.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which group sizes exist. The numeric values equal the proto enum. */
typedef enum {
  /* Powers of two as aligned blocks of consecutive GPUs, plus the whole
   * pool: the groups Megatron-Core creates for dynamic CP. */
  PK_DCP_SIZES_POW2 = 0,
  /* Any size at any start (contiguous rings over the pool). */
  PK_DCP_SIZES_ANY = 1,
} pk_dcp_sizes_t;
#define PK_DCP_SIZES_COUNT 2

typedef enum {
  PK_DCP_AUTO = 0,
  /* Megatron-Core's balanced scheduler (buckets by group size, greedy
   * placement with a 5 % balance slack, trimming, idle GPUs filled by
   * doubling groups), reproduced with the per-GPU cap kept hard. */
  PK_DCP_MEGATRON = 1,
  /* Megatron-Core's packing-aware scheduler (its dev line's default
   * dynamic-CP scheduler: each sequence to the group size and group,
   * existing or new, that raise the slot's most loaded GPU least, under a
   * work ceiling from the slot's longest sequence; free GPUs filled by
   * doubling groups), its slots kept where they keep the per-GPU cap and
   * rebuilt under the cap where they do not. */
  PK_DCP_MEGATRON_PACKING = 2,
} pk_dcp_algo_t;
#define PK_DCP_ALGO_COUNT 3

typedef struct pk_dcp_cost {
  pk_cost_model_t base; /* Defaults as in pk_planner.h. */
  double cp_token;      /* Per token of aligned length, times (c - 1) / c. 0: none. */
  double cp_group;      /* Per group and slot, times (c - 1). 0: none. */
} pk_dcp_cost_t;

typedef struct pk_dcp_request {
  const uint32_t *lengths; /* n entries, each >= 1. */
  size_t n;
  uint32_t dp;            /* Required, >= 1. */
  uint32_t cp;            /* 0 means 1; the pool is dp x cp GPUs. */
  uint32_t tp;            /* 0 means 1. */
  uint32_t cp_algo;       /* pk_cp_algo_t: zigzag aligns to 2 c tp, Ulysses to c tp. */
  bool sequence_parallel; /* Groups of one GPU align to tp (else 1). */
  uint32_t sizes;         /* pk_dcp_sizes_t. */
  uint32_t min_size;      /* Smallest group; 0 means 1. */
  uint64_t max_tokens;    /* Per GPU and slot: sum of aligned lengths / c. Required. */
  uint32_t max_seqs;      /* Sequences per group; 0: no cap. */
  uint32_t algo;          /* pk_dcp_algo_t. */
  pk_dcp_cost_t cost;
} pk_dcp_request_t;

/* One group of one slot. Arrays point into the plan's storage. */
typedef struct pk_dcp_group {
  uint32_t slot;
  uint32_t first; /* Its first GPU in the pool. */
  uint32_t size;  /* c. */
  uint32_t align; /* Every slot of its stream is a multiple of it. */
  uint32_t nseqs;
  const uint32_t *seqs;             /* nseqs indices into lengths, packed order. */
  const int32_t *cu_seqlens;        /* nseqs + 1, real lengths, leading 0. */
  const int32_t *cu_seqlens_padded; /* nseqs + 1, aligned slots, leading 0. */
  uint64_t tokens;                  /* Real tokens of the stream. */
  uint64_t padded_tokens;           /* Aligned tokens of the stream (c x per GPU). */
  double cost;                      /* Per GPU, as above. */
} pk_dcp_group_t;

typedef struct pk_dcp_stats {
  uint32_t sequences;
  uint32_t pool;
  uint32_t slots;
  uint32_t slots_lower_bound;
  uint32_t groups;
  double step_cost;             /* Sum over slots of the costliest GPU. */
  double step_cost_lower_bound; /* A proven lower bound on step_cost. */
  double work;                  /* Sum over slots and GPUs of the cost. */
  double efficiency;            /* work / pool / step_cost. */
  uint32_t cap_violations;      /* Groups over max_tokens per GPU: 0 for packd. */
  uint32_t idle_gpu_slots;      /* (slot, GPU) pairs in no group. */
  uint64_t max_gpu_tokens;      /* Largest aligned tokens per GPU in a slot. */
  uint64_t plan_time_us;
} pk_dcp_stats_t;

typedef struct pk_dcp_plan {
  uint32_t pool;
  uint32_t slots;
  uint32_t ngroups;
  const pk_dcp_group_t *groups; /* By slot, then by first GPU. */
  /* slots x pool: the group of GPU g in slot s at [s * pool + g], or
   * UINT32_MAX for an idle GPU. */
  const uint32_t *gpu_group;
  pk_dcp_stats_t stats;
  void *storage_; /* Private. */
} pk_dcp_plan_t;

/* Plans `req` under `limits` (NULL: none). Returns 0 and a new plan in
 * *out, or a negative pk_error code with a message naming the field and
 * value: PK_EINVAL for a bad field, PK_EPRECOND naming the index of a
 * sequence that fits in no allowed group, PK_ELIMIT over limits->
 * max_sequences or when the plan would have more than 2^26 (slot, GPU)
 * pairs, PK_ENOMEM, PK_ECANCELED. Like pk_plan_limited it reads
 * neither limits->max_plan_bytes (the codec checks the answer's size) nor
 * limits->admit. */
PK_EXPORT int pk_dcp_plan(const pk_dcp_request_t *req, const pk_limits_t *limits,
                          pk_dcp_plan_t **out, char *err, size_t errlen);
PK_EXPORT void pk_dcp_plan_free(pk_dcp_plan_t *plan);

/* The per-GPU cost of a group of `size` GPUs holding the sequences
 * seqs[0 .. nseqs) of a valid request, as pk_dcp_plan counts it, and the
 * aligned tokens per GPU in *gpu_tokens (may be NULL). Lets a caller score
 * a schedule made elsewhere with packd's cost. Returns a negative value
 * when the request is invalid or an index is out of range. */
PK_EXPORT double pk_dcp_group_cost(const pk_dcp_request_t *req, uint32_t size, const uint32_t *seqs,
                                   uint32_t nseqs, uint64_t *gpu_tokens);

/* The proven lower bound on the step of any plan of a valid request and
 * the slot-count bound (may be NULL); a negative value when invalid. */
PK_EXPORT double pk_dcp_step_lower_bound(const pk_dcp_request_t *req, uint32_t *slots_lower_bound);

PK_EXPORT const char *pk_dcp_sizes_name(uint32_t v);
PK_EXPORT const char *pk_dcp_algo_name(uint32_t v);
PK_EXPORT int pk_dcp_sizes_parse(const char *s, uint32_t *value);
PK_EXPORT int pk_dcp_algo_parse(const char *s, uint32_t *value);

#ifdef __cplusplus
}
#endif

#endif
