/* Micro-batch counts of AUTO over many random rollout batches, for
 * bench_planner: the grid has one batch per configuration, and near 100 %
 * token fill whether the packings reach the micro-batch bound depends on
 * the batch. */
#ifndef PK_BENCH_SWEEP_H
#define PK_BENCH_SWEEP_H

#include <stdint.h>

/* Writes n rollout lengths and their loss tokens (responses) for a seed,
 * responses truncated at resp_max. */
typedef void (*sweep_gen_fn)(uint64_t seed, uint32_t n, uint32_t resp_max, uint32_t *len,
                             uint32_t *loss);

/* Advances a random state and returns 64 random bits. */
typedef uint64_t (*sweep_rng_fn)(uint64_t *state);

/* Plans 20 batches of n = 65536 per setting (DP 8 and 64, caps 16384 and
 * 32768 with responses up to grid_resp_max; beyond the grid, cap 8192 with
 * responses up to 7168, max_seqs 8 at cap 16384, one node (DP 1, 2, 4) and
 * max_seqs 4; sweep_run's table lists them) and prints a markdown table of
 * how far the micro-batch count is above its lower bound, with the median
 * and the largest plan time. Then a second table against a known optimum:
 * batches made of 8192 micro-batches of exactly 16384 tokens, each cut at
 * random (rng) into 2 to 8 sequences (the last setting: exactly 8, with
 * max_seqs 8, so that both limits are met exactly), shuffled, so the best
 * plan has 8192 / dp micro-batches per rank, every one full.
 * Progress goes to stderr (t_start: bench_now_ms at the bench's start).
 * Returns 0, or -1 when a plan fails or memory runs out. */
int sweep_run(sweep_gen_fn gen, sweep_rng_fn rng, uint32_t grid_resp_max, double t_start);

#endif
