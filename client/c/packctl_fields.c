/* packctl's request-field flags (packctl_fields.h): the table, its
 * getopt_long entries and its help.
 *
 * Invariant: every entry names a scalar field of PlanRequest or of one of
 * its sub-messages (a dotted path such as parallel.dynamic_cp for nested
 * ones); tests/python/test_packctl.py sets every flag and checks
 * the field it reaches. */
#include "packctl_fields.h"

#include <stdbool.h>
#include <string.h>

#include "packctl_request.h"

const packctl_field_flag_t packctl_field_flags[] = {
    {"dp", "parallel", "dp", "N", "data-parallel ranks (required, >= 1)"},
    {"tp", "parallel", "tp", "N", "tensor-parallel size (default 0: 1)"},
    {"cp", "parallel", "cp", "N", "context-parallel size (default 0: 1)"},
    {"pp", "parallel", "pp", "N", "pipeline-parallel size (default 0: 1)"},
    {"vpp", "parallel", "vpp", "N", "virtual pipeline stages (default 0: 1)"},
    {"cp-algo", "parallel", "cp_algo", "A", "zigzag (default) | ulysses"},
    {"sequence-parallel", "parallel", "sequence_parallel", NULL,
     "sequence parallelism (default false)"},
    {"num-heads", "parallel", "num_heads", "N", "attention heads (checked for Ulysses)"},
    {"microbatch-group", "parallel", "microbatch_group", "N",
     "micro-batch counts a multiple of N (default 0: PP when VPP > 1)"},
    {"mini-batches", "batching", "mini_batches", "N", "optimizer steps per batch (default 0: 1)"},
    {"shuffle", "batching", "shuffle", NULL, "seeded shuffle before mini-batches (default false)"},
    {"dp-balance", "batching", "dp_balance", "A",
     "auto (default) | none | kk | kk_equal | lpt | lpt_equal | sorted_stride"},
    {"equal-count", "batching", "equal_count", NULL,
     "equal sequence counts per rank (default false)"},
    {"mode", "batching", "mode", "M", "packed (default) | padded | fixed"},
    {"max-tokens", "batching", "max_tokens", "N",
     "token cap per micro-batch per CP rank (default 0: none)"},
    {"max-seqs", "batching", "max_seqs", "N", "sequence cap per micro-batch (default 0: none)"},
    {"micro-batch-size", "batching", "micro_batch_size", "N", "sequences per micro-batch (fixed)"},
    {"min-micro-batches", "batching", "min_micro_batches", "N",
     "at least N micro-batches (default 0: 1)"},
    {"round", "batching", "round", "N", "padded row width multiple (default 0: 1)"},
    {"micro-algo", "batching", "micro_algo", "A",
     "auto (default) | next_fit | ffd | mffd | kk_count | lpt_cap | shared_cuts"},
    {"order", "batching", "order", "O", "cost_desc (default) | heavy_middle | original"},
    {"keep-groups", "batching", "keep_groups", NULL, "keep a group in one mini-batch"},
    {"groups-on-rank", "batching", "groups_on_rank", NULL, "every group on one DP rank"},
    {"cost-linear", "cost", "linear", "X", "sequence cost = per-sequence + linear*a"},
    {"cost-quadratic", "cost", "quadratic", "X", "  + quadratic*a^2 (both 0: 1 and 1/24576)"},
    {"per-sequence", "cost", "per_sequence", "X", "cost of every sequence (default 0)"},
    {"per-micro-batch", "cost", "per_micro_batch", "X", "cost of every micro-batch (default 0)"},
    {"align", "layout", "align", "N", "alignment A (default 0: from the parallel layout)"},
    {"pad-multiple", "layout", "pad_multiple", "N", "extra multiple combined with A by lcm"},
    {"total-multiple", "layout", "total_multiple", "N", "packed total multiple per micro-batch"},
    {"fixed-shape", "layout", "fixed_shape", NULL, "one packed length per rank"},
    {"dcp-sizes", "parallel.dynamic_cp", "sizes", "S",
     "dynamic CP group sizes: pow2 (default) | any (sets dynamic CP)"},
    {"dcp-min-size", "parallel.dynamic_cp", "min_size", "N",
     "smallest dynamic CP group (default 0: 1; sets dynamic CP)"},
    {"dcp-algo", "parallel.dynamic_cp", "algo", "A",
     "dynamic CP planner: auto (default) | megatron | megatron_packing (sets dynamic CP)"},
    {"cp-token", "cost", "cp_token", "X", "dynamic CP: per token x (c-1)/c (default 0)"},
    {"cp-group", "cost", "cp_group", "X", "dynamic CP: per group x (c-1) (default 0)"},
    {"seed", NULL, "seed", "N", "request seed (default 0; also seeds --sample)"},
    {"job", NULL, "job", "NAME", "job label (not part of the plan id)"},
    /* The proto names of the cost fields, as `packctl load` took them. */
    {"cost-per-sequence", "cost", "per_sequence", "X", NULL},
    {"cost-per-micro-batch", "cost", "per_micro_batch", "X", NULL},
};
const size_t packctl_n_field_flags = sizeof packctl_field_flags / sizeof packctl_field_flags[0];

void packctl_fields_options(struct option *opts, int base) {
  for (size_t i = 0; i < packctl_n_field_flags; i++) {
    opts[i].name = packctl_field_flags[i].flag;
    opts[i].has_arg = packctl_field_flags[i].meta == NULL ? optional_argument : required_argument;
    opts[i].flag = NULL;
    opts[i].val = base + (int)i;
  }
}

void packctl_fields_usage(FILE *f) {
  for (size_t i = 0; i < packctl_n_field_flags; i++) {
    const packctl_field_flag_t *ff = &packctl_field_flags[i];
    if (ff->help == NULL)
      continue;
    char head[48];
    /* A bool's value must follow `=`: `--shuffle false` would read false
     * as INPUT. */
    if (ff->meta != NULL)
      snprintf(head, sizeof head, "--%s %s", ff->flag, ff->meta);
    else
      snprintf(head, sizeof head, "--%s[=BOOL]", ff->flag);
    fprintf(f, "  %-28s %s\n", head, ff->help);
  }
}

int packctl_fields_set(Packd__V1__PlanRequest *req, size_t index, const char *text, char *err,
                       size_t errlen) {
  const packctl_field_flag_t *ff = &packctl_field_flags[index];
  char what[64];
  snprintf(what, sizeof what, "--%s", ff->flag);
  return packctl_request_set(req, ff->sub, ff->field, text, what, err, errlen);
}
