/* Round-robin timing for bench_planner: the n = 4096, DP 64 AUTO target
 * (1 ms) sits inside this VM's slow spells, which last longer than the
 * back-to-back repetitions of one configuration. Here each configuration
 * is timed once per round and the rounds go over all of them in turn, so a
 * spell reaches only the calls that fall in it, not all of one
 * configuration's. */
#ifndef PK_BENCH_ROUNDS_H
#define PK_BENCH_ROUNDS_H

#include <stddef.h>
#include <stdint.h>

#include "pk_planner.h"

#define PK_ROUNDS_MAX_CONFIGS 32
#define PK_ROUNDS_MAX_ROUNDS 256

/* One configuration: the request points at lengths the set owns. */
typedef struct rounds_config {
  char label[96];
  pk_request_t req;
  uint32_t *len, *loss;
  double grid_ms;   /* The grid's median (back-to-back calls), for contrast. */
  double median_ms; /* Filled by rounds_run. */
  double min_ms, max_ms;
} rounds_config_t;

typedef struct rounds_set {
  rounds_config_t cfg[PK_ROUNDS_MAX_CONFIGS];
  uint32_t count;
} rounds_set_t;

/* Adds a copy of req (its lengths and loss tokens copied) under label.
 * Returns 0, or -1 when the set is full or memory runs out. */
int rounds_add(rounds_set_t *set, const char *label, const pk_request_t *req, double grid_ms);

/* Times every configuration once per round for `rounds` rounds (at most
 * PK_ROUNDS_MAX_ROUNDS) and fills the medians, minima and maxima. Returns 0,
 * or -1 when a plan fails (it did not in the grid). */
int rounds_run(rounds_set_t *set, int rounds);

/* Timing helpers, shared with bench_planner.c: CLOCK_MONOTONIC in
 * milliseconds, and a qsort comparator for doubles, ascending. */
double bench_now_ms(void);
/* From now on bench_now_ms reads the calling thread's CPU time instead
 * (bench_planner --cpu-time): on a machine other jobs load, CPU time moves
 * far less than wall-clock time, so two builds compare back to back. */
void bench_use_cpu_time(void);
int bench_cmp_ms(const void *a, const void *b);

/* Frees what rounds_add copied. */
void rounds_free(rounds_set_t *set);

#endif
