/* The random numbers of the planner benches: splitmix64, so that every
 * bench draws the same batches from the same seed on every platform. */
#ifndef PK_BENCH_RNG_H
#define PK_BENCH_RNG_H

#include <stdint.h>

static inline uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double rng_unit(uint64_t *s) {
  return (double)(rng_next(s) >> 11) / 9007199254740992.0;
}

#endif
