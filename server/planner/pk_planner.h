/* The packd planner: a pure C11 library that turns the sequence lengths of a
 * global batch and a parallel layout into a plan (DP assignment, micro-batches
 * and packed layouts). No I/O, no threads, no global state: every call works
 * only on its arguments and its own stack, and whatever a call records for
 * its caller (AUTO's trace, below) goes into a struct the caller passes, so
 * any number of threads may plan at once.
 *
 * The request mirrors packd.v1.PlanRequest (proto/packd/v1/packd.proto) with
 * plain C types; zero values mean "default" exactly as in the proto. The
 * codec (server/codec/codec.h) translates between the two and decides nothing.
 *
 * Ownership: the caller owns the request and everything it points to; the
 * planner only reads it. pk_plan() allocates the plan; the caller frees it
 * with pk_plan_free(). */
#ifndef PK_PLANNER_H
#define PK_PLANNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pk_error.h"
#include "pk_export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The numeric values equal the proto enum values. */
typedef enum { PK_CP_ZIGZAG = 0, PK_CP_ULYSSES = 1 } pk_cp_algo_t;

typedef enum {
  PK_DP_AUTO = 0,
  PK_DP_NONE = 1,
  PK_DP_KK = 2,
  PK_DP_KK_EQUAL = 3,
  PK_DP_LPT = 4,
  PK_DP_LPT_EQUAL = 5,
  PK_DP_SORTED_STRIDE = 6,
} pk_dp_balance_t;
#define PK_DP_BALANCE_COUNT 7

typedef enum { PK_MODE_PACKED = 0, PK_MODE_PADDED = 1, PK_MODE_FIXED = 2 } pk_mode_t;
#define PK_MODE_COUNT 3

typedef enum {
  PK_MICRO_AUTO = 0,
  PK_MICRO_NEXT_FIT = 1,
  PK_MICRO_FFD = 2,
  PK_MICRO_MFFD = 3,
  PK_MICRO_KK_COUNT = 4,
  PK_MICRO_LPT_CAP = 5,
  PK_MICRO_SHARED_CUTS = 6,
} pk_micro_algo_t;
#define PK_MICRO_ALGO_COUNT 7

typedef enum {
  PK_ORDER_COST_DESC = 0,
  PK_ORDER_HEAVY_MIDDLE = 1,
  PK_ORDER_ORIGINAL = 2
} pk_order_t;
#define PK_ORDER_COUNT 3

typedef struct pk_parallel {
  uint32_t dp;      /* Required, >= 1. */
  uint32_t tp;      /* 0 means 1. */
  uint32_t cp;      /* 0 means 1. */
  uint32_t pp;      /* 0 means 1. */
  uint32_t vpp;     /* 0 means 1. */
  uint32_t cp_algo; /* pk_cp_algo_t; other values are rejected. */
  bool sequence_parallel;
  uint32_t num_heads;        /* 0: not checked. */
  uint32_t microbatch_group; /* 0: PP when VPP > 1, else 1. */
} pk_parallel_t;

typedef struct pk_batching {
  uint32_t mini_batches; /* 0 means 1. */
  bool shuffle;
  uint32_t dp_balance; /* pk_dp_balance_t. */
  bool equal_count;
  uint32_t mode;       /* pk_mode_t. */
  uint64_t max_tokens; /* Per CP rank; 0: no cap. */
  uint32_t max_seqs;   /* 0: no cap. */
  uint32_t micro_batch_size;
  uint32_t min_micro_batches; /* 0 means 1. */
  uint32_t round;             /* 0 means 1. */
  uint32_t micro_algo;        /* pk_micro_algo_t. */
  uint32_t order;             /* pk_order_t. */
  bool keep_groups;
  bool groups_on_rank; /* Every group on one DP rank (group_dp.c). */
} pk_batching_t;

/* A sequence of aligned length a costs per_sequence + linear a +
 * quadratic a^2 (zero-length sequences pay per_sequence too); a
 * micro-batch costs the sum over its sequences plus per_micro_batch. All
 * finite and >= 0. */
typedef struct pk_cost_model {
  double linear; /* Both 0: linear 1, quadratic 1/24576. */
  double quadratic;
  double per_sequence;    /* 0: none. */
  double per_micro_batch; /* 0: none. */
} pk_cost_model_t;

typedef struct pk_layout_opts {
  uint32_t align;          /* 0: A from the parallel layout. */
  uint32_t pad_multiple;   /* 0 means 1. */
  uint32_t total_multiple; /* 0 means 1. */
  bool fixed_shape;
} pk_layout_opts_t;

typedef struct pk_request {
  const uint32_t *lengths; /* n entries; required. */
  size_t n;
  const uint32_t *loss_tokens; /* NULL, or n entries each <= lengths[i]. */
  size_t n_loss_tokens;        /* 0 or n. */
  const uint64_t *groups;      /* NULL, or n group ids (GRPO uid). */
  size_t n_groups;             /* 0 or n. */
  pk_parallel_t parallel;
  pk_batching_t batching;
  pk_cost_model_t cost;
  pk_layout_opts_t layout;
  uint64_t seed;
} pk_request_t;

/* One micro-batch of one rank. All arrays point into storage owned by the
 * plan. */
typedef struct pk_micro {
  const uint32_t *seqs;             /* nseqs indices into lengths, packed order. */
  const int32_t *cu_seqlens;        /* nseqs + 1, real lengths, leading 0. */
  const int32_t *cu_seqlens_padded; /* nseqs + 1, aligned slots, leading 0. */
  uint32_t nseqs;
  uint32_t max_seqlen;    /* Largest aligned slot (PACKED/FIXED) or padded width. */
  uint32_t padded_width;  /* PADDED mode: the row width; else 0. */
  uint64_t tokens;        /* Real tokens. */
  uint64_t padded_tokens; /* Footprint over all CP ranks. */
  double cost;
  double loss_scale;
} pk_micro_t;

/* The micro-batches of one rank in one mini-batch. */
typedef struct pk_cell {
  const pk_micro_t *micros;
  uint32_t nmicros;
} pk_cell_t;

typedef struct pk_stats {
  uint32_t sequences;
  uint32_t mini_batches;
  uint32_t micro_batches_per_rank;    /* Summed over mini-batches. */
  uint32_t micro_batches_lower_bound; /* Summed over mini-batches. */
  uint64_t tokens;
  uint64_t padded_tokens;
  double pad_fraction;
  double total_cost;
  double step_cost;                 /* Sum over slots of the max over ranks. */
  double step_cost_lower_bound;     /* A proven lower bound on step_cost. */
  double lockstep_efficiency;       /* (total_cost / dp) / step_cost. */
  double lockstep_efficiency_bound; /* (total_cost / dp) / step_cost_lower_bound. */
  double dp_imbalance;              /* Max rank cost / mean rank cost. */
  uint32_t cap_violations;
  uint64_t plan_time_us;
  uint32_t plan_micros;
  uint32_t zero_length;
  uint32_t alignment;
  uint64_t max_micro_tokens; /* Largest per-CP-rank footprint. */
} pk_stats_t;

typedef struct pk_plan {
  uint32_t dp;
  uint32_t mini_batches;
  const pk_cell_t *cells; /* dp * mini_batches, index rank * mini_batches + mini. */
  pk_stats_t stats;
  void *storage_; /* Private. */
} pk_plan_t;

/* Plans `req`. On success returns 0 and stores a new plan in *out (free it
 * with pk_plan_free). On failure returns a negative pk_error code, leaves
 * *out NULL and writes a message naming the field and the value into err
 * (always NUL-terminated when errlen > 0). */
PK_EXPORT int pk_plan(const pk_request_t *req, pk_plan_t **out, char *err, size_t errlen);

/* What the planner knows of a plan before planning it, for a caller's
 * admission check (pk_limits_t.admit): the request's counts and bounds on
 * what the plan holds. */
typedef struct pk_plan_shape {
  uint64_t sequences;
  uint32_t dp, mini_batches;
  /* A lower bound on the plan's micro-batches over all ranks and
   * mini-batches (min_micro_batches, microbatch_group, the token cap and
   * max_seqs pooled over the batch). */
  uint64_t micro_batches;
  /* An upper bound on a micro-batch's footprint: the token cap, else the
   * whole batch's. */
  uint64_t largest_micro;
} pk_plan_shape_t;

/* Validates req and writes its shape: 0, or the validation's error code
 * and message. O(n), no allocation. */
PK_EXPORT int pk_plan_shape(const pk_request_t *req, pk_plan_shape_t *shape, char *err,
                            size_t errlen);

/* Request-independent limits the caller (the server, the embedded library)
 * sets, checked before any planning so that an oversized request is refused
 * in O(n) time and memory instead of being planned in full. 0: no limit. */
typedef struct pk_limits {
  uint64_t max_sequences; /* Sequences per request: PK_ELIMIT above. */
  /* The encoded PlanResponse's size limit. A wire size, so the planner
   * does not read it: the codec's request path (pk_plan_request) checks
   * its estimate against it in the admission check below. */
  uint64_t max_plan_bytes;
  /* NULL, or the caller's admission check: called once, after the request
   * is validated and before anything is planned, with the plan's shape. A
   * nonzero return (a pk_error code, with a message written into err)
   * refuses the request. */
  int (*admit)(void *admit_arg, const pk_plan_shape_t *shape, char *err, size_t errlen);
  void *admit_arg;
  /* A cooperative stop: the planner calls should_stop(stop_arg) between its
   * stages and inside its long loops (every 4096 iterations of a loop), on
   * the planning thread. A nonzero answer stops planning: pk_plan_limited
   * frees everything it built and returns PK_ECANCELED. The callback is
   * not called again after its first nonzero answer. Some stages run
   * between two polls for a while (sorts and bounds over the whole batch;
   * several of AUTO's stages): a stop takes effect at the next poll.
   * The planner does no I/O and starts no thread; the callback decides
   * (an atomic flag, a deadline against a monotonic clock). It must be
   * cheap and must not call back into the planner. NULL: never stops. */
  int (*should_stop)(void *stop_arg);
  void *stop_arg;
  /* NULL, or where AUTO records its trace: the candidates it tried,
   * skipped and kept and what each stage gained, for the last mini-batch
   * it planned (server/planner/auto/auto.h defines the struct; the
   * benchmarks read it). The planner writes it only during the call. */
  struct pk_auto_trace *trace;
} pk_limits_t;

/* The defaults of the server (--max-sequences, --max-plan-bytes) and of
 * pk_plan_bytes. 16 Mi sequences took 14-16 s and 1.9 GiB to plan before
 * the answer was refused; 64 MiB is the server's default
 * --max-message-bytes, the largest answer it can send. */
#define PK_DEFAULT_MAX_SEQUENCES 4194304u
#define PK_DEFAULT_MAX_PLAN_BYTES (64ull << 20)

/* pk_plan under `limits` (NULL: none): a request over max_sequences is
 * PK_ELIMIT (RESOURCE_EXHAUSTED) with a message naming the limit and the
 * figure before it is even validated; then, validated, it goes through the
 * admission check (limits->admit), then it is planned. */
PK_EXPORT int pk_plan_limited(const pk_request_t *req, const pk_limits_t *limits, pk_plan_t **out,
                              char *err, size_t errlen);

/* Frees a plan from pk_plan. NULL is allowed. */
PK_EXPORT void pk_plan_free(pk_plan_t *plan);

/* The cell of (rank, mini). */
static inline const pk_cell_t *pk_plan_cell(const pk_plan_t *plan, uint32_t rank, uint32_t mini) {
  return &plan->cells[(size_t)rank * plan->mini_batches + mini];
}

/* The effective alignment A of a request, or 0 when the request is
 * invalid. */
PK_EXPORT uint32_t pk_alignment(const pk_request_t *req);

/* Names for enum values ("auto", "kk_equal", ...), NULL when out of range,
 * and the reverse lookup (returns 0 and sets *value, or PK_EINVAL). */
PK_EXPORT const char *pk_dp_balance_name(uint32_t v);
PK_EXPORT const char *pk_micro_algo_name(uint32_t v);
PK_EXPORT const char *pk_mode_name(uint32_t v);
PK_EXPORT const char *pk_order_name(uint32_t v);
PK_EXPORT const char *pk_cp_algo_name(uint32_t v);
PK_EXPORT int pk_dp_balance_parse(const char *s, uint32_t *value);
PK_EXPORT int pk_micro_algo_parse(const char *s, uint32_t *value);
PK_EXPORT int pk_mode_parse(const char *s, uint32_t *value);
PK_EXPORT int pk_order_parse(const char *s, uint32_t *value);
PK_EXPORT int pk_cp_algo_parse(const char *s, uint32_t *value);

#ifdef __cplusplus
}
#endif

#endif
