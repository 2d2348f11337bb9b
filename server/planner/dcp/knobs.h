/* The dynamic-CP planner's knobs: every threshold, budget and tolerance its
 * files read, in one table, each with its unit and the reason for its
 * value. Compile-time constants, as AUTO's (auto/knobs.h): a plan is a pure
 * function of its request. What stays beside the code is structural only
 * (array sizes, the validation limits of dcp.h). */
#ifndef PK_DCP_KNOBS_H
#define PK_DCP_KNOBS_H

/* ---- Stopping ----------------------------------------------------------- */

/* Items placed (shelf.c) or groups visited (split.c) between two polls of
 * the caller's stop: a few hundred ns each, so well under a millisecond
 * between polls. Unit: items. */
#define DCP_POLL_ITEMS 4096u
/* Sequences placed by the Megatron reproduction between two polls: each
 * scans the slot's groups (up to the pool), so fewer per poll. Unit:
 * sequences. */
#define DCP_POLL_MEGATRON 256u
/* Accepted levelling changes between two polls: each is found by a scan of
 * up to every group. Unit: changes. */
#define DCP_POLL_LEVEL 64u

/* ---- Candidates (auto.c) ---------------------------------------------- */

/* Slot counts tried by the class plans after the first that packs: each is
 * a full plan, and the bound at the next count usually stops the search
 * sooner. Unit: counts. */
#define DCP_EXTRA_COUNTS 3u
/* Largest batch for the class plans and the Megatron candidate: their
 * packing scans every group per sequence (O(n x groups)); the fixed-CP and
 * shelf candidates cover every batch. Unit: sequences. */
#define DCP_CLASS_MAX_N 1024u
/* With any-size groups, sizes looked at one by one past a sequence's
 * smallest before the search doubles the size: pool work grows with the
 * size but for padding, which only the next few sizes change. Unit: sizes. */
#define DCP_ANY_STEPS 8u
/* The same for a sequence's cheapest size (auto.c, cheapest). Unit: sizes. */
#define DCP_ANY_CHEAPEST 4u

/* ---- Bounds (cost.c) ----------------------------------------------------- */

/* Longest sequences whose sizes the threshold bound looks at: the bound is
 * set by the costliest few; each one costs a pass over the candidate
 * thresholds. Unit: sequences. */
#define DCP_BOUND_TOP 16u
/* With any-size groups, sizes per sequence the threshold bound looks at
 * (the rest count as free of extra work, a weaker but valid bound). Unit:
 * sizes. */
#define DCP_BOUND_ANY_SIZES 64u

/* ---- Levelling (level.c) ------------------------------------------------- */

/* Passes over the slots. Unit: passes. */
#define DCP_LEVEL_PASSES 16u
/* Candidate (sequence, group) pairs looked at per sequence of the batch, and
 * at most in all: about 1 ms per 4,096 sequences; more found little on the
 * bench batches (bench/dcp). Unit: pairs. */
#define DCP_LEVEL_PER_SEQ 16u
#define DCP_LEVEL_BUDGET 4000000u
/* A change must lower the step by more than this fraction of it (plus the
 * same absolute amount): float rounding must not count as a gain. */
#define DCP_LEVEL_EPS 1e-9

/* ---- Megatron-Core's scheduler (megatron.c) ------------------------------ */

/* Its balance slack (`delta` of next_hdp_group) and the work over which a
 * bucket closes (1.1 x its share, make_buckets_equal): the original's
 * values, which the reproduction must keep. */
#define DCP_MEG_SLACK 0.05
#define DCP_MEG_BUCKET_OVER 1.1

/* ---- Megatron-Core's packing-aware scheduler (packaware.c) -------------- */

/* Sequences placed between two polls of the caller's stop: each scans the
 * slot's groups at every size it may take (up to the pool's groups times
 * log2 of the pool). Unit: sequences. */
#define DCP_POLL_PACKAWARE 256u
/* A slot's work ceiling over its longest length x the cap
 * (`_DYNAMIC_CP_WORKLOAD_CAP_DELTA`): the original's value, which the
 * reproduction must keep. Unit: fraction. */
#define DCP_PA_WORK_OVER 0.05
/* Largest batch for the packing-aware candidate of AUTO: every slot scans
 * every sequence left against its groups (O(n x slots x groups)). Unit:
 * sequences. */
#define DCP_PA_MAX_N 1024u

#endif
