/* Property tests of the host backend over random layouts: CP in {1,2,4,8},
 * TP in {1,2}, zigzag and Ulysses, zero-length rows, sequences shorter than
 * 2*CP, element sizes 1/2/4/8 and odd row widths. Every expected value comes
 * from a brute-force oracle written here independently of the library's
 * index maps: the global packed stream is built slot by slot and then split
 * the way docs/design.md describes zigzag and Ulysses sharding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "gpu_test_cases.h"

#define CASES 300

static pk_gpu_layout_t *case_layout(pk_gpu_ctx_t *ctx, const rcase_t *c) {
  pk_gpu_layout_desc_t d = pkt_desc(c->B, c->S, c->n, c->seqs, c->cu_pad, c->cp, c->algo);
  pk_gpu_layout_t *l = NULL;
  int rc = pk_gpu_layout_create(ctx, &d, &l);
  if (rc != 0) {
    fail_msg("layout: %s", pk_gpu_last_error());
  }
  return l;
}

/* Oracle: the global index (into the packed stream of T) of local token j
 * of rank r, by splitting the stream slot by slot. */
static int64_t *oracle_split(const rcase_t *c, int32_t r) {
  int64_t *idx = malloc(sizeof(int64_t) * (size_t)(c->Tl + 1));
  int64_t k = 0;
  if (c->cp == 1 || c->algo == PK_GPU_CP_ULYSSES) {
    for (int64_t j = 0; j < c->Tl; j++) {
      idx[k++] = (int64_t)r * c->Tl + j;
    }
  } else {
    for (int32_t i = 0; i < c->n; i++) {
      int64_t plen = c->cu_pad[i + 1] - c->cu_pad[i], ch = plen / (2 * c->cp);
      for (int64_t o = 0; o < ch; o++) {
        idx[k++] = c->cu_pad[i] + r * ch + o;
      }
      for (int64_t o = 0; o < ch; o++) {
        idx[k++] = c->cu_pad[i] + (2 * c->cp - 1 - r) * ch + o;
      }
    }
  }
  assert_int_equal(k, c->Tl);
  return idx;
}

/* Oracle: for global packed index p, its sequence and offset in the slot. */
static void oracle_seq(const rcase_t *c, int64_t p, int32_t *seq, int64_t *g) {
  for (int32_t i = 0; i < c->n; i++) {
    if (p >= c->cu_pad[i] && p < c->cu_pad[i + 1]) {
      *seq = i;
      *g = p - c->cu_pad[i];
      return;
    }
  }
  fail_msg("index %lld outside every slot", (long long)p);
}

/* Random padded tensor [B, S, W] of esize elements; every element non-zero. */
static unsigned char *rand_tensor(pkt_rng_t *rng, const rcase_t *c, int64_t W, int esize) {
  size_t bytes = (size_t)c->B * (size_t)c->S * (size_t)W * (size_t)esize + 1;
  unsigned char *x = malloc(bytes);
  for (size_t k = 0; k < bytes; k++) {
    x[k] = (unsigned char)pkt_next(rng);
    if (k % (size_t)esize == 0 && x[k] == 0) {
      x[k] = 1;
    }
  }
  return x;
}

static void test_index_map_is_permutation(void **state) {
  pkt_rng_t rng = {0x5eed1};
  for (int t = 0; t < CASES; t++) {
    rcase_t c;
    case_make(&rng, &c);
    uint8_t *hit = calloc((size_t)c.T + 1, 1);
    for (int32_t r = 0; r < c.cp; r++) {
      int64_t *got = malloc(sizeof(int64_t) * (size_t)(c.Tl + 1));
      assert_int_equal(pk_gpu_cp_index_map(c.n, c.cu_pad, c.cp, c.algo, r, got), 0);
      int64_t *want = oracle_split(&c, r);
      for (int64_t j = 0; j < c.Tl; j++) {
        assert_int_equal(got[j], want[j]);
        assert_true(got[j] >= 0 && got[j] < c.T);
        assert_int_equal(hit[got[j]], 0);
        hit[got[j]] = 1;
      }
      free(got);
      free(want);
    }
    for (int64_t p = 0; p < c.T; p++) {
      assert_int_equal(hit[p], 1);
    }
    free(hit);
    case_free(&c);
  }
}

/* pack == oracle for every element size and odd widths; unpack(pack(x)) is
 * x on valid tokens, 0 elsewhere in the listed rows, other rows untouched. */
static void test_pack_unpack_roundtrip(void **state) {
  pkt_rng_t rng = {0x5eed2};
  pk_gpu_ctx_t *ctx = NULL;
  assert_int_equal(pk_gpu_ctx_create(PK_GPU_BACKEND_HOST, 0, &ctx), 0);
  static const int esizes[4] = {1, 2, 4, 8};
  static const int64_t widths[5] = {1, 3, 5, 7, 33};
  for (int t = 0; t < CASES; t++) {
    rcase_t c;
    case_make(&rng, &c);
    int esize = esizes[t % 4];
    int64_t W = widths[pkt_range(&rng, 0, 4)];
    size_t rb = (size_t)W * (size_t)esize;
    unsigned char *x = rand_tensor(&rng, &c, W, esize);
    pk_gpu_layout_t *l = case_layout(ctx, &c);
    assert_int_equal(pk_gpu_layout_local_tokens(l), c.Tl);
    uint64_t fill = pkt_next(&rng);
    unsigned char *gathered = malloc(rb * (size_t)c.T + 1);
    for (int32_t r = 0; r < c.cp; r++) {
      unsigned char *out = gathered + rb * (size_t)(r * c.Tl);
      pk_gpu_op_t op = pkt_op(PK_GPU_FIELD_COPY, esize, W, x, out, fill);
      assert_int_equal(pk_gpu_pack(ctx, l, c.start, c.length, r, &op, 1), 0);
      int64_t *idx = oracle_split(&c, r);
      for (int64_t j = 0; j < c.Tl; j++) {
        int32_t i = 0;
        int64_t g = 0;
        oracle_seq(&c, idx[j], &i, &g);
        int32_t row = c.seqs[i];
        const unsigned char *row_out = out + rb * (size_t)j;
        if (g < c.length[row]) {
          assert_memory_equal(row_out, x + rb * ((size_t)row * c.S + c.start[row] + g), rb);
        } else {
          for (size_t k = 0; k < rb; k++) {
            assert_int_equal(row_out[k], (unsigned char)(fill >> (8 * (k % esize))));
          }
        }
      }
      free(idx);
    }
    /* Gathered unpack into a poisoned buffer. */
    size_t xb = rb * (size_t)c.B * (size_t)c.S;
    unsigned char *back = malloc(xb + 1);
    memset(back, 0xee, xb + 1);
    pk_gpu_op_t uop = pkt_op(PK_GPU_FIELD_COPY, esize, W, gathered, back, 0);
    assert_int_equal(pk_gpu_unpack(ctx, l, c.start, c.length, -1, &uop, 1), 0);
    uint8_t *listed = calloc((size_t)c.B, 1);
    for (int32_t i = 0; i < c.n; i++) {
      listed[c.seqs[i]] = 1;
    }
    for (int32_t b = 0; b < c.B; b++) {
      for (int32_t s = 0; s < c.S; s++) {
        const unsigned char *e = back + rb * ((size_t)b * c.S + s);
        bool valid = s >= c.start[b] && s < c.start[b] + c.length[b];
        for (size_t k = 0; k < rb; k++) {
          unsigned char want = !listed[b] ? 0xee : valid ? x[rb * ((size_t)b * c.S + s) + k] : 0;
          assert_int_equal(e[k], want);
        }
      }
    }
    /* CP-local unpack: every valid token comes back from exactly one rank,
     * all other slots are 0 (so a sum over ranks rebuilds the batch). */
    unsigned char *loc = malloc(xb + 1);
    int32_t *owners = calloc((size_t)c.B * (size_t)c.S + 1, sizeof(int32_t));
    for (int32_t r = 0; r < c.cp; r++) {
      memset(loc, 0xee, xb + 1);
      pk_gpu_op_t lop =
          pkt_op(PK_GPU_FIELD_COPY, esize, W, gathered + rb * (size_t)(r * c.Tl), loc, 0);
      assert_int_equal(pk_gpu_unpack(ctx, l, c.start, c.length, r, &lop, 1), 0);
      for (int32_t i = 0; i < c.n; i++) {
        int32_t b = c.seqs[i];
        for (int32_t s = 0; s < c.S; s++) {
          size_t at = rb * ((size_t)b * c.S + s);
          bool zero = true;
          for (size_t k = 0; k < rb; k++) {
            zero = zero && loc[at + k] == 0;
          }
          if (!zero) {
            assert_memory_equal(loc + at, x + at, rb);
            owners[(size_t)b * c.S + s]++;
          }
        }
      }
    }
    for (int32_t i = 0; i < c.n; i++) {
      int32_t b = c.seqs[i];
      for (int32_t s = 0; s < c.S; s++) {
        bool valid = s >= c.start[b] && s < c.start[b] + c.length[b];
        assert_int_equal(owners[(size_t)b * c.S + s], valid ? 1 : 0);
      }
    }
    free(loc);
    free(owners);
    free(listed);
    free(back);
    free(gathered);
    free(x);
    pk_gpu_layout_destroy(l);
    case_free(&c);
  }
  pk_gpu_ctx_destroy(ctx);
}

/* Labels, positions and the valid mask in one call: labels never cross
 * sequences, positions follow both conventions, and the per-rank real
 * cu_seqlens equal a count of the valid mask (a prefix of each local slot
 * for zigzag). */
static void test_labels_positions_valid(void **state) {
  pkt_rng_t rng = {0x5eed3};
  pk_gpu_ctx_t *ctx = NULL;
  assert_int_equal(pk_gpu_ctx_create(PK_GPU_BACKEND_HOST, 0, &ctx), 0);
  for (int t = 0; t < CASES; t++) {
    rcase_t c;
    case_make(&rng, &c);
    /* ids[b, s] = b * 1000 + s + 1: the row of every label is visible. */
    int64_t *ids = malloc(sizeof(int64_t) * ((size_t)c.B * c.S + 1));
    for (int32_t b = 0; b < c.B; b++) {
      for (int32_t s = 0; s < c.S; s++) {
        ids[(size_t)b * c.S + s] = (int64_t)b * 1000 + s + 1;
      }
    }
    pk_gpu_layout_t *l = case_layout(ctx, &c);
    size_t nl = (size_t)c.Tl + 1;
    int64_t *lab = malloc(sizeof(int64_t) * nl), *po = malloc(sizeof(int64_t) * nl);
    int32_t *pr = malloc(sizeof(int32_t) * nl), *lab32 = malloc(sizeof(int32_t) * nl);
    uint8_t *valid = malloc(nl);
    int32_t *ids32 = malloc(sizeof(int32_t) * ((size_t)c.B * c.S + 1));
    for (size_t k = 0; k < (size_t)c.B * c.S; k++) {
      ids32[k] = (int32_t)ids[k];
    }
    for (int32_t r = 0; r < c.cp; r++) {
      pk_gpu_op_t ops[5] = {
          pkt_op(PK_GPU_FIELD_LABELS, 8, 1, ids, lab, (uint64_t)(int64_t)-100),
          pkt_op(PK_GPU_FIELD_POS_OFFSET, 8, 1, NULL, po, 0),
          pkt_op(PK_GPU_FIELD_POS_RESTART, 4, 1, NULL, pr, 0),
          pkt_op(PK_GPU_FIELD_VALID, 1, 1, NULL, valid, 0),
          pkt_op(PK_GPU_FIELD_LABELS, 4, 1, ids32, lab32, (uint64_t)(int64_t)-100),
      };
      assert_int_equal(pk_gpu_pack(ctx, l, c.start, c.length, r, ops, 5), 0);
      int64_t *idx = oracle_split(&c, r);
      for (int64_t j = 0; j < c.Tl; j++) {
        int32_t i = 0;
        int64_t g = 0;
        oracle_seq(&c, idx[j], &i, &g);
        int32_t row = c.seqs[i];
        int64_t len = c.length[row];
        if (g + 1 < len) {
          assert_int_equal(lab[j] / 1000, row);
          assert_int_equal(lab[j], ids[(size_t)row * c.S + c.start[row] + g + 1]);
        } else {
          assert_int_equal(lab[j], -100);
        }
        assert_int_equal(lab32[j], (int32_t)lab[j]);
        assert_int_equal(po[j], g);
        assert_int_equal(pr[j], g < len ? g : g - len);
        assert_int_equal(valid[j], g < len ? 1 : 0);
      }
      /* Real cu of this rank vs the valid mask. */
      int32_t *lens = malloc(sizeof(int32_t) * ((size_t)c.n + 1));
      int32_t *rcu = malloc(sizeof(int32_t) * ((size_t)c.n + 1));
      for (int32_t i = 0; i < c.n; i++) {
        lens[i] = c.length[c.seqs[i]];
      }
      assert_int_equal(pk_gpu_cp_real_cu(c.n, lens, c.cu_pad, c.cp, c.algo, r, rcu), 0);
      int64_t total_valid = 0;
      for (int64_t j = 0; j < c.Tl; j++) {
        total_valid += valid[j];
      }
      assert_int_equal(rcu[c.n], total_valid);
      if (c.algo == PK_GPU_CP_ZIGZAG || c.cp == 1) {
        for (int32_t i = 0; i < c.n; i++) {
          int64_t lo = c.cu_pad[i] / c.cp, hi = c.cu_pad[i + 1] / c.cp;
          int64_t mine = rcu[i + 1] - rcu[i];
          for (int64_t j = lo; j < hi; j++) {
            assert_int_equal(valid[j], j - lo < mine ? 1 : 0);
          }
        }
      }
      free(lens);
      free(rcu);
      free(idx);
    }
    free(lab);
    free(po);
    free(pr);
    free(lab32);
    free(valid);
    free(ids);
    free(ids32);
    pk_gpu_layout_destroy(l);
    case_free(&c);
  }
  pk_gpu_ctx_destroy(ctx);
}

/* Spans of random masks: verl rows (one run), empty rows, rows with holes. */
static void test_spans_random(void **state) {
  pkt_rng_t rng = {0x5eed4};
  pk_gpu_ctx_t *ctx = NULL;
  assert_int_equal(pk_gpu_ctx_create(PK_GPU_BACKEND_HOST, 0, &ctx), 0);
  static const int esizes[4] = {1, 2, 4, 8};
  for (int t = 0; t < CASES; t++) {
    int32_t B = (int32_t)pkt_range(&rng, 1, 8), S = (int32_t)pkt_range(&rng, 0, 30);
    int esize = esizes[t % 4];
    unsigned char *mask = calloc((size_t)B * S * esize + 8, 1);
    int32_t *ws = calloc((size_t)B, 4), *wl = calloc((size_t)B, 4);
    int32_t *gs = calloc((size_t)B, 4), *gl = calloc((size_t)B, 4);
    bool any_hole = false;
    for (int32_t b = 0; b < B; b++) {
      int32_t len = (int32_t)pkt_range(&rng, 0, S), st = (int32_t)pkt_range(&rng, 0, S - len);
      for (int32_t s = st; s < st + len; s++) {
        mask[((size_t)b * S + s) * esize + pkt_range(&rng, 0, esize - 1)] =
            (unsigned char)pkt_range(&rng, 1, 255);
      }
      ws[b] = len ? st : 0;
      wl[b] = len;
      if (len >= 3 && pkt_range(&rng, 0, 5) == 0) {
        memset(mask + ((size_t)b * S + st + 1) * esize, 0, (size_t)esize);
        wl[b] = -1;
        any_hole = true;
      }
    }
    int rc = pk_gpu_spans(ctx, mask, esize, B, S, gs, gl);
    assert_int_equal(rc, any_hole ? PK_GPU_EINVAL : 0);
    if (any_hole) {
      assert_non_null(strstr(pk_gpu_last_error(), "not one contiguous run"));
    }
    for (int32_t b = 0; b < B; b++) {
      assert_int_equal(gl[b], wl[b]);
      if (wl[b] >= 0) {
        assert_int_equal(gs[b], ws[b]);
      }
    }
    free(mask);
    free(ws);
    free(wl);
    free(gs);
    free(gl);
  }
  pk_gpu_ctx_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_index_map_is_permutation),
      cmocka_unit_test(test_pack_unpack_roundtrip),
      cmocka_unit_test(test_labels_positions_valid),
      cmocka_unit_test(test_spans_random),
  };
  return cmocka_run_group_tests_name("gpu_props", tests, NULL, NULL);
}
