/* Tests of the codec's decoding, plan ids and status mapping
 * (server/codec/codec.c) on real protobuf-c bytes. */
#include "codec_fixture.h"

#include <stdio.h>

/* Appends a varint to buf at *o. */
static void put_varint(uint8_t *buf, size_t *o, uint64_t v) {
  while (v >= 0x80) {
    buf[(*o)++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  buf[(*o)++] = (uint8_t)v;
}

static void test_status_mapping(void **state) {
  (void)state;
  assert_int_equal(pk_status_from_error(PK_OK), 0);
  assert_int_equal(pk_status_from_error(PK_EINVAL), 3);
  assert_int_equal(pk_status_from_error(PK_EDECODE), 3);
  assert_int_equal(pk_status_from_error(PK_ENOTFOUND), 5);
  assert_int_equal(pk_status_from_error(PK_ENOMEM), 8);
  assert_int_equal(pk_status_from_error(PK_EPRECOND), 9);
  assert_int_equal(pk_status_from_error(PK_EINTERNAL), 13);
  /* Codes nobody defined are bugs: INTERNAL, never OK. */
  assert_int_equal(pk_status_from_error(-99), 13);
  assert_int_equal(pk_status_from_error(7), 13);
}

/* Every field of pk_request_t equals the message field it came from. */
static void assert_request_matches(const Packd__V1__PlanRequest *m, const pk_request_t *r) {
  assert_int_equal(r->n, m->n_lengths);
  if (m->n_lengths > 0)
    assert_memory_equal(r->lengths, m->lengths, m->n_lengths * sizeof(uint32_t));
  assert_int_equal(r->n_loss_tokens, m->n_loss_tokens);
  if (m->n_loss_tokens > 0)
    assert_memory_equal(r->loss_tokens, m->loss_tokens, m->n_loss_tokens * sizeof(uint32_t));
  else
    assert_null(r->loss_tokens);
  assert_int_equal(r->n_groups, m->n_groups);
  if (m->n_groups > 0)
    assert_memory_equal(r->groups, m->groups, m->n_groups * sizeof(uint64_t));
  else
    assert_null(r->groups);
  const Packd__V1__Parallel dp0 = PACKD__V1__PARALLEL__INIT;
  const Packd__V1__Parallel *p = m->parallel != NULL ? m->parallel : &dp0;
  assert_int_equal(r->parallel.dp, p->dp);
  assert_int_equal(r->parallel.tp, p->tp);
  assert_int_equal(r->parallel.cp, p->cp);
  assert_int_equal(r->parallel.pp, p->pp);
  assert_int_equal(r->parallel.vpp, p->vpp);
  assert_int_equal(r->parallel.cp_algo, (uint32_t)p->cp_algo);
  assert_int_equal(r->parallel.sequence_parallel, p->sequence_parallel != 0);
  assert_int_equal(r->parallel.num_heads, p->num_heads);
  assert_int_equal(r->parallel.microbatch_group, p->microbatch_group);
  const Packd__V1__Batching b0 = PACKD__V1__BATCHING__INIT;
  const Packd__V1__Batching *b = m->batching != NULL ? m->batching : &b0;
  assert_int_equal(r->batching.mini_batches, b->mini_batches);
  assert_int_equal(r->batching.shuffle, b->shuffle != 0);
  assert_int_equal(r->batching.dp_balance, (uint32_t)b->dp_balance);
  assert_int_equal(r->batching.equal_count, b->equal_count != 0);
  assert_int_equal(r->batching.mode, (uint32_t)b->mode);
  assert_int_equal(r->batching.max_tokens, b->max_tokens);
  assert_int_equal(r->batching.max_seqs, b->max_seqs);
  assert_int_equal(r->batching.micro_batch_size, b->micro_batch_size);
  assert_int_equal(r->batching.min_micro_batches, b->min_micro_batches);
  assert_int_equal(r->batching.round, b->round);
  assert_int_equal(r->batching.micro_algo, (uint32_t)b->micro_algo);
  assert_int_equal(r->batching.order, (uint32_t)b->order);
  assert_int_equal(r->batching.keep_groups, b->keep_groups != 0);
  assert_int_equal(r->batching.groups_on_rank, b->groups_on_rank != 0);
  const Packd__V1__Cost c0 = PACKD__V1__COST__INIT;
  const Packd__V1__Cost *c = m->cost != NULL ? m->cost : &c0;
  assert_true(r->cost.linear == c->linear);
  assert_true(r->cost.quadratic == c->quadratic);
  assert_true(r->cost.per_sequence == c->per_sequence);
  assert_true(r->cost.per_micro_batch == c->per_micro_batch);
  const Packd__V1__Layout l0 = PACKD__V1__LAYOUT__INIT;
  const Packd__V1__Layout *l = m->layout != NULL ? m->layout : &l0;
  assert_int_equal(r->layout.align, l->align);
  assert_int_equal(r->layout.pad_multiple, l->pad_multiple);
  assert_int_equal(r->layout.total_multiple, l->total_multiple);
  assert_int_equal(r->layout.fixed_shape, l->fixed_shape != 0);
  assert_int_equal(r->seed, m->seed);
}

/* Property: for random requests, bytes -> decode gives a pk_request_t equal
 * field by field to the message, and re-packing the decoded message gives
 * the same bytes. */
static void test_decode_round_trip_random(void **state) {
  (void)state;
  uint64_t s = 42;
  for (int iter = 0; iter < 300; iter++) {
    Packd__V1__PlanRequest *m = fx_random_request(&s);
    size_t len = 0;
    uint8_t *buf = fx_pack(m, &len);
    Packd__V1__PlanRequest *dec = NULL;
    pk_request_t req;
    char err[256] = "";
    assert_int_equal(pk_codec_decode_request(buf, len, &dec, &req, err, sizeof err), PK_OK);
    assert_non_null(dec);
    assert_request_matches(m, &req);
    /* The request from an already unpacked message is the same. */
    pk_request_t req2;
    pk_codec_request_from_msg(dec, &req2);
    assert_request_matches(m, &req2);
    size_t len2 = 0;
    uint8_t *buf2 = fx_pack(dec, &len2);
    assert_int_equal(len2, len);
    assert_memory_equal(buf2, buf, len);
    free(buf2);
    free(buf);
    pk_codec_free_request(dec);
    packd__v1__plan_request__free_unpacked(m, NULL);
  }
}

static void test_decode_empty_is_defaults(void **state) {
  (void)state;
  Packd__V1__PlanRequest *msg = NULL;
  pk_request_t req;
  char err[64];
  assert_int_equal(pk_codec_decode_request(NULL, 0, &msg, &req, err, sizeof err), PK_OK);
  assert_non_null(msg);
  assert_int_equal(req.n, 0);
  assert_int_equal(req.parallel.dp, 0);
  assert_null(req.loss_tokens);
  pk_codec_free_request(msg);
}

/* Known-bad encodings are PK_EDECODE with a message, and leave *msg NULL. */
static void test_decode_malformed(void **state) {
  (void)state;
  static const struct {
    const char *what;
    uint8_t bytes[8];
    size_t len;
  } bad[] = {
      {"truncated varint in seed", {0x48, 0xff}, 2},
      {"length past the end (lengths)", {0x12, 0x05, 0x01}, 3},
      {"length past the end (parallel)", {0x2a, 0x7f, 0x08, 0x01}, 4},
      {"wrong wire type for job (varint)", {0x08, 0x01}, 2},
      {"field number zero", {0x00, 0x01}, 2},
      {"end group without start", {0x0c}, 1},
      {"invalid wire type 7", {0x0f, 0x00}, 2},
      {"truncated packed varint", {0x12, 0x01, 0x80}, 3},
      {"parallel.dp truncated inside sub-message", {0x2a, 0x01, 0x08}, 3},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    Packd__V1__PlanRequest *msg = (Packd__V1__PlanRequest *)0x1;
    pk_request_t req;
    char err[256] = "";
    int rc = pk_codec_decode_request(bad[i].bytes, bad[i].len, &msg, &req, err, sizeof err);
    if (rc != PK_EDECODE)
      fail_msg("%s: expected PK_EDECODE, got %d", bad[i].what, rc);
    assert_null(msg);
    assert_non_null(strstr(err, "PlanRequest"));
  }
  /* A NULL buffer with a length is a caller bug reported as PK_EDECODE. */
  Packd__V1__PlanRequest *msg = NULL;
  pk_request_t req;
  char err[128] = "";
  assert_int_equal(pk_codec_decode_request(NULL, 4, &msg, &req, err, sizeof err), PK_EDECODE);
  assert_true(err[0] != '\0');
}

/* Property: random bytes never crash the decoder; it either succeeds or
 * reports PK_EDECODE. Mutations of valid requests exercise deep paths. */
static void test_decode_fuzz(void **state) {
  (void)state;
  uint64_t s = 7;
  int ok = 0, bad = 0;
  for (int iter = 0; iter < 2000; iter++) {
    Packd__V1__PlanRequest *m = fx_random_request(&s);
    size_t len = 0;
    uint8_t *buf = fx_pack(m, &len);
    packd__v1__plan_request__free_unpacked(m, NULL);
    size_t flips = 1 + fx_below(&s, 4);
    for (size_t k = 0; k < flips && len > 0; k++)
      buf[fx_below(&s, (uint32_t)len)] ^= (uint8_t)(1u << fx_below(&s, 8));
    size_t cut = len > 0 && fx_below(&s, 3) == 0 ? fx_below(&s, (uint32_t)len) : len;
    Packd__V1__PlanRequest *msg = NULL;
    pk_request_t req;
    char err[256];
    int rc = pk_codec_decode_request(buf, cut, &msg, &req, err, sizeof err);
    assert_true(rc == PK_OK || rc == PK_EDECODE);
    if (rc == PK_OK) {
      ok++;
      assert_non_null(msg);
      assert_int_equal(req.n, msg->n_lengths);
    } else {
      bad++;
      assert_null(msg);
    }
    pk_codec_free_request(msg);
    free(buf);
  }
  /* Both outcomes occurred, so the property was tested on both sides. */
  assert_true(ok > 0);
  assert_true(bad > 0);
}

static bool is_hex_id(const char *id) {
  if (strlen(id) != 32)
    return false;
  for (const char *p = id; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
      return false;
  return true;
}

/* Property: the id is 32 lowercase hex digits, stable for the same request,
 * independent of the job label, and different for requests that differ in
 * any planning field. */
static void test_plan_id_properties(void **state) {
  (void)state;
  uint64_t s = 99;
  enum { N = 200 };
  char ids[N][33];
  for (int iter = 0; iter < N; iter++) {
    Packd__V1__PlanRequest *m = fx_random_request(&s);
    /* Distinct seeds make every request different. */
    m->seed = (uint64_t)iter + 1;
    size_t len = 0;
    uint8_t *buf = fx_pack(m, &len);
    char a[33], b[33];
    fx_id_of_bytes(buf, len, a);
    fx_id_of_bytes(buf, len, b);
    assert_true(is_hex_id(a));
    assert_string_equal(a, b);
    /* The id of the in-memory message equals the id of its bytes. */
    char c[33];
    pk_codec_plan_id(m, c, sizeof c);
    assert_string_equal(a, c);
    /* The job label does not change the id. */
    if (m->job != protobuf_c_empty_string)
      free(m->job);
    m->job = fx_strdup("another-job");
    pk_codec_plan_id(m, c, sizeof c);
    assert_string_equal(a, c);
    /* Changing a planning field does. */
    fx_parallel(m)->dp += 1;
    pk_codec_plan_id(m, c, sizeof c);
    assert_string_not_equal(a, c);
    memcpy(ids[iter], a, 33);
    free(buf);
    packd__v1__plan_request__free_unpacked(m, NULL);
  }
  for (int i = 0; i < N; i++)
    for (int j = i + 1; j < N; j++)
      assert_string_not_equal(ids[i], ids[j]);
}

/* Every single-field change of a fixed request gives a new id. */
static void test_plan_id_each_field(void **state) {
  (void)state;
  const uint32_t lens[4] = {10, 20, 30, 40};
  Packd__V1__PlanRequest *m = fx_request_new();
  fx_set_lengths(m, lens, 4);
  fx_parallel(m)->dp = 2;
  char base[33], id[33];
  pk_codec_plan_id(m, base, sizeof base);
#define CHANGED(stmt, undo)                                                                        \
  do {                                                                                             \
    stmt;                                                                                          \
    pk_codec_plan_id(m, id, sizeof id);                                                            \
    if (strcmp(id, base) == 0)                                                                     \
      fail_msg("id unchanged after %s", #stmt);                                                    \
    undo;                                                                                          \
    pk_codec_plan_id(m, id, sizeof id);                                                            \
    assert_string_equal(id, base);                                                                 \
  } while (0)
  CHANGED(m->lengths[3] = 41, m->lengths[3] = 40);
  CHANGED(m->n_lengths = 3, m->n_lengths = 4);
  CHANGED(fx_parallel(m)->tp = 2, fx_parallel(m)->tp = 0);
  CHANGED(fx_parallel(m)->cp = 2, fx_parallel(m)->cp = 0);
  CHANGED(fx_parallel(m)->pp = 2, fx_parallel(m)->pp = 0);
  CHANGED(fx_parallel(m)->vpp = 2, fx_parallel(m)->vpp = 0);
  CHANGED(fx_parallel(m)->cp_algo = PACKD__V1__CP_ALGO__CP_ALGO_ULYSSES,
          fx_parallel(m)->cp_algo = 0);
  CHANGED(fx_parallel(m)->sequence_parallel = 1, fx_parallel(m)->sequence_parallel = 0);
  CHANGED(fx_parallel(m)->num_heads = 8, fx_parallel(m)->num_heads = 0);
  CHANGED(fx_parallel(m)->microbatch_group = 2, fx_parallel(m)->microbatch_group = 0);
  CHANGED(fx_batching(m)->mini_batches = 2, fx_batching(m)->mini_batches = 0);
  CHANGED(fx_batching(m)->shuffle = 1, fx_batching(m)->shuffle = 0);
  CHANGED(fx_batching(m)->dp_balance = 3, fx_batching(m)->dp_balance = 0);
  CHANGED(fx_batching(m)->equal_count = 1, fx_batching(m)->equal_count = 0);
  CHANGED(fx_batching(m)->mode = 1, fx_batching(m)->mode = 0);
  CHANGED(fx_batching(m)->max_tokens = 100, fx_batching(m)->max_tokens = 0);
  CHANGED(fx_batching(m)->max_seqs = 3, fx_batching(m)->max_seqs = 0);
  CHANGED(fx_batching(m)->micro_batch_size = 3, fx_batching(m)->micro_batch_size = 0);
  CHANGED(fx_batching(m)->min_micro_batches = 3, fx_batching(m)->min_micro_batches = 0);
  CHANGED(fx_batching(m)->round = 3, fx_batching(m)->round = 0);
  CHANGED(fx_batching(m)->micro_algo = 3, fx_batching(m)->micro_algo = 0);
  CHANGED(fx_batching(m)->order = 2, fx_batching(m)->order = 0);
  CHANGED(fx_batching(m)->keep_groups = 1, fx_batching(m)->keep_groups = 0);
  CHANGED(fx_batching(m)->groups_on_rank = 1, fx_batching(m)->groups_on_rank = 0);
  CHANGED(fx_cost(m)->linear = 2, fx_cost(m)->linear = 0);
  CHANGED(fx_cost(m)->quadratic = 1e-3, fx_cost(m)->quadratic = 0);
  CHANGED(fx_cost(m)->per_sequence = 40, fx_cost(m)->per_sequence = 0);
  CHANGED(fx_cost(m)->per_micro_batch = 400, fx_cost(m)->per_micro_batch = 0);
  CHANGED(fx_layout(m)->align = 8, fx_layout(m)->align = 0);
  CHANGED(fx_layout(m)->pad_multiple = 8, fx_layout(m)->pad_multiple = 0);
  CHANGED(fx_layout(m)->total_multiple = 8, fx_layout(m)->total_multiple = 0);
  CHANGED(fx_layout(m)->fixed_shape = 1, fx_layout(m)->fixed_shape = 0);
  CHANGED(m->seed = 5, m->seed = 0);
#undef CHANGED
  /* Empty sub-messages (now all present, every field back at 0 except dp)
   * mean the same as absent ones. */
  pk_codec_plan_id(m, id, sizeof id);
  assert_string_equal(id, base);
  packd__v1__plan_request__free_unpacked(m, NULL);
}

/* Non-canonical encodings of one request share its id: fields out of order,
 * repeated lengths not packed, unknown fields, an explicit empty
 * sub-message, default values written out. */
static void test_plan_id_canonical(void **state) {
  (void)state;
  const uint32_t lens[3] = {5, 300, 7};
  Packd__V1__PlanRequest *m = fx_request_new();
  fx_set_lengths(m, lens, 3);
  fx_parallel(m)->dp = 3;
  m->seed = 9;
  size_t len = 0;
  uint8_t *canon = fx_pack(m, &len);
  char want[33], got[33];
  fx_id_of_bytes(canon, len, want);

  uint8_t buf[128];
  size_t o = 0;
  /* seed (9) first, then unknown field 100 (varint), parallel {dp 3,
   * unknown field 50 (bytes)}, lengths unpacked one by one, an empty cost,
   * job "x", and an explicit default layout.align = 0. */
  put_varint(buf, &o, (9 << 3) | 0);
  put_varint(buf, &o, 9);
  put_varint(buf, &o, (100 << 3) | 0);
  put_varint(buf, &o, 12345);
  put_varint(buf, &o, (5 << 3) | 2);
  put_varint(buf, &o, 7); /* dp: 2 bytes; field 50: 2-byte tag, length, "hi". */
  put_varint(buf, &o, (1 << 3) | 0);
  put_varint(buf, &o, 3);
  put_varint(buf, &o, (50 << 3) | 2);
  put_varint(buf, &o, 2);
  buf[o++] = 'h';
  buf[o++] = 'i';
  for (int i = 0; i < 3; i++) {
    put_varint(buf, &o, (2 << 3) | 0);
    put_varint(buf, &o, lens[i]);
  }
  put_varint(buf, &o, (7 << 3) | 2);
  put_varint(buf, &o, 0);
  put_varint(buf, &o, (1 << 3) | 2);
  put_varint(buf, &o, 1);
  buf[o++] = 'x';
  put_varint(buf, &o, (8 << 3) | 2);
  put_varint(buf, &o, 2);
  put_varint(buf, &o, (1 << 3) | 0);
  put_varint(buf, &o, 0);
  assert_true(o <= sizeof buf);
  fx_id_of_bytes(buf, o, got);
  assert_string_equal(got, want);

  /* Ids can be truncated; the result is always NUL-terminated. */
  char small[9];
  memset(small, 'z', sizeof small);
  pk_codec_plan_id(m, small, sizeof small);
  assert_int_equal(strlen(small), 8);
  assert_memory_equal(small, want, 8);
  free(canon);
  packd__v1__plan_request__free_unpacked(m, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_status_mapping),
      cmocka_unit_test(test_decode_round_trip_random),
      cmocka_unit_test(test_decode_empty_is_defaults),
      cmocka_unit_test(test_decode_malformed),
      cmocka_unit_test(test_decode_fuzz),
      cmocka_unit_test(test_plan_id_properties),
      cmocka_unit_test(test_plan_id_each_field),
      cmocka_unit_test(test_plan_id_canonical),
  };
  return cmocka_run_group_tests_name("codec", tests, NULL, NULL);
}
