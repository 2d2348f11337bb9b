/* `packctl plan`: builds a PlanRequest from an input file and flags, plans
 * it locally (through the same bytes pipeline as the server: pack, decode,
 * plan, encode, unpack) or on a server, and prints the PlanResponse. */
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "packctl.h"
#include "packctl_input.h"
#include "packctl_output.h"
#include "packctl_remote.h"
#include "packctl_request.h"

/* One flag that sets one request field. Bools take an optional value
 * (`--shuffle` or `--shuffle=false`). */
typedef struct field_flag {
  const char *flag;
  const char *sub; /* Sub-message name, NULL for the top level. */
  const char *field;
  const char *help;
} field_flag_t;

static const field_flag_t field_flags[] = {
    {"dp", "parallel", "dp", "data-parallel ranks (required)"},
    {"tp", "parallel", "tp", "tensor-parallel size"},
    {"cp", "parallel", "cp", "context-parallel size"},
    {"pp", "parallel", "pp", "pipeline-parallel size"},
    {"vpp", "parallel", "vpp", "virtual pipeline stages"},
    {"cp-algo", "parallel", "cp_algo", "zigzag|ulysses"},
    {"sequence-parallel", "parallel", "sequence_parallel", "[=BOOL] sequence parallelism"},
    {"num-heads", "parallel", "num_heads", "attention heads (checked for Ulysses)"},
    {"microbatch-group", "parallel", "microbatch_group", "micro-batch counts multiple of this"},
    {"mini-batches", "batching", "mini_batches", "optimizer steps per global batch"},
    {"shuffle", "batching", "shuffle", "[=BOOL] seeded shuffle before mini-batches"},
    {"dp-balance", "batching", "dp_balance", "auto|none|kk|kk_equal|lpt|lpt_equal|sorted_stride"},
    {"equal-count", "batching", "equal_count", "[=BOOL] equal sequence counts per rank"},
    {"mode", "batching", "mode", "packed|padded|fixed"},
    {"max-tokens", "batching", "max_tokens", "token cap per micro-batch per CP rank"},
    {"max-seqs", "batching", "max_seqs", "sequence cap per micro-batch"},
    {"micro-batch-size", "batching", "micro_batch_size", "sequences per micro-batch (fixed)"},
    {"min-micro-batches", "batching", "min_micro_batches", "at least this many micro-batches"},
    {"round", "batching", "round", "padded row width multiple"},
    {"micro-algo", "batching", "micro_algo", "auto|next_fit|ffd|mffd|kk_count|lpt_cap|shared_cuts"},
    {"order", "batching", "order", "cost_desc|heavy_middle|original"},
    {"keep-groups", "batching", "keep_groups", "[=BOOL] keep a group in one mini-batch"},
    {"groups-on-rank", "batching", "groups_on_rank", "[=BOOL] every group on one DP rank"},
    {"cost-linear", "cost", "linear", "sequence cost = per-sequence + linear*a"},
    {"cost-quadratic", "cost", "quadratic", "  + quadratic*a^2 (both 0: 1 and 1/24576)"},
    {"per-sequence", "cost", "per_sequence", "cost of every sequence (0: none)"},
    {"per-micro-batch", "cost", "per_micro_batch", "cost of every micro-batch (0: none)"},
    {"align", "layout", "align", "alignment A (0: from the parallel layout)"},
    {"pad-multiple", "layout", "pad_multiple", "extra multiple combined with A by lcm"},
    {"total-multiple", "layout", "total_multiple", "packed total multiple per micro-batch"},
    {"fixed-shape", "layout", "fixed_shape", "[=BOOL] one packed length per rank"},
    {"seed", NULL, "seed", "request seed (also seeds --sample)"},
    {"job", NULL, "job", "job label (not part of the plan id)"},
};
#define N_FIELD_FLAGS (sizeof field_flags / sizeof field_flags[0])

enum {
  OPT_LOCAL = 256,
  OPT_SERVER,
  OPT_TIMEOUT,
  OPT_FORMAT,
  OPT_OUT,
  OPT_SAMPLE,
  OPT_GROUP_SIZE,
  OPT_REQUEST_FILE,
  OPT_SAVE_REQUEST,
  OPT_SAVE_RESPONSE,
  OPT_DRY_RUN,
  OPT_HELP,
  OPT_CONN,         /* --tls-ca, --tls-cert, --tls-key, --token-file (packctl_remote.h). */
  OPT_FIELD = 1000, /* OPT_FIELD + index into field_flags. */
};

typedef struct plan_opts {
  bool local, dry_run;
  const char *server;
  double timeout_s;
  packctl_format_t format;
  const char *out;
  bool sample_set;
  uint64_t sample;
  uint64_t group_size; /* 0: groups as the input gives them. */
  const char *input;
  const char *request_file;
  const char *save_request;
  const char *save_response;
  /* The field flags in command-line order: index into field_flags, value. */
  size_t nset;
  int *set_index;
  const char **set_value;
} plan_opts_t;

static void plan_usage(FILE *f) {
  fputs("usage: packctl plan [OPTIONS] (INPUT | --request-file FILE)\n"
        "\n"
        "INPUT is a lengths file (TOTAL or PROMPT RESPONSE per line, # comments)\n"
        "or a JSON manifest (a PlanRequest in the protobuf JSON mapping); '-' reads\n"
        "stdin. Flags override the manifest.\n"
        "\n"
        "where to plan:\n"
        "  --local               plan in this process (planner linked in)\n"
        "  --server HOST:PORT    plan on a packd server (default: $PACKD_TARGET)\n"
        "  --timeout SECONDS     deadline for --server (default 30)\n" PACKCTL_CONN_USAGE
        "  --dry-run             build (and --save-request) the request, do not plan\n"
        "\n"
        "input and output:\n"
        "  --sample N            a deterministic sample of N sequences (by --seed)\n"
        "  --group-size N        groups = runs of N consecutive sequences (after --sample)\n"
        "  --request-file FILE   read a binary packd.v1.PlanRequest instead of INPUT\n"
        "  --save-request FILE   write the binary PlanRequest that is sent\n"
        "  --save-response FILE  write the binary PlanResponse that came back\n"
        "  --format FORMAT       summary (default) | json | svg\n"
        "  --out FILE            write the output to FILE instead of stdout\n"
        "\n"
        "request fields:\n",
        f);
  for (size_t i = 0; i < N_FIELD_FLAGS; i++)
    fprintf(f, "  --%-20s %s\n", field_flags[i].flag, field_flags[i].help);
  fputs("\nexit status: 0 ok, 1 the planner or server refused (message on stderr),\n"
        "2 bad flags, values or input.\n",
        f);
}

/* Prints "packctl plan: <message>" and a hint; returns the usage status. */
static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "packctl plan: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nRun 'packctl plan --help' for the options.\n");
  va_end(ap);
  return PACKCTL_EXIT_USAGE;
}

static bool field_is_bool(const field_flag_t *ff) {
  const ProtobufCMessageDescriptor *d = &packd__v1__plan_request__descriptor;
  if (ff->sub != NULL)
    d = protobuf_c_message_descriptor_get_field_by_name(d, ff->sub)->descriptor;
  const ProtobufCFieldDescriptor *fd =
      protobuf_c_message_descriptor_get_field_by_name(d, ff->field);
  return fd != NULL && fd->type == PROTOBUF_C_TYPE_BOOL;
}

/* Parses argv into opts; returns PACKCTL_EXIT_OK, or an exit status after
 * printing a message (help prints and returns -1 for "done, exit 0"). */
static int parse_opts(int argc, char **argv, plan_opts_t *o) {
  static struct option long_opts[N_FIELD_FLAGS + 24];
  static const struct option fixed[] = {
      {"local", no_argument, NULL, OPT_LOCAL},
      {"server", required_argument, NULL, OPT_SERVER},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"format", required_argument, NULL, OPT_FORMAT},
      {"out", required_argument, NULL, OPT_OUT},
      {"sample", required_argument, NULL, OPT_SAMPLE},
      {"group-size", required_argument, NULL, OPT_GROUP_SIZE},
      {"request-file", required_argument, NULL, OPT_REQUEST_FILE},
      {"save-request", required_argument, NULL, OPT_SAVE_REQUEST},
      {"save-response", required_argument, NULL, OPT_SAVE_RESPONSE},
      {"dry-run", no_argument, NULL, OPT_DRY_RUN},
      {"help", no_argument, NULL, OPT_HELP},
      {"tls-ca", required_argument, NULL, OPT_CONN},
      {"tls-cert", required_argument, NULL, OPT_CONN},
      {"tls-key", required_argument, NULL, OPT_CONN},
      {"token-file", required_argument, NULL, OPT_CONN},
  };
  size_t k = 0;
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
    long_opts[k++] = fixed[i];
  for (size_t i = 0; i < N_FIELD_FLAGS; i++) {
    long_opts[k].name = field_flags[i].flag;
    long_opts[k].has_arg = field_is_bool(&field_flags[i]) ? optional_argument : required_argument;
    long_opts[k].flag = NULL;
    long_opts[k].val = OPT_FIELD + (int)i;
    k++;
  }
  memset(&long_opts[k], 0, sizeof long_opts[k]);

  char err[512];
  opterr = 0;
  optind = 1;
  for (;;) {
    int idx = -1;
    int c = getopt_long(argc, argv, ":h", long_opts, &idx);
    if (c == -1)
      break;
    if (c == ':') {
      const char *name = "?";
      for (size_t i = 0; long_opts[i].name != NULL; i++)
        if (long_opts[i].val == optopt)
          name = long_opts[i].name;
      return usage_error("--%s needs a value", name);
    }
    if (c == '?')
      return usage_error("unknown option '%s'", argv[optind - 1]);
    switch (c) {
    case 'h':
    case OPT_HELP:
      plan_usage(stdout);
      return -1;
    case OPT_LOCAL:
      o->local = true;
      break;
    case OPT_SERVER:
      o->server = optarg;
      break;
    case OPT_CONN:
      if (packctl_conn_option(long_opts[idx].name, optarg, err, sizeof err) < 0)
        return usage_error("%s", err);
      break;
    case OPT_TIMEOUT: {
      char *end = NULL;
      o->timeout_s = strtod(optarg, &end);
      if (*optarg == '\0' || *end != '\0' || !(o->timeout_s > 0 && o->timeout_s < 1e9))
        return usage_error("--timeout: expected a positive number of seconds, got '%s'", optarg);
      break;
    }
    case OPT_FORMAT:
      if (packctl_format_parse(optarg, &o->format) != 0)
        return usage_error("--format: unknown format '%s' (expected summary, json or svg)", optarg);
      break;
    case OPT_OUT:
      o->out = optarg;
      break;
    case OPT_SAMPLE:
      if (packctl_parse_u64(optarg, SIZE_MAX, "--sample", &o->sample, err, sizeof err) != 0)
        return usage_error("%s", err);
      if (o->sample == 0)
        return usage_error("--sample: must be at least 1, got '%s'", optarg);
      o->sample_set = true;
      break;
    case OPT_GROUP_SIZE:
      if (packctl_parse_u64(optarg, UINT32_MAX, "--group-size", &o->group_size, err, sizeof err) !=
          0)
        return usage_error("%s", err);
      if (o->group_size == 0)
        return usage_error("--group-size: must be at least 1, got '%s'", optarg);
      break;
    case OPT_REQUEST_FILE:
      o->request_file = optarg;
      break;
    case OPT_SAVE_REQUEST:
      o->save_request = optarg;
      break;
    case OPT_SAVE_RESPONSE:
      o->save_response = optarg;
      break;
    case OPT_DRY_RUN:
      o->dry_run = true;
      break;
    default:
      if (c >= OPT_FIELD && c < OPT_FIELD + (int)N_FIELD_FLAGS) {
        o->set_index[o->nset] = c - OPT_FIELD;
        o->set_value[o->nset] = optarg != NULL ? optarg : "true";
        o->nset++;
        break;
      }
      return usage_error("unexpected option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc)
    o->input = argv[optind++];
  if (optind < argc)
    return usage_error("unexpected argument '%s' (one INPUT at most)", argv[optind]);
  if (o->input != NULL && o->request_file != NULL)
    return usage_error("give INPUT or --request-file, not both (got '%s' and '%s')", o->input,
                       o->request_file);
  if (o->input == NULL && o->request_file == NULL)
    return usage_error("missing INPUT (a lengths file, a JSON manifest or '-')");
  if (o->local && o->server != NULL)
    return usage_error("give --local or --server, not both");
  if (!o->local && o->server == NULL && !o->dry_run) {
    o->server = packctl_server_address(NULL);
    if (o->server == NULL)
      return usage_error("say where to plan: --local or --server HOST:PORT (or $PACKD_TARGET)");
  }
  return PACKCTL_EXIT_OK;
}

/* Applies the field flags in command-line order. */
static int apply_flags(const plan_opts_t *o, Packd__V1__PlanRequest *req, char *err,
                       size_t errlen) {
  for (size_t i = 0; i < o->nset; i++) {
    const field_flag_t *ff = &field_flags[o->set_index[i]];
    char what[64];
    snprintf(what, sizeof what, "--%s", ff->flag);
    int rc = packctl_request_set(req, ff->sub, ff->field, o->set_value[i], what, err, errlen);
    if (rc != 0)
      return rc;
  }
  return 0;
}

static int write_bytes(const char *path, const uint8_t *data, size_t len, const char *flag) {
  FILE *f = fopen(path, "wb");
  if (f == NULL) {
    fprintf(stderr, "packctl plan: %s %s: cannot open for writing\n", flag, path);
    return PACKCTL_EXIT_USAGE;
  }
  bool ok = fwrite(data, 1, len, f) == len;
  ok = (fclose(f) == 0) && ok;
  if (!ok) {
    fprintf(stderr, "packctl plan: %s %s: write failed\n", flag, path);
    return PACKCTL_EXIT_FAIL;
  }
  return PACKCTL_EXIT_OK;
}

/* Packs a message into a new buffer (free with free()); NULL when out of
 * memory. */
static uint8_t *pack_message(const ProtobufCMessage *m, size_t *len) {
  *len = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(*len == 0 ? 1 : *len);
  if (buf != NULL)
    protobuf_c_message_pack(m, buf);
  return buf;
}

/* Plans req in this process through the same bytes path the server uses. */
static int plan_local(const uint8_t *req_bytes, size_t req_len, Packd__V1__PlanResponse **resp,
                      char *err, size_t errlen) {
  uint8_t *out = NULL;
  size_t out_len = 0;
  *resp = NULL;
  int rc = pk_plan_bytes(req_bytes, req_len, &out, &out_len, err, errlen);
  if (rc != 0)
    return rc;
  *resp = packd__v1__plan_response__unpack(NULL, out_len, out);
  pk_codec_free_bytes(out);
  if (*resp == NULL) {
    snprintf(err, errlen, "the codec produced an undecodable PlanResponse");
    return PK_EINTERNAL;
  }
  return 0;
}

static int run(const plan_opts_t *o) {
  int status = PACKCTL_EXIT_OK;
  Packd__V1__PlanRequest *req = NULL;
  Packd__V1__PlanResponse *resp = NULL;
  uint8_t *req_bytes = NULL;
  size_t req_len = 0;
  char err[1024] = "";
  int rc;

  if (o->request_file != NULL) {
    rc = packctl_read_request_file(o->request_file, &req, err, sizeof err);
  } else {
    req = packctl_request_new();
    rc = req == NULL ? PK_ENOMEM : packctl_read_input(o->input, req, err, sizeof err);
  }
  if (rc == 0)
    rc = apply_flags(o, req, err, sizeof err);
  if (rc == 0 && o->sample_set)
    rc = packctl_sample(req, (size_t)o->sample, req->seed, err, sizeof err);
  /* After --sample: the runs are of the sequences that are planned. */
  if (rc == 0 && o->group_size > 0)
    rc = packctl_group_runs(req, o->group_size, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "packctl plan: %s\n",
            rc == PK_ENOMEM && err[0] == '\0' ? "out of memory" : err);
    status = rc == PK_ENOMEM ? PACKCTL_EXIT_FAIL : PACKCTL_EXIT_USAGE;
    goto done;
  }
  req_bytes = pack_message(&req->base, &req_len);
  if (req_bytes == NULL) {
    fprintf(stderr, "packctl plan: out of memory packing the request\n");
    status = PACKCTL_EXIT_FAIL;
    goto done;
  }
  if (o->save_request != NULL) {
    status = write_bytes(o->save_request, req_bytes, req_len, "--save-request");
    if (status != PACKCTL_EXIT_OK)
      goto done;
  }
  if (o->dry_run)
    goto done;

  if (o->local)
    rc = plan_local(req_bytes, req_len, &resp, err, sizeof err);
  else
    rc = packctl_plan_remote(o->server, o->timeout_s, req, &resp, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "packctl plan: %s: %s\n", pk_strerror(rc), err);
    status = PACKCTL_EXIT_FAIL;
    goto done;
  }
  if (o->save_response != NULL) {
    size_t len = 0;
    uint8_t *bytes = pack_message(&resp->base, &len);
    if (bytes == NULL) {
      fprintf(stderr, "packctl plan: out of memory packing the response\n");
      status = PACKCTL_EXIT_FAIL;
      goto done;
    }
    status = write_bytes(o->save_response, bytes, len, "--save-response");
    free(bytes);
    if (status != PACKCTL_EXIT_OK)
      goto done;
  }

  FILE *f = stdout;
  if (o->out != NULL) {
    f = fopen(o->out, "w");
    if (f == NULL) {
      fprintf(stderr, "packctl plan: --out %s: cannot open for writing\n", o->out);
      status = PACKCTL_EXIT_USAGE;
      goto done;
    }
  }
  rc = packctl_write(f, o->format, resp, req);
  if (o->out != NULL && fclose(f) != 0)
    rc = -1;
  else if (o->out == NULL && fflush(f) != 0)
    rc = -1;
  if (rc != 0) {
    fprintf(stderr, "packctl plan: writing the output failed\n");
    status = PACKCTL_EXIT_FAIL;
  }
done:
  free(req_bytes);
  if (resp != NULL)
    packd__v1__plan_response__free_unpacked(resp, NULL);
  if (req != NULL)
    packd__v1__plan_request__free_unpacked(req, NULL);
  return status;
}

int packctl_cmd_plan(int argc, char **argv) {
  plan_opts_t o;
  memset(&o, 0, sizeof o);
  o.timeout_s = 30.0;
  o.format = PACKCTL_FORMAT_SUMMARY;
  o.set_index = calloc((size_t)argc + 1, sizeof *o.set_index);
  o.set_value = calloc((size_t)argc + 1, sizeof *o.set_value);
  int status;
  if (o.set_index == NULL || o.set_value == NULL) {
    fprintf(stderr, "packctl plan: out of memory\n");
    status = PACKCTL_EXIT_FAIL;
    goto done;
  }
  status = parse_opts(argc, argv, &o);
  if (status == -1) {
    status = PACKCTL_EXIT_OK;
    goto done;
  }
  if (status != PACKCTL_EXIT_OK)
    goto done;
  /* Check every flag value before reading any input (stdin included), on a
   * scratch request, so that a typo fails fast. */
  char err[512];
  Packd__V1__PlanRequest *scratch = packctl_request_new();
  if (scratch == NULL) {
    fprintf(stderr, "packctl plan: out of memory\n");
    status = PACKCTL_EXIT_FAIL;
    goto done;
  }
  int rc = apply_flags(&o, scratch, err, sizeof err);
  packd__v1__plan_request__free_unpacked(scratch, NULL);
  if (rc != 0) {
    fprintf(stderr, "packctl plan: %s\n", err);
    status = rc == PK_ENOMEM ? PACKCTL_EXIT_FAIL : PACKCTL_EXIT_USAGE;
    goto done;
  }
  status = run(&o);
done:
  free(o.set_index);
  free(o.set_value);
  return status;
}
