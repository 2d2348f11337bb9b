/* AUTO's knobs: every threshold and budget its stages read, in one table.
 *
 * Each knob has its value, its unit and the reason for that value. They are
 * compile-time constants on purpose: a plan must be a pure function of its
 * request (the plan store and the replicas compare plans byte for byte), so
 * none of them is read from the environment. Numerical tolerances that only
 * absorb floating-point rounding are at the end; changing them changes no
 * decision on real data, only ties. What stays beside the code is
 * structural only (array sizes, bit widths, the index layout of a bitset,
 * a random draw's bit fields, unit conversions); every tolerance, budget
 * and tuning value is here. */
#ifndef PK_AUTO_KNOBS_H
#define PK_AUTO_KNOBS_H

/* ---- Stopping ---------------------------------------------------------- */

/* Work units (an item placed, a move tried, a search step) between two
 * calls of the caller's stop callback inside a long loop. At 20 to 200 ns a
 * unit this is 0.1 to 1 ms between polls: a 4 M-sequence plan stops well
 * within 100 ms, and the callback's cost stays below measurement. */
#define PK_AUTO_POLL_EVERY 4096u

/* Iterations of a cheap loop (an item placed, a row counted) between two
 * ticks of the stop counter (pk_auto_tick_loop): the loop pays a mask test
 * per iteration and a tick per PK_AUTO_TICK_BATCH. Unit: iterations; a
 * power of two. */
#define PK_AUTO_TICK_BATCH 1024u

/* Micro-batches cleared between two polls (pk_auto_clear_bins): 64 Ki
 * micro-batches are 2 MiB; clearing a pass over every possible count takes
 * a hundred milliseconds at 4 M sequences. Unit: micro-batches. */
#define PK_AUTO_CLEAR_CHUNK (1u << 16)

/* Work units charged per micro-batch completion fills (complete.c): 16
 * without max_seqs, else max_seqs up to 64 (the items it may take). Unit:
 * work units. */
#define PK_COMPLETE_TICK 16u
#define PK_COMPLETE_TICK_MAX 64u

/* First fit repair (repair.c): item pairs read per work unit of the stop
 * counter (a pair read is a few ns). Unit: pairs. */
#define PK_REPAIR_PAIRS_PER_TICK 64u

/* ---- Count: the least M at which a candidate fits ------------------------ */

/* Fill (fraction of M x dp x cap) above which first fit decreasing, the
 * tightest packer, goes first at a count: above it the column packers often
 * fail and cost a wasted pass each. Unit: fraction of the token capacity. */
#define PK_AUTO_FULL_FILL 0.99

/* Columns or micro-batches a greedy packer tries for one tier or item
 * before it declares the count full. Unit: tries. Beyond 16 first fit
 * almost never finds room the room tree did not show at once. */
#define PK_AUTO_TRIES 16

/* ---- Candidate packers ----------------------------------------------------- */

/* A packing within this fraction of the step bound (bounds.c) is not
 * improved further: at most that much could be gained. Unit: fraction of
 * the step bound. */
#define PK_AUTO_GOOD_ENOUGH 1e-3

/* A packing within this fraction of the step bound is close: the second
 * column packing is not tried after it, and where first fit is this close
 * the tier packing goes first. Unit: fraction of the step bound. */
#define PK_AUTO_CLOSE 5e-3

/* The exact search (exact.c): steps all its searches of one mini-batch may
 * take (a step: one option of a bin's set tried, or a bin closed and the
 * next opened, 25 to 60 ns): a search out of steps costs 0.1 to 0.25 s.
 * 2^17 steps packed as many of exact.c's random tight batches; 20 to 25
 * lengths of 50 to 90 under a cap of 300 (verl's dynamic-batching test,
 * replayed 10,000 times by tests/peers/test_verl_replay.py) have packings
 * at the token bound that 2^21 steps miss and 2^22 find, each one
 * micro-batch (a forward and backward pass) less. Unit: search steps. */
#define PK_EXACT_STEPS (1u << 22)

/* The most items of a mini-batch the exact search takes: larger batches
 * reach the bound greedily (the bench's, from 512 up, all do), and their
 * searches run out of steps more often. Unit: sequences. */
#define PK_EXACT_MAX_ITEMS 256u

/* The exact search's first pass (by size classes) gets 1 / this share of
 * its steps and the plain order the rest: measured best of a half, a
 * quarter and an eighth (exact.c). Unit: share. */
#define PK_EXACT_CLASS_SHARE 4u

/* PADDED: the even band is tried where halving split at least this share
 * of the runs (1 / PK_PADDED_EVEN_SHARE); below, the halved runs are
 * already even. Unit: runs per halving. */
#define PK_PADDED_EVEN_SHARE 100u

/* PADDED: column levels are tried where the head rows leave their
 * columns more room below the level than this fraction of the step cost.
 * Unit: fraction of the step cost. */
#define PK_PADDED_LEVELS_ROOM 2e-3

/* PADDED cut search (runs.c): tried with at most this many runs and this
 * many runs per tier (an accepted move costs O(runs)); its moves are at
 * most PK_CUT_MOVES, fewer past 100 tiers so that a search reads at most
 * PK_CUT_READS tier tops. At 8 runs per tier 20000 moves lower the step by
 * up to 4 % (about 1 ms at 40 runs); at 64 per tier (n = 4096, DP 64)
 * 50000 moves gained 0.7 % on one of 8 samples at 3 to 14 ms. */
/* The cut search's start temperature: the larger of PK_CUT_TEMP_STEP of the
 * step cost and PK_CUT_TEMP_ROW of the mean row cost, so that moving a row
 * or two can climb early on in small batches too. Unit: fractions. */
/* A cut search move shifts one cut by up to PK_CUT_SHIFT_MAX rows, but
 * one move in PK_CUT_SPLIT_EVERY (a power of two) merges two runs and
 * splits another. Unit: rows; moves. */
#define PK_CUT_SHIFT_MAX 3
#define PK_CUT_SPLIT_EVERY 4u
#define PK_CUT_TEMP_STEP 2e-3
#define PK_CUT_TEMP_ROW 0.15
#define PK_CUT_MAX_RUNS 512u
#define PK_CUT_MAX_DP 32u
#define PK_CUT_MOVES 20000u
#define PK_CUT_READS 2000000u

/* PADDED level search (levels.c): tried with 2 to PK_WALK_MAX_M columns (a
 * walk reads every level per width class) where the step cost is more than
 * PK_WALK_GAIN above the mean cost per rank (no packing costs less than
 * that mean); its work is PK_WALK_MIN_UNITS to PK_WALK_MAX_UNITS per row,
 * one more per PK_WALK_ROWS_PER_UNIT rows (about 0.1 ms at n = 4096 and up
 * to 10 ms at n = 65536; the gains come in the first few dozen walks). */
#define PK_WALK_MAX_M 64u
#define PK_WALK_GAIN 2e-3
#define PK_WALK_MIN_UNITS 4u
#define PK_WALK_MAX_UNITS 16u
#define PK_WALK_ROWS_PER_UNIT 2048u

/* Completion (complete.c): items the exchange at the end of a micro-batch
 * takes out at most; distinct sizes keep_room reads at most; completion
 * packings tried per count by pk_auto_tighten. Unit: items; sizes; tries. */
#define PK_EXCHANGE_MAX 4
#define PK_KEEP_RANKS 8
#define PK_COMPLETE_TRIES 4

/* First fit repair (repair.c): exchanges tried for one micro-batch
 * gathering room; micro-batches that try to gather room for one leftover;
 * partner micro-batches searched for one exchange; the repair is tried when
 * the leftovers need at most 1 / PK_REPAIR_ROOM_SHARE of the room; item
 * pairs its exchange searches may read per item of the batch (a failed
 * repair on spread-thin room read 73 million pairs, 36 ms, before this
 * bound; the successful ones on the bench read at most 18 million). */
#define PK_REPAIR_SWAPS 64
#define PK_REPAIR_TARGETS 16
#define PK_REPAIR_PARTNERS 256
#define PK_REPAIR_ROOM_SHARE 10
#define PK_REPAIR_WORK_PER_ITEM 320

/* PADDED level search (levels.c): the pattern steps (fractions of a
 * level, coarsest first), the sweeps per step, and the walks from one
 * start whatever the work budget. */
#define PK_WALK_STEPS                                                                              \
  { 0.08, 0.04, 0.02, 0.01, 0.005 }
#define PK_WALK_SWEEPS 3
#define PK_WALK_MAX_WALKS 400u

/* The level search's tail target (levels.c): moved down or up from the
 * last walk's by PK_WALK_TARGET_STEP, doubling each time (down at most
 * PK_WALK_TARGET_MAX_FALL), then bisected to PK_WALK_TARGET_TOL of it;
 * the first walk raises unfit levels by PK_WALK_START_RAISE up to
 * PK_WALK_START_TRIES times; a batch of runs read costs
 * PK_WALK_BATCH_UNITS work units. Unit: fractions of the target; tries;
 * work units. */
#define PK_WALK_TARGET_STEP 0.01
#define PK_WALK_TARGET_MAX_FALL 0.5
#define PK_WALK_TARGET_TOL 1e-5
#define PK_WALK_START_RAISE 1.002
#define PK_WALK_START_TRIES 64
#define PK_WALK_BATCH_UNITS 8u

/* PADDED targets (padded.c): the least target of a count is bisected to
 * PK_PADDED_TARGET_TOL of it, the even band's low end to
 * PK_PADDED_BAND_TOL of its high end. Unit: fractions of the target. */
#define PK_PADDED_TARGET_TOL 1e-7
#define PK_PADDED_BAND_TOL 4e-3

/* ---- Improvers ---------------------------------------------------------------- */

/* In-column refinement (packed.c): partners (the cheapest micro-batches of
 * a column) tried per step with one or two columns, and items of each side
 * read (micro-batches with many items are level already). Unit: micro-
 * batches; items. With more columns, 2 partners and 16 items. */
#define PK_REFINE_PARTNERS 4
#define PK_REFINE_SCAN 48
#define PK_REFINE_PARTNERS_MANY 2
#define PK_REFINE_SCAN_MANY 16

/* Refinement rounds per column, per rank: with one or two columns
 * PK_REFINE_ROUNDS_WIDE x dp, with more PK_REFINE_ROUNDS x dp. Unit:
 * rounds per rank. */
#define PK_REFINE_ROUNDS_WIDE 4u
#define PK_REFINE_ROUNDS 2u

/* The refinement stops once the costliest micro-batch of a column is within
 * this fraction of the column's mean: with one or two columns (DP balancing
 * alone, as verl's balance_batch asks: its tests accept 1e-4) 2e-5; with
 * more, 5e-4 (a column's share of the step cost is small, and time grows
 * with M). Unit: fraction of the column's mean cost. */
#define PK_REFINE_TOL_WIDE 2e-5
#define PK_REFINE_TOL 5e-4

/* Cross-column lowering (lower.c): moves per column are at most
 * PK_LOWER_MOVES x dp, each reading at most PK_LOWER_SCAN items of the
 * giving micro-batch; exchanges pick among PK_LOWER_PARTNERS micro-batches
 * with the most cost to spare and try PK_LOWER_SUBSET_TRIES subsets; they
 * run only while columns x micro-batches stay within PK_LOWER_EXCHANGE_WORK
 * (a partner scan per column) and the plan is more than
 * PK_LOWER_EXCHANGE_GAP above the step bound. */
#define PK_LOWER_MOVES 4
#define PK_LOWER_SCAN 32
#define PK_LOWER_PARTNERS 4
#define PK_LOWER_SUBSET_TRIES 8
#define PK_LOWER_EXCHANGE_WORK (1u << 16)
#define PK_LOWER_EXCHANGE_GAP 5e-3

/* An exchange out of a column's costliest micro-batch asks for at least
 * 1 / PK_LOWER_NEED_SHARE of its excess over the target at once (lower.c).
 * Unit: share. */
#define PK_LOWER_NEED_SHARE 4

/* PADDED cross-column lowering (padded_lower.c): the most micro-batch
 * reads of one pass (a try reads the micro-batches of the columns with room
 * for the row). About 4 ms at most. Unit: reads. */
#define PK_LOWER_PADDED_READS 4000000u

/* ---- Numerical tolerances ------------------------------------------------ */

/* Relative slack for comparisons of sums of doubles that should be equal
 * or ordered: absorbs rounding of sums of up to millions of costs (about
 * 1e-16 each) so that a move "gains" only where it gains for real. */
#define PK_AUTO_REL_EPS 1e-9

/* Relative slack for comparisons of single products (a level against a
 * cost): a tie up to one rounding is a tie. */
#define PK_AUTO_TIE_EPS 1e-12

/* PADDED lowering's fixed-point rooms (padded_lower.c): the costliest
 * micro-batch's cost is 2^PK_LOWER_PADDED_UNIT_BITS units. Unit: bits. */
#define PK_LOWER_PADDED_UNIT_BITS 40

#endif
