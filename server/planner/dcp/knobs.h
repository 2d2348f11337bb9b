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
/* The shelf plan that spreads against the costliest sequence's least
 * height runs when that height is at least this fraction of the pool work
 * over the pool: it pays where one tall slot is a fair share of the step
 * (bench/dcp's cp-cost wikipedia_64k batches, a few to 16 slots: 10-25 %
 * lower steps), and costs a shelf plan (about a quarter of the time of a
 * batch of 65,536 sequences) where hundreds of slots make it moot. Unit:
 * fraction. */
#define DCP_TALL_MIN_SHARE 0.05

/* With any-size groups, sizes looked at one by one past a sequence's
 * smallest before the search doubles the size: pool work grows with the
 * size but for padding, which only the next few sizes change. Unit: sizes. */
#define DCP_ANY_STEPS 8u
/* The same for a sequence's cheapest size (auto.c, cheapest). Unit: sizes. */
#define DCP_ANY_CHEAPEST 4u

/* A shelf packing whose slots' floor (shelf.c, slot_floor) passes the
 * best step so far by more than this fraction stops: the floor and the
 * step are sums of many terms, rounded apart. Each slot's longest sequence
 * is looked at over every size, so only with at most DCP_SHELF_BOUND_SIZES
 * sizes. Unit: fraction of the step; sizes. */
#define DCP_SHELF_BOUND_TOL 1e-9
/* Class plans at growing slot counts stop once the step bound at the count
 * reaches the best step so far within this fraction (both are sums of many
 * terms, rounded apart). Unit: fraction of the step. */
#define DCP_COUNT_STOP_TOL 1e-9
#define DCP_SHELF_BOUND_SIZES 64u

/* ---- Bounds (cost.c) ----------------------------------------------------- */

/* Longest sequences whose sizes the threshold bound looks at: the bound is
 * set by the costliest few; each one costs a pass over the candidate
 * thresholds. Unit: sequences. */
#define DCP_BOUND_TOP 16u
/* With any-size groups, sizes per sequence the threshold bound looks at
 * (the rest count as free of extra work, a weaker but valid bound). Unit:
 * sizes. */
#define DCP_BOUND_ANY_SIZES 64u

/* Longest sequences the tall-slot bound looks at: each is a prefix of the
 * longest, its slots counted from 1 to its size (quadratic in this). The
 * bound is set by the few longest. Unit: sequences. */
#define DCP_BOUND_TALL_TOP 32u

/* ---- Levelling (level.c) ------------------------------------------------- */

/* Passes over the slots. Unit: passes. */
#define DCP_LEVEL_PASSES 16u
/* Candidate (sequence, group) pairs looked at per sequence of the batch, at
 * least in all, and at most in all: about 1 ms per 4,096 sequences; more
 * found little on the large bench batches (bench/dcp), while batches of a
 * few hundred sequences gained 1-2 % from the floor (a sequence of a tall
 * group looks at every group of the plan). Unit: pairs. */
#define DCP_LEVEL_PER_SEQ 16u
#define DCP_LEVEL_MIN_BUDGET 50000u
#define DCP_LEVEL_BUDGET 4000000u
/* Largest batch on which every AUTO candidate is levelled before the
 * cheapest is kept (above it, the winner only): levelling changes which
 * candidate is best (the default-cost wikipedia_64k and azure_conv batches
 * of bench/dcp gained 2-11 %), and on small batches it costs little next to
 * the class plans. Unit: sequences. */
#define DCP_LEVEL_ALL_MAX_N 1024u
/* ... and only the candidates whose step is within this fraction of the
 * best so far: levelling lowered a candidate's step by up to about 12 % on
 * the bench batches (bench/dcp, a class plan of one slot on a default-cost
 * wikipedia_64k batch), and 0.15 missed such a winner; a candidate further
 * off rarely wins, and each levelling costs about a candidate's time. Unit:
 * fraction of the step. */
#define DCP_LEVEL_ALL_SLACK 0.3
/* A change must lower the step by more than this fraction of it (plus the
 * same absolute amount): float rounding must not count as a gain. */
#define DCP_LEVEL_EPS 1e-9
/* A group's pairs are passed over without reading them only where a
 * sequence's rise is above the group's room by more than this fraction of
 * the costs involved: the group's running load drifts from the sum of its
 * members by rounding (about 1e-16 per change), so the shortcut never
 * skips a pair that the full check would try. Unit: fraction of a cost. */
#define DCP_LEVEL_SKIP_TOL 1e-6
/* A swap scan asks per block of DCP_LEVEL_BLOCK groups whether any of
 * them can take the sequence at all, size by size, and counts a block
 * that cannot without reading its groups: on a batch of tens of thousands
 * of one-sequence groups nearly every block. Blocks are kept only with at
 * most DCP_LEVEL_SURVEY_SIZES sizes (the question costs a pass over them;
 * with any-size groups over a large pool reading the groups is cheaper).
 * Unit: groups; sizes. */
#define DCP_LEVEL_BLOCK 64u
#define DCP_LEVEL_SURVEY_SIZES 64u

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
/* The margin by which a sequence must pass the room left in a full slot
 * before it waits for the next one: the original compares floats its own
 * way, and a sequence at the edge must land where the original's does.
 * Unit: fraction of the room (plus one token). */
#define DCP_PA_ROOM_TOL 1e-9

#endif
