/* Golden vectors worked out by hand (lengths [2,4,6,1], CP 2; the verl
 * left/right padded batch; Ulysses SP 2) and TransformerEngine's documented
 * zigzag examples, run through the public API on the host backend. */
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

static void assert_i64(const int64_t *got, const int64_t *want, int n) {
  for (int k = 0; k < n; k++) {
    if (got[k] != want[k]) {
      fail_msg("entry %d: got %lld, want %lld", k, (long long)got[k], (long long)want[k]);
    }
  }
}

static void assert_i32(const int32_t *got, const int32_t *want, int n) {
  for (int k = 0; k < n; k++) {
    if (got[k] != want[k]) {
      fail_msg("entry %d: got %d, want %d", k, (int)got[k], (int)want[k]);
    }
  }
}

/* §6.1: lengths [2,4,6,1], CP 2, TP 1 (A = 4). */
static const int32_t len61[4] = {2, 4, 6, 1};
static const int32_t cupad61[5] = {0, 4, 8, 16, 20};

static void test_cu_from_lengths(void **state) {
  int32_t cu[5], cp[5];
  assert_int_equal(pk_gpu_cu_from_lengths(4, len61, 4, cu, cp), 0);
  const int32_t want_cu[5] = {0, 2, 6, 12, 13};
  assert_i32(cu, want_cu, 5);
  assert_i32(cp, cupad61, 5);
  /* CP 2, TP 2 (A = 8): every slot 8. */
  const int32_t want8[5] = {0, 8, 16, 24, 32};
  assert_int_equal(pk_gpu_cu_from_lengths(4, len61, 8, cu, cp), 0);
  assert_i32(cp, want8, 5);
}

static void test_index_map_61(void **state) {
  int64_t got[10];
  const int64_t r0[10] = {0, 3, 4, 7, 8, 9, 14, 15, 16, 19};
  const int64_t r1[10] = {1, 2, 5, 6, 10, 11, 12, 13, 17, 18};
  assert_int_equal(pk_gpu_cp_index_map(4, cupad61, 2, PK_GPU_CP_ZIGZAG, 0, got), 0);
  assert_i64(got, r0, 10);
  assert_int_equal(pk_gpu_cp_index_map(4, cupad61, 2, PK_GPU_CP_ZIGZAG, 1, got), 0);
  assert_i64(got, r1, 10);
}

static void test_real_cu_61(void **state) {
  int32_t got[5];
  const int32_t r0[5] = {0, 1, 3, 5, 6};
  const int32_t r1[5] = {0, 1, 3, 7, 7};
  assert_int_equal(pk_gpu_cp_real_cu(4, len61, cupad61, 2, PK_GPU_CP_ZIGZAG, 0, got), 0);
  assert_i32(got, r0, 5);
  assert_int_equal(pk_gpu_cp_real_cu(4, len61, cupad61, 2, PK_GPU_CP_ZIGZAG, 1, got), 0);
  assert_i32(got, r1, 5);
}

/* Right-padded rows holding token codes: sequence a = 10,11; b = 20..23;
 * c = 30..35; d = 40. Pads are filled with 99. */
static void fill_61_rows(int64_t *x, int S) {
  for (int b = 0; b < 4; b++) {
    for (int s = 0; s < S; s++) {
      x[b * S + s] = s < len61[b] ? (b + 1) * 10 + s : -7;
    }
  }
}

static void test_pack_tokens_and_positions_61(void **state) {
  pk_gpu_ctx_t *ctx = host_ctx();
  const int S = 8;
  int64_t x[32];
  fill_61_rows(x, S);
  const int32_t seqs[4] = {0, 1, 2, 3};
  pk_gpu_layout_desc_t d = pkt_desc(4, S, 4, seqs, cupad61, 2, PK_GPU_CP_ZIGZAG);
  pk_gpu_layout_t *l = NULL;
  assert_int_equal(pk_gpu_layout_create(ctx, &d, &l), 0);
  assert_int_equal(pk_gpu_layout_tokens(l), 20);
  assert_int_equal(pk_gpu_layout_local_tokens(l), 10);
  /* Tokens, RoPE positions (offset in the padded sequence) and a valid mask
   * in one call. */
  const int64_t tok[2][10] = {{10, 99, 20, 23, 30, 31, 99, 99, 40, 99},
                              {11, 99, 21, 22, 32, 33, 34, 35, 99, 99}};
  const int64_t pos[2][10] = {{0, 3, 0, 3, 0, 1, 6, 7, 0, 3}, {1, 2, 1, 2, 2, 3, 4, 5, 1, 2}};
  const int64_t valid[2][10] = {{1, 0, 1, 1, 1, 1, 0, 0, 1, 0}, {1, 0, 1, 1, 1, 1, 1, 1, 0, 0}};
  for (int r = 0; r < 2; r++) {
    int64_t out_tok[10], out_pos[10];
    uint8_t out_valid[10];
    pk_gpu_op_t ops[3] = {
        pkt_op(PK_GPU_FIELD_COPY, 8, 1, x, out_tok, 99),
        pkt_op(PK_GPU_FIELD_POS_OFFSET, 8, 1, NULL, out_pos, 0),
        pkt_op(PK_GPU_FIELD_VALID, 1, 1, NULL, out_valid, 0),
    };
    assert_int_equal(pk_gpu_pack(ctx, l, NULL, len61, r, ops, 3), 0);
    assert_i64(out_tok, tok[r], 10);
    assert_i64(out_pos, pos[r], 10);
    for (int j = 0; j < 10; j++) {
      assert_int_equal(out_valid[j], valid[r][j]);
    }
  }
  pk_gpu_layout_destroy(l);
  pk_gpu_ctx_destroy(ctx);
}

/* §6.2: verl batch, P = 4 prompt and R = 4 response columns, S = 8. */
static const uint8_t verl_mask[4][8] = {
    {0, 0, 0, 1, 1, 0, 0, 0},
    {0, 0, 1, 1, 1, 1, 0, 0},
    {0, 1, 1, 1, 1, 1, 1, 0},
    {0, 0, 0, 1, 0, 0, 0, 0},
};

static void test_verl_spans_and_gather_map(void **state) {
  pk_gpu_ctx_t *ctx = host_ctx();
  int32_t start[4], length[4];
  assert_int_equal(pk_gpu_spans(ctx, verl_mask, 1, 4, 8, start, length), 0);
  const int32_t want_start[4] = {3, 2, 1, 3};
  assert_i32(start, want_start, 4);
  assert_i32(length, len61, 4);
  /* The same spans from int32 and int64 masks. */
  int32_t m32[32];
  int64_t m64[32];
  for (int k = 0; k < 32; k++) {
    m32[k] = verl_mask[k / 8][k % 8];
    m64[k] = (int64_t)verl_mask[k / 8][k % 8] << 40;
  }
  int32_t s2[4], l2[4];
  assert_int_equal(pk_gpu_spans(ctx, m32, 4, 4, 8, s2, l2), 0);
  assert_i32(s2, want_start, 4);
  assert_i32(l2, len61, 4);
  assert_int_equal(pk_gpu_spans(ctx, m64, 8, 4, 8, s2, l2), 0);
  assert_i32(s2, want_start, 4);
  assert_i32(l2, len61, 4);

  /* Pack the flat index i*S+s: the gather map of each rank ('-' = -1). */
  int64_t flat[32];
  for (int k = 0; k < 32; k++) {
    flat[k] = k;
  }
  const int32_t seqs[4] = {0, 1, 2, 3};
  pk_gpu_layout_desc_t d = pkt_desc(4, 8, 4, seqs, cupad61, 2, PK_GPU_CP_ZIGZAG);
  pk_gpu_layout_t *l = NULL;
  assert_int_equal(pk_gpu_layout_create(ctx, &d, &l), 0);
  const int64_t want[2][10] = {{3, -1, 10, 13, 17, 18, -1, -1, 27, -1},
                               {4, -1, 11, 12, 19, 20, 21, 22, -1, -1}};
  int64_t gathered[20];
  for (int r = 0; r < 2; r++) {
    pk_gpu_op_t op = pkt_op(PK_GPU_FIELD_COPY, 8, 1, flat, gathered + 10 * r, (uint64_t)-1);
    assert_int_equal(pk_gpu_pack(ctx, l, start, length, r, &op, 1), 0);
    assert_i64(gathered + 10 * r, want[r], 10);
  }
  /* Unpack of the gathered stream: row 2, t = 4 comes from G[1*10 + 6],
   * flat source 21 = (row 2, col 5). Every valid slot gets its own flat
   * index back, every other slot 0. */
  assert_int_equal(gathered[16], 21);
  int64_t out[32];
  memset(out, 0x5a, sizeof out);
  pk_gpu_op_t op = pkt_op(PK_GPU_FIELD_COPY, 8, 1, gathered, out, 0);
  assert_int_equal(pk_gpu_unpack(ctx, l, start, length, -1, &op, 1), 0);
  for (int k = 0; k < 32; k++) {
    assert_int_equal(out[k], verl_mask[k / 8][k % 8] ? k : 0);
  }
  /* Labels built per sequence before the split: next token of the same row,
   * -100 on each sequence's last token and in the padding. */
  const int64_t lab[2][10] = {{4, -100, 11, -100, 18, 19, -100, -100, -100, -100},
                              {-100, -100, 12, 13, 20, 21, 22, -100, -100, -100}};
  for (int r = 0; r < 2; r++) {
    int64_t got[10];
    pk_gpu_op_t lo = pkt_op(PK_GPU_FIELD_LABELS, 8, 1, flat, got, (uint64_t)-100);
    assert_int_equal(pk_gpu_pack(ctx, l, start, length, r, &lo, 1), 0);
    assert_i64(got, lab[r], 10);
  }
  pk_gpu_layout_destroy(l);
  pk_gpu_ctx_destroy(ctx);
}

/* §6.3: Ulysses SP 2 on the same 13 tokens, padded at the end to 14. */
static void test_ulysses_61(void **state) {
  pk_gpu_ctx_t *ctx = host_ctx();
  const int32_t cu[5] = {0, 2, 6, 12, 14};
  int64_t x[32];
  fill_61_rows(x, 8);
  const int32_t seqs[4] = {0, 1, 2, 3};
  pk_gpu_layout_desc_t d = pkt_desc(4, 8, 4, seqs, cu, 2, PK_GPU_CP_ULYSSES);
  pk_gpu_layout_t *l = NULL;
  assert_int_equal(pk_gpu_layout_create(ctx, &d, &l), 0);
  assert_int_equal(pk_gpu_layout_local_tokens(l), 7);
  const int64_t tok[14] = {10, 11, 20, 21, 22, 23, 30, 31, 32, 33, 34, 35, 40, 0};
  /* HF convention: every sequence and the trailing pad start at 0. */
  const int64_t pos[14] = {0, 1, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 0, 0};
  for (int r = 0; r < 2; r++) {
    int64_t ot[7], op_[7];
    pk_gpu_op_t ops[2] = {pkt_op(PK_GPU_FIELD_COPY, 8, 1, x, ot, 0),
                          pkt_op(PK_GPU_FIELD_POS_RESTART, 8, 1, NULL, op_, 0)};
    assert_int_equal(pk_gpu_pack(ctx, l, NULL, len61, r, ops, 2), 0);
    assert_i64(ot, tok + 7 * r, 7);
    assert_i64(op_, pos + 7 * r, 7);
  }
  int64_t idx[7];
  const int64_t want1[7] = {7, 8, 9, 10, 11, 12, 13};
  assert_int_equal(pk_gpu_cp_index_map(4, cu, 2, PK_GPU_CP_ULYSSES, 1, idx), 0);
  assert_i64(idx, want1, 7);
  int32_t rcu[5];
  const int32_t want_rcu0[5] = {0, 2, 6, 7, 7}, want_rcu1[5] = {0, 0, 0, 5, 6};
  assert_int_equal(pk_gpu_cp_real_cu(4, len61, cu, 2, PK_GPU_CP_ULYSSES, 0, rcu), 0);
  assert_i32(rcu, want_rcu0, 5);
  assert_int_equal(pk_gpu_cp_real_cu(4, len61, cu, 2, PK_GPU_CP_ULYSSES, 1, rcu), 0);
  assert_i32(rcu, want_rcu1, 5);
  pk_gpu_layout_destroy(l);
  pk_gpu_ctx_destroy(ctx);
}

/* TransformerEngine's thd_get_partitioned_indices test: cu = [0,8,16], CP 2. */
static void test_te_partition(void **state) {
  const int32_t cu[3] = {0, 8, 16};
  const int64_t r0[8] = {0, 1, 6, 7, 8, 9, 14, 15};
  const int64_t r1[8] = {2, 3, 4, 5, 10, 11, 12, 13};
  int64_t got[8];
  assert_int_equal(pk_gpu_cp_index_map(2, cu, 2, PK_GPU_CP_ZIGZAG, 0, got), 0);
  assert_i64(got, r0, 8);
  assert_int_equal(pk_gpu_cp_index_map(2, cu, 2, PK_GPU_CP_ZIGZAG, 1, got), 0);
  assert_i64(got, r1, 8);
  /* Megatron's BSHD split, S = 8, CP = 2: rank 0 keeps columns 0,1,6,7. */
  const int32_t one[2] = {0, 8};
  const int64_t b0[4] = {0, 1, 6, 7};
  assert_int_equal(pk_gpu_cp_index_map(1, one, 2, PK_GPU_CP_ZIGZAG, 0, got), 0);
  assert_i64(got, b0, 4);
}

/* TE's sequence-order -> CP-rank-order example: cu_pad = [0,8,16,24,40],
 * CP 4; rank 0's part holds offsets [0,7 | 0,7 | 0,7 | 0,1,14,15]. */
static void test_te_reorder_cp4(void **state) {
  const int32_t cu[5] = {0, 8, 16, 24, 40};
  const int64_t want[10] = {0, 7, 0, 7, 0, 7, 0, 1, 14, 15};
  int64_t got[10];
  assert_int_equal(pk_gpu_cp_index_map(4, cu, 4, PK_GPU_CP_ZIGZAG, 0, got), 0);
  for (int j = 0; j < 10; j++) {
    int seq = j < 2 ? 0 : j < 4 ? 1 : j < 6 ? 2 : 3;
    assert_int_equal(got[j] - cu[seq], want[j]);
  }
}

/* TE's cu_seqlens doc example: [a a a 1 b b 2 2 c c c c 3], real
 * cu [0,3,5,9], padded cu [0,4,8,13]. */
static void test_te_padded_doc(void **state) {
  pk_gpu_ctx_t *ctx = host_ctx();
  const int32_t cu_pad[4] = {0, 4, 8, 13}, len[3] = {3, 2, 4}, seqs[3] = {0, 1, 2};
  const char rows[3][4] = {{'a', 'a', 'a', 0}, {'b', 'b', 0, 0}, {'c', 'c', 'c', 'c'}};
  char out[13];
  pk_gpu_layout_desc_t d = pkt_desc(3, 4, 3, seqs, cu_pad, 1, PK_GPU_CP_ZIGZAG);
  pk_gpu_layout_t *l = NULL;
  assert_int_equal(pk_gpu_layout_create(ctx, &d, &l), 0);
  pk_gpu_op_t op = pkt_op(PK_GPU_FIELD_COPY, 1, 1, rows, out, '_');
  assert_int_equal(pk_gpu_pack(ctx, l, NULL, len, 0, &op, 1), 0);
  assert_memory_equal(out, "aaa_bb__cccc_", 13);
  int32_t cu_real[4], cp[4];
  assert_int_equal(pk_gpu_cu_from_lengths(3, len, 1, cu_real, cp), 0);
  const int32_t want_real[4] = {0, 3, 5, 9};
  assert_i32(cu_real, want_real, 4);
  pk_gpu_layout_destroy(l);
  pk_gpu_ctx_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cu_from_lengths),
      cmocka_unit_test(test_index_map_61),
      cmocka_unit_test(test_real_cu_61),
      cmocka_unit_test(test_pack_tokens_and_positions_61),
      cmocka_unit_test(test_verl_spans_and_gather_map),
      cmocka_unit_test(test_ulysses_61),
      cmocka_unit_test(test_te_partition),
      cmocka_unit_test(test_te_reorder_cp4),
      cmocka_unit_test(test_te_padded_doc),
  };
  return cmocka_run_group_tests_name("gpu_golden", tests, NULL, NULL);
}
