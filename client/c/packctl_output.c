/* packctl: the summary output of a plan and of a request (--dry-run), and
 * the choice among the formats (packctl_json.c writes JSON, packctl_svg.c
 * the picture). */
#include "packctl_output.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "codec.h"
#include "packctl_dcp.h"
#include "packctl_json.h"
#include "packctl_number.h"
#include "packctl_svg.h"
#include "pk_planner.h"

int packctl_format_parse(const char *s, packctl_format_t *out) {
  if (strcasecmp(s, "summary") == 0)
    *out = PACKCTL_FORMAT_SUMMARY;
  else if (strcasecmp(s, "json") == 0)
    *out = PACKCTL_FORMAT_JSON;
  else if (strcasecmp(s, "svg") == 0)
    *out = PACKCTL_FORMAT_SVG;
  else
    return -1;
  return 0;
}

/* ---- summary ------------------------------------------------------------ */

typedef struct rank_totals {
  uint64_t micros, seqs, tokens, padded;
  double cost;
} rank_totals_t;

int packctl_write_summary(FILE *f, const Packd__V1__PlanResponse *resp,
                          const Packd__V1__PlanRequest *req) {
  const Packd__V1__PlanStats zero = PACKD__V1__PLAN_STATS__INIT;
  const Packd__V1__PlanStats *st = resp->stats != NULL ? resp->stats : &zero;
  size_t dp = resp->n_ranks;
  rank_totals_t *t = calloc(dp == 0 ? 1 : dp, sizeof *t);
  if (t == NULL)
    return -1;
  double total_cost = 0;
  for (size_t r = 0; r < dp; r++) {
    const Packd__V1__RankPlan *rp = resp->ranks[r];
    for (size_t m = 0; m < rp->n_mini_batches; m++) {
      const Packd__V1__MiniBatch *mb = rp->mini_batches[m];
      for (size_t j = 0; j < mb->n_micro_batches; j++) {
        const Packd__V1__MicroBatch *mi = mb->micro_batches[j];
        t[r].micros++;
        t[r].seqs += mi->n_seqs;
        t[r].tokens += mi->tokens;
        t[r].padded += mi->padded_tokens;
        t[r].cost += mi->cost;
      }
    }
    total_cost += t[r].cost;
  }
  double mean = dp > 0 ? total_cost / (double)dp : 0;

  fprintf(f, "plan %s\n", resp->plan_id != NULL && resp->plan_id[0] ? resp->plan_id : "(no id)");
  fprintf(f, "  %u sequences, %zu DP ranks, %u mini-batch%s, alignment %u", st->sequences, dp,
          st->mini_batches, st->mini_batches == 1 ? "" : "es", st->alignment);
  if (req != NULL && req->batching != NULL) {
    const char *mode = pk_mode_name((uint32_t)req->batching->mode);
    fprintf(f, ", mode %s", mode != NULL ? mode : "?");
    if (req->batching->max_tokens > 0)
      fprintf(f, ", max_tokens %llu", (unsigned long long)req->batching->max_tokens);
  }
  fputs("\n\n", f);
  fprintf(f, "%6s %7s %7s %12s %12s %16s %9s\n", "rank", "micro", "seqs", "tokens", "padded",
          "cost", "cost/mean");
  rank_totals_t sum = {0, 0, 0, 0, 0};
  for (size_t r = 0; r < dp; r++) {
    fprintf(f, "%6u %7llu %7llu %12llu %12llu %16.1f %9.4f\n", resp->ranks[r]->dp_rank,
            (unsigned long long)t[r].micros, (unsigned long long)t[r].seqs,
            (unsigned long long)t[r].tokens, (unsigned long long)t[r].padded, t[r].cost,
            mean > 0 ? t[r].cost / mean : 0.0);
    sum.micros += t[r].micros;
    sum.seqs += t[r].seqs;
    sum.tokens += t[r].tokens;
    sum.padded += t[r].padded;
    sum.cost += t[r].cost;
  }
  fprintf(f, "%6s %7llu %7llu %12llu %12llu %16.1f\n\n", "all", (unsigned long long)sum.micros,
          (unsigned long long)sum.seqs, (unsigned long long)sum.tokens,
          (unsigned long long)sum.padded, sum.cost);

  fprintf(f, "lock-step efficiency    %.5f (bound %.5f)\n", st->lockstep_efficiency,
          st->lockstep_efficiency_bound);
  fprintf(f, "step cost               %.1f (lower bound %.1f)\n", st->step_cost,
          st->step_cost_lower_bound);
  fprintf(f, "DP imbalance            %.5f\n", st->dp_imbalance);
  fprintf(f, "micro-batches per rank  %u (lower bound %u)\n", st->micro_batches_per_rank,
          st->micro_batches_lower_bound);
  fprintf(f, "micro-batches in plan   %u\n", st->plan_micros);
  fprintf(f, "tokens                  %llu real, %llu padded, pad fraction %.5f\n",
          (unsigned long long)st->tokens, (unsigned long long)st->padded_tokens, st->pad_fraction);
  fprintf(f, "largest micro-batch     %llu tokens per CP rank\n",
          (unsigned long long)st->max_micro_tokens);
  fprintf(f, "cap violations          %u\n", st->cap_violations);
  fprintf(f, "zero-length sequences   %u\n", st->zero_length);
  fprintf(f, "plan time               %llu us\n", (unsigned long long)st->plan_time_us);
  free(t);
  return ferror(f) ? -1 : 0;
}

/* The fields of a request's sub-message that are set, as "name value"
 * pairs on one line ("dp 8, cp 2"). */
static void summary_fields(FILE *f, const ProtobufCMessage *m) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  int shown = 0;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *fd = &d->fields[i];
    const char *p = (const char *)m + fd->offset;
    char value[64] = "";
    switch (fd->type) {
    case PROTOBUF_C_TYPE_UINT32:
      if (*(const uint32_t *)p != 0)
        snprintf(value, sizeof value, "%u", (unsigned)*(const uint32_t *)p);
      break;
    case PROTOBUF_C_TYPE_UINT64:
      if (*(const uint64_t *)p != 0)
        snprintf(value, sizeof value, "%llu", (unsigned long long)*(const uint64_t *)p);
      break;
    case PROTOBUF_C_TYPE_BOOL:
      if (*(const protobuf_c_boolean *)p)
        snprintf(value, sizeof value, "true");
      break;
    case PROTOBUF_C_TYPE_DOUBLE:
      if (*(const double *)p != 0)
        packctl_format_double(*(const double *)p, value, sizeof value);
      break;
    case PROTOBUF_C_TYPE_ENUM:
      if (*(const int *)p != 0) {
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value(fd->descriptor, *(const int *)p);
        snprintf(value, sizeof value, "%s", ev != NULL ? ev->name : "?");
      }
      break;
    default:
      break;
    }
    if (value[0] == '\0')
      continue;
    fprintf(f, "%s%s %s", shown == 0 ? "" : ", ", fd->name, value);
    shown++;
  }
  if (shown == 0)
    fputs("(defaults)", f);
  fputc('\n', f);
}

int packctl_write_request_summary(FILE *f, const Packd__V1__PlanRequest *req, size_t req_len) {
  uint64_t total = 0;
  uint32_t longest = 0, shortest = req->n_lengths > 0 ? UINT32_MAX : 0;
  for (size_t i = 0; i < req->n_lengths; i++) {
    total += req->lengths[i];
    longest = req->lengths[i] > longest ? req->lengths[i] : longest;
    shortest = req->lengths[i] < shortest ? req->lengths[i] : shortest;
  }
  char id[33];
  pk_codec_plan_id(req, id, sizeof id);
  fprintf(f, "request (dry run: not planned) %zu bytes, plan id %s\n", req_len, id);
  fprintf(f, "  sequences   %zu, %llu tokens (shortest %u, longest %u)\n", req->n_lengths,
          (unsigned long long)total, shortest, longest);
  fprintf(f, "  loss tokens %s\n", req->n_loss_tokens > 0 ? "given" : "none (every token counts)");
  fprintf(f, "  groups      %s\n", req->n_groups > 0 ? "given" : "none");
  const struct {
    const char *label;
    const ProtobufCMessage *m;
  } subs[] = {
      {"parallel", req->parallel != NULL ? &req->parallel->base : NULL},
      {"batching", req->batching != NULL ? &req->batching->base : NULL},
      {"cost", req->cost != NULL ? &req->cost->base : NULL},
      {"layout", req->layout != NULL ? &req->layout->base : NULL},
  };
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
    fprintf(f, "  %-11s ", subs[i].label);
    if (subs[i].m == NULL)
      fputs("(defaults)\n", f);
    else
      summary_fields(f, subs[i].m);
  }
  fprintf(f, "  seed        %llu\n", (unsigned long long)req->seed);
  if (req->job != NULL && req->job[0] != '\0')
    fprintf(f, "  job         %s\n", req->job);
  return ferror(f) ? -1 : 0;
}

int packctl_write(FILE *f, packctl_format_t fmt, const Packd__V1__PlanResponse *resp,
                  const Packd__V1__PlanRequest *req) {
  switch (fmt) {
  case PACKCTL_FORMAT_JSON:
    return packctl_write_json(f, &resp->base);
  case PACKCTL_FORMAT_SVG:
    if (resp->dynamic_cp != NULL)
      return packctl_write_dcp_svg(f, resp);
    return packctl_write_svg(f, resp);
  case PACKCTL_FORMAT_SUMMARY:
  default:
    if (resp->dynamic_cp != NULL)
      return packctl_write_dcp_summary(f, resp);
    return packctl_write_summary(f, resp, req);
  }
}
