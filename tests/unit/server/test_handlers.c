/* Unit tests of server/handlers.c with the real codec, the real planner and
 * real protobuf-c bytes: Plan, GetRankPlan (hit, miss, expiry, bad rank; a
 * dynamic-CP plan's GPU parts), Health/Check, and bad input that must
 * become a status, never a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec.h"
#include "grpc/health/v1/health.pb-c.h"
#include "handlers.h"
#include "packd/v1/packd.pb-c.h"
#include "pk_error.h"

typedef struct fixture {
  pk_plan_cache_t *cache;
  pk_metrics_t metrics;
  pk_handler_env_t env;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  assert_int_equal(pk_plan_cache_create(64 << 20, 30, &f->cache), PK_OK);
  pk_metrics_init(&f->metrics, 0);
  f->env = (pk_handler_env_t){.cache = f->cache,
                              .metrics = &f->metrics,
                              .max_message_bytes = 64 << 20,
                              .serving = true,
                              .now = 1000.0};
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  pk_plan_cache_destroy(f->cache);
  free(f);
  return 0;
}

/* Packs a PlanRequest of n pseudo-random lengths; free with free(). */
static uint8_t *make_request(size_t n, uint32_t dp, uint64_t max_tokens, uint64_t seed,
                             size_t *len) {
  uint32_t *lengths = malloc(n * sizeof *lengths);
  uint64_t s = seed | 1;
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    lengths[i] = 1 + (uint32_t)(s % 4000);
  }
  Packd__V1__PlanRequest req = PACKD__V1__PLAN_REQUEST__INIT;
  Packd__V1__Parallel par = PACKD__V1__PARALLEL__INIT;
  Packd__V1__Batching bat = PACKD__V1__BATCHING__INIT;
  par.dp = dp;
  bat.max_tokens = max_tokens;
  req.parallel = &par;
  req.batching = &bat;
  req.n_lengths = n;
  req.lengths = lengths;
  *len = packd__v1__plan_request__get_packed_size(&req);
  uint8_t *buf = malloc(*len);
  packd__v1__plan_request__pack(&req, buf);
  free(lengths);
  return buf;
}

static uint8_t *pack_rank(Packd__V1__RankPlan *rk, const char *plan_id, size_t *len) {
  char *saved = rk->plan_id;
  rk->plan_id = (char *)plan_id;
  *len = packd__v1__rank_plan__get_packed_size(rk);
  uint8_t *b = malloc(*len + 1);
  packd__v1__rank_plan__pack(rk, b);
  rk->plan_id = saved;
  return b;
}

static uint8_t *make_get(const char *plan_id, uint32_t rank, size_t *len) {
  Packd__V1__GetRankPlanRequest g = PACKD__V1__GET_RANK_PLAN_REQUEST__INIT;
  g.plan_id = (char *)plan_id;
  g.dp_rank = rank;
  *len = packd__v1__get_rank_plan_request__get_packed_size(&g);
  uint8_t *b = malloc(*len + 1);
  packd__v1__get_rank_plan_request__pack(&g, b);
  return b;
}

static void test_plan_then_every_rank(void **state) {
  fixture_t *f = *state;
  size_t len;
  uint8_t *req = make_request(500, 8, 16384, 42, &len);
  pk_reply_t r;
  pk_handle_plan(&f->env, req, len, &r);
  assert_int_equal(r.code, PK_GRPC_OK);
  assert_int_equal(r.sequences, 500);
  Packd__V1__PlanResponse *resp = packd__v1__plan_response__unpack(NULL, r.len, r.bytes);
  assert_non_null(resp);
  assert_string_equal(resp->plan_id, r.plan_id);
  assert_int_equal(resp->n_ranks, 8);
  /* Every sequence exactly once over all ranks. */
  int seen[500] = {0};
  for (size_t k = 0; k < resp->n_ranks; k++)
    for (size_t m = 0; m < resp->ranks[k]->n_mini_batches; m++)
      for (size_t j = 0; j < resp->ranks[k]->mini_batches[m]->n_micro_batches; j++) {
        Packd__V1__MicroBatch *mb = resp->ranks[k]->mini_batches[m]->micro_batches[j];
        for (size_t q = 0; q < mb->n_seqs; q++) {
          assert_true(mb->seqs[q] < 500);
          seen[mb->seqs[q]]++;
        }
      }
  for (int i = 0; i < 500; i++)
    assert_int_equal(seen[i], 1);

  for (uint32_t k = 0; k < 8; k++) {
    size_t glen;
    uint8_t *get = make_get(r.plan_id, k, &glen);
    pk_reply_t g;
    pk_handle_get_rank_plan(&f->env, get, glen, &g);
    assert_int_equal(g.code, PK_GRPC_OK);
    size_t want_len;
    uint8_t *want = pack_rank(resp->ranks[k], r.plan_id, &want_len);
    assert_int_equal(g.len, want_len);
    assert_memory_equal(g.bytes, want, want_len);
    Packd__V1__RankPlan *rk = packd__v1__rank_plan__unpack(NULL, g.len, g.bytes);
    assert_string_equal(rk->plan_id, r.plan_id);
    assert_int_equal(rk->dp_rank, k);
    packd__v1__rank_plan__free_unpacked(rk, NULL);
    free(want);
    free(g.bytes);
    free(get);
  }
  /* Metrics saw one plan of 500 sequences. */
  assert_int_equal(atomic_load(&f->metrics.plan_sequences.count), 1);
  assert_int_equal(atomic_load(&f->metrics.plan_sequences.sum_units), 500);
  packd__v1__plan_response__free_unpacked(resp, NULL);
  free(r.bytes);
  free(req);
}

static void test_same_request_same_plan(void **state) {
  fixture_t *f = *state;
  size_t len;
  uint8_t *req = make_request(300, 4, 8192, 7, &len);
  pk_reply_t a, b;
  pk_handle_plan(&f->env, req, len, &a);
  pk_handle_plan(&f->env, req, len, &b);
  assert_int_equal(a.code, PK_GRPC_OK);
  assert_int_equal(b.code, PK_GRPC_OK);
  assert_string_equal(a.plan_id, b.plan_id);
  Packd__V1__PlanResponse *ra = packd__v1__plan_response__unpack(NULL, a.len, a.bytes);
  Packd__V1__PlanResponse *rb = packd__v1__plan_response__unpack(NULL, b.len, b.bytes);
  assert_int_equal(ra->n_ranks, rb->n_ranks);
  for (size_t k = 0; k < ra->n_ranks; k++) {
    size_t la, lb;
    uint8_t *pa = pack_rank(ra->ranks[k], "", &la);
    uint8_t *pb = pack_rank(rb->ranks[k], "", &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(pa, pb, la);
    free(pa);
    free(pb);
  }
  /* A different request gets a different id. */
  size_t len2;
  uint8_t *req2 = make_request(300, 4, 8192, 8, &len2);
  pk_reply_t c;
  pk_handle_plan(&f->env, req2, len2, &c);
  assert_int_equal(c.code, PK_GRPC_OK);
  assert_string_not_equal(a.plan_id, c.plan_id);
  pk_cache_stats_t st;
  pk_plan_cache_stats(f->cache, &st);
  assert_int_equal(st.entries, 2);
  packd__v1__plan_response__free_unpacked(ra, NULL);
  packd__v1__plan_response__free_unpacked(rb, NULL);
  free(a.bytes);
  free(b.bytes);
  free(c.bytes);
  free(req);
  free(req2);
}

static void test_get_rank_miss_expiry_and_bad_input(void **state) {
  fixture_t *f = *state;
  size_t len;
  uint8_t *req = make_request(50, 2, 0, 3, &len);
  pk_reply_t r;
  pk_handle_plan(&f->env, req, len, &r);
  assert_int_equal(r.code, PK_GRPC_OK);

  size_t glen;
  pk_reply_t g;
  uint8_t *get = make_get("0123456789abcdef", 0, &glen);
  pk_handle_get_rank_plan(&f->env, get, glen, &g);
  assert_int_equal(g.code, PK_GRPC_NOT_FOUND);
  assert_non_null(strstr(g.message, "0123456789abcdef"));
  assert_null(g.bytes);
  free(get);

  get = make_get(r.plan_id, 2, &glen);
  pk_handle_get_rank_plan(&f->env, get, glen, &g);
  assert_int_equal(g.code, PK_GRPC_INVALID_ARGUMENT);
  assert_non_null(strstr(g.message, "dp_rank"));
  assert_non_null(strstr(g.message, "2 ranks"));
  free(get);

  get = make_get("", 0, &glen);
  pk_handle_get_rank_plan(&f->env, get, glen, &g);
  assert_int_equal(g.code, PK_GRPC_INVALID_ARGUMENT);
  assert_non_null(strstr(g.message, "plan_id"));
  free(get);

  const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff};
  pk_handle_get_rank_plan(&f->env, garbage, sizeof garbage, &g);
  assert_int_equal(g.code, PK_GRPC_INVALID_ARGUMENT);

  /* Past the TTL (30 s) the plan is gone. */
  pk_handler_env_t later = f->env;
  later.now += 31;
  get = make_get(r.plan_id, 1, &glen);
  pk_handle_get_rank_plan(&later, get, glen, &g);
  assert_int_equal(g.code, PK_GRPC_NOT_FOUND);
  assert_non_null(strstr(g.message, r.plan_id));
  free(get);
  free(r.bytes);
  free(req);
}

/* A dynamic-CP plan through the handlers: the cache keeps every GPU's
 * part, GetRankPlan answers GPU g its slice of the whole answer (per slot
 * its DcpGpu and its group, the same bytes as in the PlanResponse), a GPU
 * outside the pool is INVALID_ARGUMENT naming dp_rank and the value, and
 * the parts expire with the plan. */
static void test_dynamic_cp_rank_plans(void **state) {
  fixture_t *f = *state;
  uint32_t lens[12] = {30000, 12000, 9000, 7000, 5000, 4000, 3000, 2500, 2000, 1500, 1200, 800};
  Packd__V1__PlanRequest req = PACKD__V1__PLAN_REQUEST__INIT;
  Packd__V1__Parallel par = PACKD__V1__PARALLEL__INIT;
  Packd__V1__DynamicCp dcp = PACKD__V1__DYNAMIC_CP__INIT;
  Packd__V1__Batching bat = PACKD__V1__BATCHING__INIT;
  par.dp = 4;
  par.cp = 2;
  par.dynamic_cp = &dcp;
  bat.max_tokens = 8192;
  req.parallel = &par;
  req.batching = &bat;
  req.n_lengths = 12;
  req.lengths = lens;
  size_t len = packd__v1__plan_request__get_packed_size(&req);
  uint8_t *buf = malloc(len);
  packd__v1__plan_request__pack(&req, buf);
  pk_reply_t r;
  pk_handle_plan(&f->env, buf, len, &r);
  assert_int_equal(r.code, PK_GRPC_OK);
  Packd__V1__PlanResponse *resp = packd__v1__plan_response__unpack(NULL, r.len, r.bytes);
  assert_non_null(resp);
  assert_non_null(resp->dynamic_cp);
  assert_int_equal(resp->dynamic_cp->pool, 8);
  const Packd__V1__DynamicCpPlan *whole = resp->dynamic_cp;
  for (uint32_t g = 0; g < 8; g++) {
    size_t glen;
    uint8_t *get = make_get(r.plan_id, g, &glen);
    pk_reply_t a;
    pk_handle_get_rank_plan(&f->env, get, glen, &a);
    assert_int_equal(a.code, PK_GRPC_OK);
    /* The expected part, built from the whole answer's own messages. */
    Packd__V1__DcpRankSlot *slots = calloc(whole->n_slots, sizeof *slots);
    Packd__V1__DcpRankSlot **ptr = calloc(whole->n_slots, sizeof *ptr);
    for (size_t j = 0; j < whole->n_slots; j++) {
      packd__v1__dcp_rank_slot__init(&slots[j]);
      slots[j].gpu = whole->slots[j]->gpus[g];
      uint32_t k = slots[j].gpu->group;
      slots[j].group = k == UINT32_MAX ? NULL : whole->slots[j]->groups[k];
      ptr[j] = &slots[j];
    }
    Packd__V1__DcpRankPlan view = PACKD__V1__DCP_RANK_PLAN__INIT;
    view.pool = 8;
    view.n_slots = whole->n_slots;
    view.slots = ptr;
    Packd__V1__RankPlan rk = PACKD__V1__RANK_PLAN__INIT;
    rk.dp_rank = g;
    rk.dynamic_cp = &view;
    size_t want_len;
    uint8_t *want = pack_rank(&rk, r.plan_id, &want_len);
    assert_int_equal(a.len, want_len);
    assert_memory_equal(a.bytes, want, want_len);
    free(want);
    free(slots);
    free(ptr);
    free(a.bytes);
    free(get);
  }
  size_t glen;
  pk_reply_t b;
  uint8_t *get = make_get(r.plan_id, 8, &glen);
  pk_handle_get_rank_plan(&f->env, get, glen, &b);
  assert_int_equal(b.code, PK_GRPC_INVALID_ARGUMENT);
  assert_non_null(strstr(b.message, "dp_rank: 8 is out of range"));
  assert_non_null(strstr(b.message, "8 ranks"));
  assert_null(b.bytes);
  free(get);
  pk_handler_env_t later = f->env;
  later.now += 31;
  get = make_get(r.plan_id, 0, &glen);
  pk_handle_get_rank_plan(&later, get, glen, &b);
  assert_int_equal(b.code, PK_GRPC_NOT_FOUND);
  free(get);
  packd__v1__plan_response__free_unpacked(resp, NULL);
  free(r.bytes);
  free(buf);
}

static void test_plan_errors_become_statuses(void **state) {
  fixture_t *f = *state;
  pk_reply_t r;
  size_t len;
  /* dp 0: the planner refuses; the message names the field. */
  uint8_t *req = make_request(10, 0, 0, 1, &len);
  pk_handle_plan(&f->env, req, len, &r);
  assert_int_equal(r.code, PK_GRPC_INVALID_ARGUMENT);
  assert_non_null(strstr(r.message, "dp"));
  assert_null(r.bytes);
  free(req);
  /* A response larger than the message limit. */
  req = make_request(2000, 4, 0, 1, &len);
  pk_handler_env_t small = f->env;
  small.max_message_bytes = 1024;
  pk_handle_plan(&small, req, len, &r);
  assert_int_equal(r.code, PK_GRPC_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(r.message, "max_message_bytes"));
  /* The plan limits refuse before planning, naming the limit. */
  pk_handler_env_t limited = f->env;
  limited.plan_limits.max_sequences = 4;
  pk_handle_plan(&limited, req, len, &r);
  assert_int_equal(r.code, PK_GRPC_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(r.message, "max_sequences = 4"));
  assert_null(r.bytes);
  limited.plan_limits = (pk_limits_t){.max_plan_bytes = 100};
  pk_handle_plan(&limited, req, len, &r);
  assert_int_equal(r.code, PK_GRPC_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(r.message, "max_plan_bytes = 100"));
  /* Every prefix of a valid request: a status, never a crash. */
  for (size_t cut = 0; cut < len; cut += 1 + cut / 8) {
    pk_handle_plan(&f->env, req, cut, &r);
    assert_true(r.code == PK_GRPC_OK || r.code == PK_GRPC_INVALID_ARGUMENT ||
                r.code == PK_GRPC_FAILED_PRECONDITION);
    assert_true(r.code == PK_GRPC_OK ? r.bytes != NULL : r.bytes == NULL);
    assert_true(r.code == PK_GRPC_OK || r.message[0] != '\0');
    free(r.bytes);
  }
  free(req);
  const uint8_t garbage[] = {0x12, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01};
  pk_handle_plan(&f->env, garbage, sizeof garbage, &r);
  assert_int_equal(r.code, PK_GRPC_INVALID_ARGUMENT);
}

static uint8_t *make_health(const char *service, size_t *len) {
  Grpc__Health__V1__HealthCheckRequest h = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  h.service = (char *)service;
  *len = grpc__health__v1__health_check_request__get_packed_size(&h);
  uint8_t *b = malloc(*len + 1);
  grpc__health__v1__health_check_request__pack(&h, b);
  return b;
}

static int health_status(const pk_reply_t *r) {
  Grpc__Health__V1__HealthCheckResponse *h =
      grpc__health__v1__health_check_response__unpack(NULL, r->len, r->bytes);
  assert_non_null(h);
  int s = (int)h->status;
  grpc__health__v1__health_check_response__free_unpacked(h, NULL);
  return s;
}

static void test_health(void **state) {
  fixture_t *f = *state;
  pk_reply_t r;
  size_t len;
  uint8_t *req = make_health("", &len);
  pk_handle_health_check(&f->env, req, len, &r);
  assert_int_equal(r.code, PK_GRPC_OK);
  assert_int_equal(health_status(&r),
                   GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
  free(r.bytes);
  pk_handler_env_t draining = f->env;
  draining.serving = false;
  pk_handle_health_check(&draining, req, len, &r);
  assert_int_equal(health_status(&r),
                   GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
  free(r.bytes);
  free(req);
  req = make_health("packd.v1.Planner", &len);
  pk_handle_health_check(&f->env, req, len, &r);
  assert_int_equal(r.code, PK_GRPC_OK);
  free(r.bytes);
  free(req);
  req = make_health("other.Service", &len);
  pk_handle_health_check(&f->env, req, len, &r);
  assert_int_equal(r.code, PK_GRPC_NOT_FOUND);
  assert_non_null(strstr(r.message, "other.Service"));
  free(req);
  const uint8_t garbage[] = {0x0a, 0x05, 'a'};
  pk_handle_health_check(&f->env, garbage, sizeof garbage, &r);
  assert_int_equal(r.code, PK_GRPC_INVALID_ARGUMENT);
}

/* The response the handler assembles from rank bytes is byte for byte what
 * protobuf-c packs for the whole message, over random requests. */
static void test_packed_response_equals_protobuf_c(void **state) {
  fixture_t *f = *state;
  uint64_t s = 77;
  for (int trial = 0; trial < 30; trial++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    size_t n = 1 + (size_t)(s >> 33) % 3000;
    uint32_t dp = 1 + (uint32_t)(s >> 20) % 16;
    if (n < dp)
      n = dp;
    size_t len;
    uint8_t *req = make_request(n, dp, 8192 + (s >> 40) % 50000, s, &len);
    pk_reply_t r;
    pk_handle_plan(&f->env, req, len, &r);
    assert_int_equal(r.code, PK_GRPC_OK);
    Packd__V1__PlanResponse *resp = packd__v1__plan_response__unpack(NULL, r.len, r.bytes);
    assert_non_null(resp);
    size_t want_len = packd__v1__plan_response__get_packed_size(resp);
    uint8_t *want = malloc(want_len);
    packd__v1__plan_response__pack(resp, want);
    assert_int_equal(r.len, want_len);
    assert_memory_equal(r.bytes, want, want_len);
    uint8_t *got = NULL;
    size_t got_len = pk_pack_plan_response(resp, &got);
    assert_int_equal(got_len, want_len);
    assert_memory_equal(got, want, want_len);
    free(got);
    free(want);
    packd__v1__plan_response__free_unpacked(resp, NULL);
    free(r.bytes);
    free(req);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_plan_then_every_rank, setup, teardown),
      cmocka_unit_test_setup_teardown(test_same_request_same_plan, setup, teardown),
      cmocka_unit_test_setup_teardown(test_get_rank_miss_expiry_and_bad_input, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dynamic_cp_rank_plans, setup, teardown),
      cmocka_unit_test_setup_teardown(test_plan_errors_become_statuses, setup, teardown),
      cmocka_unit_test_setup_teardown(test_health, setup, teardown),
      cmocka_unit_test_setup_teardown(test_packed_response_equals_protobuf_c, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
