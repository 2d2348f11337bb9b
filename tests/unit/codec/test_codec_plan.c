/* Tests of the codec's encoding of real plans (server/codec/codec.c with the real
 * planner): pk_codec_encode_plan copies every figure of the plan, and
 * pk_plan_bytes and pk_plan_request are decode -> limits -> validate -> id
 * -> plan -> encode -> pack. */
#include "codec_fixture.h"

#include <stdio.h>

/* Every field of the response equals the plan it was built from. */
static void assert_response_matches(const pk_plan_t *plan, const char *id,
                                    const Packd__V1__PlanResponse *resp, bool same_time) {
  assert_string_equal(resp->plan_id, id);
  assert_int_equal(resp->n_ranks, plan->dp);
  for (uint32_t r = 0; r < plan->dp; r++) {
    const Packd__V1__RankPlan *rp = resp->ranks[r];
    assert_int_equal(rp->dp_rank, r);
    assert_string_equal(rp->plan_id, id);
    assert_int_equal(rp->n_mini_batches, plan->mini_batches);
    for (uint32_t m = 0; m < plan->mini_batches; m++) {
      const pk_cell_t *cell = pk_plan_cell(plan, r, m);
      const Packd__V1__MiniBatch *mb = rp->mini_batches[m];
      assert_int_equal(mb->n_micro_batches, cell->nmicros);
      for (uint32_t j = 0; j < cell->nmicros; j++) {
        const pk_micro_t *want = &cell->micros[j];
        const Packd__V1__MicroBatch *got = mb->micro_batches[j];
        assert_int_equal(got->n_seqs, want->nseqs);
        if (want->nseqs > 0)
          assert_memory_equal(got->seqs, want->seqs, want->nseqs * sizeof(uint32_t));
        assert_int_equal(got->n_cu_seqlens, want->nseqs + 1);
        assert_memory_equal(got->cu_seqlens, want->cu_seqlens, (want->nseqs + 1) * sizeof(int32_t));
        assert_int_equal(got->n_cu_seqlens_padded, want->nseqs + 1);
        assert_memory_equal(got->cu_seqlens_padded, want->cu_seqlens_padded,
                            (want->nseqs + 1) * sizeof(int32_t));
        assert_int_equal(got->max_seqlen, want->max_seqlen);
        assert_int_equal(got->padded_width, want->padded_width);
        assert_int_equal(got->tokens, want->tokens);
        assert_int_equal(got->padded_tokens, want->padded_tokens);
        assert_true(got->cost == want->cost);
        assert_true(got->loss_scale == want->loss_scale);
      }
    }
  }
  const pk_stats_t *s = &plan->stats;
  const Packd__V1__PlanStats *g = resp->stats;
  assert_non_null(g);
  assert_int_equal(g->sequences, s->sequences);
  assert_int_equal(g->mini_batches, s->mini_batches);
  assert_int_equal(g->micro_batches_per_rank, s->micro_batches_per_rank);
  assert_int_equal(g->micro_batches_lower_bound, s->micro_batches_lower_bound);
  assert_int_equal(g->tokens, s->tokens);
  assert_int_equal(g->padded_tokens, s->padded_tokens);
  assert_true(g->pad_fraction == s->pad_fraction);
  assert_true(g->total_cost == s->total_cost);
  assert_true(g->step_cost == s->step_cost);
  assert_true(g->step_cost_lower_bound == s->step_cost_lower_bound);
  assert_true(g->lockstep_efficiency == s->lockstep_efficiency);
  assert_true(g->lockstep_efficiency_bound == s->lockstep_efficiency_bound);
  assert_true(g->dp_imbalance == s->dp_imbalance);
  assert_int_equal(g->cap_violations, s->cap_violations);
  if (same_time)
    assert_int_equal(g->plan_time_us, s->plan_time_us);
  assert_int_equal(g->plan_micros, s->plan_micros);
  assert_int_equal(g->zero_length, s->zero_length);
  assert_int_equal(g->alignment, s->alignment);
  assert_int_equal(g->max_micro_tokens, s->max_micro_tokens);
}

/* A valid random request: lengths up to the cap, a random layout. */
static Packd__V1__PlanRequest *valid_request(uint64_t *s) {
  Packd__V1__PlanRequest *m = fx_request_new();
  uint32_t dp = 1 + fx_below(s, 8);
  size_t n = dp * (4 + fx_below(s, 60));
  uint32_t cap = 2048 + fx_below(s, 4) * 2048;
  m->n_lengths = n;
  m->lengths = fx_alloc(n, sizeof(uint32_t));
  m->n_loss_tokens = n;
  m->loss_tokens = fx_alloc(n, sizeof(uint32_t));
  for (size_t i = 0; i < n; i++) {
    m->lengths[i] = 1 + fx_below(s, cap / 2);
    m->loss_tokens[i] = fx_below(s, m->lengths[i] + 1);
  }
  fx_parallel(m)->dp = dp;
  if (fx_below(s, 2))
    fx_parallel(m)->cp = 2;
  fx_batching(m)->max_tokens = cap;
  fx_batching(m)->mini_batches = 1 + fx_below(s, 2);
  fx_batching(m)->mode = fx_below(s, 2) ? PACKD__V1__MODE__MODE_PADDED : 0;
  m->seed = fx_rand(s);
  return m;
}

/* Property: over random valid requests, the response built by the codec
 * equals the plan field by field, packs, and unpacks to the same bytes. */
static void test_encode_real_plans(void **state) {
  (void)state;
  uint64_t s = 2024;
  for (int iter = 0; iter < 60; iter++) {
    Packd__V1__PlanRequest *m = valid_request(&s);
    size_t len = 0;
    uint8_t *bytes = fx_pack(m, &len);
    Packd__V1__PlanRequest *dec = NULL;
    pk_request_t req;
    char err[512] = "";
    assert_int_equal(pk_codec_decode_request(bytes, len, &dec, &req, err, sizeof err), PK_OK);
    pk_plan_t *plan = NULL;
    int rc = pk_plan(&req, &plan, err, sizeof err);
    if (rc != PK_OK)
      fail_msg("iteration %d: pk_plan failed: %s", iter, err);
    char id[33];
    pk_codec_plan_id(dec, id, sizeof id);
    Packd__V1__PlanResponse *resp = NULL;
    assert_int_equal(pk_codec_encode_plan(plan, id, &resp), PK_OK);
    assert_response_matches(plan, id, resp, true);

    /* Through bytes and back: same bytes again. */
    size_t rlen = packd__v1__plan_response__get_packed_size(resp);
    uint8_t *rbytes = fx_alloc(rlen, 1);
    assert_int_equal(packd__v1__plan_response__pack(resp, rbytes), rlen);
    Packd__V1__PlanResponse *back = packd__v1__plan_response__unpack(NULL, rlen, rbytes);
    assert_non_null(back);
    assert_response_matches(plan, id, back, true);
    uint8_t *rbytes2 = fx_alloc(rlen, 1);
    assert_int_equal(packd__v1__plan_response__pack(back, rbytes2), rlen);
    assert_memory_equal(rbytes, rbytes2, rlen);

    /* pk_plan_bytes gives the same plan (the planning time may differ). */
    uint8_t *pb = NULL;
    size_t pblen = 0;
    assert_int_equal(pk_plan_bytes(bytes, len, &pb, &pblen, err, sizeof err), PK_OK);
    Packd__V1__PlanResponse *viab = packd__v1__plan_response__unpack(NULL, pblen, pb);
    assert_non_null(viab);
    assert_response_matches(plan, id, viab, false);

    packd__v1__plan_response__free_unpacked(viab, NULL);
    pk_codec_free_bytes(pb);
    packd__v1__plan_response__free_unpacked(back, NULL);
    free(rbytes2);
    free(rbytes);
    pk_codec_free_response(resp);
    pk_plan_free(plan);
    pk_codec_free_request(dec);
    free(bytes);
    packd__v1__plan_request__free_unpacked(m, NULL);
  }
}

/* The verl example of seed 003 through the bytes pipeline: lengths
 * [100, 900, 50, 950, 400, 600], cap 2000, KK_COUNT -> two micro-batches of
 * 1500 tokens, the one holding {900, 600} first. */
static void test_plan_bytes_seed003(void **state) {
  (void)state;
  const uint32_t lens[6] = {100, 900, 50, 950, 400, 600};
  Packd__V1__PlanRequest *m = fx_request_new();
  fx_set_lengths(m, lens, 6);
  fx_parallel(m)->dp = 1;
  fx_batching(m)->max_tokens = 2000;
  fx_batching(m)->micro_algo = PACKD__V1__MICRO_ALGO__MICRO_ALGO_KK_COUNT;
  size_t len = 0;
  uint8_t *bytes = fx_pack(m, &len);
  uint8_t *out = NULL;
  size_t out_len = 0;
  char err[256] = "";
  assert_int_equal(pk_plan_bytes(bytes, len, &out, &out_len, err, sizeof err), PK_OK);
  Packd__V1__PlanResponse *resp = packd__v1__plan_response__unpack(NULL, out_len, out);
  assert_non_null(resp);
  assert_int_equal(resp->n_ranks, 1);
  const Packd__V1__MiniBatch *mb = resp->ranks[0]->mini_batches[0];
  assert_int_equal(mb->n_micro_batches, 2);
  for (size_t j = 0; j < 2; j++) {
    assert_int_equal(mb->micro_batches[j]->tokens, 1500);
    assert_int_equal(mb->micro_batches[j]->cu_seqlens[mb->micro_batches[j]->n_seqs], 1500);
  }
  bool has900 = false, has600 = false;
  for (size_t k = 0; k < mb->micro_batches[0]->n_seqs; k++) {
    has900 |= mb->micro_batches[0]->seqs[k] == 1;
    has600 |= mb->micro_batches[0]->seqs[k] == 5;
  }
  assert_true(has900 && has600);
  /* The response carries the request's plan id. */
  char id[33];
  fx_id_of_bytes(bytes, len, id);
  assert_string_equal(resp->plan_id, id);
  packd__v1__plan_response__free_unpacked(resp, NULL);
  pk_codec_free_bytes(out);
  free(bytes);
  packd__v1__plan_request__free_unpacked(m, NULL);
}

/* Errors come back as codes with the planner's message; nothing is
 * returned. */
static void test_plan_bytes_errors(void **state) {
  (void)state;
  uint8_t *out = (uint8_t *)0x1;
  size_t out_len = 7;
  char err[256] = "";
  const uint8_t junk[2] = {0x48, 0xff};
  assert_int_equal(pk_plan_bytes(junk, sizeof junk, &out, &out_len, err, sizeof err), PK_EDECODE);
  assert_null(out);
  assert_int_equal(out_len, 0);
  assert_true(err[0] != '\0');

  /* dp missing: INVALID_ARGUMENT naming the field. */
  const uint32_t lens[3] = {1, 2, 3};
  Packd__V1__PlanRequest *m = fx_request_new();
  fx_set_lengths(m, lens, 3);
  size_t len = 0;
  uint8_t *bytes = fx_pack(m, &len);
  err[0] = '\0';
  int rc = pk_plan_bytes(bytes, len, &out, &out_len, err, sizeof err);
  assert_int_equal(rc, PK_EINVAL);
  assert_int_equal(pk_status_from_error(rc), 3);
  assert_null(out);
  assert_non_null(strstr(err, "dp"));
  free(bytes);

  /* A sequence longer than the cap: FAILED_PRECONDITION naming the index. */
  fx_parallel(m)->dp = 1;
  fx_batching(m)->max_tokens = 2;
  bytes = fx_pack(m, &len);
  err[0] = '\0';
  rc = pk_plan_bytes(bytes, len, &out, &out_len, err, sizeof err);
  assert_int_equal(rc, PK_EPRECOND);
  assert_int_equal(pk_status_from_error(rc), 9);
  assert_null(out);
  assert_non_null(strstr(err, "2"));
  free(bytes);
  packd__v1__plan_request__free_unpacked(m, NULL);
}

/* The caller's plan id function: a fixed id, or none ("") when arg is NULL. */
static void fixed_id(const void *arg, const Packd__V1__PlanRequest *msg, char *id, size_t idlen) {
  (void)msg;
  snprintf(id, idlen, "%s", arg != NULL ? (const char *)arg : "");
}

/* pk_plan_request, the one path from request bytes to response bytes:
 * every configured limit is PK_ELIMIT (RESOURCE_EXHAUSTED, distinct from
 * out of memory) naming the limit, a refused request gets no plan id (it is
 * computed once admitted), the caller's id function names the plan, and a
 * failed id is INTERNAL. */
static void test_plan_request_limits(void **state) {
  (void)state;
  uint32_t lens[64];
  for (uint32_t i = 0; i < 64; i++)
    lens[i] = 100 + 7 * i;
  Packd__V1__PlanRequest *m = fx_request_new();
  fx_set_lengths(m, lens, 64);
  fx_parallel(m)->dp = 2;
  fx_batching(m)->max_tokens = 1000;
  size_t len = 0;
  uint8_t *bytes = fx_pack(m, &len);
  char err[256];
  assert_int_not_equal(PK_ELIMIT, PK_ENOMEM);
  assert_int_equal(pk_status_from_error(PK_ELIMIT), 8); /* RESOURCE_EXHAUSTED */
  assert_string_not_equal(pk_strerror(PK_ELIMIT), pk_strerror(PK_ENOMEM));

  pk_plan_call_t call = {.max_bytes = INT64_MAX, .plan_id = fixed_id, .plan_id_arg = "abc"};
  assert_int_equal(pk_plan_request(bytes, len, &call, err, sizeof err), PK_OK);
  assert_int_equal(call.sequences, 64);
  assert_string_equal(call.id, "abc");
  Packd__V1__PlanResponse *resp =
      packd__v1__plan_response__unpack(NULL, call.packed.resp_len, call.packed.resp);
  assert_non_null(resp);
  assert_string_equal(resp->plan_id, "abc");
  assert_int_equal(call.packed.n_ranks, 2);
  size_t whole = call.packed.resp_len;
  packd__v1__plan_response__free_unpacked(resp, NULL);
  pk_packed_plan_free(&call.packed);

  /* Each limit at its figure passes; one below refuses. */
  const struct {
    pk_limits_t limits;
    int64_t max_bytes;
    const char *names;
  } cases[] = {
      {{.max_sequences = 63}, INT64_MAX, "max_sequences = 63"},
      {{.max_plan_bytes = 100}, INT64_MAX, "max_plan_bytes = 100"},
      {{0}, (int64_t)whole - 1, "max_message_bytes"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    call = (pk_plan_call_t){.limits = cases[c].limits, .max_bytes = cases[c].max_bytes};
    err[0] = '\0';
    assert_int_equal(pk_plan_request(bytes, len, &call, err, sizeof err), PK_ELIMIT);
    assert_non_null(strstr(err, cases[c].names));
    assert_null(call.packed.resp);
    /* Refused before planning: no id was computed. */
    if (cases[c].max_bytes == INT64_MAX)
      assert_string_equal(call.id, "");
  }
  call = (pk_plan_call_t){.max_bytes = (int64_t)whole, .plan_id = fixed_id, .plan_id_arg = "abc"};
  assert_int_equal(pk_plan_request(bytes, len, &call, err, sizeof err), PK_OK);
  pk_packed_plan_free(&call.packed);

  /* An id function that fails: INTERNAL, naming the plan id. */
  call = (pk_plan_call_t){.max_bytes = INT64_MAX, .plan_id = fixed_id, .plan_id_arg = NULL};
  assert_int_equal(pk_plan_request(bytes, len, &call, err, sizeof err), PK_EINTERNAL);
  assert_non_null(strstr(err, "plan_id"));
  assert_null(call.packed.resp);

  /* Bytes that do not decode: PK_EDECODE, nothing planned. */
  call = (pk_plan_call_t){.max_bytes = INT64_MAX};
  assert_int_equal(pk_plan_request(bytes, len / 2, &call, err, sizeof err), PK_EDECODE);
  assert_true(err[0] != '\0');
  free(bytes);
  packd__v1__plan_request__free_unpacked(m, NULL);
}

/* A NULL plan id gives a response without ids; freeing NULL is allowed. */
static void test_encode_without_id(void **state) {
  (void)state;
  const uint32_t lens[4] = {3, 1, 4, 1};
  Packd__V1__PlanRequest *m = fx_request_new();
  fx_set_lengths(m, lens, 4);
  fx_parallel(m)->dp = 2;
  pk_request_t req;
  pk_codec_request_from_msg(m, &req);
  pk_plan_t *plan = NULL;
  char err[256];
  assert_int_equal(pk_plan(&req, &plan, err, sizeof err), PK_OK);
  Packd__V1__PlanResponse *resp = NULL;
  assert_int_equal(pk_codec_encode_plan(plan, NULL, &resp), PK_OK);
  assert_string_equal(resp->plan_id, "");
  assert_string_equal(resp->ranks[1]->plan_id, "");
  assert_int_equal(resp->ranks[1]->dp_rank, 1);
  pk_codec_free_response(resp);
  pk_codec_free_response(NULL);
  pk_codec_free_request(NULL);
  pk_plan_free(plan);
  packd__v1__plan_request__free_unpacked(m, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_encode_real_plans), cmocka_unit_test(test_plan_bytes_seed003),
      cmocka_unit_test(test_plan_bytes_errors), cmocka_unit_test(test_plan_request_limits),
      cmocka_unit_test(test_encode_without_id),
  };
  return cmocka_run_group_tests_name("codec_plan", tests, NULL, NULL);
}
