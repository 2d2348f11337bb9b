/* Bad input never crashes: every rejected argument gives a clear error that
 * names the field and the value; bad data seen during a call (a span that
 * does not fit its slot) still writes every output element, treats the row
 * as empty and is reported. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "gpu_test_util.h"

static pk_gpu_ctx_t *host_ctx(void) {
  pk_gpu_ctx_t *ctx = NULL;
  assert_int_equal(pk_gpu_ctx_create(PK_GPU_BACKEND_HOST, 0, &ctx), 0);
  return ctx;
}

static void expect_error(int rc, int code, const char *needle) {
  assert_int_equal(rc, code);
  if (strstr(pk_gpu_last_error(), needle) == NULL) {
    fail_msg("message \"%s\" does not contain \"%s\"", pk_gpu_last_error(), needle);
  }
}

static void test_layout_rejects(void **state) {
  pk_gpu_ctx_t *ctx = host_ctx();
  pk_gpu_layout_t *l = NULL;
  const int32_t seqs[3] = {0, 1, 2};
  const int32_t good[4] = {0, 4, 8, 12};
  pk_gpu_layout_desc_t d = pkt_desc(3, 8, 3, seqs, good, 2, PK_GPU_CP_ZIGZAG);
  const int32_t down[4] = {0, 4, 2, 12};
  d.cu_pad = down;
  expect_error(pk_gpu_layout_create(ctx, &d, &l), PK_GPU_EINVAL,
               "cu_seqlens_padded[2] = 2 < cu_seqlens_padded[1] = 4");
  const int32_t odd[4] = {0, 4, 10, 12};
  d.cu_pad = odd;
  expect_error(pk_gpu_layout_create(ctx, &d, &l), PK_GPU_EINVAL,
               "slot of 6 tokens is not a multiple of 2*cp = 4");
  const int32_t first[4] = {1, 4, 8, 12};
  d.cu_pad = first;
  expect_error(pk_gpu_layout_create(ctx, &d, &l), PK_GPU_EINVAL, "cu_seqlens_padded[0] = 1");
  d.cu_pad = good;
  d.cp = 3;
  expect_error(pk_gpu_layout_create(ctx, &d, &l), PK_GPU_EINVAL, "2*cp = 6");
  d.cp = 2000;
  expect_error(pk_gpu_layout_create(ctx, &d, &l), PK_GPU_EINVAL, "cp = 2000");
  d.cp = 2;
  d.cp_algo = 7;
  expect_error(pk_gpu_layout_create(ctx, &d, &l), PK_GPU_EINVAL, "cp_algo = 7");
  d.cp_algo = PK_GPU_CP_ULYSSES;
  const int32_t uly[4] = {0, 3, 5, 7};
  d.cu_pad = uly;
  expect_error(pk_gpu_layout_create(ctx, &d, &l), PK_GPU_EINVAL,
               "7 tokens: not a multiple of cp = 2");
  d.cu_pad = good;
  d.cp_algo = PK_GPU_CP_ZIGZAG;
  const int32_t dup[3] = {0, 2, 0};
  d.seqs = dup;
  expect_error(pk_gpu_layout_create(ctx, &d, &l), PK_GPU_EINVAL, "seqs[2] = 0: row listed twice");
  const int32_t far[3] = {0, 1, 3};
  d.seqs = far;
  expect_error(pk_gpu_layout_create(ctx, &d, &l), PK_GPU_EINVAL, "seqs[2] = 3: not a row");
  d.seqs = seqs;
  d.batch = -1;
  expect_error(pk_gpu_layout_create(ctx, &d, &l), PK_GPU_EINVAL, "batch = -1");
  assert_null(l);
  expect_error(pk_gpu_layout_create(ctx, NULL, &l), PK_GPU_EINVAL, "desc");
  pk_gpu_ctx_destroy(ctx);
}

static void test_op_rejects(void **state) {
  pk_gpu_ctx_t *ctx = host_ctx();
  const int32_t seqs[2] = {0, 1}, cu[3] = {0, 4, 8}, len[2] = {3, 4};
  pk_gpu_layout_desc_t d = pkt_desc(2, 4, 2, seqs, cu, 2, PK_GPU_CP_ZIGZAG);
  pk_gpu_layout_t *l = NULL;
  assert_int_equal(pk_gpu_layout_create(ctx, &d, &l), 0);
  int64_t x[8] = {0}, out[4];
  pk_gpu_op_t op = pkt_op(PK_GPU_FIELD_COPY, 8, 1, x, out, 0);
  expect_error(pk_gpu_pack(ctx, l, NULL, len, 2, &op, 1), PK_GPU_EINVAL, "cp_rank = 2");
  expect_error(pk_gpu_unpack(ctx, l, NULL, len, -2, &op, 1), PK_GPU_EINVAL, "cp_rank = -2");
  op.elem_size = 3;
  expect_error(pk_gpu_pack(ctx, l, NULL, len, 0, &op, 1), PK_GPU_EINVAL, "ops[0].elem_size = 3");
  op.elem_size = 8;
  op.width = 0;
  expect_error(pk_gpu_pack(ctx, l, NULL, len, 0, &op, 1), PK_GPU_EINVAL, "ops[0].width = 0");
  op.width = 1;
  op.field = 9;
  expect_error(pk_gpu_pack(ctx, l, NULL, len, 0, &op, 1), PK_GPU_EINVAL, "ops[0].field = 9");
  op.field = PK_GPU_FIELD_LABELS;
  expect_error(pk_gpu_unpack(ctx, l, NULL, len, 0, &op, 1), PK_GPU_EINVAL, "unpack only moves");
  op = pkt_op(PK_GPU_FIELD_POS_OFFSET, 2, 1, NULL, out, 0);
  expect_error(pk_gpu_pack(ctx, l, NULL, len, 0, &op, 1), PK_GPU_EINVAL, "position ids need");
  op = pkt_op(PK_GPU_FIELD_COPY, 8, 1, NULL, out, 0);
  expect_error(pk_gpu_pack(ctx, l, NULL, len, 0, &op, 1), PK_GPU_EINVAL, "ops[0].src = NULL");
  op = pkt_op(PK_GPU_FIELD_COPY, 8, 1, x, out, 0);
  expect_error(pk_gpu_pack(ctx, l, NULL, NULL, 0, &op, 1), PK_GPU_EINVAL, "length = NULL");
  expect_error(pk_gpu_pack(ctx, l, NULL, len, 0, &op, PK_GPU_MAX_OPS + 1), PK_GPU_EINVAL,
               "nops = 65");
  /* A layout of another context. */
  pk_gpu_ctx_t *other = host_ctx();
  expect_error(pk_gpu_pack(other, l, NULL, len, 0, &op, 1), PK_GPU_EINVAL, "another context");
  pk_gpu_ctx_destroy(other);
  pk_gpu_layout_destroy(l);
  pk_gpu_ctx_destroy(ctx);
}

static void test_bad_span_is_reported_and_row_empty(void **state) {
  pk_gpu_ctx_t *ctx = host_ctx();
  const int32_t seqs[2] = {0, 1}, cu[3] = {0, 4, 8};
  int32_t len[2] = {3, 5}; /* Row 1 is longer than its slot of 4. */
  pk_gpu_layout_desc_t d = pkt_desc(2, 6, 2, seqs, cu, 1, PK_GPU_CP_ZIGZAG);
  pk_gpu_layout_t *l = NULL;
  assert_int_equal(pk_gpu_layout_create(ctx, &d, &l), 0);
  int64_t x[12];
  for (int k = 0; k < 12; k++) {
    x[k] = k + 1;
  }
  int64_t out[8];
  memset(out, 0x77, sizeof out);
  pk_gpu_op_t op = pkt_op(PK_GPU_FIELD_COPY, 8, 1, x, out, 0);
  expect_error(pk_gpu_pack(ctx, l, NULL, len, 0, &op, 1), PK_GPU_EINVAL, "length[1] = 5");
  const int64_t want[8] = {1, 2, 3, 0, 0, 0, 0, 0};
  assert_memory_equal(out, want, sizeof want);
  /* The error was returned by the call, so the check finds nothing more. */
  assert_int_equal(pk_gpu_ctx_check(ctx), 0);
  len[1] = 2;
  int32_t start[2] = {0, 5};
  expect_error(pk_gpu_pack(ctx, l, start, len, 0, &op, 1), PK_GPU_EINVAL, "start[1] = 5");
  start[1] = -1;
  int64_t back[12];
  pk_gpu_op_t uop = pkt_op(PK_GPU_FIELD_COPY, 8, 1, out, back, 0);
  expect_error(pk_gpu_unpack(ctx, l, start, len, -1, &uop, 1), PK_GPU_EINVAL, "start[1] = -1");
  const int64_t want_back[12] = {1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  assert_memory_equal(back, want_back, sizeof want_back);
  pk_gpu_layout_destroy(l);
  pk_gpu_ctx_destroy(ctx);
}

/* Empty streams: NULL data pointers are fine where nothing is read or
 * written (an empty torch tensor has data_ptr() == 0). */
static void test_empty_stream_null_pointers(void **state) {
  pk_gpu_ctx_t *ctx = host_ctx();
  const int32_t seqs[2] = {0, 1}, cu[3] = {0, 0, 0}, len[2] = {0, 0};
  pk_gpu_layout_desc_t d = pkt_desc(2, 3, 2, seqs, cu, 2, PK_GPU_CP_ZIGZAG);
  pk_gpu_layout_t *l = NULL;
  assert_int_equal(pk_gpu_layout_create(ctx, &d, &l), 0);
  assert_int_equal(pk_gpu_layout_tokens(l), 0);
  pk_gpu_op_t op = pkt_op(PK_GPU_FIELD_COPY, 4, 1, NULL, NULL, 0);
  assert_int_equal(pk_gpu_pack(ctx, l, NULL, len, 1, &op, 1), 0);
  int32_t out[6];
  memset(out, 0x11, sizeof out);
  op.dst = out;
  assert_int_equal(pk_gpu_unpack(ctx, l, NULL, len, -1, &op, 1), 0);
  for (int k = 0; k < 6; k++) {
    assert_int_equal(out[k], 0);
  }
  op.dst = NULL;
  expect_error(pk_gpu_unpack(ctx, l, NULL, len, -1, &op, 1), PK_GPU_EINVAL, "ops[0].dst = NULL");
  pk_gpu_layout_destroy(l);
  pk_gpu_ctx_destroy(ctx);
}

static void test_spans_rejects(void **state) {
  pk_gpu_ctx_t *ctx = host_ctx();
  int32_t s[2], l[2];
  int64_t mask[4] = {1, 1, 0, 1};
  expect_error(pk_gpu_spans(ctx, mask, 3, 2, 2, s, l), PK_GPU_EINVAL, "mask elem_size = 3");
  expect_error(pk_gpu_spans(ctx, (const char *)mask + 1, 4, 2, 2, s, l), PK_GPU_EINVAL,
               "not aligned");
  expect_error(pk_gpu_spans(ctx, NULL, 8, 2, 2, s, l), PK_GPU_EINVAL, "mask = NULL");
  expect_error(pk_gpu_spans(ctx, mask, 8, -2, 2, s, l), PK_GPU_EINVAL, "batch = -2");
  /* Row 1 = [0, 1] is fine; [1, 0, 1] style holes are covered by the
   * property tests. */
  assert_int_equal(pk_gpu_spans(ctx, mask, 8, 2, 2, s, l), 0);
  assert_int_equal(l[0], 2);
  assert_int_equal(s[1], 1);
  assert_int_equal(l[1], 1);
  pk_gpu_ctx_destroy(ctx);
}

static void test_backend_and_helpers(void **state) {
  assert_int_equal(pk_gpu_backend_available(PK_GPU_BACKEND_HOST), 0);
  expect_error(pk_gpu_backend_available((pk_gpu_backend_t)5), PK_GPU_EINVAL, "backend = 5");
  int rc = pk_gpu_backend_available(PK_GPU_BACKEND_CUDA);
  if (rc != 0) {
    /* No device here or not built with CUDA: a clear reason either way. */
    assert_int_equal(rc, PK_GPU_ENOTSUP);
    assert_true(strstr(pk_gpu_last_error(), "CUDA") != NULL);
    pk_gpu_ctx_t *ctx = NULL;
    assert_int_equal(pk_gpu_ctx_create(PK_GPU_BACKEND_CUDA, 0, &ctx), PK_GPU_ENOTSUP);
    assert_null(ctx);
  }
  assert_string_equal(pk_gpu_strerror(PK_GPU_EINVAL), "invalid argument");
  assert_string_equal(pk_gpu_strerror(12345), "unknown error");
  int32_t cu[3], cp[3];
  const int32_t neg[2] = {3, -1};
  expect_error(pk_gpu_cu_from_lengths(2, neg, 4, cu, cp), PK_GPU_EINVAL, "lengths[1] = -1");
  expect_error(pk_gpu_cu_from_lengths(2, neg, 0, cu, cp), PK_GPU_EINVAL, "align = 0");
  const int32_t big[2] = {INT32_MAX, 5};
  expect_error(pk_gpu_cu_from_lengths(2, big, 4, cu, cp), PK_GPU_EINVAL, "overflow int32");
  const int32_t cu_pad[3] = {0, 4, 8}, lens[2] = {3, 6};
  int32_t out[3];
  expect_error(pk_gpu_cp_real_cu(2, lens, cu_pad, 2, 0, 0, out), PK_GPU_EINVAL, "lengths[1] = 6");
  int64_t map[4];
  expect_error(pk_gpu_cp_index_map(2, cu_pad, 2, 0, 2, map), PK_GPU_EINVAL, "rank = 2");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layout_rejects),
      cmocka_unit_test(test_op_rejects),
      cmocka_unit_test(test_bad_span_is_reported_and_row_empty),
      cmocka_unit_test(test_empty_stream_null_pointers),
      cmocka_unit_test(test_spans_rejects),
      cmocka_unit_test(test_backend_and_helpers),
  };
  return cmocka_run_group_tests_name("gpu_api", tests, NULL, NULL);
}
