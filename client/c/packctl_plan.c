/* `packctl plan`: builds a PlanRequest from an input file and flags, plans
 * it locally (through the same bytes pipeline as the server: pack, decode,
 * plan, encode, unpack) or on a server, and prints the PlanResponse. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "packctl.h"
#include "packctl_args.h"
#include "packctl_fail.h"
#include "packctl_fields.h"
#include "packctl_input.h"
#include "packctl_json.h"
#include "packctl_output.h"
#include "packctl_remote.h"
#include "packctl_request.h"

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
  OPT_DYNAMIC_CP,
  OPT_FIELD = 1000, /* OPT_FIELD + index into packctl_field_flags. */
};

typedef struct plan_opts {
  bool local, dry_run;
  bool dynamic_cp; /* --dynamic-cp: parallel.dynamic_cp present. */
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
  fputs("usage: packctl plan [OPTIONS] --dp N (INPUT | --request-file FILE)\n"
        "\n"
        "INPUT is a lengths file (TOTAL or PROMPT RESPONSE per line, # comments)\n"
        "or a JSON manifest (a PlanRequest in the protobuf JSON mapping); '-' reads\n"
        "stdin. Flags override the manifest. --dp is required unless the manifest or\n"
        "the request file sets parallel.dp.\n"
        "\n"
        "where to plan (one of):\n"
        "  --local                      plan in this process (planner linked in)\n"
        "  --server HOST:PORT           plan on a packd server (default: $PACKD_TARGET,\n"
        "                               else $PACKD_SERVER)\n"
        "  --dry-run                    build the request, print it (a summary, or with\n"
        "                               --format json the request as JSON), do not plan\n"
        "  --timeout SECONDS            deadline for --server (default 30)\n" PACKCTL_CONN_USAGE
        "\n"
        "input and output:\n"
        "  --sample N                   a deterministic sample of N sequences (by --seed)\n"
        "  --group-size N               groups = runs of N consecutive sequences (after --sample)\n"
        "  --request-file FILE          read a binary packd.v1.PlanRequest instead of INPUT\n"
        "  --save-request FILE          write the binary PlanRequest that is sent\n"
        "  --save-response FILE         write the binary PlanResponse that came back\n"
        "  --format F                   summary (default) | json | svg\n"
        "  --dynamic-cp                 plan dynamic context parallelism over the dp x cp\n"
        "                               GPUs (--max-tokens is then per GPU; --dcp-* below)\n"
        "  --out FILE                   write the output to FILE (default: stdout)\n"
        "  -h, --help                   this help\n"
        "\n"
        "request fields (0, the default, means the planner's default):\n",
        f);
  packctl_fields_usage(f);
  fputs("\nexample: packctl plan --local --dp 8 --max-tokens 16384 lengths.txt\n"
        "\nexit status: 0 ok, 1 the planner or server refused (message on stderr),\n"
        "2 bad flags, values or input.\n",
        f);
}

/* Stores one plan option or argument (packctl_take_fn). */
static int plan_take(void *opts, int c, const char *v) {
  plan_opts_t *o = opts;
  char err[512];
  switch (c) {
  case PACKCTL_ARGS_POSITIONAL:
    if (o->input != NULL)
      return packctl_usage_fail(
          "plan", "unexpected argument '%s' (one INPUT at most; got '%s' first)", v, o->input);
    o->input = v;
    break;
  case OPT_LOCAL:
    o->local = true;
    break;
  case OPT_SERVER:
    o->server = v;
    break;
  case OPT_TIMEOUT:
    if (packctl_parse_seconds(v, &o->timeout_s) != 0)
      return packctl_usage_fail("plan",
                                "--timeout: expected a positive number of seconds, got '%s'", v);
    break;
  case OPT_FORMAT:
    if (packctl_format_parse(v, &o->format) != 0)
      return packctl_usage_fail("plan",
                                "--format: unknown format '%s' (expected summary, json or svg)", v);
    break;
  case OPT_OUT:
    o->out = v;
    break;
  case OPT_SAMPLE:
    if (packctl_parse_u64(v, SIZE_MAX, "--sample", &o->sample, err, sizeof err) != 0)
      return packctl_usage_fail("plan", "%s", err);
    if (o->sample == 0)
      return packctl_usage_fail("plan", "--sample: must be at least 1, got '%s'", v);
    o->sample_set = true;
    break;
  case OPT_GROUP_SIZE:
    if (packctl_parse_u64(v, UINT32_MAX, "--group-size", &o->group_size, err, sizeof err) != 0)
      return packctl_usage_fail("plan", "%s", err);
    if (o->group_size == 0)
      return packctl_usage_fail("plan", "--group-size: must be at least 1, got '%s'", v);
    break;
  case OPT_REQUEST_FILE:
    o->request_file = v;
    break;
  case OPT_SAVE_REQUEST:
    o->save_request = v;
    break;
  case OPT_SAVE_RESPONSE:
    o->save_response = v;
    break;
  case OPT_DRY_RUN:
    o->dry_run = true;
    break;
  case OPT_DYNAMIC_CP:
    o->dynamic_cp = true;
    break;
  default:
    if (packctl_is_conn_option(c)) {
      if (packctl_conn_take(c, v, err, sizeof err) != 0)
        return packctl_usage_fail("plan", "%s", err);
      break;
    }
    /* Only field flags are left: the table holds nothing else. */
    o->set_index[o->nset] = c - OPT_FIELD;
    o->set_value[o->nset] = v != NULL ? v : "true";
    o->nset++;
    break;
  }
  return 0;
}

/* Parses argv into opts; returns PACKCTL_EXIT_OK, or an exit status after
 * printing a message (help prints and returns -1 for "done, exit 0"). */
static int parse_opts(int argc, char **argv, plan_opts_t *o) {
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
      {"dynamic-cp", no_argument, NULL, OPT_DYNAMIC_CP},
      PACKCTL_CONN_OPTIONS,
      {"help", no_argument, NULL, PACKCTL_ARGS_HELP},
  };
  enum { N_FIXED = sizeof fixed / sizeof fixed[0] };
  struct option *long_opts = calloc(N_FIXED + packctl_n_field_flags + 1, sizeof *long_opts);
  if (long_opts == NULL) {
    fprintf(stderr, "packctl plan: out of memory\n");
    return PACKCTL_EXIT_FAIL;
  }
  memcpy(long_opts, fixed, sizeof fixed);
  packctl_fields_options(long_opts + N_FIXED, OPT_FIELD);

  int status = packctl_args_scan("plan", argc, argv, long_opts, plan_usage, plan_take, o);
  if (status != PACKCTL_EXIT_OK)
    goto done;
  if (o->input != NULL && o->request_file != NULL)
    status =
        packctl_usage_fail("plan", "give INPUT or --request-file, not both (got '%s' and '%s')",
                           o->input, o->request_file);
  else if (o->input == NULL && o->request_file == NULL)
    status = packctl_usage_fail(
        "plan",
        "missing INPUT (a lengths file, a JSON manifest or '-' for stdin), or --request-file FILE");
  else if (o->dry_run && o->format == PACKCTL_FORMAT_SVG)
    status = packctl_usage_fail("plan", "--dry-run prints the request: --format summary or json, "
                                        "not svg (there is no plan to draw)");
  else if (o->local && o->server != NULL)
    status = packctl_usage_fail("plan", "give --local or --server, not both");
  else if (!o->local && o->server == NULL && !o->dry_run) {
    o->server = packctl_server_address(NULL);
    if (o->server == NULL)
      status = packctl_usage_fail("plan", "say where to plan: --local, --server HOST:PORT (or set "
                                          "$PACKD_TARGET or $PACKD_SERVER), or --dry-run");
  }
done:
  free(long_opts);
  return status;
}

/* Applies the field flags in command-line order. */
static int apply_flags(const plan_opts_t *o, Packd__V1__PlanRequest *req, char *err,
                       size_t errlen) {
  /* --dynamic-cp makes parallel.dynamic_cp present with its defaults (an
   * empty message is the request for dynamic CP); the --dcp-* flags then
   * set its fields. */
  if (o->dynamic_cp) {
    int rc = packctl_request_touch(req, "parallel.dynamic_cp", err, errlen);
    if (rc != 0)
      return rc;
  }
  for (size_t i = 0; i < o->nset; i++) {
    int rc = packctl_fields_set(req, (size_t)o->set_index[i], o->set_value[i], err, errlen);
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

/* Whether a --dp flag was given (with any value, 0 included). */
static bool dp_flag_given(const plan_opts_t *o) {
  for (size_t i = 0; i < o->nset; i++)
    if (strcmp(packctl_field_flags[o->set_index[i]].flag, "dp") == 0)
      return true;
  return false;
}

/* Writes the output to --out or stdout: the plan in the chosen format, or,
 * for --dry-run (resp NULL), the request as JSON or as a summary. Returns
 * an exit status. */
static int write_output(const plan_opts_t *o, const Packd__V1__PlanRequest *req,
                        const Packd__V1__PlanResponse *resp, size_t req_len) {
  FILE *f = stdout;
  if (o->out != NULL) {
    f = fopen(o->out, "w");
    if (f == NULL) {
      fprintf(stderr, "packctl plan: --out %s: cannot open for writing\n", o->out);
      return PACKCTL_EXIT_USAGE;
    }
  }
  int rc;
  if (resp != NULL)
    rc = packctl_write(f, o->format, resp, req);
  else if (o->format == PACKCTL_FORMAT_JSON)
    rc = packctl_write_json(f, &req->base);
  else
    rc = packctl_write_request_summary(f, req, req_len);
  if (o->out != NULL && fclose(f) != 0)
    rc = -1;
  else if (o->out == NULL && fflush(f) != 0)
    rc = -1;
  if (rc != 0) {
    fprintf(stderr, "packctl plan: writing the output failed\n");
    return PACKCTL_EXIT_FAIL;
  }
  return PACKCTL_EXIT_OK;
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
  /* The planner would refuse dp 0 as an invalid value; a dp that nobody
   * set is a missing flag, and the message says which. */
  if (!o->dry_run && (req->parallel == NULL || req->parallel->dp == 0) && !dp_flag_given(o)) {
    status = packctl_usage_fail(
        "plan",
        "--dp N is required: the data-parallel size (parallel.dp) is set neither by a flag "
        "nor by %s",
        o->request_file != NULL      ? o->request_file
        : strcmp(o->input, "-") == 0 ? "stdin"
                                     : o->input);
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
  if (o->dry_run) {
    status = write_output(o, req, NULL, req_len);
    goto done;
  }

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
  status = write_output(o, req, resp, req_len);
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
