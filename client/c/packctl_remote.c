/* packctl remote mode (packctl.h): `plan --server` through the C client
 * library, `rank-plan` and `health`. `load` lives in packctl_load.c. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "packctl.h"
#include "packctl_args.h"
#include "packctl_dcp.h"
#include "packctl_fail.h"
#include "packctl_json.h"
#include "packctl_output.h"
#include "packctl_remote.h"
#include "packctl_request.h"
#include "pk_client.h"
#include "pk_error.h"

const char *packctl_server_address(const char *flag) {
  if (flag != NULL && flag[0] != '\0')
    return flag;
  /* PACKD_TARGET is the Python client's name for the same thing, so one
   * variable serves a trainer's client and packctl; PACKD_SERVER is the
   * older name, still read. */
  static const char *const names[] = {"PACKD_TARGET", "PACKD_SERVER"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const char *env = getenv(names[i]);
    if (env != NULL && env[0] != '\0')
      return env;
  }
  return NULL;
}

/* The connection flags of this packctl run (one command per process). */
static pk_client_options_t g_conn;

int packctl_conn_take(int val, const char *value, char *err, size_t errlen) {
  static const char *const names[PACKCTL_N_CONN_OPTIONS] = {"tls-ca", "tls-cert", "tls-key",
                                                            "token-file"};
  if (!packctl_is_conn_option(val)) {
    snprintf(err, errlen, "internal error: option %d is not a connection flag", val);
    return -1;
  }
  return pk_client_options_set(&g_conn, names[val - PACKCTL_OPT_CONN], value, err, errlen) < 0 ? -1
                                                                                               : 0;
}

void packctl_conn_apply(pk_client_options_t *opts) {
  opts->tls_ca = g_conn.tls_ca;
  opts->tls_cert = g_conn.tls_cert;
  opts->tls_key = g_conn.tls_key;
  opts->token_file = g_conn.token_file;
  pk_client_options_from_env(opts);
}

int packctl_parse_seconds(const char *text, double *out) {
  if (text == NULL || text[0] == '\0')
    return -1;
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (errno != 0 || *end != '\0' || !isfinite(v) || !(v > 0) || v >= 1e9)
    return -1;
  *out = v;
  return 0;
}

int packctl_plan_remote(const char *server, double timeout_s, const Packd__V1__PlanRequest *req,
                        Packd__V1__PlanResponse **resp, char *err, size_t errlen) {
  *resp = NULL;
  pk_client_options_t opts;
  pk_client_options_default(&opts);
  packctl_conn_apply(&opts);
  if (timeout_s > 0)
    opts.timeout_s = timeout_s;
  pk_client_t *c = NULL;
  int rc = pk_client_open(server, &opts, &c, err, errlen);
  if (rc != PK_OK)
    return rc;
  pk_rpc_status_t st;
  rc = pk_client_plan(c, req, resp, &st);
  if (rc != PK_OK)
    snprintf(err, errlen, "server %s answered %s: %s", server, pk_client_status_name(st.code),
             st.message);
  pk_client_close(c);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* rank-plan                                                                  */

static void rank_plan_usage(FILE *f) {
  fputs("usage: packctl rank-plan [--server HOST:PORT] --plan-id ID --rank R [OPTIONS]\n"
        "\n"
        "Fetches one data-parallel rank's part of a recent plan (GetRankPlan); of a\n"
        "dynamic-CP plan, one GPU's part: its group in every slot.\n"
        "\n"
        "  --server HOST:PORT   the packd server (default: $PACKD_TARGET, else $PACKD_SERVER)\n"
        "  --plan-id ID         plan_id of a PlanResponse (required)\n"
        "  --rank R             the DP rank, 0-based (required); for a dynamic-CP plan,\n"
        "                       the GPU's index in the pool (dp-cp order)\n"
        "  --timeout SECONDS    deadline (default 30)\n"
        "  --format F           json (default) | summary\n" PACKCTL_CONN_USAGE
        "  -h, --help           this help\n"
        "\n"
        "exit status: 0 ok, 1 the server refused: NOT_FOUND (the plan left the cache,\n"
        "and the plan store when the server has one: plan again) or UNAVAILABLE (the\n"
        "server or its plan store cannot be reached: retry after a few seconds); the\n"
        "server's message goes to stderr. 2 bad flags.\n",
        f);
}

static void write_rank_summary(FILE *f, const Packd__V1__RankPlan *rk) {
  fprintf(f, "plan_id %s  dp_rank %u  mini-batches %zu\n", rk->plan_id, rk->dp_rank,
          rk->n_mini_batches);
  for (size_t m = 0; m < rk->n_mini_batches; m++) {
    const Packd__V1__MiniBatch *mb = rk->mini_batches[m];
    fprintf(f, "mini-batch %zu: %zu micro-batches\n", m, mb->n_micro_batches);
    for (size_t j = 0; j < mb->n_micro_batches; j++) {
      const Packd__V1__MicroBatch *mi = mb->micro_batches[j];
      fprintf(f,
              "  micro %-3zu seqs %-5zu tokens %-8llu padded %-8llu max_seqlen %-7u cost %-10.1f "
              "loss_scale %.6f\n",
              j, mi->n_seqs, (unsigned long long)mi->tokens, (unsigned long long)mi->padded_tokens,
              mi->max_seqlen, mi->cost, mi->loss_scale);
    }
  }
}

typedef struct rank_plan_opts {
  const char *server, *plan_id, *format;
  uint64_t rank;
  bool have_rank;
  double timeout_s;
} rank_plan_opts_t;

enum { OPT_SERVER = 256, OPT_PLAN_ID, OPT_RANK, OPT_TIMEOUT, OPT_FORMAT, OPT_SERVICE, OPT_WAIT };

/* Stores one rank-plan option (packctl_take_fn). */
static int rank_plan_take(void *opts, int c, const char *v) {
  rank_plan_opts_t *o = opts;
  char err[512];
  switch (c) {
  case PACKCTL_ARGS_POSITIONAL:
    return packctl_usage_fail("rank-plan",
                              "unexpected argument '%s' (rank-plan takes only options)", v);
  case OPT_SERVER:
    o->server = v;
    return 0;
  case OPT_PLAN_ID:
    o->plan_id = v;
    return 0;
  case OPT_RANK:
    if (packctl_parse_u64(v, UINT32_MAX, "--rank", &o->rank, err, sizeof err) != 0)
      return packctl_usage_fail("rank-plan", "%s", err);
    o->have_rank = true;
    return 0;
  case OPT_TIMEOUT:
    if (packctl_parse_seconds(v, &o->timeout_s) != 0)
      return packctl_usage_fail("rank-plan",
                                "--timeout: expected a positive number of seconds, got '%s'", v);
    return 0;
  case OPT_FORMAT:
    if (strcmp(v, "json") != 0 && strcmp(v, "summary") != 0)
      return packctl_usage_fail("rank-plan", "--format: expected json or summary, got '%s'", v);
    o->format = v;
    return 0;
  default:
    if (packctl_conn_take(c, v, err, sizeof err) != 0)
      return packctl_usage_fail("rank-plan", "%s", err);
    return 0;
  }
}

int packctl_cmd_rank_plan(int argc, char **argv) {
  const char *cmd = "rank-plan";
  char err[512];
  static const struct option long_opts[] = {
      {"server", required_argument, NULL, OPT_SERVER},
      {"plan-id", required_argument, NULL, OPT_PLAN_ID},
      {"rank", required_argument, NULL, OPT_RANK},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"format", required_argument, NULL, OPT_FORMAT},
      PACKCTL_CONN_OPTIONS,
      {"help", no_argument, NULL, PACKCTL_ARGS_HELP},
      {NULL, 0, NULL, 0},
  };
  rank_plan_opts_t o = {.format = "json", .timeout_s = 30.0};
  int status = packctl_args_scan(cmd, argc, argv, long_opts, rank_plan_usage, rank_plan_take, &o);
  if (status != 0)
    return status == PACKCTL_ARGS_HELPED ? PACKCTL_EXIT_OK : status;
  const char *server = o.server, *plan_id = o.plan_id, *format = o.format;
  uint64_t rank = o.rank;
  bool have_rank = o.have_rank;
  double timeout_s = o.timeout_s;
  server = packctl_server_address(server);
  if (server == NULL)
    return packctl_usage_fail(cmd,
                              "missing --server HOST:PORT (or set $PACKD_TARGET or $PACKD_SERVER)");
  if (plan_id == NULL || plan_id[0] == '\0')
    return packctl_usage_fail(cmd, "missing --plan-id ID (the planId of a plan's JSON)");
  if (!have_rank)
    return packctl_usage_fail(cmd, "missing --rank R (the DP rank, 0-based)");

  pk_client_options_t opts;
  pk_client_options_default(&opts);
  packctl_conn_apply(&opts);
  opts.timeout_s = timeout_s;
  pk_client_t *c = NULL;
  if (pk_client_open(server, &opts, &c, err, sizeof err) != PK_OK) {
    fprintf(stderr, "packctl %s: %s\n", cmd, err);
    return PACKCTL_EXIT_FAIL;
  }
  Packd__V1__RankPlan *rk = NULL;
  pk_rpc_status_t st;
  int rc = pk_client_get_rank_plan(c, plan_id, (uint32_t)rank, &rk, &st);
  pk_client_close(c);
  if (rc != PK_OK) {
    fprintf(stderr, "packctl %s: server %s answered %s: %s\n", cmd, server,
            pk_client_status_name(st.code), st.message);
    return PACKCTL_EXIT_FAIL;
  }
  int wr;
  if (strcmp(format, "json") == 0)
    wr = packctl_write_json(stdout, &rk->base);
  else if (rk->dynamic_cp != NULL)
    wr = packctl_write_dcp_rank_summary(stdout, rk);
  else {
    write_rank_summary(stdout, rk);
    wr = 0;
  }
  packd__v1__rank_plan__free_unpacked(rk, NULL);
  if (wr != 0 || fflush(stdout) != 0) {
    fprintf(stderr, "packctl %s: writing the output failed\n", cmd);
    return PACKCTL_EXIT_FAIL;
  }
  return PACKCTL_EXIT_OK;
}

/* ------------------------------------------------------------------------ */
/* health                                                                     */

static void health_usage(FILE *f) {
  fputs("usage: packctl health [--server HOST:PORT] [--service NAME] [--timeout SECONDS]\n"
        "                      [--wait SECONDS]\n"
        "\n"
        "Calls grpc.health.v1.Health/Check and prints SERVING or NOT_SERVING.\n"
        "  --server HOST:PORT  the packd server (default: $PACKD_TARGET, else $PACKD_SERVER)\n"
        "  --service NAME      \"\" (default: the whole server) or packd.v1.Planner\n"
        "  --timeout SECONDS   deadline of each check (default 5)\n"
        "  --wait SECONDS      keep asking until SERVING or this much time passed\n"
        "                      (default 0: ask once; for scripts that just started the "
        "server)\n" PACKCTL_CONN_USAGE "  -h, --help          this help\n"
        "\n"
        "exit status: 0 only when SERVING; 1 NOT_SERVING, unreachable or refused;\n"
        "2 bad flags.\n",
        f);
}

typedef struct health_opts {
  const char *server, *service;
  double timeout_s, wait_s;
} health_opts_t;

/* Stores one health option (packctl_take_fn). */
static int health_take(void *opts, int c, const char *v) {
  health_opts_t *o = opts;
  char err[256];
  switch (c) {
  case PACKCTL_ARGS_POSITIONAL:
    return packctl_usage_fail("health", "unexpected argument '%s' (health takes only options)", v);
  case OPT_SERVER:
    o->server = v;
    return 0;
  case OPT_SERVICE:
    o->service = v;
    return 0;
  case OPT_TIMEOUT:
    if (packctl_parse_seconds(v, &o->timeout_s) != 0)
      return packctl_usage_fail("health",
                                "--timeout: expected a positive number of seconds, got '%s'", v);
    return 0;
  case OPT_WAIT:
    if (packctl_parse_seconds(v, &o->wait_s) != 0)
      return packctl_usage_fail("health", "--wait: expected a positive number of seconds, got '%s'",
                                v);
    return 0;
  default:
    if (packctl_conn_take(c, v, err, sizeof err) != 0)
      return packctl_usage_fail("health", "%s", err);
    return 0;
  }
}

int packctl_cmd_health(int argc, char **argv) {
  const char *cmd = "health";
  static const struct option long_opts[] = {
      {"server", required_argument, NULL, OPT_SERVER},
      {"service", required_argument, NULL, OPT_SERVICE},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"wait", required_argument, NULL, OPT_WAIT},
      PACKCTL_CONN_OPTIONS,
      {"help", no_argument, NULL, PACKCTL_ARGS_HELP},
      {NULL, 0, NULL, 0},
  };
  health_opts_t o = {.service = "", .timeout_s = 5.0};
  int status = packctl_args_scan(cmd, argc, argv, long_opts, health_usage, health_take, &o);
  if (status != 0)
    return status == PACKCTL_ARGS_HELPED ? PACKCTL_EXIT_OK : status;
  const char *server = o.server, *service = o.service;
  double timeout_s = o.timeout_s, wait_s = o.wait_s;
  server = packctl_server_address(server);
  if (server == NULL)
    return packctl_usage_fail(cmd,
                              "missing --server HOST:PORT (or set $PACKD_TARGET or $PACKD_SERVER)");
  pk_client_options_t opts;
  pk_client_options_default(&opts);
  packctl_conn_apply(&opts);
  opts.timeout_s = timeout_s;
  char err[512];
  int serving = 0;
  pk_rpc_status_t st;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int rc;
  for (;;) {
    /* A fresh channel per attempt: a channel that failed to connect would
     * wait out gRPC's reconnect backoff (a second and more) first. */
    pk_client_t *c = NULL;
    if (pk_client_open(server, &opts, &c, err, sizeof err) != PK_OK) {
      fprintf(stderr, "packctl %s: %s\n", cmd, err);
      return PACKCTL_EXIT_FAIL;
    }
    rc = pk_client_health(c, service, &serving, &st);
    pk_client_close(c);
    if (rc == PK_OK && serving == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING)
      break;
    /* With --wait, a server that is not up yet or still starting gets
     * another chance; a NOT_FOUND service does not. */
    if (rc == PK_ENOTFOUND)
      break;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double waited = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9;
    if (waited + 0.1 > wait_s)
      break;
    struct timespec nap = {0, 100000000L};
    nanosleep(&nap, NULL);
  }
  if (rc != PK_OK) {
    printf("UNKNOWN\n");
    fprintf(stderr, "packctl %s: server %s answered %s: %s\n", cmd, server,
            pk_client_status_name(st.code), st.message);
    return PACKCTL_EXIT_FAIL;
  }
  const char *names[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
  printf("%s\n", serving >= 0 && serving <= 3 ? names[serving] : "UNKNOWN");
  return serving == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
             ? PACKCTL_EXIT_OK
             : PACKCTL_EXIT_FAIL;
}
