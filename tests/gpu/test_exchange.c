/* The exchange between DP ranks and the CP all-gather + unpack, with every
 * rank a thread on the host fake transport (the same call sequence NCCL
 * would see). Properties over random assignments: every send matches a
 * receive of the same size (the fake fails otherwise), zero-row items and
 * self moves never become p2p calls, and every rank ends with exactly its
 * target assignment. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "gpu_test_exchange.h"

/* Random assignment of nseq sequences to nranks ranks, in CSR form. */
static void rand_assign(pkt_rng_t *rng, int32_t nranks, int32_t nseq, int32_t *off, int32_t *ids) {
  int32_t *owner = malloc(sizeof(int32_t) * ((size_t)nseq + 1));
  int32_t *perm = malloc(sizeof(int32_t) * ((size_t)nseq + 1));
  for (int32_t s = 0; s < nseq; s++) {
    owner[s] = (int32_t)pkt_range(rng, 0, nranks - 1);
    perm[s] = s;
  }
  for (int32_t s = nseq - 1; s > 0; s--) {
    int32_t k = (int32_t)pkt_range(rng, 0, s), t = perm[s];
    perm[s] = perm[k];
    perm[k] = t;
  }
  int32_t at = 0;
  for (int32_t r = 0; r < nranks; r++) {
    off[r] = at;
    for (int32_t p = 0; p < nseq; p++) {
      if (owner[perm[p]] == r) {
        ids[at++] = perm[p];
      }
    }
  }
  off[nranks] = at;
  free(owner);
  free(perm);
}

static void test_exchange_random(void **state) {
  pkt_rng_t rng = {0xe1c4};
  for (int t = 0; t < 150; t++) {
    int32_t nranks = (int32_t)pkt_range(&rng, 1, 6), nseq = (int32_t)pkt_range(&rng, 0, 30);
    int64_t row_bytes = (int64_t[]){1, 3, 8, 24}[pkt_range(&rng, 0, 3)];
    int64_t *rows = malloc(sizeof(int64_t) * ((size_t)nseq + 1));
    for (int32_t s = 0; s < nseq; s++) {
      rows[s] = pkt_range(&rng, 0, 3) == 0 ? 0 : pkt_range(&rng, 1, 6);
    }
    int32_t soff[MAXR + 1], doff[MAXR + 1];
    int32_t *sids = malloc(sizeof(int32_t) * ((size_t)nseq + 1));
    int32_t *dids = malloc(sizeof(int32_t) * ((size_t)nseq + 1));
    rand_assign(&rng, nranks, nseq, soff, sids);
    rand_assign(&rng, nranks, nseq, doff, dids);
    pk_gpu_xitem_t *items = malloc(sizeof(pk_gpu_xitem_t) * ((size_t)nseq + 1));
    assert_int_equal(
        pk_gpu_xitems_from_assignments(nranks, nseq, rows, soff, sids, doff, dids, items), 0);
    /* Buffers: byte k of row q of sequence s is a function of (s, q, k). */
    unsigned char *src[MAXR], *dst[MAXR];
    int64_t dst_rows[MAXR];
    for (int32_t r = 0; r < nranks; r++) {
      int64_t srows = 0, drows = 0;
      for (int32_t p = soff[r]; p < soff[r + 1]; p++) {
        srows += rows[sids[p]];
      }
      for (int32_t p = doff[r]; p < doff[r + 1]; p++) {
        drows += rows[dids[p]];
      }
      dst_rows[r] = drows;
      src[r] = malloc((size_t)(srows * row_bytes) + 1);
      dst[r] = malloc((size_t)(drows * row_bytes) + 1);
      memset(dst[r], 0xcd, (size_t)(drows * row_bytes) + 1);
      int64_t at = 0;
      for (int32_t p = soff[r]; p < soff[r + 1]; p++) {
        int32_t s = sids[p];
        for (int64_t q = 0; q < rows[s]; q++, at++) {
          for (int64_t k = 0; k < row_bytes; k++) {
            src[r][at * row_bytes + k] = (unsigned char)(s * 37 + q * 11 + k * 3 + 1);
          }
        }
      }
    }
    pk_gpu_fake_hub_t *hub = NULL;
    assert_int_equal(pk_gpu_fake_hub_create(nranks, 5000, &hub), 0);
    xjob_t jobs[MAXR];
    for (int32_t r = 0; r < nranks; r++) {
      jobs[r] = (xjob_t){hub, r, items, nseq, row_bytes, src[r], dst[r], -99, "", {0}};
    }
    run_ranks(jobs, nranks, xrun);
    int64_t sends = 0, recvs = 0, sent = 0, recvd = 0;
    for (int32_t r = 0; r < nranks; r++) {
      if (jobs[r].rc != 0) {
        fail_msg("rank %d: %d %s", (int)r, jobs[r].rc, jobs[r].msg);
      }
      pk_gpu_fake_stats_t fs;
      assert_int_equal(pk_gpu_fake_stats(hub, r, &fs), 0);
      assert_int_equal(fs.zero_byte_p2p, 0);
      assert_int_equal(fs.self_p2p, 0);
      assert_int_equal(fs.sends, jobs[r].stats.sends);
      assert_int_equal(fs.recvs, jobs[r].stats.recvs);
      assert_true(fs.groups <= 1);
      sends += fs.sends;
      recvs += fs.recvs;
      sent += fs.bytes_sent;
      recvd += fs.bytes_recv;
      /* The target assignment, byte for byte. */
      int64_t at = 0;
      for (int32_t p = doff[r]; p < doff[r + 1]; p++) {
        int32_t s = dids[p];
        for (int64_t q = 0; q < rows[s]; q++, at++) {
          for (int64_t k = 0; k < row_bytes; k++) {
            assert_int_equal(dst[r][at * row_bytes + k],
                             (unsigned char)(s * 37 + q * 11 + k * 3 + 1));
          }
        }
      }
      assert_int_equal(at, dst_rows[r]);
      assert_int_equal(dst[r][dst_rows[r] * row_bytes], 0xcd); /* Nothing past the end. */
    }
    assert_int_equal(sends, recvs);
    assert_int_equal(sent, recvd);
    pk_gpu_fake_hub_destroy(hub);
    for (int32_t r = 0; r < nranks; r++) {
      free(src[r]);
      free(dst[r]);
    }
    free(items);
    free(rows);
    free(sids);
    free(dids);
  }
}

/* Adjacent items between the same pair travel as one message. */
static void test_exchange_merges_runs(void **state) {
  const int64_t rows[3] = {2, 3, 1};
  const int32_t soff[3] = {0, 3, 3}, sids[3] = {0, 1, 2};
  const int32_t doff[3] = {0, 0, 3}, dids[3] = {0, 1, 2};
  pk_gpu_xitem_t items[3];
  assert_int_equal(pk_gpu_xitems_from_assignments(2, 3, rows, soff, sids, doff, dids, items), 0);
  unsigned char src[6] = {1, 2, 3, 4, 5, 6}, dst[6] = {0};
  pk_gpu_fake_hub_t *hub = NULL;
  assert_int_equal(pk_gpu_fake_hub_create(2, 5000, &hub), 0);
  xjob_t jobs[2] = {{hub, 0, items, 3, 1, src, NULL, -99, "", {0}},
                    {hub, 1, items, 3, 1, NULL, dst, -99, "", {0}}};
  run_ranks(jobs, 2, xrun);
  assert_int_equal(jobs[0].rc, 0);
  assert_int_equal(jobs[1].rc, 0);
  assert_int_equal(jobs[0].stats.sends, 1);
  assert_int_equal(jobs[1].stats.recvs, 1);
  assert_memory_equal(dst, src, 6);
  pk_gpu_fake_hub_destroy(hub);
}

/* Ranks that disagree are caught by the fake instead of hanging. */
static void test_exchange_mismatch_detected(void **state) {
  pk_gpu_xitem_t a[1] = {{0, 1, 0, 0, 4}};
  pk_gpu_xitem_t b[1] = {{0, 1, 0, 0, 3}};
  unsigned char src[4] = {1, 2, 3, 4}, dst[4] = {0};
  pk_gpu_fake_hub_t *hub = NULL;
  assert_int_equal(pk_gpu_fake_hub_create(2, 300, &hub), 0);
  xjob_t jobs[2] = {{hub, 0, a, 1, 1, src, NULL, -99, "", {0}},
                    {hub, 1, b, 1, 1, NULL, dst, -99, "", {0}}};
  run_ranks(jobs, 2, xrun);
  assert_int_equal(jobs[0].rc, PK_GPU_EINTERNAL);
  assert_int_equal(jobs[1].rc, PK_GPU_EINTERNAL);
  assert_non_null(strstr(jobs[1].msg, "recv of 3 bytes from rank 0 matched a send of 4 bytes"));
  pk_gpu_fake_hub_destroy(hub);
  /* A send nobody receives times out with a message. */
  assert_int_equal(pk_gpu_fake_hub_create(2, 200, &hub), 0);
  xjob_t lone = {hub, 0, a, 1, 1, src, NULL, -99, "", {0}};
  xrun(&lone);
  assert_int_equal(lone.rc, PK_GPU_ETIMEOUT);
  assert_non_null(strstr(lone.msg, "never received"));
  pk_gpu_fake_hub_destroy(hub);
}

static void test_exchange_rejects(void **state) {
  pk_gpu_fake_hub_t *hub = NULL;
  assert_int_equal(pk_gpu_fake_hub_create(2, 200, &hub), 0);
  const pk_gpu_transport_t *tp = pk_gpu_fake_transport(hub, 0);
  unsigned char buf[16] = {0};
  pk_gpu_xitem_t overlap[2] = {{0, 1, 0, 0, 4}, {1, 1, 0, 2, 4}};
  assert_int_equal(pk_gpu_exchange(tp, overlap, 2, 1, buf, buf, NULL), PK_GPU_EINVAL);
  assert_non_null(strstr(pk_gpu_last_error(), "items[0] and items[1] both write rank 1"));
  pk_gpu_xitem_t far[1] = {{0, 2, 0, 0, 1}};
  assert_int_equal(pk_gpu_exchange(tp, far, 1, 1, buf, buf, NULL), PK_GPU_EINVAL);
  assert_non_null(strstr(pk_gpu_last_error(), "ranks 0 -> 2 outside 0..1"));
  assert_int_equal(pk_gpu_exchange(tp, far, 1, 0, buf, buf, NULL), PK_GPU_EINVAL);
  assert_null(pk_gpu_fake_transport(hub, 2));
  pk_gpu_fake_hub_destroy(hub);
  const int64_t rows[2] = {1, 1};
  const int32_t off[2] = {0, 2}, twice[2] = {1, 1}, ok[2] = {0, 1};
  pk_gpu_xitem_t items[2];
  assert_int_equal(pk_gpu_xitems_from_assignments(1, 2, rows, off, twice, off, ok, items),
                   PK_GPU_EINVAL);
  assert_non_null(strstr(pk_gpu_last_error(), "src_ids[1] = 1: sequence assigned twice"));
  const int32_t short_off[2] = {0, 1};
  assert_int_equal(pk_gpu_xitems_from_assignments(1, 2, rows, off, ok, short_off, ok, items),
                   PK_GPU_EINVAL);
  assert_non_null(strstr(pk_gpu_last_error(), "dst_off"));
  assert_int_equal(pk_gpu_nccl_transport_create(NULL, NULL, NULL),
                   (pk_gpu_build_flags() & PK_GPU_HAVE_NCCL) ? PK_GPU_EINVAL : PK_GPU_ENOTSUP);
}

/* CP all-gather + unpack: each CP rank (a thread with its own host
 * context) packs its part, then gathers and unpacks the whole batch. */
typedef struct {
  pk_gpu_fake_hub_t *hub;
  int32_t rank, cp, B, S, n;
  const int32_t *seqs, *cu, *start, *length;
  const int64_t *x;
  int64_t *out;
  int rc;
  char msg[512];
} gjob_t;

static void *grun(void *arg) {
  gjob_t *j = arg;
  pk_gpu_ctx_t *ctx = NULL;
  pk_gpu_layout_t *l = NULL;
  int64_t *local = NULL, *gather = NULL;
  j->rc = pk_gpu_ctx_create(PK_GPU_BACKEND_HOST, 0, &ctx);
  pk_gpu_layout_desc_t d = pkt_desc(j->B, j->S, j->n, j->seqs, j->cu, j->cp, PK_GPU_CP_ZIGZAG);
  if (j->rc == 0) {
    j->rc = pk_gpu_layout_create(ctx, &d, &l);
  }
  if (j->rc == 0) {
    int64_t T = pk_gpu_layout_tokens(l), Tl = pk_gpu_layout_local_tokens(l);
    local = malloc(sizeof(int64_t) * (size_t)(Tl + 1));
    gather = malloc(sizeof(int64_t) * (size_t)(T + 1));
    pk_gpu_op_t op = pkt_op(PK_GPU_FIELD_COPY, 8, 1, j->x, local, 0);
    j->rc = pk_gpu_pack(ctx, l, j->start, j->length, j->rank, &op, 1);
    if (j->rc == 0) {
      pk_gpu_op_t u = pkt_op(PK_GPU_FIELD_COPY, 8, 1, local, j->out, 0);
      void *g[1] = {gather};
      j->rc = pk_gpu_cp_gather_unpack(ctx, pk_gpu_fake_transport(j->hub, j->rank), l, j->start,
                                      j->length, &u, 1, g);
    }
  }
  snprintf(j->msg, sizeof j->msg, "%s", pk_gpu_last_error());
  free(local);
  free(gather);
  pk_gpu_layout_destroy(l);
  pk_gpu_ctx_destroy(ctx);
  return NULL;
}

static void test_cp_gather_unpack(void **state) {
  pkt_rng_t rng = {0x9a7};
  for (int t = 0; t < 60; t++) {
    int32_t cp = (int32_t[]){1, 2, 4, 8}[t % 4];
    int32_t B = (int32_t)pkt_range(&rng, 1, 6), S = (int32_t)pkt_range(&rng, 1, 20);
    int32_t seqs[6], cu[7] = {0}, start[6], length[6];
    for (int32_t b = 0; b < B; b++) {
      length[b] = (int32_t)pkt_range(&rng, 0, S);
      start[b] = (int32_t)pkt_range(&rng, 0, S - length[b]);
      seqs[b] = B - 1 - b;
    }
    int32_t a = cp > 1 ? 2 * cp : 1;
    for (int32_t i = 0; i < B; i++) {
      cu[i + 1] = cu[i] + (length[seqs[i]] + a - 1) / a * a;
    }
    int64_t x[6 * 20];
    for (int32_t k = 0; k < B * S; k++) {
      x[k] = k + 1;
    }
    int64_t outs[MAXR][6 * 20];
    pk_gpu_fake_hub_t *hub = NULL;
    assert_int_equal(pk_gpu_fake_hub_create(cp, 5000, &hub), 0);
    gjob_t jobs[MAXR];
    pthread_t th[MAXR];
    for (int32_t r = 0; r < cp; r++) {
      memset(outs[r], 0x3c, sizeof outs[r]);
      jobs[r] = (gjob_t){hub, r, cp, B, S, B, seqs, cu, start, length, x, outs[r], -99, ""};
      assert_int_equal(pthread_create(&th[r], NULL, grun, &jobs[r]), 0);
    }
    for (int32_t r = 0; r < cp; r++) {
      pthread_join(th[r], NULL);
    }
    for (int32_t r = 0; r < cp; r++) {
      if (jobs[r].rc != 0) {
        fail_msg("rank %d: %s", (int)r, jobs[r].msg);
      }
      for (int32_t b = 0; b < B; b++) {
        for (int32_t s = 0; s < S; s++) {
          bool valid = s >= start[b] && s < start[b] + length[b];
          assert_int_equal(outs[r][b * S + s], valid ? x[b * S + s] : 0);
        }
      }
      pk_gpu_fake_stats_t fs;
      assert_int_equal(pk_gpu_fake_stats(hub, r, &fs), 0);
      assert_int_equal(fs.gathers, 1);
    }
    pk_gpu_fake_hub_destroy(hub);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exchange_random),
      cmocka_unit_test(test_exchange_merges_runs),
      cmocka_unit_test(test_exchange_mismatch_detected),
      cmocka_unit_test(test_exchange_rejects),
      cmocka_unit_test(test_cp_gather_unpack),
  };
  return cmocka_run_group_tests_name("gpu_exchange", tests, NULL, NULL);
}
