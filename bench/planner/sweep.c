/* Micro-batch counts over random rollout batches (see sweep.h). */
#include "sweep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pk_planner.h"
#include "rounds.h"

enum { SWEEP_BATCHES = 20, SWEEP_N = 65536 };

int sweep_run(sweep_gen_fn gen, uint32_t grid_resp_max, double t_start) {
  /* Beyond the grid: cap 8192 with responses up to 7168 tokens, so about a
   * fifth of the sequences exceed half the cap and leave gaps that only a
   * few short ones can close; and max_seqs 8 at cap 16384, where the count
   * and the tokens both bind. */
  const struct {
    uint32_t dp;
    uint64_t cap;
    uint32_t resp_max, max_seqs; /* max_seqs 0: none. */
  } settings[] = {
      {8, 16384, grid_resp_max, 0},  {8, 32768, grid_resp_max, 0}, {64, 16384, grid_resp_max, 0},
      {64, 32768, grid_resp_max, 0}, {8, 8192, 7168, 0},           {64, 8192, 7168, 0},
      {8, 16384, grid_resp_max, 8},  {64, 16384, grid_resp_max, 8}};
  uint32_t *len = malloc(SWEEP_N * sizeof *len);
  uint32_t *loss = malloc(SWEEP_N * sizeof *loss);
  int rc = 0;
  if (len == NULL || loss == NULL) {
    fprintf(stderr, "bench_planner: out of memory for the sweep\n");
    rc = -1;
    goto done;
  }
  printf("\n## AUTO micro-batches per rank over %d random rollout batches (n = %d, PACKED)\n\n",
         SWEEP_BATCHES, SWEEP_N);
  printf("| dp | cap | responses up to | max_seqs | = LB | LB+1 | above LB+1 | worst | median ms "
         "|\n");
  printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (size_t w = 0; w < sizeof settings / sizeof settings[0]; w++) {
    uint32_t at[3] = {0, 0, 0}, worst = 0;
    double ms[SWEEP_BATCHES];
    for (uint32_t b = 0; b < SWEEP_BATCHES; b++) {
      fprintf(stderr, "[sweep %6.1fs] dp=%u cap=%llu batch %u\n", (bench_now_ms() - t_start) / 1e3,
              settings[w].dp, (unsigned long long)settings[w].cap, b);
      gen(0x73770000ull + b, SWEEP_N, settings[w].resp_max, len, loss);
      pk_request_t req;
      memset(&req, 0, sizeof req);
      req.lengths = len;
      req.loss_tokens = loss;
      req.n_loss_tokens = SWEEP_N;
      req.n = SWEEP_N;
      req.parallel.dp = settings[w].dp;
      req.batching.max_tokens = settings[w].cap;
      req.batching.max_seqs = settings[w].max_seqs;
      pk_plan_t *plan = NULL;
      char err[512] = "";
      double t0 = bench_now_ms();
      if (pk_plan(&req, &plan, err, sizeof err) != 0) {
        printf("batch %u failed: %s\n", b, err);
        rc = -1;
        goto done;
      }
      ms[b] = bench_now_ms() - t0;
      uint32_t over = plan->stats.micro_batches_per_rank - plan->stats.micro_batches_lower_bound;
      pk_plan_free(plan);
      at[over < 2 ? over : 2]++;
      worst = over > worst ? over : worst;
    }
    qsort(ms, SWEEP_BATCHES, sizeof ms[0], bench_cmp_ms);
    char seqs[16] = "-";
    if (settings[w].max_seqs != 0)
      snprintf(seqs, sizeof seqs, "%u", settings[w].max_seqs);
    printf("| %u | %llu | %u | %s | %u | %u | %u | LB+%u | %.1f |\n", settings[w].dp,
           (unsigned long long)settings[w].cap, settings[w].resp_max, seqs, at[0], at[1], at[2],
           worst, ms[SWEEP_BATCHES / 2]);
  }
done:
  free(len);
  free(loss);
  return rc;
}
