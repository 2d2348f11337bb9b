/* Unit tests of server/config.c and the level parser of server/log.c:
 * defaults, environment, flags over environment, and errors that name the
 * flag or variable and the value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "log.h"
#include "pk_error.h"

/* A fake environment: NULL-terminated pairs. */
static const char *table_env(const char *name, void *user) {
  const char *const *kv = user;
  for (size_t i = 0; kv[i] != NULL; i += 2)
    if (strcmp(kv[i], name) == 0)
      return kv[i + 1];
  return NULL;
}

static int load(pk_server_config_t *cfg, const char *const *env, int argc, const char **argv,
                char *err, size_t errlen) {
  static const char *const empty[] = {NULL};
  pk_config_defaults(cfg);
  return pk_config_load(cfg, argc, (char *const *)argv, table_env, (void *)(env ? env : empty), err,
                        errlen);
}

static void test_defaults(void **state) {
  (void)state;
  pk_server_config_t cfg;
  char err[256];
  const char *argv[] = {"packd"};
  assert_int_equal(load(&cfg, NULL, 1, argv, err, sizeof err), PK_OK);
  assert_string_equal(cfg.listen, "127.0.0.1:50051");
  assert_string_equal(cfg.metrics_listen, "127.0.0.1:9464");
  assert_true(cfg.workers >= 2);
  /* 1,000,000 sequences with lengths, loss tokens and groups fit. */
  assert_true(cfg.max_message_bytes >= 20 * 1000 * 1000);
  assert_int_equal(cfg.log_level, PK_LOG_INFO);
  assert_false(cfg.show_help);
}

static void test_env_then_flags(void **state) {
  (void)state;
  const char *const env[] = {"PACKD_LISTEN",
                             "0.0.0.0:7000",
                             "PACKD_WORKERS",
                             "3",
                             "PACKD_CACHE_BYTES",
                             "16M",
                             "PACKD_GRACE_PERIOD",
                             "2.5",
                             "PACKD_LOG_LEVEL",
                             "DEBUG",
                             NULL};
  const char *argv[] = {"packd", "--workers", "5", "--cache-ttl=500ms", "--max-message-bytes",
                        "1G"};
  pk_server_config_t cfg;
  char err[256];
  assert_int_equal(load(&cfg, env, 6, argv, err, sizeof err), PK_OK);
  assert_string_equal(cfg.listen, "0.0.0.0:7000");
  assert_int_equal(cfg.workers, 5); /* The flag wins over PACKD_WORKERS. */
  assert_int_equal(cfg.cache_bytes, 16 << 20);
  assert_true(cfg.grace_period == 2.5);
  assert_true(cfg.cache_ttl == 0.5);
  assert_int_equal(cfg.max_message_bytes, 1 << 30);
  assert_int_equal(cfg.log_level, PK_LOG_DEBUG);
}

static void expect_error(const char *const *env, int argc, const char **argv,
                         const char *must_contain1, const char *must_contain2) {
  pk_server_config_t cfg;
  char err[256] = "";
  assert_int_equal(load(&cfg, env, argc, argv, err, sizeof err), PK_EINVAL);
  if (strstr(err, must_contain1) == NULL || strstr(err, must_contain2) == NULL)
    fail_msg("error \"%s\" should name \"%s\" and \"%s\"", err, must_contain1, must_contain2);
}

static void test_errors_name_flag_and_value(void **state) {
  (void)state;
  const char *a1[] = {"packd", "--workers", "0"};
  expect_error(NULL, 3, a1, "--workers", "\"0\"");
  const char *a2[] = {"packd", "--listen", "localhost"};
  expect_error(NULL, 3, a2, "--listen", "localhost");
  const char *a3[] = {"packd", "--listen", "1.2.3.4:70000"};
  expect_error(NULL, 3, a3, "--listen", "70000");
  const char *a4[] = {"packd", "--bogus=1"};
  expect_error(NULL, 2, a4, "unknown flag", "--bogus");
  const char *a5[] = {"packd", "--grace-period"};
  expect_error(NULL, 2, a5, "--grace-period", "needs a value");
  const char *a6[] = {"packd", "--max-message-bytes", "12Q"};
  expect_error(NULL, 3, a6, "--max-message-bytes", "12Q");
  const char *a7[] = {"packd", "--log-level", "loud"};
  expect_error(NULL, 3, a7, "--log-level", "loud");
  const char *a8[] = {"packd", "stray"};
  expect_error(NULL, 2, a8, "unexpected argument", "stray");
  const char *a9[] = {"packd", "--help=yes"};
  expect_error(NULL, 2, a9, "--help", "yes");
  const char *const env[] = {"PACKD_CACHE_TTL", "-1", NULL};
  const char *a10[] = {"packd"};
  expect_error(env, 1, a10, "PACKD_CACHE_TTL", "-1");
  /* The metrics listener takes numeric addresses only: a name is a usage
   * error naming the flag (or variable) and the host, not a bind failure. */
  const char *a11[] = {"packd", "--metrics-listen", "localhost:0"};
  expect_error(NULL, 3, a11, "--metrics-listen", "\"localhost\" is not a numeric IPv4 or [IPv6]");
  const char *const env2[] = {"PACKD_METRICS_LISTEN", "metrics.local:9464", NULL};
  expect_error(env2, 1, a10, "PACKD_METRICS_LISTEN", "metrics.local");
}

static void test_metrics_listen_numeric_addresses(void **state) {
  (void)state;
  pk_server_config_t cfg;
  char err[256];
  const char *ok[] = {"127.0.0.1:0", "0.0.0.0:9464", "[::1]:9464", "[::]:0"};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    const char *argv[] = {"packd", "--metrics-listen", ok[i]};
    if (load(&cfg, NULL, 3, argv, err, sizeof err) != PK_OK)
      fail_msg("%s refused: %s", ok[i], err);
    assert_string_equal(cfg.metrics_listen, ok[i]);
  }
  /* The gRPC listener resolves names through gRPC: they stay accepted. */
  const char *argv[] = {"packd", "--listen", "localhost:0"};
  assert_int_equal(load(&cfg, NULL, 3, argv, err, sizeof err), PK_OK);
}

static void test_help_and_version_flags(void **state) {
  (void)state;
  pk_server_config_t cfg;
  char err[256];
  const char *argv[] = {"packd", "--help", "--version"};
  assert_int_equal(load(&cfg, NULL, 3, argv, err, sizeof err), PK_OK);
  assert_true(cfg.show_help);
  assert_true(cfg.show_version);
}

static void test_hostport(void **state) {
  (void)state;
  char host[64];
  int port = -1;
  assert_int_equal(pk_parse_hostport("127.0.0.1:0", host, sizeof host, &port), PK_OK);
  assert_string_equal(host, "127.0.0.1");
  assert_int_equal(port, 0);
  assert_int_equal(pk_parse_hostport("[::1]:65535", host, sizeof host, &port), PK_OK);
  assert_string_equal(host, "::1");
  assert_int_equal(port, 65535);
  const char *bad[] = {"", ":80", "host:", "host:-1", "::1:80", "[::1]80", "h:1x", "h:65536"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (pk_parse_hostport(bad[i], host, sizeof host, &port) != PK_EINVAL)
      fail_msg("\"%s\" should be rejected", bad[i]);
}

static void test_bytes_and_seconds_round_trip(void **state) {
  (void)state;
  uint64_t s = 88172645463325252ull;
  for (int i = 0; i < 2000; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    uint64_t v = s % (1ull << 40);
    const char *suffix[] = {"", "K", "M", "G"};
    int k = (int)(s >> 60) % 4;
    if (k > 0)
      v %= 1ull << 20;
    char text[64];
    snprintf(text, sizeof text, "%llu%s", (unsigned long long)v, suffix[k]);
    int64_t out = -1;
    assert_int_equal(pk_parse_bytes(text, &out), PK_OK);
    assert_int_equal((uint64_t)out, v << (10 * k));
    double secs = (double)(s % 100000) / 8.0; /* Exact in binary. */
    snprintf(text, sizeof text, "%.3f", secs);
    double got = -1;
    assert_int_equal(pk_parse_seconds(text, &got), PK_OK);
    assert_true(got == secs);
    snprintf(text, sizeof text, "%llums", (unsigned long long)(s % 100000));
    assert_int_equal(pk_parse_seconds(text, &got), PK_OK);
    assert_true(got > (double)(s % 100000) / 1000.0 - 1e-9 &&
                got < (double)(s % 100000) / 1000.0 + 1e-9);
  }
  int64_t out;
  assert_int_equal(pk_parse_bytes("99999999999G", &out), PK_EINVAL);
  assert_int_equal(pk_parse_bytes("-1", &out), PK_EINVAL);
  double d;
  assert_int_equal(pk_parse_seconds("nan", &d), PK_EINVAL);
  assert_int_equal(pk_parse_seconds("1h", &d), PK_EINVAL);
}

static void test_describe_and_usage(void **state) {
  (void)state;
  pk_server_config_t cfg;
  pk_config_defaults(&cfg);
  char line[1536];
  pk_config_describe(&cfg, line, sizeof line);
  assert_non_null(strstr(line, "listen=127.0.0.1:50051"));
  assert_non_null(strstr(line, "metrics_listen=127.0.0.1:9464"));
  assert_non_null(strstr(line, "grace_period=10s"));
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  pk_config_usage(f, "packd");
  fclose(f);
  const char *must[] = {
      "--listen",       "PACKD_LISTEN",   "--metrics-listen",    "PACKD_METRICS_LISTEN",
      "--workers",      "--max-inflight", "--max-message-bytes", "--cache-bytes",
      "--cache-ttl",    "--grace-period", "PACKD_GRACE_PERIOD",  "--log-level",
      "PACKD_LOG_LEVEL"};
  for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
    if (strstr(buf, must[i]) == NULL)
      fail_msg("usage text lacks %s", must[i]);
  free(buf);
}

static void test_plan_store_flags(void **state) {
  (void)state;
  pk_server_config_t cfg;
  char err[512];
  const char *a0[] = {"packd"};
  assert_int_equal(load(&cfg, NULL, 1, a0, err, sizeof err), PK_OK);
  assert_string_equal(cfg.plan_store, "");
  assert_string_equal(cfg.plan_store_prefix, "packd:");
  char line[1536];
  pk_config_describe(&cfg, line, sizeof line);
  assert_non_null(strstr(line, "plan_store=off"));

  const char *const env[] = {"PACKD_PLAN_STORE", "redis://:pw@store:6380/2",
                             "PACKD_PLAN_STORE_PREFIX", "env:", NULL};
  const char *a1[] = {"packd", "--plan-store-prefix", "flag:"};
  assert_int_equal(load(&cfg, env, 3, a1, err, sizeof err), PK_OK);
  assert_string_equal(cfg.plan_store, "redis://:pw@store:6380/2");
  assert_string_equal(cfg.plan_store_prefix, "flag:");
  /* The start-up line names the store, never its password. */
  pk_config_describe(&cfg, line, sizeof line);
  assert_non_null(strstr(line, "plan_store=redis://store:6380/2 plan_store_prefix=flag:"));
  assert_null(strstr(line, "pw"));

  const char *b1[] = {"packd", "--plan-store", "rediss://store:6380"};
  expect_error(NULL, 3, b1, "--plan-store", "TLS");
  const char *b2[] = {"packd", "--plan-store=redis://store:0"};
  expect_error(NULL, 2, b2, "--plan-store", "port");
  const char *b3[] = {"packd", "--plan-store-prefix", "a b"};
  expect_error(NULL, 3, b3, "--plan-store-prefix", "a b");
  const char *b4[] = {"packd", "--plan-store-password-file", "/run/secrets/pw"};
  expect_error(NULL, 3, b4, "--plan-store-password-file", "--plan-store is not");
  const char *b5[] = {"packd", "--plan-store", "redis://:pw@store", "--plan-store-password-file",
                      "/run/secrets/pw"};
  expect_error(NULL, 5, b5, "--plan-store-password-file", "one place");
  const char *const benv[] = {"PACKD_PLAN_STORE", "http://store", NULL};
  expect_error(benv, 1, a0, "PACKD_PLAN_STORE", "not a redis:// URL");
  const char *b6[] = {"packd", "--plan-store", "redis://:hunter2@store:99999"};
  pk_server_config_t c2;
  char e2[512] = "";
  assert_int_equal(load(&c2, NULL, 3, b6, e2, sizeof e2), PK_EINVAL);
  assert_null(strstr(e2, "hunter2"));
  const char *ok[] = {"packd", "--plan-store", "redis://store", "--plan-store-password-file",
                      "/run/secrets/pw"};
  assert_int_equal(load(&cfg, NULL, 5, ok, err, sizeof err), PK_OK);
  assert_string_equal(cfg.plan_store_password_file, "/run/secrets/pw");
}

/* --max-sequences and --max-plan-bytes: the planner's defaults, then the
 * environment, then the flags; out-of-range values name the flag. */
static void test_plan_limit_flags(void **state) {
  (void)state;
  pk_server_config_t cfg;
  char err[256];
  const char *argv[] = {"packd"};
  assert_int_equal(load(&cfg, NULL, 1, argv, err, sizeof err), PK_OK);
  assert_int_equal(cfg.max_sequences, 4194304);
  assert_int_equal(cfg.max_plan_bytes, 64LL << 20);
  const char *const env[] = {"PACKD_MAX_SEQUENCES", "1000", "PACKD_MAX_PLAN_BYTES", "8M", NULL};
  assert_int_equal(load(&cfg, env, 1, argv, err, sizeof err), PK_OK);
  assert_int_equal(cfg.max_sequences, 1000);
  assert_int_equal(cfg.max_plan_bytes, 8LL << 20);
  const char *flags[] = {"packd", "--max-sequences=0", "--max-plan-bytes", "0"};
  assert_int_equal(load(&cfg, env, 4, flags, err, sizeof err), PK_OK);
  assert_int_equal(cfg.max_sequences, 0);
  assert_int_equal(cfg.max_plan_bytes, 0);
  const char *bad[] = {"packd", "--max-sequences", "40000000"};
  assert_int_equal(load(&cfg, NULL, 3, bad, err, sizeof err), PK_EINVAL);
  assert_non_null(strstr(err, "max-sequences"));
}

/* The decoded-bytes budget, the refused-call log interval and an
 * optional plan store: defaults, variables, flags, and a budget below one
 * message refused naming both flags. */
static void test_body_and_log_flags(void **state) {
  (void)state;
  pk_server_config_t cfg;
  char err[256];
  const char *argv[] = {"packd"};
  assert_int_equal(load(&cfg, NULL, 1, argv, err, sizeof err), PK_OK);
  assert_int_equal(cfg.max_decoded_bytes, 0);
  assert_true(cfg.log_refused_interval == 10.0);
  assert_false(cfg.plan_store_optional);
  const char *const env[] = {"PACKD_MAX_DECODED_BYTES",
                             "1G",
                             "PACKD_LOG_REFUSED_INTERVAL",
                             "0",
                             "PACKD_PLAN_STORE_OPTIONAL",
                             "1",
                             NULL};
  assert_int_equal(load(&cfg, env, 1, argv, err, sizeof err), PK_OK);
  assert_int_equal(cfg.max_decoded_bytes, 1LL << 30);
  assert_true(cfg.log_refused_interval == 0.0);
  assert_true(cfg.plan_store_optional);
  const char *flags[] = {"packd", "--max-decoded-bytes=128M", "--log-refused-interval", "500ms",
                         "--plan-store-optional"};
  assert_int_equal(load(&cfg, NULL, 5, flags, err, sizeof err), PK_OK);
  assert_int_equal(cfg.max_decoded_bytes, 128LL << 20);
  assert_true(cfg.log_refused_interval == 0.5);
  assert_true(cfg.plan_store_optional);
  const char *small[] = {"packd", "--max-decoded-bytes", "1M"};
  assert_int_equal(load(&cfg, NULL, 3, small, err, sizeof err), PK_EINVAL);
  assert_non_null(strstr(err, "--max-decoded-bytes"));
  assert_non_null(strstr(err, "--max-message-bytes"));
  const char *const off[] = {"PACKD_PLAN_STORE_OPTIONAL", "false", NULL};
  assert_int_equal(load(&cfg, off, 1, argv, err, sizeof err), PK_OK);
  assert_false(cfg.plan_store_optional);
  const char *const junk[] = {"PACKD_PLAN_STORE_OPTIONAL", "maybe", NULL};
  assert_int_equal(load(&cfg, junk, 1, argv, err, sizeof err), PK_EINVAL);
  assert_non_null(strstr(err, "PACKD_PLAN_STORE_OPTIONAL"));
  char desc[2048];
  assert_int_equal(load(&cfg, NULL, 1, argv, err, sizeof err), PK_OK);
  pk_config_describe(&cfg, desc, sizeof desc);
  assert_non_null(strstr(desc, "max_decoded_bytes="));
  assert_non_null(strstr(desc, "log_refused_interval=10s"));
}

static void test_admission_and_http_flags(void **state) {
  (void)state;
  pk_server_config_t cfg;
  char err[256];
  const char *argv[] = {"packd", "--workers", "4"};
  assert_int_equal(load(&cfg, NULL, 3, argv, err, sizeof err), PK_OK);
  assert_int_equal(cfg.large_request_bytes, 1LL << 20);
  assert_int_equal(cfg.large_workers, 0);
  assert_int_equal(pk_config_large_workers(&cfg), 3); /* workers - 1 */
  assert_int_equal(cfg.http_max_conns, 256);
  assert_int_equal(cfg.http_max_conns_per_peer, 64);
  assert_true(cfg.http_header_timeout == 5.0);
  assert_true(cfg.http_idle_timeout == 2.0);
  const char *one[] = {"packd", "--workers", "1"};
  assert_int_equal(load(&cfg, NULL, 3, one, err, sizeof err), PK_OK);
  assert_int_equal(pk_config_large_workers(&cfg), 1); /* never below 1 */
  const char *const env[] = {"PACKD_LARGE_WORKERS",
                             "9",
                             "PACKD_LARGE_REQUEST_BYTES",
                             "4M",
                             "PACKD_HTTP_MAX_CONNS",
                             "32",
                             "PACKD_HTTP_MAX_CONNS_PER_PEER",
                             "8",
                             "PACKD_HTTP_HEADER_TIMEOUT",
                             "750ms",
                             "PACKD_HTTP_IDLE_TIMEOUT",
                             "0.25",
                             NULL};
  const char *two[] = {"packd", "--workers", "2"};
  assert_int_equal(load(&cfg, env, 3, two, err, sizeof err), PK_OK);
  assert_int_equal(cfg.large_request_bytes, 4LL << 20);
  assert_int_equal(pk_config_large_workers(&cfg), 2); /* never above the workers */
  assert_int_equal(cfg.http_max_conns, 32);
  assert_int_equal(cfg.http_max_conns_per_peer, 8);
  assert_true(cfg.http_header_timeout == 0.75);
  assert_true(cfg.http_idle_timeout == 0.25);
  char desc[1536];
  pk_config_describe(&cfg, desc, sizeof desc);
  assert_non_null(strstr(desc, "large_workers=2"));
  assert_non_null(strstr(desc, "http_idle_timeout=0.25s"));
  const char *bad_timeout[] = {"packd", "--http-header-timeout", "0"};
  assert_int_equal(load(&cfg, NULL, 3, bad_timeout, err, sizeof err), PK_EINVAL);
  assert_non_null(strstr(err, "--http-header-timeout"));
  const char *const bad_env[] = {"PACKD_HTTP_MAX_CONNS_PER_PEER", "0", NULL};
  assert_int_equal(load(&cfg, bad_env, 1, argv, err, sizeof err), PK_EINVAL);
  assert_non_null(strstr(err, "PACKD_HTTP_MAX_CONNS_PER_PEER"));
  assert_non_null(strstr(err, "\"0\""));
}

static void test_log_levels(void **state) {
  (void)state;
  pk_log_level_t lv;
  assert_int_equal(pk_log_level_parse("Warning", &lv), PK_OK);
  assert_int_equal(lv, PK_LOG_WARN);
  assert_int_equal(pk_log_level_parse("off", &lv), PK_OK);
  assert_int_equal(lv, PK_LOG_OFF);
  assert_int_equal(pk_log_level_parse("verbose", &lv), PK_EINVAL);
  pk_log_set_level(PK_LOG_WARN);
  assert_false(pk_log_enabled(PK_LOG_INFO));
  assert_true(pk_log_enabled(PK_LOG_ERROR));
  pk_log_set_level(PK_LOG_OFF);
  assert_false(pk_log_enabled(PK_LOG_ERROR));
  pk_log_set_level(PK_LOG_INFO);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_env_then_flags),
      cmocka_unit_test(test_errors_name_flag_and_value),
      cmocka_unit_test(test_help_and_version_flags),
      cmocka_unit_test(test_hostport),
      cmocka_unit_test(test_metrics_listen_numeric_addresses),
      cmocka_unit_test(test_bytes_and_seconds_round_trip),
      cmocka_unit_test(test_describe_and_usage),
      cmocka_unit_test(test_plan_store_flags),
      cmocka_unit_test(test_log_levels),
      cmocka_unit_test(test_plan_limit_flags),
      cmocka_unit_test(test_body_and_log_flags),
      cmocka_unit_test(test_admission_and_http_flags),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
