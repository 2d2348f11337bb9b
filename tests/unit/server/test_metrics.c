/* Unit tests of server/metrics.c: counters by method and code, histogram
 * buckets (cumulative, ending at the count), the cache and build lines, and
 * the shape of the exposition text. The integration tests parse the real
 * /metrics with prometheus_client. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "metrics.h"
#include "pk_error.h"

static char *render(const pk_metrics_t *m, const pk_cache_stats_t *cs, bool serving) {
  pk_metrics_view_t v = {cs, serving, "9.9.9", "29.0.0", 2, 64, 12345, NULL, 1, 3, 2, 1, 5, NULL};
  char *text = NULL;
  size_t len = 0;
  assert_int_equal(pk_metrics_render(m, &v, &text, &len), PK_OK);
  assert_int_equal(strlen(text), len);
  return text;
}

/* The value of the sample line that starts with `series` followed by a
 * space; fails the test when absent. */
static double value_of(const char *text, const char *series) {
  size_t n = strlen(series);
  for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
    if (strncmp(p, series, n) == 0 && p[n] == ' ')
      return strtod(p + n + 1, NULL);
  }
  fail_msg("no line \"%s\" in:\n%s", series, text);
  return -1;
}

static int has_line_prefix(const char *text, const char *prefix) {
  size_t n = strlen(prefix);
  for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
    if (strncmp(p, prefix, n) == 0)
      return 1;
  return 0;
}

static void test_requests_by_method_and_code(void **state) {
  (void)state;
  pk_metrics_t m;
  pk_metrics_init(&m, 1700000000.0);
  pk_metrics_request(&m, PK_METHOD_PLAN, 0, 0.001);
  pk_metrics_request(&m, PK_METHOD_PLAN, 0, 0.002);
  pk_metrics_request(&m, PK_METHOD_PLAN, 3, 0.0001);
  pk_metrics_request(&m, PK_METHOD_UNKNOWN, 12, 0.00001);
  pk_metrics_request(&m, PK_METHOD_GET_RANK_PLAN, 99, 0.1); /* Out of range: UNKNOWN. */
  char *t = render(&m, NULL, true);
  assert_true(value_of(t, "packd_requests_total{method=\"Plan\",code=\"OK\"}") == 2);
  assert_true(value_of(t, "packd_requests_total{method=\"Plan\",code=\"INVALID_ARGUMENT\"}") == 1);
  assert_true(value_of(t, "packd_requests_total{method=\"unknown\",code=\"UNIMPLEMENTED\"}") == 1);
  assert_true(value_of(t, "packd_requests_total{method=\"GetRankPlan\",code=\"UNKNOWN\"}") == 1);
  /* OK is always present; codes that never happened are not. */
  assert_true(value_of(t, "packd_requests_total{method=\"Check\",code=\"OK\"}") == 0);
  assert_false(has_line_prefix(t, "packd_requests_total{method=\"Check\",code=\"NOT_FOUND\"}"));
  assert_true(value_of(t, "packd_request_duration_seconds_count{method=\"Plan\"}") == 3);
  double sum = value_of(t, "packd_request_duration_seconds_sum{method=\"Plan\"}");
  assert_true(sum > 0.0031 - 1e-9 && sum < 0.0031 + 1e-9);
  assert_true(value_of(t, "packd_request_duration_seconds_bucket{method=\"Plan\",le=\"0.0001\"}") ==
              1);
  assert_true(value_of(t, "packd_request_duration_seconds_bucket{method=\"Plan\",le=\"0.001\"}") ==
              2);
  assert_true(value_of(t, "packd_request_duration_seconds_bucket{method=\"Plan\",le=\"+Inf\"}") ==
              3);
  assert_true(value_of(t, "packd_serving") == 1);
  assert_true(value_of(t, "packd_build_info{version=\"9.9.9\",grpc_core=\"29.0.0\"}") == 1);
  assert_true(value_of(t, "process_resident_memory_bytes") == 12345);
  assert_false(has_line_prefix(t, "packd_plan_cache_entries"));
  free(t);
}

static void test_cache_and_plan_lines(void **state) {
  (void)state;
  pk_metrics_t m;
  pk_metrics_init(&m, 0);
  pk_metrics_plan(&m, 4096, 0.0003, 0.0001);
  pk_metrics_plan(&m, 1000000, 0.2, 0.05);
  atomic_store(&m.inflight, 3);
  pk_cache_stats_t cs = {.entries = 7,
                         .bytes = 1234,
                         .max_bytes = 99999,
                         .hits = 5,
                         .misses = 2,
                         .evictions = 1,
                         .expired = 4};
  char *t = render(&m, &cs, false);
  assert_true(value_of(t, "packd_serving") == 0);
  assert_true(value_of(t, "packd_plan_sequences_count") == 2);
  assert_true(value_of(t, "packd_plan_sequences_sum") == 1004096);
  assert_true(value_of(t, "packd_plan_sequences_bucket{le=\"4096\"}") == 1);
  assert_true(value_of(t, "packd_plan_sequences_bucket{le=\"1.04858e+06\"}") == 2);
  assert_true(value_of(t, "packd_plan_duration_seconds_count") == 2);
  assert_true(value_of(t, "packd_encode_duration_seconds_count") == 2);
  assert_true(value_of(t, "packd_inflight_calls") == 3);
  assert_true(value_of(t, "packd_max_inflight_calls") == 64);
  assert_true(value_of(t, "packd_plan_cache_entries") == 7);
  assert_true(value_of(t, "packd_plan_cache_bytes") == 1234);
  assert_true(value_of(t, "packd_plan_cache_max_bytes") == 99999);
  assert_true(value_of(t, "packd_plan_cache_hits_total") == 5);
  assert_true(value_of(t, "packd_plan_cache_misses_total") == 2);
  assert_true(value_of(t, "packd_plan_cache_evictions_total") == 1);
  assert_true(value_of(t, "packd_plan_cache_expired_total") == 4);
  free(t);
}

/* Every family has HELP and TYPE before its samples; every sample line is
 * "name[{labels}] value" with a number; histogram buckets never decrease
 * and end at the count. Random observations. */
static void test_text_shape_and_histogram_invariants(void **state) {
  (void)state;
  pk_metrics_t m;
  pk_metrics_init(&m, 0);
  uint64_t s = 0x2545f4914f6cdd1dull;
  for (int i = 0; i < 5000; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    double secs = (double)(s % 1000000) / 1e5; /* 0 to 10 s, also past the last bound. */
    pk_metrics_request(&m, (pk_method_t)(s % PK_METHOD_COUNT), (int)(s >> 40) % 17, secs * 5);
    pk_histogram_observe_sequences(&m.plan_sequences, s % 40000000);
  }
  pk_cache_stats_t cs = {0};
  char *t = render(&m, &cs, true);
  char family[128] = "";
  double last_bucket = -1;
  int in_buckets = 0;
  char last_series[256] = "";
  char *save = NULL;
  for (char *line = strtok_r(t, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (strncmp(line, "# HELP ", 7) == 0) {
      sscanf(line + 7, "%127s", family);
      continue;
    }
    if (strncmp(line, "# TYPE ", 7) == 0) {
      char name[128], type[32];
      assert_int_equal(sscanf(line + 7, "%127s %31s", name, type), 2);
      assert_string_equal(name, family);
      assert_true(strcmp(type, "counter") == 0 || strcmp(type, "gauge") == 0 ||
                  strcmp(type, "histogram") == 0);
      continue;
    }
    assert_true(line[0] != '#');
    assert_int_equal(strncmp(line, family, strlen(family)), 0);
    char *sp = strrchr(line, ' ');
    assert_non_null(sp);
    char *end;
    double v = strtod(sp + 1, &end);
    assert_true(*end == '\0');
    assert_true(v >= 0);
    if (strstr(line, "_bucket{") != NULL) {
      /* A new series starts when the part before le= changes. */
      char series[256];
      snprintf(series, sizeof series, "%.*s", (int)(strstr(line, "le=") - line), line);
      if (!in_buckets || strcmp(series, last_series) != 0)
        last_bucket = -1;
      snprintf(last_series, sizeof last_series, "%s", series);
      assert_true(v >= last_bucket);
      last_bucket = v;
      in_buckets = 1;
    } else if (strstr(line, "_count") != NULL && in_buckets) {
      assert_true(v == last_bucket); /* The count equals the +Inf bucket. */
      in_buckets = 0;
    }
  }
  free(t);
}

static void test_plan_store_lines(void **state) {
  (void)state;
  pk_metrics_t m;
  pk_metrics_init(&m, 1700000000.0);
  char *t = render(&m, NULL, true);
  /* No store configured: no store lines at all; no budget: no decode lines. */
  assert_false(has_line_prefix(t, "packd_plan_store_"));
  assert_false(has_line_prefix(t, "packd_decoded_bytes"));
  free(t);
  pk_histogram_observe_seconds(&m.store_read_seconds, 0.0003);
  pk_store_stats_t st = {.where = "redis://h:6379/0",
                         .up = false,
                         .errors_write = 2,
                         .errors_read = 3,
                         .writes_ok = 5,
                         .writes_skipped = 2,
                         .reads_hit = 7,
                         .reads_absent = 1,
                         .reads_unavailable = 4,
                         .reads_corrupt = 1,
                         .corrupt = 1,
                         .outages = 1,
                         .replay_queued = 3,
                         .replay_queued_bytes = 4096,
                         .replayed = 9,
                         .replay_dropped = 2,
                         .replay_expired = 1};
  pk_decode_budget_t budget;
  pk_decode_budget_init(&budget, 1000);
  assert_true(pk_decode_budget_take(&budget, 600));
  assert_false(pk_decode_budget_take(&budget, 600));
  pk_metrics_view_t v = {NULL, true, "9.9.9", "29.0.0", 2, 64, -1, &st, 1, 0, 0, 0, 0, &budget};
  size_t len;
  assert_int_equal(pk_metrics_render(&m, &v, &t, &len), PK_OK);
  assert_true(value_of(t, "packd_plan_store_up{store=\"redis://h:6379/0\"}") == 0);
  assert_true(value_of(t, "packd_plan_store_errors_total{op=\"write\"}") == 2);
  assert_true(value_of(t, "packd_plan_store_errors_total{op=\"read\"}") == 3);
  assert_true(value_of(t, "packd_plan_store_errors_total{op=\"probe\"}") == 0);
  assert_true(value_of(t, "packd_plan_store_writes_total{result=\"skipped\"}") == 2);
  assert_true(value_of(t, "packd_plan_store_reads_total{result=\"hit\"}") == 7);
  assert_true(value_of(t, "packd_plan_store_reads_total{result=\"unavailable\"}") == 4);
  assert_true(value_of(t, "packd_plan_store_corrupt_total") == 1);
  assert_true(value_of(t, "packd_plan_store_outages_total") == 1);
  assert_true(value_of(t, "packd_plan_store_read_duration_seconds_count") == 1);
  assert_true(value_of(t, "packd_plan_store_write_duration_seconds_count") == 0);
  assert_true(value_of(t, "packd_plan_store_replay_queued") == 3);
  assert_true(value_of(t, "packd_plan_store_replay_queued_bytes") == 4096);
  assert_true(value_of(t, "packd_plan_store_replay_total{result=\"written\"}") == 9);
  assert_true(value_of(t, "packd_plan_store_replay_total{result=\"dropped\"}") == 2);
  assert_true(value_of(t, "packd_plan_store_replay_total{result=\"expired\"}") == 1);
  /* The decoded-bytes lines, present with a budget in the view. */
  assert_true(value_of(t, "packd_decoded_bytes_limit") == 1000);
  assert_true(value_of(t, "packd_decoded_bytes") == 600);
  assert_true(value_of(t, "packd_decoded_bytes_peak") == 600);
  assert_true(value_of(t, "packd_decode_budget_refused_total") == 1);
  assert_true(value_of(t, "packd_memory_trims_total") == 0);
  free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_requests_by_method_and_code),
      cmocka_unit_test(test_cache_and_plan_lines),
      cmocka_unit_test(test_text_shape_and_histogram_invariants),
      cmocka_unit_test(test_plan_store_lines),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
