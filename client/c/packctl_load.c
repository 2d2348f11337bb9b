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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "packctl.h"
#include "packctl_input.h"
#include "packctl_remote.h"
#include "packctl_request.h"
#include "pk_client.h"
#include "pk_error.h"

#define N_CODES 17

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
  uint64_t errors[N_CODES];
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
      int code = st.code >= 0 && st.code < N_CODES ? st.code : 2;
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
  fputs("usage: packctl load --server HOST:PORT (--lengths FILE | --request-file FILE)\n"
        "                    [--concurrency C] [--duration S] [--sample N] [FIELD FLAGS]\n"
        "\n"
        "Sends Plan calls from C threads (one connection each) for S seconds and prints\n"
        "requests/s, latency p50/p90/p99 and errors by status.\n"
        "\n"
        "  --server HOST:PORT    the packd server (default: $PACKD_TARGET)\n"
        "  --lengths FILE        lengths file or JSON manifest (as packctl plan INPUT)\n"
        "  --request-file FILE   a binary packd.v1.PlanRequest instead\n"
        "  --concurrency C       client threads (default 1)\n"
        "  --duration S          measured seconds (default 10)\n"
        "  --warmup S            seconds before measuring (default 1)\n"
        "  --sample N            sequences per request, sampled from the input\n"
        "  --distinct K          different samples cycled through (default 16)\n"
        "  --seed X              request seed and first sample seed (default 0)\n"
        "  --timeout S           deadline per call (default 30)\n" PACKCTL_CONN_USAGE
        "  --format FORMAT       table (default) or json\n"
        "\n"
        "Field flags set request fields as in packctl plan, by proto field name with\n"
        "dashes: --dp 64 --max-tokens 32768 --mode packed --equal-count --cost-linear 1 ...\n"
        "\n"
        "exit status: 0 every measured call OK, 1 some call failed, 2 bad flags.\n",
        f);
}

static int usage_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_err(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "packctl load: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nRun 'packctl load --help' for the options.\n");
  va_end(ap);
  return PACKCTL_EXIT_USAGE;
}

/* Finds the request field a field flag names: "max-tokens" is
 * batching.max_tokens, "cost-linear" cost.linear, "job" the top level. */
static int resolve_field(const char *flag, const char **sub, char *field, size_t flen,
                         int *is_bool) {
  char name[64];
  snprintf(name, sizeof name, "%s", flag);
  for (char *p = name; *p; p++)
    if (*p == '-')
      *p = '_';
  static const struct {
    const char *sub;
    const ProtobufCMessageDescriptor *d;
    const char *prefix;
  } subs[] = {
      {"parallel", &packd__v1__parallel__descriptor, ""},
      {"batching", &packd__v1__batching__descriptor, ""},
      {"layout", &packd__v1__layout__descriptor, ""},
      {"cost", &packd__v1__cost__descriptor, "cost_"},
      {NULL, &packd__v1__plan_request__descriptor, ""},
  };
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
    size_t pl = strlen(subs[i].prefix);
    if (strncmp(name, subs[i].prefix, pl) != 0)
      continue;
    const ProtobufCFieldDescriptor *fd =
        protobuf_c_message_descriptor_get_field_by_name(subs[i].d, name + pl);
    if (fd == NULL || fd->label == PROTOBUF_C_LABEL_REPEATED || fd->type == PROTOBUF_C_TYPE_MESSAGE)
      continue;
    *sub = subs[i].sub;
    snprintf(field, flen, "%s", name + pl);
    *is_bool = fd->type == PROTOBUF_C_TYPE_BOOL;
    return 0;
  }
  return -1;
}

static uint8_t *pack_request(const Packd__V1__PlanRequest *req, size_t *len) {
  *len = packd__v1__plan_request__get_packed_size(req);
  uint8_t *b = malloc(*len > 0 ? *len : 1);
  if (b != NULL)
    packd__v1__plan_request__pack(req, b);
  return b;
}

/* Builds the requests; returns an exit status. */
static int build_requests(const load_opts_t *o, int argc, char **argv, shared_t *sh,
                          size_t *sequences) {
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
  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], "--", 2) != 0)
      continue;
    char name[64];
    const char *v;
    packctl_next_flag(argc, argv, &i, false, name, sizeof name, &v);
    static const char *const own[] = {"server",   "lengths", "request-file", "concurrency",
                                      "duration", "warmup",  "sample",       "distinct",
                                      "timeout",  "format",  "seed"};
    int is_own = 0;
    for (size_t k = 0; k < sizeof own / sizeof own[0]; k++)
      is_own |= strcmp(name, own[k]) == 0;
    if (packctl_conn_is_option(name)) {
      if (v == NULL)
        i++; /* Its value; parse_opts took it. */
      continue;
    }
    if (is_own) {
      if (v == NULL)
        i++; /* Skip its value; parse_opts checked it. */
      if (strcmp(name, "seed") != 0)
        continue;
    }
    const char *sub = NULL;
    char field[64];
    int is_bool = 0;
    resolve_field(name, &sub, field, sizeof field, &is_bool);
    if (v == NULL)
      v = is_own ? argv[i] : (is_bool ? "true" : argv[++i]);
    char what[80];
    snprintf(what, sizeof what, "--%s", name);
    rc = packctl_request_set(req, sub, field, v, what, err, sizeof err);
    if (rc != 0) {
      fprintf(stderr, "packctl load: %s\n", err);
      packd__v1__plan_request__free_unpacked(req, NULL);
      return PACKCTL_EXIT_USAGE;
    }
  }
  if (req->parallel == NULL || req->parallel->dp == 0) {
    packd__v1__plan_request__free_unpacked(req, NULL);
    return usage_err("the request has no parallel.dp: give --dp N");
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

static int parse_opts(int argc, char **argv, load_opts_t *o) {
  char err[512];
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      load_usage(stdout);
      return -1;
    }
    if (strncmp(argv[i], "--", 2) != 0)
      return usage_err("unexpected argument '%s'", argv[i]);
    char name[64];
    const char *v;
    /* Field flags are checked here too, so that a typo is a usage error
     * before any request is built. */
    const char *sub;
    char field[64];
    int is_bool = 0;
    const char *arg = argv[i] + 2;
    size_t nl = strcspn(arg, "=");
    snprintf(name, sizeof name, "%.*s", (int)nl, arg);
    int known_field = resolve_field(name, &sub, field, sizeof field, &is_bool) == 0;
    if (packctl_next_flag(argc, argv, &i, !(known_field && is_bool), name, sizeof name, &v) != 0)
      return usage_err("--%s needs a value", name);
    uint64_t u;
    int conn = packctl_conn_option(name, v, err, sizeof err);
    if (conn < 0)
      return usage_err("%s", err);
    if (conn > 0) {
      continue;
    } else if (strcmp(name, "server") == 0) {
      o->server = v;
    } else if (strcmp(name, "lengths") == 0) {
      o->lengths = v;
    } else if (strcmp(name, "request-file") == 0) {
      o->request_file = v;
    } else if (strcmp(name, "concurrency") == 0) {
      if (packctl_parse_u64(v, 4096, "--concurrency", &u, err, sizeof err) != 0 || u == 0)
        return usage_err("--concurrency: expected 1 to 4096, got '%s'", v);
      o->concurrency = (int)u;
    } else if (strcmp(name, "duration") == 0) {
      if (packctl_parse_seconds(v, &o->duration_s) != 0)
        return usage_err("--duration: expected a positive number of seconds, got '%s'", v);
    } else if (strcmp(name, "warmup") == 0) {
      if (strcmp(v, "0") == 0)
        o->warmup_s = 0;
      else if (packctl_parse_seconds(v, &o->warmup_s) != 0)
        return usage_err("--warmup: expected a number of seconds, got '%s'", v);
    } else if (strcmp(name, "timeout") == 0) {
      if (packctl_parse_seconds(v, &o->timeout_s) != 0)
        return usage_err("--timeout: expected a positive number of seconds, got '%s'", v);
    } else if (strcmp(name, "sample") == 0) {
      if (packctl_parse_u64(v, UINT32_MAX, "--sample", &o->sample, err, sizeof err) != 0 ||
          o->sample == 0)
        return usage_err("--sample: expected a positive count, got '%s'", v);
    } else if (strcmp(name, "distinct") == 0) {
      if (packctl_parse_u64(v, 4096, "--distinct", &o->distinct, err, sizeof err) != 0 ||
          o->distinct == 0)
        return usage_err("--distinct: expected 1 to 4096, got '%s'", v);
    } else if (strcmp(name, "seed") == 0) {
      if (packctl_parse_u64(v, UINT64_MAX, "--seed", &o->seed, err, sizeof err) != 0)
        return usage_err("%s", err);
    } else if (strcmp(name, "format") == 0) {
      if (strcmp(v, "json") == 0)
        o->json = 1;
      else if (strcmp(v, "table") == 0 || strcmp(v, "summary") == 0)
        o->json = 0;
      else
        return usage_err("--format: expected table or json, got '%s'", v);
    } else if (!known_field) {
      return usage_err("unknown option '--%s'", name);
    }
  }
  o->server = packctl_server_address(o->server);
  if (o->server == NULL)
    return usage_err("missing --server HOST:PORT (or $PACKD_TARGET)");
  if ((o->lengths == NULL) == (o->request_file == NULL))
    return usage_err("give exactly one of --lengths FILE and --request-file FILE");
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
  for (int c = 0; c < N_CODES; c++)
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
  for (int c = 0; c < N_CODES; c++)
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
  char *text = root ? json_dumps(root, JSON_INDENT(2)) : NULL;
  if (text != NULL)
    printf("%s\n", text);
  free(text);
  json_decref(root);
}

int packctl_cmd_load(int argc, char **argv) {
  load_opts_t o = {
      .concurrency = 1, .duration_s = 10, .warmup_s = 1, .timeout_s = 30, .distinct = 16};
  int status = parse_opts(argc, argv, &o);
  if (status != PACKCTL_EXIT_OK)
    return status < 0 ? PACKCTL_EXIT_OK : status;

  shared_t sh = {.o = &o};
  size_t sequences = 0;
  worker_t *w = NULL;
  uint64_t *all = NULL;
  status = build_requests(&o, argc, argv, &sh, &sequences);
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

  uint64_t ok = 0, nerr = 0, errors[N_CODES] = {0};
  const char *first_error = "";
  for (int t = 0; t < o.concurrency; t++) {
    ok += w[t].n;
    for (int c = 0; c < N_CODES; c++) {
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
  return status;
}
