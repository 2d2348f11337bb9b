/* Micro-batch counts over random rollout batches (see sweep.h). */
#include "sweep.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pk_planner.h"
#include "rounds.h"

enum { SWEEP_BATCHES = 20, SWEEP_N = 65536 };

/* The known-optimum batches: micro-batches of FILL_CAP tokens, each cut
 * into 2 to 8 sequences, so at most FILL_BINS x 8 sequences. */
enum { FILL_BINS = 8192, FILL_CAP = 16384, FILL_PARTS_MAX = 8 };

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

/* Writes the lengths of FILL_BINS full micro-batches, each cut at distinct
 * random points into parts_min .. parts_max sequences, shuffled; returns
 * their count. */
static uint32_t gen_exact_fill(sweep_rng_fn rng, uint64_t seed, uint32_t parts_min,
                               uint32_t parts_max, uint32_t *len) {
  uint64_t s = seed;
  uint32_t n = 0;
  for (uint32_t b = 0; b < FILL_BINS; b++) {
    uint32_t parts = parts_min + (uint32_t)(rng(&s) % (parts_max - parts_min + 1));
    uint32_t cut[FILL_PARTS_MAX + 1];
    bool distinct = false;
    while (!distinct) {
      cut[0] = 0;
      cut[parts] = FILL_CAP;
      for (uint32_t j = 1; j < parts; j++)
        cut[j] = 1 + (uint32_t)(rng(&s) % (FILL_CAP - 1));
      qsort(cut + 1, parts - 1, sizeof cut[0], cmp_u32);
      distinct = true;
      for (uint32_t j = 0; j < parts; j++)
        distinct = distinct && cut[j + 1] > cut[j];
    }
    for (uint32_t j = 0; j < parts; j++)
      len[n++] = cut[j + 1] - cut[j];
  }
  for (uint32_t i = n - 1; i > 0; i--) {
    uint32_t j = (uint32_t)(rng(&s) % (i + 1)), t = len[i];
    len[i] = len[j];
    len[j] = t;
  }
  return n;
}

/* Plans lengths (loss tokens optional) for dp ranks under cap and max_seqs
 * (0: none); fills the micro-batches per rank, their bound and the plan
 * time. Prints the error and returns -1 when the plan fails. */
static int plan_counts(const uint32_t *len, const uint32_t *loss, uint32_t n, uint32_t dp,
                       uint64_t cap, uint32_t max_seqs, uint32_t *micro, uint32_t *bound,
                       double *ms) {
  pk_request_t req;
  memset(&req, 0, sizeof req);
  req.lengths = len;
  req.loss_tokens = loss;
  req.n_loss_tokens = loss != NULL ? n : 0;
  req.n = n;
  req.parallel.dp = dp;
  req.batching.max_tokens = cap;
  req.batching.max_seqs = max_seqs;
  pk_plan_t *plan = NULL;
  char err[512] = "";
  double t0 = bench_now_ms();
  if (pk_plan(&req, &plan, err, sizeof err) != 0) {
    printf("plan failed: %s\n", err);
    return -1;
  }
  *ms = bench_now_ms() - t0;
  *micro = plan->stats.micro_batches_per_rank;
  *bound = plan->stats.micro_batches_lower_bound;
  pk_plan_free(plan);
  return 0;
}

/* One setting's batches: how many plans are at the reference count
 * (the bound, or the known optimum), one above it and more; the most
 * above; the plan times (sorted by tally_finish). */
typedef struct tally {
  uint32_t at[3], worst;
  double ms[SWEEP_BATCHES];
  char seqs[16]; /* max_seqs as printed ("-": none). */
} tally_t;

static void tally_add(tally_t *t, uint32_t over) {
  t->at[over < 2 ? over : 2]++;
  t->worst = over > t->worst ? over : t->worst;
}

static void tally_finish(tally_t *t, uint32_t max_seqs) {
  qsort(t->ms, SWEEP_BATCHES, sizeof t->ms[0], bench_cmp_ms);
  if (max_seqs != 0)
    snprintf(t->seqs, sizeof t->seqs, "%u", max_seqs);
  else
    snprintf(t->seqs, sizeof t->seqs, "-");
}

/* The table against a known optimum (see sweep.h). */
static int sweep_exact_fill(sweep_rng_fn rng, uint32_t *len, double t_start) {
  const struct {
    uint32_t dp, parts_min, parts_max, max_seqs; /* max_seqs 0: none. */
  } settings[] = {{8, 2, 8, 0}, {64, 2, 8, 0}, {8, 2, 8, 8}, {64, 2, 8, 8}, {8, 8, 8, 8}};
  printf("\n## AUTO against a known optimum: %d batches of %d full micro-batches of %d tokens "
         "(PACKED)\n\n",
         SWEEP_BATCHES, FILL_BINS, FILL_CAP);
  printf("| dp | sequences per micro-batch | max_seqs | optimum per rank | = optimum | +1 | "
         "above +1 | worst | LB = optimum | median ms |\n");
  printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (size_t w = 0; w < sizeof settings / sizeof settings[0]; w++) {
    uint32_t lb_at_opt = 0, best = FILL_BINS / settings[w].dp;
    tally_t t = {0};
    for (uint32_t b = 0; b < SWEEP_BATCHES; b++) {
      fprintf(stderr, "[fill  %6.1fs] dp=%u parts=%u..%u batch %u\n",
              (bench_now_ms() - t_start) / 1e3, settings[w].dp, settings[w].parts_min,
              settings[w].parts_max, b);
      uint32_t n =
          gen_exact_fill(rng, 0x66696c6cull + b, settings[w].parts_min, settings[w].parts_max, len);
      uint32_t micro = 0, bound = 0;
      if (plan_counts(len, NULL, n, settings[w].dp, FILL_CAP, settings[w].max_seqs, &micro, &bound,
                      &t.ms[b]) != 0)
        return -1;
      lb_at_opt += bound == best;
      tally_add(&t, micro - best);
    }
    tally_finish(&t, settings[w].max_seqs);
    printf("| %u | %u to %u | %s | %u | %u | %u | %u | +%u | %u of %d | %.1f |\n", settings[w].dp,
           settings[w].parts_min, settings[w].parts_max, t.seqs, best, t.at[0], t.at[1], t.at[2],
           t.worst, lb_at_opt, SWEEP_BATCHES, t.ms[SWEEP_BATCHES / 2]);
  }
  return 0;
}

int sweep_run(sweep_gen_fn gen, sweep_rng_fn rng, uint32_t grid_resp_max, double t_start) {
  /* Beyond the grid: cap 8192 with responses up to 7168 tokens, so about a
   * fifth of the sequences exceed half the cap and leave gaps that only a
   * few short ones can close; and max_seqs 8 at cap 16384, where the count
   * and the tokens both bind; then one, two and four ranks (one node), where
   * a column is one to four micro-batches, so the count per rank follows
   * the micro-batch count of the whole batch one for one; last max_seqs 4,
   * where the count decides: the sequences cut at the length limit leave
   * no room for three more beside them. */
  const struct {
    uint32_t dp;
    uint64_t cap;
    uint32_t resp_max, max_seqs; /* max_seqs 0: none. */
  } settings[] = {{8, 16384, grid_resp_max, 0},
                  {8, 32768, grid_resp_max, 0},
                  {64, 16384, grid_resp_max, 0},
                  {64, 32768, grid_resp_max, 0},
                  {8, 8192, 7168, 0},
                  {64, 8192, 7168, 0},
                  {8, 16384, grid_resp_max, 8},
                  {64, 16384, grid_resp_max, 8},
                  {1, 16384, grid_resp_max, 0},
                  {1, 32768, grid_resp_max, 0},
                  {1, 8192, 7168, 0},
                  {2, 8192, 7168, 0},
                  {4, 8192, 7168, 0},
                  {8, 16384, grid_resp_max, 4},
                  {1, 16384, grid_resp_max, 4}};
  size_t cap_len = SWEEP_N > FILL_BINS * FILL_PARTS_MAX ? SWEEP_N : FILL_BINS * FILL_PARTS_MAX;
  uint32_t *len = malloc(cap_len * sizeof *len);
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
         "| max ms |\n");
  printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (size_t w = 0; w < sizeof settings / sizeof settings[0]; w++) {
    tally_t t = {0};
    for (uint32_t b = 0; b < SWEEP_BATCHES; b++) {
      fprintf(stderr, "[sweep %6.1fs] dp=%u cap=%llu batch %u\n", (bench_now_ms() - t_start) / 1e3,
              settings[w].dp, (unsigned long long)settings[w].cap, b);
      gen(0x73770000ull + b, SWEEP_N, settings[w].resp_max, len, loss);
      uint32_t micro = 0, bound = 0;
      if (plan_counts(len, loss, SWEEP_N, settings[w].dp, settings[w].cap, settings[w].max_seqs,
                      &micro, &bound, &t.ms[b]) != 0) {
        rc = -1;
        goto done;
      }
      tally_add(&t, micro - bound);
    }
    tally_finish(&t, settings[w].max_seqs);
    printf("| %u | %llu | %u | %s | %u | %u | %u | LB+%u | %.1f | %.1f |\n", settings[w].dp,
           (unsigned long long)settings[w].cap, settings[w].resp_max, t.seqs, t.at[0], t.at[1],
           t.at[2], t.worst, t.ms[SWEEP_BATCHES / 2], t.ms[SWEEP_BATCHES - 1]);
  }
  rc = sweep_exact_fill(rng, len, t_start);
done:
  free(len);
  free(loss);
  return rc;
}
