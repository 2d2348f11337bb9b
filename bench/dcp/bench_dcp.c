/* bench_dcp: plans or scores one dynamic context-parallel batch per input
 * line and prints one JSON line per input line (bench/dcp/run.py drives
 * it; README.md in this folder).
 *
 * Input lines, fields separated by spaces, sections by " | ":
 *   plan ALGO DP CP TP CAP LIN QUAD SEQ MICRO CP_TOKEN CP_GROUP | LENGTHS
 *     ALGO: auto or megatron (pk_dcp_plan), or fixed: packd's fixed-CP
 *     AUTO (pk_plan with cp CP) with every micro-batch of DP rank r taken
 *     as a group of CP GPUs at r x CP and priced with the dynamic cost;
 *   score DP CP TP CAP LIN QUAD SEQ MICRO CP_TOKEN CP_GROUP | LENGTHS | GROUPS
 *     GROUPS: "slot size i,j,k;slot size i;..." from another scheduler,
 *     priced with the same cost (pk_dcp_group_cost); a group over the cap
 *     is counted, not refused.
 * Output: step, bound (packd's proven bound for the batch), slots,
 * cap_violations (groups whose aligned tokens per GPU pass CAP),
 * max_gpu_tokens, idle GPU-slots, plan time in microseconds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pk_dcp.h"
#include "pk_planner.h"

#define MAX_LINE (64u << 20)

static uint64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint32_t parse_lengths(char *s, uint32_t **out) {
  size_t cap = 1024, n = 0;
  uint32_t *v = malloc(cap * sizeof *v);
  char *end;
  for (;;) {
    unsigned long x = strtoul(s, &end, 10);
    if (end == s)
      break;
    if (n == cap)
      v = realloc(v, (cap *= 2) * sizeof *v);
    v[n++] = (uint32_t)x;
    s = end;
  }
  *out = v;
  return (uint32_t)n;
}

static void print_stats(double step, double bound, uint32_t slots, uint32_t viol, uint64_t maxtok,
                        uint32_t idle, uint64_t us) {
  printf("{\"status\":\"ok\",\"step\":%.6f,\"bound\":%.6f,\"slots\":%u,\"cap_violations\":%u,"
         "\"max_gpu_tokens\":%llu,\"idle\":%u,\"time_us\":%llu}\n",
         step, bound, slots, viol, (unsigned long long)maxtok, idle, (unsigned long long)us);
}

static void print_error(const char *msg) {
  printf("{\"status\":\"error\",\"message\":\"");
  for (const char *p = msg; *p; p++)
    putchar(*p == '"' ? '\'' : *p);
  printf("\"}\n");
}

/* packd's fixed-CP AUTO on the same pool, priced with the dynamic cost. Its
 * own cost model is the dynamic one at c = CP scaled by CP (so that AUTO
 * optimises what it is judged by): linear + cp_token (CP - 1), quadratic,
 * per_sequence x CP, (per_micro_batch + cp_group (CP - 1)) x CP. */
static void run_fixed(const pk_dcp_request_t *d) {
  uint32_t cp = d->cp;
  const pk_cost_model_t *b = &d->cost.base;
  double lin = b->linear, quad = b->quadratic;
  if (lin == 0 && quad == 0) {
    lin = 1;
    quad = 1.0 / 24576;
  }
  pk_request_t req = {.lengths = d->lengths, .n = d->n};
  req.parallel.dp = d->dp;
  req.parallel.cp = cp;
  req.parallel.tp = d->tp;
  req.batching.max_tokens = d->max_tokens;
  req.cost.linear = lin + d->cost.cp_token * (cp - 1);
  req.cost.quadratic = quad;
  req.cost.per_sequence = b->per_sequence * cp;
  req.cost.per_micro_batch = (b->per_micro_batch + d->cost.cp_group * (cp - 1)) * cp;
  pk_plan_t *plan = NULL;
  char err[512];
  uint64_t t0 = now_us();
  if (pk_plan(&req, &plan, err, sizeof err) != 0) {
    print_error(err);
    return;
  }
  uint64_t us = now_us() - t0;
  double step = 0;
  uint32_t viol = 0;
  uint64_t maxtok = 0;
  uint32_t nmicro = pk_plan_cell(plan, 0, 0)->nmicros;
  for (uint32_t j = 0; j < nmicro; j++) {
    double mx = 0;
    for (uint32_t r = 0; r < d->dp; r++) {
      const pk_micro_t *m = &pk_plan_cell(plan, r, 0)->micros[j];
      uint64_t tok = 0;
      double c = pk_dcp_group_cost(d, cp, m->seqs, m->nseqs, &tok);
      mx = fmax(mx, c);
      viol += tok > d->max_tokens;
      maxtok = tok > maxtok ? tok : maxtok;
    }
    step += mx;
  }
  print_stats(step, pk_dcp_step_lower_bound(d, NULL), nmicro, viol, maxtok, 0, us);
  pk_plan_free(plan);
}

static void run_score(const pk_dcp_request_t *d, char *groups) {
  double step = 0, slot_max = 0;
  uint32_t viol = 0, slots = 0, cur = UINT32_MAX, used = 0, idle = 0;
  uint64_t maxtok = 0;
  uint32_t pool = d->dp * d->cp;
  uint32_t *seqs = malloc((d->n + 1) * sizeof *seqs);
  for (char *tok = strtok(groups, ";"); tok != NULL; tok = strtok(NULL, ";")) {
    char *end;
    uint32_t slot = (uint32_t)strtoul(tok, &end, 10);
    uint32_t size = (uint32_t)strtoul(end, &end, 10);
    uint32_t n = 0;
    while (*end == ' ')
      end++;
    for (char *p = end; *p;) {
      char *e;
      unsigned long x = strtoul(p, &e, 10);
      if (e == p)
        break;
      seqs[n++] = (uint32_t)x;
      p = *e == ',' ? e + 1 : e;
    }
    if (slot != cur) {
      if (cur != UINT32_MAX) {
        step += slot_max;
        idle += pool - used;
      }
      cur = slot;
      slot_max = 0;
      used = 0;
      slots++;
    }
    uint64_t t = 0;
    double c = pk_dcp_group_cost(d, size, seqs, n, &t);
    if (c < 0) {
      print_error("score: a group is out of range");
      free(seqs);
      return;
    }
    slot_max = fmax(slot_max, c);
    used += size;
    viol += t > d->max_tokens;
    maxtok = t > maxtok ? t : maxtok;
  }
  step += slot_max;
  idle += pool - used;
  print_stats(step, pk_dcp_step_lower_bound(d, NULL), slots, viol, maxtok, idle, 0);
  free(seqs);
}

int main(void) {
  char *line = malloc(MAX_LINE);
  while (fgets(line, MAX_LINE, stdin) != NULL) {
    char *sec1 = strstr(line, " | ");
    if (sec1 == NULL) {
      print_error("no ' | ' in the line");
      continue;
    }
    *sec1 = '\0';
    char *lens = sec1 + 3;
    char *sec2 = strstr(lens, " | ");
    if (sec2 != NULL)
      *sec2 = '\0';
    char mode[16] = "", algo[16] = "";
    pk_dcp_request_t d = {0};
    unsigned long long cap = 0;
    int got;
    if (strncmp(line, "plan", 4) == 0)
      got = sscanf(line, "%15s %15s %u %u %u %llu %lf %lf %lf %lf %lf %lf", mode, algo, &d.dp,
                   &d.cp, &d.tp, &cap, &d.cost.base.linear, &d.cost.base.quadratic,
                   &d.cost.base.per_sequence, &d.cost.base.per_micro_batch, &d.cost.cp_token,
                   &d.cost.cp_group) -
            12;
    else
      got = sscanf(line, "%15s %u %u %u %llu %lf %lf %lf %lf %lf %lf", mode, &d.dp, &d.cp, &d.tp,
                   &cap, &d.cost.base.linear, &d.cost.base.quadratic, &d.cost.base.per_sequence,
                   &d.cost.base.per_micro_batch, &d.cost.cp_token, &d.cost.cp_group) -
            11;
    if (got != 0) {
      print_error("bad header");
      continue;
    }
    d.max_tokens = cap;
    uint32_t *lengths = NULL;
    d.n = parse_lengths(lens, &lengths);
    d.lengths = lengths;
    if (strcmp(mode, "score") == 0) {
      run_score(&d, sec2 != NULL ? sec2 + 3 : (char[]){""});
    } else if (strcmp(algo, "fixed") == 0) {
      run_fixed(&d);
    } else {
      if (pk_dcp_algo_parse(algo, &d.algo) != 0) {
        print_error("unknown algorithm");
        free(lengths);
        continue;
      }
      pk_dcp_plan_t *plan = NULL;
      char err[512];
      if (pk_dcp_plan(&d, NULL, &plan, err, sizeof err) != 0) {
        print_error(err);
      } else {
        const pk_dcp_stats_t *s = &plan->stats;
        print_stats(s->step_cost, s->step_cost_lower_bound, s->slots, s->cap_violations,
                    s->max_gpu_tokens, s->idle_gpu_slots, s->plan_time_us);
        pk_dcp_plan_free(plan);
      }
    }
    fflush(stdout);
    free(lengths);
  }
  free(line);
  return 0;
}
