/* bench_planner: plans real and generated batches with AUTO and with every
 * peer's algorithm pair through the public API (pk_plan) and prints Markdown
 * tables of plan time, lock-step efficiency, DP imbalance, micro-batches per
 * rank against the lower bound, pad fraction and cap violations, then checks
 * AUTO's targets (plan time, efficiency, micro-batch count). See
 * bench/planner/README.md.
 *
 * Usage: bench_planner [--workloads DIR] [--quick] [--full] [--csv FILE]
 *                      [--reps-scale X] [--save-samples DIR] [--sweep-only]
 * --sweep-only prints only the micro-batch count sweeps (sweep.c).
 * --trace FILE writes AUTO's stage trace (trace.c); --auto-only skips the
 * peers' pairs; --cpu-time times the planning thread's CPU time instead of
 * wall-clock time (rounds.h).
 * --save-samples writes every batch planned to DIR/WORKLOAD_N_CAP.txt, one
 * length per line (for bench/planner/padded_exact.py and other tools).
 * Progress goes to stderr, tables to stdout. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_rng.h"
#include "pk_planner.h"
#include "rounds.h"
#include "sweep.h"
#include "trace.h"

#ifndef PK_SOURCE_DIR
#define PK_SOURCE_DIR "."
#endif

/* ---- Workloads ----------------------------------------------------------- */

/* A list of sequences: lengths and loss tokens (the response, or the whole
 * length for single-column files). Owned by the workload. */
typedef struct workload {
  const char *name;
  const char *file; /* NULL: generated. */
  uint32_t *len, *loss;
  size_t n;
} workload_t;

/* Reads `TOTAL` or `PROMPT RESPONSE` lines; `#` starts a comment. */
static int load_file(const char *path, workload_t *w) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    fprintf(stderr, "bench_planner: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 1 << 16;
  w->len = malloc(cap * sizeof(uint32_t));
  w->loss = malloc(cap * sizeof(uint32_t));
  w->n = 0;
  char line[256];
  while (w->len && w->loss && fgets(line, sizeof line, f) != NULL) {
    char *hash = strchr(line, '#');
    if (hash != NULL)
      *hash = '\0';
    unsigned long a, b;
    int got = sscanf(line, "%lu %lu", &a, &b);
    if (got <= 0)
      continue;
    if (w->n == cap) {
      cap *= 2;
      uint32_t *l = realloc(w->len, cap * sizeof(uint32_t));
      uint32_t *o = l ? realloc(w->loss, cap * sizeof(uint32_t)) : NULL;
      if (l == NULL || o == NULL) {
        free(l ? l : w->len);
        w->len = NULL;
        break;
      }
      w->len = l;
      w->loss = o;
    }
    w->len[w->n] = (uint32_t)(got == 2 ? a + b : a);
    w->loss[w->n] = (uint32_t)(got == 2 ? b : a);
    w->n++;
  }
  fclose(f);
  if (w->len == NULL || w->loss == NULL) {
    fprintf(stderr, "bench_planner: out of memory reading %s\n", path);
    return -1;
  }
  return 0;
}

/* Generated RL rollout: prompt U[64, 1024], response log-normal with
 * median 1500 (mu = ln 1500, sigma = 1) truncated at resp_max, and 3 % of
 * responses at resp_max (generations cut by the length limit). RESP_MAX =
 * 15360, the grid's, keeps every total within 16384, the smaller cap. */
#define RESP_MAX 15360u
static void gen_rollout_to(uint64_t seed, uint32_t n, uint32_t resp_max, uint32_t *len,
                           uint32_t *loss) {
  uint64_t s = seed;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t prompt = 64 + (uint32_t)(rng_next(&s) % 961);
    double u1 = rng_unit(&s) + 1e-300, u2 = rng_unit(&s);
    double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    double r = exp(log(1500.0) + z);
    uint32_t resp = r >= resp_max || rng_unit(&s) < 0.03 ? resp_max : (uint32_t)r;
    len[i] = prompt + resp;
    loss[i] = resp;
  }
}

static void gen_rollout(uint64_t seed, uint32_t n, uint32_t *len, uint32_t *loss) {
  gen_rollout_to(seed, n, RESP_MAX, len, loss);
}

/* ---- A tighter lower bound on micro-batches per rank ---------------------- */

static int cmp_u64_desc(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x > y ? -1 : (x < y ? 1 : 0);
}

/* The first index i of the descending array w[0..n) with w[i] <= x. */
static uint32_t first_le(const uint64_t *w, uint32_t n, uint64_t x) {
  uint32_t lo = 0, hi = n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (w[mid] <= x)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/* Every plan's micro-batches, pooled over the ranks, are a valid grouping of
 * all n items, so dp x (micro-batches per rank) >= G, the fewest groups any
 * grouping needs, and per rank >= ceil(G / dp). This returns a proven lower
 * bound on G:
 *
 * PADDED (a group fits when rows x widest row <= cap): G is exact. Sort the
 * widths descending; the largest remaining width w opens a group that takes
 * the floor(cap / w) largest remaining items. Exchange argument: in any
 * optimal grouping, the group holding the largest item w can hold at most
 * floor(cap / w) items; swapping larger items into it from other groups
 * keeps it feasible (its widest row is still w) and keeps the others
 * feasible (they lose width or rows), so some optimal grouping starts like
 * the greedy one; induct on the rest.
 *
 * PACKED (a group fits when the sum <= cap): Martello and Toth's L2 bound,
 * max over a in [0, cap/2] of |J1| + |J2| + max(0, ceil((sum J3 - (|J2| cap -
 * sum J2)) / cap)), J1 = {s > cap - a}, J2 = {cap/2 < s <= cap - a},
 * J3 = {a <= s <= cap/2}; a = 0 gives at least ceil(sum / cap). Items of
 * J1 and J2 need a group each; J3 items fit only in J2 groups' free space or
 * in further groups. */
static uint64_t pooled_groups_lb(const uint32_t *len, uint32_t n, uint64_t cap, bool padded,
                                 uint64_t round) {
  uint64_t *w = malloc((size_t)n * sizeof(uint64_t));
  if (w == NULL)
    return 0;
  for (uint32_t i = 0; i < n; i++)
    w[i] = padded ? (len[i] + round - 1) / round * round : len[i];
  qsort(w, n, sizeof(uint64_t), cmp_u64_desc);
  uint64_t g = 0;
  if (padded) {
    for (uint32_t i = 0; i < n;) {
      uint64_t take = w[i] ? cap / w[i] : n;
      g++;
      i = take >= n - i ? n : i + (uint32_t)take;
    }
  } else {
    /* Candidates for a: 0 and every size <= cap/2 (the bound only changes
     * there). Prefix sums over the descending order make each O(log n). */
    uint64_t *pre = malloc(((size_t)n + 1) * sizeof(uint64_t));
    if (pre == NULL) {
      free(w);
      return 0;
    }
    pre[0] = 0;
    for (uint32_t i = 0; i < n; i++)
      pre[i + 1] = pre[i] + w[i];
    uint32_t half = first_le(w, n, cap / 2); /* [0, half): s > cap/2. */
    for (uint32_t t = half; t <= n; t++) {
      uint64_t a = t == n ? 0 : w[t];
      if (t < n && t > half && w[t] == w[t - 1])
        continue;
      uint32_t j1 = a == 0 ? 0 : first_le(w, n, cap - a);  /* [0, j1): s > cap - a. */
      uint32_t j3end = a == 0 ? n : first_le(w, n, a - 1); /* [half, j3end): a <= s <= cap/2. */
      uint64_t n2 = half - j1, s2 = pre[half] - pre[j1];
      uint64_t s3 = pre[j3end] - pre[half];
      uint64_t free2 = n2 * cap - s2;
      uint64_t extra = s3 > free2 ? (s3 - free2 + cap - 1) / cap : 0;
      uint64_t l = j1 + n2 + extra;
      g = l > g ? l : g;
    }
    free(pre);
  }
  free(w);
  return g;
}

/* ---- Algorithms ---------------------------------------------------------- */

#define MODE_PACKED_BIT 1
#define MODE_PADDED_BIT 2

typedef struct algo {
  const char *name;
  const char *peer;
  uint32_t dp_balance, micro_algo, order;
  bool equal_count;
  uint32_t pad_multiple;
  int modes;
} algo_t;

/* AUTO first; then the pairs the peers run (as packd's compatibility modes
 * reproduce them), and two
 * pairs that cover the free-count KK and LPT. */
static const algo_t k_algos[] = {
    {"auto", "packd", PK_DP_AUTO, PK_MICRO_AUTO, PK_ORDER_COST_DESC, false, 0, 3},
    {"verl", "KK_EQUAL + KK_COUNT, heavy middle", PK_DP_KK_EQUAL, PK_MICRO_KK_COUNT,
     PK_ORDER_HEAVY_MIDDLE, true, 0, 3},
    {"roll-dyn", "SORTED_STRIDE + NEXT_FIT (shared boundaries)", PK_DP_SORTED_STRIDE,
     PK_MICRO_NEXT_FIT, PK_ORDER_ORIGINAL, true, 0, MODE_PADDED_BIT},
    {"roll-pack", "KK_EQUAL + KK_COUNT, pad 16, heavy middle", PK_DP_KK_EQUAL, PK_MICRO_KK_COUNT,
     PK_ORDER_HEAVY_MIDDLE, true, 16, MODE_PACKED_BIT},
    {"mindspeed", "LPT_EQUAL + LPT_CAP", PK_DP_LPT_EQUAL, PK_MICRO_LPT_CAP, PK_ORDER_ORIGINAL, true,
     0, 3},
    {"nemo", "NONE + MFFD", PK_DP_NONE, PK_MICRO_MFFD, PK_ORDER_ORIGINAL, false, 0, 3},
    {"slime", "NONE + FFD", PK_DP_NONE, PK_MICRO_FFD, PK_ORDER_ORIGINAL, false, 0, 3},
    {"openrlhf", "NONE + KK_COUNT", PK_DP_NONE, PK_MICRO_KK_COUNT, PK_ORDER_ORIGINAL, false, 0, 3},
    {"kk+ffd", "KK (free) + FFD", PK_DP_KK, PK_MICRO_FFD, PK_ORDER_COST_DESC, false, 0, 3},
    {"lpt+mffd", "LPT (free) + MFFD", PK_DP_LPT, PK_MICRO_MFFD, PK_ORDER_COST_DESC, false, 0, 3},
};
#define NALGOS (sizeof(k_algos) / sizeof(k_algos[0]))

/* ---- One measurement ----------------------------------------------------- */

typedef struct result {
  bool ran, failed;
  char why[160];
  double ms; /* Median wall-clock time of pk_plan. */
  pk_stats_t st;
  uint32_t violations; /* Counted from the micro-batches, not from stats. */
  uint32_t max_micro;  /* Largest micro count of any rank (equal on all). */
} result_t;

/* trace: NULL, or where AUTO records the trace of its last mini-batch. */
static void measure(const pk_request_t *req, int reps, result_t *res, struct pk_auto_trace *trace) {
  double t[64];
  const pk_limits_t limits = {.trace = trace};
  pk_plan_t *plan = NULL;
  char err[512] = "";
  if (reps > 64)
    reps = 64;
  memset(res, 0, sizeof *res);
  for (int i = 0; i < reps; i++) {
    pk_plan_free(plan);
    plan = NULL;
    double t0 = bench_now_ms();
    int rc = pk_plan_limited(req, &limits, &plan, err, sizeof err);
    t[i] = bench_now_ms() - t0;
    if (rc != 0) {
      res->ran = true;
      res->failed = true;
      snprintf(res->why, sizeof res->why, "%s: %s", pk_strerror(rc), err);
      return;
    }
  }
  qsort(t, (size_t)reps, sizeof(double), bench_cmp_ms);
  res->ran = true;
  res->ms = reps % 2 ? t[reps / 2] : (t[reps / 2 - 1] + t[reps / 2]) / 2;
  res->st = plan->stats;
  uint64_t cap = req->batching.max_tokens;
  uint32_t cp = req->parallel.cp ? req->parallel.cp : 1;
  for (uint32_t r = 0; r < plan->dp; r++)
    for (uint32_t b = 0; b < plan->mini_batches; b++) {
      const pk_cell_t *c = pk_plan_cell(plan, r, b);
      res->max_micro = c->nmicros > res->max_micro ? c->nmicros : res->max_micro;
      for (uint32_t j = 0; j < c->nmicros; j++) {
        const pk_micro_t *m = &c->micros[j];
        if ((cap > 0 && m->padded_tokens > cap * cp) ||
            (req->batching.max_seqs > 0 && m->nseqs > req->batching.max_seqs))
          res->violations++;
      }
    }
  pk_plan_free(plan);
}

/* ---- Aggregates per algorithm -------------------------------------------- */

typedef struct agg {
  uint32_t planned, failed, skipped;
  double eff_sum, eff_min;
  uint32_t eff_n; /* Configs with n / dp >= 16. */
  double imb_sum, imb_max;
  uint32_t at_lb, le_lb1, at_tlb;
  double ratio_sum;
  double pad_sum[2];
  uint32_t pad_n[2];
  uint64_t violations;
  double ms_max[3];
  double ms_sum[3];
  uint32_t ms_n[3];
} agg_t;

typedef struct targets {
  uint32_t t1_n, t1_hit, t2_n, t2_hit, eff_n, eff_hit, micro_n, micro_lb, micro_gt1, viol;
  uint32_t micro_tlb, micro_gt1_tlb;
  double t1_worst, t2_worst;
} targets_t;

static int n_index(uint32_t n) {
  return n <= 512 ? 0 : (n <= 4096 ? 1 : 2);
}

/* ---- Main ---------------------------------------------------------------- */

/* Writes one batch to DIR/NAME_N_CAP.txt, one length per line. */
static int save_sample(const char *dir, const char *name, uint32_t n, uint64_t cap,
                       const uint32_t *len) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s_%u_%llu.txt", dir, name, n, (unsigned long long)cap);
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "bench_planner: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  for (uint32_t i = 0; i < n; i++)
    fprintf(f, "%u\n", len[i]);
  if (fclose(f) != 0) {
    fprintf(stderr, "bench_planner: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: bench_planner [--workloads DIR] [--quick] [--full] [--sweep-only] [--csv FILE] "
          "[--reps-scale X] [--save-samples DIR] [--trace FILE] [--auto-only] [--cpu-time]\n");
}

int main(int argc, char **argv) {
  const char *dir = PK_SOURCE_DIR "/bench/workloads";
  const char *csv_path = NULL, *samples_dir = NULL, *trace_path = NULL;
  bool quick = false, full = false, sweep_only = false, auto_only = false;
  double reps_scale = 1.0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--workloads") == 0 && i + 1 < argc)
      dir = argv[++i];
    else if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc)
      csv_path = argv[++i];
    else if (strcmp(argv[i], "--save-samples") == 0 && i + 1 < argc)
      samples_dir = argv[++i];
    else if (strcmp(argv[i], "--reps-scale") == 0 && i + 1 < argc)
      reps_scale = atof(argv[++i]);
    else if (strcmp(argv[i], "--trace") == 0 && i + 1 < argc)
      trace_path = argv[++i];
    else if (strcmp(argv[i], "--auto-only") == 0)
      auto_only = true;
    else if (strcmp(argv[i], "--cpu-time") == 0)
      bench_use_cpu_time();
    else if (strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (strcmp(argv[i], "--full") == 0)
      full = true;
    else if (strcmp(argv[i], "--sweep-only") == 0)
      sweep_only = true;
    else {
      usage();
      return 2;
    }
  }
  if (!(reps_scale > 0)) {
    fprintf(stderr, "bench_planner: --reps-scale must be > 0\n");
    return 2;
  }
  if (sweep_only) {
    printf("# bench_planner --sweep-only\n");
    return sweep_run(gen_rollout_to, rng_next, RESP_MAX, bench_now_ms()) != 0;
  }

  workload_t wl[] = {
      {"rollout", NULL, NULL, NULL, 0},
      {"azure-conv", "azure_conv_2023.txt", NULL, NULL, 0},
      {"azure-code", "azure_code_2023.txt", NULL, NULL, 0},
      {"wikipedia", "wikipedia_doc_lengths.txt", NULL, NULL, 0},
  };
  const size_t nwl = sizeof wl / sizeof wl[0];
  for (size_t w = 0; w < nwl; w++) {
    if (wl[w].file == NULL)
      continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, wl[w].file);
    if (load_file(path, &wl[w]) != 0)
      return 1;
  }
  static const uint32_t ns_full[] = {512, 4096, 65536}, ns_quick[] = {512, 4096};
  static const uint32_t dps[] = {8, 64, 512};
  static const uint64_t caps[] = {16384, 32768};
  const uint32_t *ns = quick ? ns_quick : ns_full;
  size_t nns = quick ? 2 : 3;
  const size_t ndps = 3, ncaps = 2;

  FILE *csv = NULL;
  if (csv_path != NULL) {
    csv = fopen(csv_path, "w");
    if (csv == NULL) {
      fprintf(stderr, "bench_planner: cannot write %s: %s\n", csv_path, strerror(errno));
      return 1;
    }
    fprintf(csv,
            "workload,n,dp,cap,mode,algo,status,time_ms,lockstep_eff,lockstep_eff_bound,"
            "dp_imbalance,micro_per_rank,micro_lb,micro_tight_lb,pad_fraction,cap_violations\n");
  }
  FILE *trace = trace_path != NULL ? fopen(trace_path, "w") : NULL;
  if (trace_path != NULL && trace == NULL) {
    fprintf(stderr, "bench_planner: cannot write %s: %s\n", trace_path, strerror(errno));
    return 1;
  }
  struct pk_auto_trace *auto_trace = trace != NULL ? trace_alloc() : NULL;
  if (trace != NULL && auto_trace == NULL) {
    fprintf(stderr, "bench_planner: out of memory\n");
    return 1;
  }
  if (trace != NULL)
    trace_header(trace);

  printf("# bench_planner\n\n");
  printf("Workloads: `rollout` = prompt U[64,1024] + response log-normal(mu ln 1500, sigma 1) "
         "truncated at %u, 3 %% of responses at %u (total <= 16384); azure-conv / azure-code / "
         "wikipedia = bench/workloads files, sampled with replacement (seeded), lengths above the "
         "cap removed first. DP in {8, 64, 512}, caps 16384 / 32768 tokens, TP = CP = 1, one "
         "mini-batch, PADDED rows rounded to 128.\n\n",
         RESP_MAX, RESP_MAX);

  agg_t agg[NALGOS];
  memset(agg, 0, sizeof agg);
  for (size_t a = 0; a < NALGOS; a++)
    agg[a].eff_min = 1.0;
  targets_t tg = {0};
  /* AUTO at n = 4096, DP 64, timed again round robin after the grid. */
  static rounds_set_t timed;
  uint32_t *len = malloc(65536 * sizeof(uint32_t));
  uint32_t *loss = malloc(65536 * sizeof(uint32_t));
  uint32_t *pool_len = NULL, *pool_loss = NULL;
  if (len == NULL || loss == NULL)
    return 1;

  {
    /* What the generated distribution looks like (the largest sample). */
    uint32_t gn = ns[nns - 1];
    gen_rollout(0x5eed0000ull + (nns - 1) * 10, gn, len, loss);
    uint64_t *sorted = malloc((size_t)gn * sizeof(uint64_t));
    if (sorted == NULL)
      return 1;
    uint64_t tot = 0;
    uint32_t at_max = 0;
    for (uint32_t i = 0; i < gn; i++) {
      sorted[i] = len[i];
      tot += len[i];
      at_max += loss[i] == RESP_MAX;
    }
    qsort(sorted, gn, sizeof(uint64_t), cmp_u64_desc);
    printf("rollout sample (n=%u): mean %.0f, p50 %llu, p90 %llu, p99 %llu, max %llu tokens; "
           "%.1f %% of responses at %u.\n\n",
           gn, (double)tot / gn, (unsigned long long)sorted[gn / 2],
           (unsigned long long)sorted[gn / 10], (unsigned long long)sorted[gn / 100],
           (unsigned long long)sorted[0], 100.0 * at_max / gn, RESP_MAX);
    free(sorted);
  }

  if (full) {
    printf("## Every configuration\n\n");
    printf("| workload | n | dp | cap | mode | algo | time ms | lock-step eff | eff bound | DP "
           "imbalance | micro/rank (LB, tight LB) | pad frac | cap viol |\n");
    printf("|---|---:|---:|---:|---|---|---:|---:|---:|---:|---|---:|---:|\n");
  }
  char auto_rows[200][200];
  size_t nauto = 0;
  size_t total_cfg = nwl * nns * ncaps * ndps * 2, done_cfg = 0;
  double t_start = bench_now_ms();

  for (size_t w = 0; w < nwl; w++) {
    for (size_t ci = 0; ci < ncaps; ci++) {
      uint64_t cap = caps[ci];
      /* The pool of lengths that fit the cap alone. */
      size_t pn = 0;
      if (wl[w].file != NULL) {
        free(pool_len);
        free(pool_loss);
        pool_len = malloc(wl[w].n * sizeof(uint32_t));
        pool_loss = malloc(wl[w].n * sizeof(uint32_t));
        if (pool_len == NULL || pool_loss == NULL)
          return 1;
        for (size_t i = 0; i < wl[w].n; i++)
          if (wl[w].len[i] <= cap) {
            pool_len[pn] = wl[w].len[i];
            pool_loss[pn] = wl[w].loss[i];
            pn++;
          }
        if (pn < wl[w].n)
          printf("Note: %s, cap %llu: %zu of %zu sequences are longer than the cap and were "
                 "removed before sampling.\n\n",
                 wl[w].name, (unsigned long long)cap, wl[w].n - pn, wl[w].n);
      }
      for (size_t ni = 0; ni < nns; ni++) {
        uint32_t n = ns[ni];
        uint64_t seed = 0x5eed0000ull + w * 1000 + ni * 10 + ci;
        if (wl[w].file == NULL) {
          gen_rollout(seed, n, len, loss);
        } else {
          uint64_t s = seed;
          for (uint32_t i = 0; i < n; i++) {
            size_t k = (size_t)(rng_next(&s) % pn);
            len[i] = pool_len[k];
            loss[i] = pool_loss[k];
          }
        }
        if (samples_dir != NULL && save_sample(samples_dir, wl[w].name, n, cap, len) != 0)
          return 1;
        uint64_t sum = 0;
        for (uint32_t i = 0; i < n; i++)
          sum += len[i];
        /* Pooled group bounds for the tight per-rank lower bound. */
        uint64_t pooled[2] = {pooled_groups_lb(len, n, cap, false, 1),
                              pooled_groups_lb(len, n, cap, true, 128)};
        for (size_t di = 0; di < ndps; di++) {
          uint32_t dp = dps[di];
          for (int mode = 0; mode < 2; mode++) {
            done_cfg++;
            fprintf(stderr, "[%3zu/%zu %6.1fs] %-10s n=%-5u dp=%-3u cap=%-5llu %s\n", done_cfg,
                    total_cfg, (bench_now_ms() - t_start) / 1e3, wl[w].name, n, dp,
                    (unsigned long long)cap, mode ? "padded" : "packed");
            /* Packed tokens bound the micro count from below in both modes. */
            uint64_t lb = (sum + dp * cap - 1) / (dp * cap);
            lb = lb ? lb : 1;
            bool skip = (uint64_t)n < dp * lb;
            uint64_t tlb = (pooled[mode] + dp - 1) / dp;
            for (size_t a = 0; a < NALGOS; a++) {
              const algo_t *al = &k_algos[a];
              if (!(al->modes & (mode ? MODE_PADDED_BIT : MODE_PACKED_BIT)) ||
                  (auto_only && al->dp_balance != PK_DP_AUTO))
                continue;
              const char *mname = mode ? "padded" : "packed";
              if (skip) {
                agg[a].skipped++;
                if (csv)
                  fprintf(csv, "%s,%u,%u,%llu,%s,%s,skipped,,,,,,,,,\n", wl[w].name, n, dp,
                          (unsigned long long)cap, mname, al->name);
                continue;
              }
              pk_request_t req;
              memset(&req, 0, sizeof req);
              req.lengths = len;
              req.n = n;
              req.loss_tokens = loss;
              req.n_loss_tokens = n;
              req.parallel.dp = dp;
              req.batching.mode = mode ? PK_MODE_PADDED : PK_MODE_PACKED;
              req.batching.max_tokens = cap;
              req.batching.round = mode ? 128 : 0;
              req.batching.dp_balance = al->dp_balance;
              req.batching.micro_algo = al->micro_algo;
              req.batching.order = al->order;
              req.batching.equal_count = al->equal_count;
              req.layout.pad_multiple = al->pad_multiple;
              req.seed = 1;
              bool is_auto = al->dp_balance == PK_DP_AUTO;
              /* AUTO at n = 4096 has a target of 1 ms on a VM whose
               * slow spells last a few milliseconds: 15 calls, so that one
               * spell cannot move the median. */
              int reps = n <= 512 ? 9 : (is_auto ? (n <= 4096 ? 15 : 3) : (n <= 4096 ? 3 : 1));
              reps = (int)(reps * reps_scale + 0.5);
              reps = reps < 1 ? 1 : reps;
              result_t res;
              measure(&req, reps, &res, is_auto ? auto_trace : NULL);
              if (is_auto && trace != NULL)
                trace_rows(trace, auto_trace, wl[w].name, n, dp, cap, mname);
              agg_t *g = &agg[a];
              if (res.failed) {
                g->failed++;
                if (full)
                  printf("| %s | %u | %u | %llu | %s | %s | failed: %s |||||||\n", wl[w].name, n,
                         dp, (unsigned long long)cap, mname, al->name, res.why);
                if (csv)
                  fprintf(csv, "%s,%u,%u,%llu,%s,%s,failed,,,,,,,,,\n", wl[w].name, n, dp,
                          (unsigned long long)cap, mname, al->name);
                if (is_auto) {
                  tg.micro_n++;
                  tg.micro_gt1++;
                  tg.micro_gt1_tlb++;
                }
                continue;
              }
              const pk_stats_t *st = &res.st;
              g->planned++;
              bool big = n / dp >= 16;
              if (big) {
                g->eff_sum += st->lockstep_efficiency;
                g->eff_min = fmin(g->eff_min, st->lockstep_efficiency);
                g->eff_n++;
              }
              g->imb_sum += st->dp_imbalance;
              g->imb_max = fmax(g->imb_max, st->dp_imbalance);
              g->at_lb += st->micro_batches_per_rank == st->micro_batches_lower_bound;
              uint64_t tight =
                  tlb > st->micro_batches_lower_bound ? tlb : st->micro_batches_lower_bound;
              g->at_tlb += st->micro_batches_per_rank <= tight;
              g->le_lb1 += st->micro_batches_per_rank <= st->micro_batches_lower_bound + 1;
              g->ratio_sum +=
                  (double)st->micro_batches_per_rank / (double)st->micro_batches_lower_bound;
              g->pad_sum[mode] += st->pad_fraction;
              g->pad_n[mode]++;
              g->violations += res.violations + st->cap_violations;
              int nix = n_index(n);
              g->ms_sum[nix] += res.ms;
              g->ms_n[nix]++;
              g->ms_max[nix] = fmax(g->ms_max[nix], res.ms);
              char row[200];
              snprintf(row, sizeof row,
                       "| %s | %u | %u | %llu | %s | %s | %.3f | %.4f | %.4f | %.4f | %u (%u, "
                       "%llu) | %.4f | %u |",
                       wl[w].name, n, dp, (unsigned long long)cap, mname, al->name, res.ms,
                       st->lockstep_efficiency, st->lockstep_efficiency_bound, st->dp_imbalance,
                       st->micro_batches_per_rank, st->micro_batches_lower_bound,
                       (unsigned long long)tight, st->pad_fraction, res.violations);
              if (full)
                printf("%s\n", row);
              if (csv)
                fprintf(csv, "%s,%u,%u,%llu,%s,%s,ok,%.4f,%.6f,%.6f,%.6f,%u,%u,%llu,%.6f,%u\n",
                        wl[w].name, n, dp, (unsigned long long)cap, mname, al->name, res.ms,
                        st->lockstep_efficiency, st->lockstep_efficiency_bound, st->dp_imbalance,
                        st->micro_batches_per_rank, st->micro_batches_lower_bound,
                        (unsigned long long)tight, st->pad_fraction, res.violations);
              tg.viol += res.violations + st->cap_violations;
              if (is_auto) {
                if (nauto < 200)
                  snprintf(auto_rows[nauto++], sizeof auto_rows[0], "%s", row);
                if (n == 4096 && dp == 64) {
                  tg.t1_n++;
                  tg.t1_hit += res.ms <= 1.0;
                  tg.t1_worst = fmax(tg.t1_worst, res.ms);
                  char label[96];
                  snprintf(label, sizeof label, "%s | %llu | %s", wl[w].name,
                           (unsigned long long)cap, mname);
                  if (rounds_add(&timed, label, &req, res.ms) != 0) {
                    fprintf(stderr, "bench_planner: out of memory\n");
                    return 1;
                  }
                }
                if (n == 65536) {
                  tg.t2_n++;
                  tg.t2_hit += res.ms <= 30.0;
                  tg.t2_worst = fmax(tg.t2_worst, res.ms);
                }
                if (big) {
                  tg.eff_n++;
                  /* Hit: >= 0.995, or step cost within 0.5 % of the proven
                   * lower bound (eff >= bound / 1.005). */
                  tg.eff_hit += st->lockstep_efficiency >= 0.995 ||
                                st->lockstep_efficiency * 1.005 >= st->lockstep_efficiency_bound;
                }
                tg.micro_n++;
                tg.micro_lb += st->micro_batches_per_rank == st->micro_batches_lower_bound;
                tg.micro_gt1 += st->micro_batches_per_rank > st->micro_batches_lower_bound + 1;
                tg.micro_tlb += st->micro_batches_per_rank <= tight;
                tg.micro_gt1_tlb += st->micro_batches_per_rank > tight + 1;
              }
            }
            if (skip)
              printf("Note: skipped %s n=%u dp=%u cap=%llu %s: n < dp x %llu needed "
                     "micro-batches.\n\n",
                     wl[w].name, n, dp, (unsigned long long)cap, mode ? "padded" : "packed",
                     (unsigned long long)lb);
          }
        }
      }
    }
  }
  if (full)
    printf("\n");
  if (csv)
    fclose(csv);
  if (trace)
    fclose(trace);
  free(auto_trace);

  printf("## Summary per algorithm\n\n");
  printf("Times are medians of repeated pk_plan calls per configuration, then the mean (max) "
         "over configurations. Efficiency over configurations with n/dp >= 16.\n\n");
  printf("| algo | pair | planned | failed | skipped | ms n=512 | ms n=4096 | ms n=65536 | "
         "eff mean | eff min | DP imb mean | DP imb max | micro = LB | <= LB+1 | = tight LB | "
         "micro/LB | pad packed | pad padded | cap viol |\n");
  printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
         "---:|\n");
  for (size_t a = 0; a < NALGOS; a++) {
    const agg_t *g = &agg[a];
    char ms[3][48];
    for (int i = 0; i < 3; i++) {
      if (g->ms_n[i])
        snprintf(ms[i], sizeof ms[i], "%.3f (%.3f)", g->ms_sum[i] / g->ms_n[i], g->ms_max[i]);
      else
        snprintf(ms[i], sizeof ms[i], "-");
    }
    uint32_t p = g->planned ? g->planned : 1;
    char pad0[16] = "-", pad1[16] = "-";
    if (g->pad_n[0])
      snprintf(pad0, sizeof pad0, "%.4f", g->pad_sum[0] / g->pad_n[0]);
    if (g->pad_n[1])
      snprintf(pad1, sizeof pad1, "%.4f", g->pad_sum[1] / g->pad_n[1]);
    printf("| %s | %s | %u | %u | %u | %s | %s | %s | %.4f | %.4f | %.4f | %.4f | %.1f %% | %.1f "
           "%% | %.1f %% | %.3f | %s | %s | %llu |\n",
           k_algos[a].name, k_algos[a].peer, g->planned, g->failed, g->skipped, ms[0], ms[1], ms[2],
           g->eff_n ? g->eff_sum / g->eff_n : 0.0, g->eff_n ? g->eff_min : 0.0, g->imb_sum / p,
           g->imb_max, 100.0 * g->at_lb / p, 100.0 * g->le_lb1 / p, 100.0 * g->at_tlb / p,
           g->ratio_sum / p, pad0, pad1, (unsigned long long)g->violations);
  }

  printf("\n## AUTO, every configuration\n\n");
  printf("| workload | n | dp | cap | mode | algo | time ms | lock-step eff | eff bound | DP "
         "imbalance | micro/rank (LB, tight LB) | pad frac | cap viol |\n");
  printf("|---|---:|---:|---:|---|---|---:|---:|---:|---:|---|---:|---:|\n");
  for (size_t i = 0; i < nauto; i++)
    printf("%s\n", auto_rows[i]);

  /* The 1 ms target from the round-robin medians (rounds.h): 51 calls per
   * configuration, each round over all of them. */
  int rounds = (int)(51 * reps_scale + 0.5);
  rounds = rounds < 5 ? 5 : rounds;
  bool rounds_ok = timed.count > 0;
  if (rounds_ok) {
    fprintf(stderr, "round-robin timing: %d rounds over %u configurations\n", rounds, timed.count);
    rounds_ok = rounds_run(&timed, rounds) == 0;
  }
  uint32_t rr_hit = 0;
  double rr_worst = 0;
  for (uint32_t i = 0; rounds_ok && i < timed.count; i++) {
    rr_hit += timed.cfg[i].median_ms <= 1.0;
    rr_worst = fmax(rr_worst, timed.cfg[i].median_ms);
  }

  printf("\n## AUTO targets\n\n");
  printf("| target | result | verdict |\n|---|---|---|\n");
  if (rounds_ok)
    printf("| n=4096, DP 64: plan <= 1 ms (round-robin medians, below) | %u of %u configs, worst "
           "%.3f ms (grid medians: %u of %u, worst %.3f ms) | %s |\n",
           rr_hit, timed.count, rr_worst, tg.t1_hit, tg.t1_n, tg.t1_worst,
           rr_hit == timed.count ? "hit" : "MISS");
  else if (tg.t1_n)
    printf("| n=4096, DP 64: plan <= 1 ms | %u of %u configs, worst %.3f ms | %s |\n", tg.t1_hit,
           tg.t1_n, tg.t1_worst, tg.t1_hit == tg.t1_n ? "hit" : "MISS");
  if (tg.t2_n)
    printf("| n=65536: plan <= 30 ms | %u of %u configs, worst %.3f ms | %s |\n", tg.t2_hit,
           tg.t2_n, tg.t2_worst, tg.t2_hit == tg.t2_n ? "hit" : "MISS");
  printf("| lock-step eff >= 0.995 (or within 0.5 %% of the bound) where n/dp >= 16 | %u of %u "
         "configs | %s |\n",
         tg.eff_hit, tg.eff_n, tg.eff_hit == tg.eff_n ? "hit" : "MISS");
  double lbpct = tg.micro_n ? 100.0 * tg.micro_lb / tg.micro_n : 0.0;
  printf("| micro-batches = LB in >= 95 %% of configs | %u of %u (%.1f %%) | %s |\n", tg.micro_lb,
         tg.micro_n, lbpct, lbpct >= 95.0 ? "hit" : "MISS");
  printf("| micro-batches never above LB+1 | %u configs above | %s |\n", tg.micro_gt1,
         tg.micro_gt1 == 0 ? "hit" : "MISS");
  double tpct = tg.micro_n ? 100.0 * tg.micro_tlb / tg.micro_n : 0.0;
  printf("| the same two against the tight bound (pooled groups / dp) | %u of %u (%.1f %%) at the "
         "bound, %u above bound+1 | %s |\n",
         tg.micro_tlb, tg.micro_n, tpct, tg.micro_gt1_tlb,
         tpct >= 95.0 && tg.micro_gt1_tlb == 0 ? "hit" : "MISS");
  printf("| 0 cap violations (all algorithms) | %u | %s |\n", tg.viol,
         tg.viol == 0 ? "hit" : "MISS");
  if (rounds_ok) {
    printf("\n## AUTO n = 4096, DP 64: round-robin timing\n\n");
    printf("Each configuration timed once per round, %d rounds over all %u in turn, after the "
           "grid (the grid's median comes from back-to-back calls of one configuration).\n\n",
           rounds, timed.count);
    printf("| workload | cap | mode | median ms | min ms | max ms | grid median ms |\n");
    printf("|---|---:|---|---:|---:|---:|---:|\n");
    for (uint32_t i = 0; i < timed.count; i++)
      printf("| %s | %.3f | %.3f | %.3f | %.3f |\n", timed.cfg[i].label, timed.cfg[i].median_ms,
             timed.cfg[i].min_ms, timed.cfg[i].max_ms, timed.cfg[i].grid_ms);
  }
  rounds_free(&timed);
  /* KK scaling: DP balance alone (no cap, one micro-batch per rank), so the
   * plan time is KK's. verl's Python KK (equal_size=False) takes seconds at
   * n = 16384, k = 512. */
  printf("\n## Karmarkar-Karp scaling (dp_balance KK / KK_EQUAL, no cap, rollout lengths)\n\n");
  printf("| n | dp | KK ms | KK DP imbalance | KK_EQUAL ms | KK_EQUAL DP imbalance |\n");
  printf("|---:|---:|---:|---:|---:|---:|\n");
  static const uint32_t kk_ns[] = {4096, 16384, 65536};
  for (size_t ni = 0; ni < (quick ? 2u : 3u); ni++) {
    uint32_t n = kk_ns[ni];
    gen_rollout(0x6b6b0000ull + ni, n, len, loss);
    for (size_t di = 0; di < ndps; di++) {
      uint32_t dp = dps[di];
      result_t r[2];
      for (int e = 0; e < 2; e++) {
        fprintf(stderr, "[kk %6.1fs] n=%u dp=%u %s\n", (bench_now_ms() - t_start) / 1e3, n, dp,
                e ? "kk_equal" : "kk");
        pk_request_t req;
        memset(&req, 0, sizeof req);
        req.lengths = len;
        req.n = n;
        req.parallel.dp = dp;
        req.batching.dp_balance = e ? PK_DP_KK_EQUAL : PK_DP_KK;
        req.batching.micro_algo = PK_MICRO_NEXT_FIT;
        measure(&req, 3, &r[e], NULL);
      }
      printf("| %u | %u | %.2f | %.5f | %.2f | %.5f |\n", n, dp, r[0].ms, r[0].st.dp_imbalance,
             r[1].ms, r[1].st.dp_imbalance);
    }
  }
  /* Micro-batch counts over many random rollout batches (sweep.c). */
  if (!quick && sweep_run(gen_rollout_to, rng_next, RESP_MAX, t_start) != 0)
    return 1;
  fprintf(stderr, "bench_planner: done in %.1f s\n", (bench_now_ms() - t_start) / 1e3);

  free(len);
  free(loss);
  free(pool_len);
  free(pool_loss);
  for (size_t w = 0; w < nwl; w++) {
    free(wl[w].len);
    free(wl[w].loss);
  }
  return 0;
}
