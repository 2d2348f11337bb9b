/* Dynamic context parallelism in the GPU agent, host backend: over random
 * group streams (group sizes 1..8, tp 1..2, zigzag and contiguous, lengths
 * from 0), the shards of all GPUs of a group put back at their index-map
 * positions are the whole padded group stream; gathering the shards and
 * unpacking restores every sample's row; the padding mask matches an
 * independent per-chunk oracle, the mask the pack kernel writes, and counts
 * the real tokens; and routing a dynamic-CP plan over the fake transport
 * gives every GPU of a group exactly its group's samples. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "gpu_test_exchange.h"

/* The mask oracle, per sequence from its chunk geometry: zigzag GPU r of c
 * holds the chunks r and 2c-1-r of h = plen/(2c) tokens; the real tokens
 * of a chunk starting at offset a are min(h, max(0, len - a)). Contiguous
 * GPU r holds [r*T/c, (r+1)*T/c) of the stream. 1 = padding. */
static void oracle_mask(int32_t n, const int32_t *len, const int32_t *cu, int32_t c, int32_t algo,
                        int32_t r, uint8_t *out) {
  int64_t total = cu[n], local = total / c, at = 0;
  if (algo == PK_GPU_CP_ULYSSES && c > 1) {
    for (int64_t j = 0; j < local; j++) {
      int64_t g = (int64_t)r * local + j;
      out[j] = 1;
      for (int32_t i = 0; i < n; i++) {
        if (g >= cu[i] && g < cu[i] + len[i]) {
          out[j] = 0;
        }
      }
    }
    return;
  }
  for (int32_t i = 0; i < n; i++) {
    int64_t plen = cu[i + 1] - cu[i];
    if (c == 1) {
      for (int64_t k = 0; k < plen; k++) {
        out[at++] = k >= len[i];
      }
      continue;
    }
    int64_t h = plen / (2 * c);
    int64_t starts[2] = {(int64_t)r * h, (2 * (int64_t)c - 1 - r) * h};
    for (int q = 0; q < 2; q++) {
      int64_t real = len[i] - starts[q];
      real = real < 0 ? 0 : real > h ? h : real;
      for (int64_t k = 0; k < h; k++) {
        out[at++] = k >= real;
      }
    }
  }
}

static void check_group(pkt_rng_t *rng, int32_t c, int32_t tp, int32_t algo) {
  int32_t n = (int32_t)pkt_range(rng, 0, 7);
  int32_t len[8], cu_real[9], cu[9], seqs[8];
  int32_t b = n + 2, s = 0;
  for (int32_t i = 0; i < n; i++) {
    len[i] =
        pkt_range(rng, 0, 4) == 0 ? (int32_t)pkt_range(rng, 0, 2) : (int32_t)pkt_range(rng, 1, 40);
    s = len[i] > s ? len[i] : s;
  }
  s += 3;
  int32_t mlr = n > 0 && pkt_range(rng, 0, 3) == 0 ? (int32_t)pkt_range(rng, 1, 30) : 0;
  if (algo == PK_GPU_CP_ZIGZAG && c > 1) {
    mlr -= mlr % (2 * tp); /* Keeps a grown last slot a multiple of 2*c. */
  }
  int32_t align = 0;
  assert_int_equal(pk_gpu_dcp_align(c, tp, algo, &align), 0);
  assert_int_equal(align, tp * c * (algo == PK_GPU_CP_ZIGZAG && c > 1 ? 2 : 1));
  assert_int_equal(pk_gpu_dcp_cu(n, len, c, tp, algo, mlr, cu_real, cu), 0);
  for (int32_t i = 0; i < n; i++) {
    int32_t plen = cu[i + 1] - cu[i];
    assert_true(plen >= len[i]);
    if (i + 1 < n || mlr == 0) {
      assert_int_equal(plen % align, 0);
      assert_true(plen - len[i] < align);
    }
  }
  if (n > 0) {
    assert_true((int64_t)cu[n] >= (int64_t)c * mlr);
  }
  /* Samples are rows of a padded batch in a shuffled order. */
  for (int32_t i = 0; i < n; i++) {
    seqs[i] = i + 1;
  }
  for (int32_t i = n - 1; i > 0; i--) {
    int32_t k = (int32_t)pkt_range(rng, 0, i), t = seqs[i];
    seqs[i] = seqs[k];
    seqs[k] = t;
  }
  int32_t start[10] = {0}, length[10] = {0};
  int64_t *x = calloc((size_t)b * (size_t)s, sizeof(int64_t));
  for (int32_t i = 0; i < n; i++) {
    int32_t row = seqs[i];
    start[row] = (int32_t)pkt_range(rng, 0, s - len[i]);
    length[row] = len[i];
    for (int32_t k = 0; k < len[i]; k++) {
      x[(int64_t)row * s + start[row] + k] = 1000 * row + k + 1;
    }
  }
  pk_gpu_ctx_t *ctx = NULL;
  assert_int_equal(pk_gpu_ctx_create(PK_GPU_BACKEND_HOST, 0, &ctx), 0);
  pk_gpu_layout_t *whole = NULL, *group = NULL;
  pk_gpu_layout_desc_t d1 = pkt_desc(b, s, n, seqs, cu, 1, PK_GPU_CP_ZIGZAG);
  pk_gpu_layout_desc_t dc = pkt_desc(b, s, n, seqs, cu, c, algo);
  assert_int_equal(pk_gpu_layout_create(ctx, &d1, &whole), 0);
  assert_int_equal(pk_gpu_layout_create(ctx, &dc, &group), 0);
  int64_t total = cu[n], local = total / c;
  assert_int_equal(pk_gpu_layout_local_tokens(group), local);
  int64_t *stream = malloc(sizeof(int64_t) * ((size_t)total + 1));
  int64_t *rebuilt = malloc(sizeof(int64_t) * ((size_t)total + 1));
  int64_t *gathered = malloc(sizeof(int64_t) * ((size_t)total + 1));
  uint8_t *hit = calloc((size_t)total + 1, 1);
  int64_t *shard = malloc(sizeof(int64_t) * ((size_t)local + 1));
  int64_t *map = malloc(sizeof(int64_t) * ((size_t)local + 1));
  uint8_t *mask = malloc((size_t)local + 1), *want = malloc((size_t)local + 1);
  uint8_t *kmask = malloc((size_t)local + 1);
  pk_gpu_op_t op = pkt_op(PK_GPU_FIELD_COPY, 8, 1, x, stream, (uint64_t)-7);
  assert_int_equal(pk_gpu_pack(ctx, whole, start, length, 0, &op, 1), 0);
  int64_t real = 0;
  for (int32_t r = 0; r < c; r++) {
    op = pkt_op(PK_GPU_FIELD_COPY, 8, 1, x, shard, (uint64_t)-7);
    assert_int_equal(pk_gpu_pack(ctx, group, start, length, r, &op, 1), 0);
    assert_int_equal(pk_gpu_cp_index_map(n, cu, c, algo, r, map), 0);
    for (int64_t j = 0; j < local; j++) {
      assert_true(map[j] >= 0 && map[j] < total);
      assert_false(hit[map[j]]); /* The shards partition the stream. */
      hit[map[j]] = 1;
      rebuilt[map[j]] = shard[j];
      gathered[(int64_t)r * local + j] = shard[j];
    }
    /* The mask: the oracle, the kernel's VALID field, the real count. */
    assert_int_equal(pk_gpu_dcp_padding_mask(n, len, cu, c, algo, r, mask), 0);
    oracle_mask(n, len, cu, c, algo, r, want);
    assert_memory_equal(mask, want, (size_t)local);
    pk_gpu_op_t mop = pkt_op(PK_GPU_FIELD_VALID, 1, 1, NULL, kmask, 1);
    mop.value_bits = 0;
    assert_int_equal(pk_gpu_pack(ctx, group, NULL, length, r, &mop, 1), 0);
    assert_memory_equal(mask, kmask, (size_t)local);
    int32_t rcu[9];
    assert_int_equal(pk_gpu_cp_real_cu(n, len, cu, c, algo, r, rcu), 0);
    int64_t zeros = 0;
    for (int64_t j = 0; j < local; j++) {
      zeros += !mask[j];
      assert_true(mask[j] || shard[j] != -7); /* Real rows carry tokens. */
    }
    assert_int_equal(zeros, rcu[n]);
    real += zeros;
  }
  assert_int_equal(real, cu_real[n]);
  if (total > 0) {
    assert_memory_equal(rebuilt, stream, sizeof(int64_t) * (size_t)total);
  }
  /* restore(shards) = the samples' rows: gathered in rank order, unpacked. */
  int64_t *back = malloc(sizeof(int64_t) * (size_t)b * (size_t)s);
  memset(back, 0x5a, sizeof(int64_t) * (size_t)b * (size_t)s);
  op = pkt_op(PK_GPU_FIELD_COPY, 8, 1, gathered, back, 0);
  assert_int_equal(pk_gpu_unpack(ctx, group, start, length, -1, &op, 1), 0);
  for (int32_t i = 0; i < n; i++) {
    int32_t row = seqs[i];
    assert_memory_equal(back + (int64_t)row * s, x + (int64_t)row * s, sizeof(int64_t) * (size_t)s);
  }
  pk_gpu_layout_destroy(group);
  pk_gpu_layout_destroy(whole);
  pk_gpu_ctx_destroy(ctx);
  free(x);
  free(stream);
  free(rebuilt);
  free(gathered);
  free(hit);
  free(shard);
  free(map);
  free(mask);
  free(want);
  free(kmask);
  free(back);
}

static void test_group_shards_random(void **state) {
  pkt_rng_t rng = {0xdc9};
  for (int t = 0; t < 400; t++) {
    int32_t c = (int32_t)pkt_range(&rng, 1, 8);
    int32_t tp = (int32_t)pkt_range(&rng, 1, 2);
    int32_t algo = (int32_t)pkt_range(&rng, 0, 1);
    check_group(&rng, c, tp, algo);
  }
}

/* A worked example: lengths 5, 3, 9 on a zigzag group of 2 (align 4). */
static void test_mask_example(void **state) {
  const int32_t len[3] = {5, 3, 9};
  int32_t cu_real[4], cu[4];
  assert_int_equal(pk_gpu_dcp_cu(3, len, 2, 1, PK_GPU_CP_ZIGZAG, 0, cu_real, cu), 0);
  const int32_t want_cu[4] = {0, 8, 12, 24};
  assert_memory_equal(cu, want_cu, sizeof want_cu);
  uint8_t m0[12], m1[12];
  const uint8_t w0[12] = {0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1, 1};
  const uint8_t w1[12] = {0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0};
  assert_int_equal(pk_gpu_dcp_padding_mask(3, len, cu, 2, PK_GPU_CP_ZIGZAG, 0, m0), 0);
  assert_int_equal(pk_gpu_dcp_padding_mask(3, len, cu, 2, PK_GPU_CP_ZIGZAG, 1, m1), 0);
  assert_memory_equal(m0, w0, sizeof w0);
  assert_memory_equal(m1, w1, sizeof w1);
}

static void test_bad_arguments(void **state) {
  int32_t a = 0, cu_real[3], cu[3];
  const int32_t len[2] = {4, 2};
  assert_int_equal(pk_gpu_dcp_align(0, 1, PK_GPU_CP_ZIGZAG, &a), PK_GPU_EINVAL);
  assert_non_null(strstr(pk_gpu_last_error(), "group_size = 0"));
  assert_int_equal(pk_gpu_dcp_align(2, 0, PK_GPU_CP_ZIGZAG, &a), PK_GPU_EINVAL);
  assert_non_null(strstr(pk_gpu_last_error(), "tp = 0"));
  assert_int_equal(pk_gpu_dcp_align(2, 1, 5, &a), PK_GPU_EINVAL);
  assert_non_null(strstr(pk_gpu_last_error(), "cp_algo = 5"));
  assert_int_equal(pk_gpu_dcp_cu(2, len, 2, 1, PK_GPU_CP_ZIGZAG, -1, cu_real, cu), PK_GPU_EINVAL);
  assert_non_null(strstr(pk_gpu_last_error(), "min_local_rows = -1"));
  assert_int_equal(pk_gpu_dcp_cu(0, len, 2, 1, PK_GPU_CP_ZIGZAG, 3, cu_real, cu), PK_GPU_EINVAL);
  assert_non_null(strstr(pk_gpu_last_error(), "no sequences"));
  assert_int_equal(pk_gpu_dcp_cu(2, len, 2, 1, PK_GPU_CP_ZIGZAG, 5, cu_real, cu), PK_GPU_EINVAL);
  assert_non_null(
      strstr(pk_gpu_last_error(), "min_local_rows = 5: zigzag groups of 2 need an even"));
  assert_int_equal(pk_gpu_dcp_cu(2, len, 2, 1, PK_GPU_CP_ULYSSES, 5, cu_real, cu), 0);
  assert_int_equal(cu[2], 10); /* Contiguous: any value; 2 GPUs x 5 rows. */
  /* A length longer than its slot, and a rank outside the group. */
  const int32_t cu_ok[3] = {0, 4, 8}, long_len[2] = {5, 1};
  uint8_t m[8];
  assert_int_equal(pk_gpu_dcp_padding_mask(2, long_len, cu_ok, 2, PK_GPU_CP_ZIGZAG, 0, m),
                   PK_GPU_EINVAL);
  assert_non_null(strstr(pk_gpu_last_error(), "lengths[0] = 5"));
  assert_int_equal(pk_gpu_dcp_padding_mask(2, len, cu_ok, 2, PK_GPU_CP_ZIGZAG, 2, m),
                   PK_GPU_EINVAL);
  assert_non_null(strstr(pk_gpu_last_error(), "rank = 2"));
  /* Zigzag slots of a group of 4 must be multiples of 8. */
  assert_int_equal(pk_gpu_dcp_padding_mask(2, len, cu_ok, 4, PK_GPU_CP_ZIGZAG, 0, m),
                   PK_GPU_EINVAL);
  assert_non_null(strstr(pk_gpu_last_error(), "2*cp = 8"));
}

/* ---- Routing a dynamic-CP plan ------------------------------------------ */

/* Random slots: the pool of nranks (a power of two) splits into aligned
 * power-of-two groups; each group gets fresh samples; every GPU of a group
 * lists them. Sources: a random owner per sample. */
static void test_route_plan_random(void **state) {
  pkt_rng_t rng = {0x7017e};
  for (int t = 0; t < 120; t++) {
    int32_t nranks = (int32_t[]){1, 2, 4, 8}[pkt_range(&rng, 0, 3)];
    int32_t slots = (int32_t)pkt_range(&rng, 1, 3);
    int32_t dst_ids[MAXR][64], ndst[MAXR] = {0};
    int32_t nseq = 0;
    for (int32_t sl = 0; sl < slots; sl++) {
      int32_t r = 0;
      while (r < nranks) {
        int32_t c = 1;
        while (r % (2 * c) == 0 && 2 * c <= nranks - r && pkt_range(&rng, 0, 1)) {
          c *= 2;
        }
        int32_t k = (int32_t)pkt_range(&rng, 1, 3);
        for (int32_t m = r; m < r + c; m++) {
          for (int32_t q = 0; q < k; q++) {
            dst_ids[m][ndst[m]++] = nseq + q;
          }
        }
        nseq += k;
        r += c;
      }
    }
    int64_t rows[256];
    int32_t owner[256], soff[MAXR + 1], sids[256], doff[MAXR + 1], dids[512];
    for (int32_t s = 0; s < nseq; s++) {
      rows[s] = pkt_range(&rng, 0, 4);
      owner[s] = (int32_t)pkt_range(&rng, 0, nranks - 1);
    }
    int32_t at = 0;
    for (int32_t r = 0; r < nranks; r++) {
      soff[r] = at;
      for (int32_t s = nseq - 1; s >= 0; s--) { /* Reverse order: not the plan's. */
        if (owner[s] == r) {
          sids[at++] = s;
        }
      }
    }
    soff[nranks] = at;
    at = 0;
    for (int32_t r = 0; r < nranks; r++) {
      doff[r] = at;
      for (int32_t p = 0; p < ndst[r]; p++) {
        dids[at++] = dst_ids[r][p];
      }
    }
    doff[nranks] = at;
    pk_gpu_xitem_t *items = malloc(sizeof(pk_gpu_xitem_t) * ((size_t)at + 1));
    assert_int_equal(pk_gpu_xitems_route(nranks, nseq, rows, soff, sids, doff, dids, items), 0);
    const int64_t rb = 3;
    unsigned char *src[MAXR], *dst[MAXR];
    int64_t drows[MAXR];
    for (int32_t r = 0; r < nranks; r++) {
      int64_t sr = 0;
      for (int32_t p = soff[r]; p < soff[r + 1]; p++) {
        sr += rows[sids[p]];
      }
      drows[r] = 0;
      for (int32_t p = doff[r]; p < doff[r + 1]; p++) {
        drows[r] += rows[dids[p]];
      }
      src[r] = malloc((size_t)(sr * rb) + 1);
      dst[r] = malloc((size_t)(drows[r] * rb) + 1);
      memset(dst[r], 0xee, (size_t)(drows[r] * rb) + 1);
      int64_t row = 0;
      for (int32_t p = soff[r]; p < soff[r + 1]; p++) {
        for (int64_t q = 0; q < rows[sids[p]]; q++, row++) {
          for (int64_t k = 0; k < rb; k++) {
            src[r][row * rb + k] = (unsigned char)(sids[p] * 29 + q * 7 + k + 1);
          }
        }
      }
    }
    pk_gpu_fake_hub_t *hub = NULL;
    assert_int_equal(pk_gpu_fake_hub_create(nranks, 5000, &hub), 0);
    xjob_t jobs[MAXR];
    for (int32_t r = 0; r < nranks; r++)
      jobs[r] = (xjob_t){hub, r, items, at, rb, src[r], dst[r], -99, "", {0}};
    run_ranks(jobs, nranks, xrun);
    for (int32_t r = 0; r < nranks; r++) {
      if (jobs[r].rc != 0) {
        fail_msg("rank %d: %d %s", (int)r, jobs[r].rc, jobs[r].msg);
      }
      int64_t row = 0;
      for (int32_t p = doff[r]; p < doff[r + 1]; p++) {
        for (int64_t q = 0; q < rows[dids[p]]; q++, row++) {
          for (int64_t k = 0; k < rb; k++) {
            assert_int_equal(dst[r][row * rb + k], (unsigned char)(dids[p] * 29 + q * 7 + k + 1));
          }
        }
      }
      assert_int_equal(dst[r][drows[r] * rb], 0xee);
      free(src[r]);
      free(dst[r]);
    }
    pk_gpu_fake_hub_destroy(hub);
    free(items);
  }
}

static void test_route_bad(void **state) {
  const int64_t rows[2] = {1, 1};
  const int32_t soff[3] = {0, 1, 2}, sids[2] = {0, 1};
  pk_gpu_xitem_t items[4];
  /* Sequence 1 goes nowhere. */
  const int32_t doff_a[3] = {0, 1, 2}, dids_a[2] = {0, 0};
  assert_int_equal(pk_gpu_xitems_route(2, 2, rows, soff, sids, doff_a, dids_a, items),
                   PK_GPU_EINVAL);
  assert_non_null(strstr(pk_gpu_last_error(), "sequence 1: no destination"));
  /* Twice on one rank. */
  const int32_t doff_b[3] = {0, 3, 3}, dids_b[3] = {0, 1, 0};
  assert_int_equal(pk_gpu_xitems_route(2, 2, rows, soff, sids, doff_b, dids_b, items),
                   PK_GPU_EINVAL);
  assert_non_null(strstr(pk_gpu_last_error(), "listed twice for rank 0"));
  /* Held twice at the source. */
  const int32_t sids_c[2] = {1, 1}, doff_c[3] = {0, 1, 2}, dids_c[2] = {0, 1};
  assert_int_equal(pk_gpu_xitems_route(2, 2, rows, soff, sids_c, doff_c, dids_c, items),
                   PK_GPU_EINVAL);
  assert_non_null(strstr(pk_gpu_last_error(), "src_ids[1] = 1: sequence held twice"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_group_shards_random), cmocka_unit_test(test_mask_example),
      cmocka_unit_test(test_bad_arguments),       cmocka_unit_test(test_route_plan_random),
      cmocka_unit_test(test_route_bad),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
