/* `packctl load`: sends Plan calls to a server from C threads, each with its
 * own client (own connection), for a fixed time, and prints requests/s,
 * latency percentiles and errors by status as a table or as JSON.
 *
 * The requests are built once before the clock starts: the input (a lengths
 * file or a binary PlanRequest) with the request flags applied, then
 * `--distinct` deterministic samples of `--sample` sequences (seeds seed,
 * seed+1, ...), packed to bytes. Workers cycle through them, so the timing
 * holds only the RPC: transport, server decode, planning and encode. */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grpc_status_names.h"
#include "packctl.h"
#include "packctl_args.h"
#include "packctl_fail.h"
#include "packctl_fields.h"
#include "packctl_input.h"
#include "packctl_json.h"
#include "packctl_output.h"
#include "packctl_remote.h"
#include "packctl_request.h"
#include "pk_client.h"
#include "pk_error.h"

typedef struct load_opts {
  const char *server;
  const char *lengths;
  const char *request_file;
  int concurrency;
  double duration_s;
  double warmup_s;
  double timeout_s;
  uint64_t sample; /* 0: every sequence. */
  uint64_t distinct;
  uint64_t seed;
  int json;
  /* The field flags in command-line order: index into
   * packctl_field_flags, value. */
  size_t nset;
  int *set_index;
  const char **set_value;
} load_opts_t;

typedef struct shared {
  const load_opts_t *o;
  uint8_t **req;
  size_t *req_len;
  size_t nreq;
  uint64_t t_measure_ns; /* Calls that start before this are warm-up. */
  uint64_t t_end_ns;
} shared_t;

typedef struct worker {
  pthread_t thread;
  const shared_t *sh;
  int id;
  pk_client_t *client;
  uint64_t *lat_ns;
  size_t n, cap;
  uint64_t errors[PK_GRPC_CODE_COUNT];
  uint64_t oom;
  char first_error[600];
} worker_t;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  const shared_t *sh = w->sh;
  size_t i = (size_t)w->id % sh->nreq;
  for (;;) {
    uint64_t t0 = now_ns();
    if (t0 >= sh->t_end_ns)
      break;
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    pk_rpc_status_t st;
    int rc = pk_client_call(w->client, PK_METHOD_PLAN_PATH, sh->req[i], sh->req_len[i], &resp,
                            &resp_len, &st);
    uint64_t t1 = now_ns();
    free(resp);
    i = (i + 1) % sh->nreq;
    if (t0 < sh->t_measure_ns)
      continue;
    if (rc != PK_OK) {
      int code = st.code >= 0 && st.code < PK_GRPC_CODE_COUNT ? st.code : PK_GRPC_UNKNOWN;
      w->errors[code]++;
      if (w->first_error[0] == '\0')
        snprintf(w->first_error, sizeof w->first_error, "%s: %s", pk_client_status_name(code),
                 st.message);
      continue;
    }
    if (w->n == w->cap) {
      size_t ncap = w->cap ? w->cap * 2 : 65536;
      uint64_t *p = realloc(w->lat_ns, ncap * sizeof *p);
      if (p == NULL) {
        w->oom++;
        continue;
      }
      w->lat_ns = p;
      w->cap = ncap;
    }
    w->lat_ns[w->n++] = t1 - t0;
  }
  return NULL;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted values, in milliseconds. */
static double pct_ms(const uint64_t *v, size_t n, double p) {
  if (n == 0)
    return 0.0;
  size_t k = (size_t)(p * (double)n + 0.999999);
  if (k == 0)
    k = 1;
  if (k > n)
    k = n;
  return (double)v[k - 1] / 1e6;
}

static void load_usage(FILE *f) {
  fputs("usage: packctl load [--server HOST:PORT] --dp N [OPTIONS] (INPUT | --request-file FILE)\n"
        "\n"
        "Sends Plan calls from C threads (one connection each) for S seconds and prints\n"
        "requests/s, latency p50/p90/p99 and errors by status. INPUT is a lengths file or\n"
        "a JSON manifest, as for packctl plan ('-' reads stdin).\n"
        "\n"
        "  --server HOST:PORT           the packd server (default: $PACKD_TARGET, else\n"
        "                               $PACKD_SERVER)\n"
        "  --lengths FILE               the same as INPUT\n"
        "  --request-file FILE          a binary packd.v1.PlanRequest instead of INPUT\n"
        "  --concurrency C              client threads (default 1)\n"
        "  --duration S                 measured seconds (default 10)\n"
        "  --warmup S                   seconds before measuring (default 1)\n"
        "  --sample N                   sequences per request, sampled from the input\n"
        "                               (default: all of them)\n"
        "  --distinct K                 different samples cycled through (default 16)\n"
        "  --timeout S                  deadline per call (default 30)\n" PACKCTL_CONN_USAGE
        "  --format F                   table (default) | json\n"
        "  -h, --help                   this help\n"
        "\n"
        "request fields, as for packctl plan (--seed X is also the first sample's seed;\n"
        "sample k uses X + k):\n",
        f);
  packctl_fields_usage(f);
  fputs("\nexit status: 0 every measured call OK, 1 some call failed, 2 bad flags.\n", f);
}

static uint8_t *pack_request(const Packd__V1__PlanRequest *req, size_t *len) {
  *len = packd__v1__plan_request__get_packed_size(req);
  uint8_t *b = malloc(*len > 0 ? *len : 1);
  if (b != NULL)
    packd__v1__plan_request__pack(req, b);
  return b;
}

/* Builds the requests; returns an exit status. */
static int build_requests(const load_opts_t *o, shared_t *sh, size_t *sequences) {
  char err[1024] = "";
  Packd__V1__PlanRequest *req = NULL;
  int rc;
  if (o->request_file != NULL) {
    rc = packctl_read_request_file(o->request_file, &req, err, sizeof err);
  } else {
    req = packctl_request_new();
    rc = req == NULL ? PK_ENOMEM : packctl_read_input(o->lengths, req, err, sizeof err);
  }
  if (rc != 0) {
    fprintf(stderr, "packctl load: %s\n", err[0] ? err : "out of memory");
    if (req != NULL)
      packd__v1__plan_request__free_unpacked(req, NULL);
    return rc == PK_ENOMEM ? PACKCTL_EXIT_FAIL : PACKCTL_EXIT_USAGE;
  }
  /* The field flags, in command-line order. */
  for (size_t i = 0; i < o->nset; i++) {
    rc = packctl_fields_set(req, (size_t)o->set_index[i], o->set_value[i], err, sizeof err);
    if (rc != 0) {
      fprintf(stderr, "packctl load: %s\n", err);
      packd__v1__plan_request__free_unpacked(req, NULL);
      return rc == PK_ENOMEM ? PACKCTL_EXIT_FAIL : PACKCTL_EXIT_USAGE;
    }
  }
  if (req->parallel == NULL || req->parallel->dp == 0) {
    packd__v1__plan_request__free_unpacked(req, NULL);
    return packctl_usage_fail("load",
                              "--dp N is required: the data-parallel size (parallel.dp) is "
                              "set neither by a flag nor by %s",
                              o->request_file != NULL ? o->request_file : o->lengths);
  }
  size_t base_len = 0;
  uint8_t *base = pack_request(req, &base_len);
  *sequences = o->sample > 0 ? (size_t)o->sample : req->n_lengths;
  packd__v1__plan_request__free_unpacked(req, NULL);
  if (base == NULL)
    return PACKCTL_EXIT_FAIL;
  sh->nreq = o->sample > 0 ? (size_t)o->distinct : 1;
  sh->req = calloc(sh->nreq, sizeof *sh->req);
  sh->req_len = calloc(sh->nreq, sizeof *sh->req_len);
  if (sh->req == NULL || sh->req_len == NULL) {
    free(base);
    return PACKCTL_EXIT_FAIL;
  }
  for (size_t k = 0; k < sh->nreq; k++) {
    if (o->sample == 0) {
      sh->req[k] = base;
      sh->req_len[k] = base_len;
      return PACKCTL_EXIT_OK;
    }
    Packd__V1__PlanRequest *copy = packd__v1__plan_request__unpack(NULL, base_len, base);
    if (copy == NULL) {
      free(base);
      return PACKCTL_EXIT_FAIL;
    }
    rc = packctl_sample(copy, (size_t)o->sample, o->seed + k, err, sizeof err);
    if (rc == 0)
      sh->req[k] = pack_request(copy, &sh->req_len[k]);
    packd__v1__plan_request__free_unpacked(copy, NULL);
    if (rc != 0) {
      fprintf(stderr, "packctl load: --sample: %s\n", err);
      free(base);
      return PACKCTL_EXIT_USAGE;
    }
    if (sh->req[k] == NULL) {
      free(base);
      return PACKCTL_EXIT_FAIL;
    }
  }
  free(base);
  return PACKCTL_EXIT_OK;
}

enum {
  OPT_SERVER = 256,
  OPT_LENGTHS,
  OPT_REQUEST_FILE,
  OPT_CONCURRENCY,
  OPT_DURATION,
  OPT_WARMUP,
  OPT_TIMEOUT,
  OPT_SAMPLE,
  OPT_DISTINCT,
  OPT_FORMAT,
  OPT_FIELD = 1000, /* OPT_FIELD + index into packctl_field_flags. */
};

/* One option's value; returns 0 or the usage status after a message. */
static int load_take(void *opts, int c, const char *v) {
  load_opts_t *o = opts;
  char err[512];
  uint64_t u;
  switch (c) {
  case OPT_SERVER:
    o->server = v;
    return 0;
  case PACKCTL_ARGS_POSITIONAL:
  case OPT_LENGTHS:
    if (o->lengths != NULL)
      return packctl_usage_fail("load", "one INPUT at most: got '%s' and '%s'", o->lengths, v);
    o->lengths = v;
    return 0;
  case OPT_REQUEST_FILE:
    o->request_file = v;
    return 0;
  case OPT_CONCURRENCY:
    if (packctl_parse_u64(v, 4096, "--concurrency", &u, err, sizeof err) != 0 || u == 0)
      return packctl_usage_fail("load", "--concurrency: expected 1 to 4096, got '%s'", v);
    o->concurrency = (int)u;
    return 0;
  case OPT_DURATION:
    if (packctl_parse_seconds(v, &o->duration_s) != 0)
      return packctl_usage_fail("load",
                                "--duration: expected a positive number of seconds, got '%s'", v);
    return 0;
  case OPT_WARMUP:
    if (strcmp(v, "0") == 0)
      o->warmup_s = 0;
    else if (packctl_parse_seconds(v, &o->warmup_s) != 0)
      return packctl_usage_fail("load", "--warmup: expected a number of seconds, got '%s'", v);
    return 0;
  case OPT_TIMEOUT:
    if (packctl_parse_seconds(v, &o->timeout_s) != 0)
      return packctl_usage_fail("load",
                                "--timeout: expected a positive number of seconds, got '%s'", v);
    return 0;
  case OPT_SAMPLE:
    if (packctl_parse_u64(v, UINT32_MAX, "--sample", &o->sample, err, sizeof err) != 0 ||
        o->sample == 0)
      return packctl_usage_fail("load", "--sample: expected a positive count, got '%s'", v);
    return 0;
  case OPT_DISTINCT:
    if (packctl_parse_u64(v, 4096, "--distinct", &o->distinct, err, sizeof err) != 0 ||
        o->distinct == 0)
      return packctl_usage_fail("load", "--distinct: expected 1 to 4096, got '%s'", v);
    return 0;
  case OPT_FORMAT:
    if (strcmp(v, "json") == 0)
      o->json = 1;
    else if (strcmp(v, "table") == 0 || strcmp(v, "summary") == 0)
      o->json = 0;
    else
      return packctl_usage_fail("load", "--format: expected table or json, got '%s'", v);
    return 0;
  default:
    if (packctl_is_conn_option(c))
      return packctl_conn_take(c, v, err, sizeof err) != 0 ? packctl_usage_fail("load", "%s", err)
                                                           : 0;
    break;
  }
  /* A field flag: checked now on a scratch request, so that a typo is a
   * usage error before any input is read; applied after the input. */
  size_t index = (size_t)(c - OPT_FIELD);
  const char *text = v != NULL ? v : "true";
  Packd__V1__PlanRequest *scratch = packctl_request_new();
  if (scratch == NULL)
    return packctl_usage_fail("load", "out of memory");
  int rc = packctl_fields_set(scratch, index, text, err, sizeof err);
  packd__v1__plan_request__free_unpacked(scratch, NULL);
  if (rc != 0)
    return packctl_usage_fail("load", "%s", err);
  if (strcmp(packctl_field_flags[index].flag, "seed") == 0 &&
      packctl_parse_u64(text, UINT64_MAX, "--seed", &o->seed, err, sizeof err) != 0)
    return packctl_usage_fail("load", "%s", err);
  o->set_index[o->nset] = (int)index;
  o->set_value[o->nset] = text;
  o->nset++;
  return 0;
}

static int parse_opts(int argc, char **argv, load_opts_t *o) {
  static const struct option fixed[] = {
      {"server", required_argument, NULL, OPT_SERVER},
      {"lengths", required_argument, NULL, OPT_LENGTHS},
      {"request-file", required_argument, NULL, OPT_REQUEST_FILE},
      {"concurrency", required_argument, NULL, OPT_CONCURRENCY},
      {"duration", required_argument, NULL, OPT_DURATION},
      {"warmup", required_argument, NULL, OPT_WARMUP},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"sample", required_argument, NULL, OPT_SAMPLE},
      {"distinct", required_argument, NULL, OPT_DISTINCT},
      {"format", required_argument, NULL, OPT_FORMAT},
      PACKCTL_CONN_OPTIONS,
      {"help", no_argument, NULL, PACKCTL_ARGS_HELP},
  };
  enum { N_FIXED = sizeof fixed / sizeof fixed[0] };
  struct option *long_opts = calloc(N_FIXED + packctl_n_field_flags + 1, sizeof *long_opts);
  if (long_opts == NULL)
    return packctl_usage_fail("load", "out of memory");
  memcpy(long_opts, fixed, sizeof fixed);
  packctl_fields_options(long_opts + N_FIXED, OPT_FIELD);
  int status = packctl_args_scan("load", argc, argv, long_opts, load_usage, load_take, o);
  free(long_opts);
  if (status != PACKCTL_EXIT_OK)
    return status;
  o->server = packctl_server_address(o->server);
  if (o->server == NULL)
    return packctl_usage_fail("load",
                              "missing --server HOST:PORT (or set $PACKD_TARGET or $PACKD_SERVER)");
  if ((o->lengths == NULL) == (o->request_file == NULL))
    return packctl_usage_fail("load", "give exactly one of INPUT (or --lengths FILE) and "
                                      "--request-file FILE");
  return PACKCTL_EXIT_OK;
}

static void print_table(const load_opts_t *o, const shared_t *sh, size_t sequences, uint64_t ok,
                        const uint64_t *errors, uint64_t nerr, const uint64_t *lat, double elapsed,
                        const char *first_error) {
  double mean = 0;
  for (uint64_t k = 0; k < ok; k++)
    mean += (double)lat[k];
  mean = ok ? mean / (double)ok / 1e6 : 0;
  printf("packctl load: server %s, concurrency %d, %.1f s measured after %.1f s warm-up\n",
         o->server, o->concurrency, elapsed, o->warmup_s);
  printf("request: %zu sequences, %zu distinct, %zu bytes\n", sequences, sh->nreq, sh->req_len[0]);
  printf("requests\n");
  printf("  %-20s %llu\n", "ok", (unsigned long long)ok);
  printf("  %-20s %llu\n", "errors", (unsigned long long)nerr);
  printf("  %-20s %.1f\n", "requests/s", (double)(ok + nerr) / elapsed);
  printf("latency (ms, ok calls)\n");
  printf("  %-20s %.3f\n", "p50", pct_ms(lat, ok, 0.50));
  printf("  %-20s %.3f\n", "p90", pct_ms(lat, ok, 0.90));
  printf("  %-20s %.3f\n", "p99", pct_ms(lat, ok, 0.99));
  printf("  %-20s %.3f\n", "max", ok ? (double)lat[ok - 1] / 1e6 : 0.0);
  printf("  %-20s %.3f\n", "mean", mean);
  printf("errors by status\n");
  if (nerr == 0)
    printf("  (none)\n");
  for (int c = 0; c < PK_GRPC_CODE_COUNT; c++)
    if (errors[c] > 0)
      printf("  %-20s %llu\n", pk_client_status_name(c), (unsigned long long)errors[c]);
  if (first_error[0] != '\0')
    printf("first error: %s\n", first_error);
}

static void print_json(const load_opts_t *o, const shared_t *sh, size_t sequences, uint64_t ok,
                       const uint64_t *errors, uint64_t nerr, const uint64_t *lat, double elapsed,
                       const char *first_error) {
  double mean = 0;
  for (uint64_t k = 0; k < ok; k++)
    mean += (double)lat[k];
  mean = ok ? mean / (double)ok / 1e6 : 0;
  json_t *by = json_object();
  for (int c = 0; c < PK_GRPC_CODE_COUNT; c++)
    if (errors[c] > 0)
      json_object_set_new(by, pk_client_status_name(c), json_integer((json_int_t)errors[c]));
  json_t *root = json_pack(
      "{s:s, s:i, s:f, s:f, s:I, s:I, s:I, s:I, s:f, s:{s:f, s:f, s:f, s:f, s:f}, s:{s:I, s:o, "
      "s:s}}",
      "server", o->server, "concurrency", o->concurrency, "duration_s", elapsed, "warmup_s",
      o->warmup_s, "sequences", (json_int_t)sequences, "distinct_requests", (json_int_t)sh->nreq,
      "request_bytes", (json_int_t)sh->req_len[0], "requests", (json_int_t)(ok + nerr),
      "requests_per_s", (double)(ok + nerr) / elapsed, "latency_ms", "p50", pct_ms(lat, ok, 0.5),
      "p90", pct_ms(lat, ok, 0.9), "p99", pct_ms(lat, ok, 0.99), "max",
      ok ? (double)lat[ok - 1] / 1e6 : 0.0, "mean", mean, "errors", "total", (json_int_t)nerr,
      "by_status", by, "first", first_error);
  if (root != NULL)
    packctl_write_json_value(stdout, root);
  json_decref(root);
}

int packctl_cmd_load(int argc, char **argv) {
  load_opts_t o = {
      .concurrency = 1, .duration_s = 10, .warmup_s = 1, .timeout_s = 30, .distinct = 16};
  o.set_index = calloc((size_t)argc + 1, sizeof *o.set_index);
  o.set_value = calloc((size_t)argc + 1, sizeof *o.set_value);
  int status =
      o.set_index == NULL || o.set_value == NULL ? PACKCTL_EXIT_FAIL : parse_opts(argc, argv, &o);
  if (status != PACKCTL_EXIT_OK) {
    free(o.set_index);
    free(o.set_value);
    return status < 0 ? PACKCTL_EXIT_OK : status;
  }

  shared_t sh = {.o = &o};
  size_t sequences = 0;
  worker_t *w = NULL;
  uint64_t *all = NULL;
  status = build_requests(&o, &sh, &sequences);
  if (status != PACKCTL_EXIT_OK)
    goto done;

  w = calloc((size_t)o.concurrency, sizeof *w);
  if (w == NULL) {
    status = PACKCTL_EXIT_FAIL;
    goto done;
  }
  pk_client_options_t copts;
  pk_client_options_default(&copts);
  packctl_conn_apply(&copts);
  copts.timeout_s = o.timeout_s;
  char err[512];
  for (int t = 0; t < o.concurrency; t++) {
    w[t].sh = &sh;
    w[t].id = t;
    if (pk_client_open(o.server, &copts, &w[t].client, err, sizeof err) != PK_OK) {
      fprintf(stderr, "packctl load: %s\n", err);
      status = PACKCTL_EXIT_FAIL;
      goto done;
    }
  }
  /* One call before the clock starts: a request the server refuses would
   * otherwise fail for the whole run. */
  {
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    pk_rpc_status_t st;
    if (pk_client_call(w[0].client, PK_METHOD_PLAN_PATH, sh.req[0], sh.req_len[0], &resp, &resp_len,
                       &st) != PK_OK) {
      fprintf(stderr, "packctl load: the first request failed: server %s answered %s: %s\n",
              o.server, pk_client_status_name(st.code), st.message);
      status = PACKCTL_EXIT_FAIL;
      goto done;
    }
    free(resp);
  }
  uint64_t t0 = now_ns();
  sh.t_measure_ns = t0 + (uint64_t)(o.warmup_s * 1e9);
  sh.t_end_ns = sh.t_measure_ns + (uint64_t)(o.duration_s * 1e9);
  int started = 0;
  for (; started < o.concurrency; started++)
    if (pthread_create(&w[started].thread, NULL, worker_main, &w[started]) != 0)
      break;
  for (int t = 0; t < started; t++)
    pthread_join(w[t].thread, NULL);
  if (started < o.concurrency) {
    fprintf(stderr, "packctl load: could start only %d of %d threads\n", started, o.concurrency);
    status = PACKCTL_EXIT_FAIL;
    goto done;
  }
  uint64_t t_last = now_ns();
  double elapsed = (double)(t_last - sh.t_measure_ns) / 1e9;
  if (elapsed <= 0)
    elapsed = o.duration_s;

  uint64_t ok = 0, nerr = 0, errors[PK_GRPC_CODE_COUNT] = {0};
  const char *first_error = "";
  for (int t = 0; t < o.concurrency; t++) {
    ok += w[t].n;
    for (int c = 0; c < PK_GRPC_CODE_COUNT; c++) {
      errors[c] += w[t].errors[c];
      nerr += w[t].errors[c];
    }
    if (first_error[0] == '\0')
      first_error = w[t].first_error;
  }
  all = malloc((ok > 0 ? ok : 1) * sizeof *all);
  if (all == NULL) {
    status = PACKCTL_EXIT_FAIL;
    goto done;
  }
  size_t k = 0;
  for (int t = 0; t < o.concurrency; t++) {
    memcpy(all + k, w[t].lat_ns, w[t].n * sizeof *all);
    k += w[t].n;
  }
  qsort(all, ok, sizeof *all, cmp_u64);
  if (o.json)
    print_json(&o, &sh, sequences, ok, errors, nerr, all, elapsed, first_error);
  else
    print_table(&o, &sh, sequences, ok, errors, nerr, all, elapsed, first_error);
  fflush(stdout);
  status = nerr == 0 ? PACKCTL_EXIT_OK : PACKCTL_EXIT_FAIL;

done:
  free(all);
  if (w != NULL) {
    for (int t = 0; t < o.concurrency; t++) {
      pk_client_close(w[t].client);
      free(w[t].lat_ns);
    }
    free(w);
  }
  if (sh.req != NULL) {
    for (size_t r = 0; r < sh.nreq; r++)
      free(sh.req[r]);
    free(sh.req);
  }
  free(sh.req_len);
  free(o.set_index);
  free(o.set_value);
  return status;
}
