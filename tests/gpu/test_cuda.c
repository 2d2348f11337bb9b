/* The CUDA backend against the host backend (the oracle), byte for byte, on
 * random layouts, element sizes, odd widths and misaligned pointers, with
 * every output buffer poisoned first so that an element the kernels forget
 * to write shows up. Also: bad data reported through pk_gpu_ctx_check, and a
 * 1-rank NCCL communicator for the exchange and gather paths.
 *
 * A tiny harness instead of cmocka: the GPU machine has none of our Debian
 * packages. Without a CUDA device (or without the CUDA backend) the test
 * prints why and exits 77, which ctest reports as skipped. */
#include <stdio.h>

#include "gpu_test_cases.h"

#define SKIP 77

static int failures;

#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      failures++;                                                                                  \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, " [%s]\n", pk_gpu_last_error());                                             \
      if (failures > 20) {                                                                         \
        exit(1);                                                                                   \
      }                                                                                            \
    }                                                                                              \
  } while (0)

#define OK(expr) EXPECT((expr) == 0, "%s", #expr)

static pk_gpu_ctx_t *hctx, *dctx;

/* A device copy of host bytes; freed with pk_gpu_mem_free. */
static void *dev_copy(const void *src, size_t bytes) {
  void *d = NULL;
  OK(pk_gpu_mem_alloc(dctx, bytes, &d));
  if (bytes > 0) {
    OK(pk_gpu_mem_upload(dctx, d, src, bytes));
  }
  return d;
}

static unsigned char *download(const void *d, size_t bytes) {
  unsigned char *h = malloc(bytes + 1);
  if (bytes > 0) {
    OK(pk_gpu_mem_download(dctx, h, d, bytes));
  }
  return h;
}

static void first_diff(const unsigned char *a, const unsigned char *b, size_t n, const char *what,
                       int t) {
  for (size_t k = 0; k < n; k++) {
    if (a[k] != b[k]) {
      EXPECT(0, "case %d %s: byte %zu host %02x cuda %02x", t, what, k, a[k], b[k]);
      return;
    }
  }
}

/* pack (5 fields in one launch) and unpack (gathered and rank-local) on
 * both backends; misalign shifts src/dst pointers by that many bytes. */
static void compare_case(pkt_rng_t *rng, int t, int esize, int64_t W, size_t misalign) {
  rcase_t c;
  case_make(rng, &c);
  size_t rb = (size_t)W * (size_t)esize, xb = rb * (size_t)c.B * (size_t)c.S;
  unsigned char *x = malloc(xb + misalign + 1);
  for (size_t k = 0; k < xb + misalign + 1; k++) {
    x[k] = (unsigned char)pkt_next(rng);
  }
  int64_t *ids = malloc(sizeof(int64_t) * ((size_t)c.B * c.S + 1));
  for (size_t k = 0; k < (size_t)c.B * c.S; k++) {
    ids[k] = (int64_t)(pkt_next(rng) % 50000);
  }
  pk_gpu_layout_desc_t d = pkt_desc(c.B, c.S, c.n, c.seqs, c.cu_pad, c.cp, c.algo);
  pk_gpu_layout_t *hl = NULL, *dl = NULL;
  OK(pk_gpu_layout_create(hctx, &d, &hl));
  OK(pk_gpu_layout_create(dctx, &d, &dl));
  unsigned char *dx = dev_copy(x, xb + misalign + 1);
  int64_t *dids = dev_copy(ids, sizeof(int64_t) * ((size_t)c.B * c.S + 1));
  int32_t *dstart = dev_copy(c.start, sizeof(int32_t) * (size_t)c.B);
  int32_t *dlen = dev_copy(c.length, sizeof(int32_t) * (size_t)c.B);
  size_t tl = (size_t)c.Tl, outb = rb * tl + misalign + 1;
  size_t sizes[5] = {outb, 8 * tl, 8 * tl, 4 * tl, 2 * tl};
  unsigned char *hout[5], *dout[5];
  unsigned char *gathered_h = malloc(rb * (size_t)c.T + 1);
  for (int32_t r = 0; r < c.cp; r++) {
    for (int k = 0; k < 5; k++) {
      hout[k] = malloc(sizes[k] + 1);
      memset(hout[k], 0xab, sizes[k] + 1);
      OK(pk_gpu_mem_alloc(dctx, sizes[k] + 1, (void **)&dout[k]));
      OK(pk_gpu_mem_set(dctx, dout[k], 0xab, sizes[k] + 1));
    }
    uint64_t fill = pkt_next(rng);
    pk_gpu_op_t hops[5] = {
        pkt_op(PK_GPU_FIELD_COPY, esize, W, x + misalign, hout[0] + misalign, fill),
        pkt_op(PK_GPU_FIELD_LABELS, 8, 1, ids, hout[1], (uint64_t)(int64_t)-100),
        pkt_op(PK_GPU_FIELD_POS_OFFSET, 8, 1, NULL, hout[2], 0),
        pkt_op(PK_GPU_FIELD_POS_RESTART, 4, 1, NULL, hout[3], 0),
        pkt_op(PK_GPU_FIELD_VALID, 2, 1, NULL, hout[4], 0),
    };
    pk_gpu_op_t dops[5];
    memcpy(dops, hops, sizeof dops);
    dops[0].src = dx + misalign;
    dops[0].dst = dout[0] + misalign;
    dops[1].src = dids;
    for (int k = 1; k < 5; k++) {
      dops[k].dst = dout[k];
    }
    OK(pk_gpu_pack(hctx, hl, c.start, c.length, r, hops, 5));
    OK(pk_gpu_pack(dctx, dl, dstart, dlen, r, dops, 5));
    OK(pk_gpu_ctx_check(dctx));
    for (int k = 0; k < 5; k++) {
      unsigned char *got = download(dout[k], sizes[k] + 1);
      first_diff(hout[k], got, sizes[k] + 1, k == 0 ? "pack" : "pack field", t);
      free(got);
    }
    memcpy(gathered_h + rb * tl * (size_t)r, hout[0] + misalign, rb * tl);
    /* Rank-local unpack. */
    unsigned char *hb = malloc(xb + 1);
    memset(hb, 0xab, xb + 1);
    unsigned char *db = NULL;
    OK(pk_gpu_mem_alloc(dctx, xb + 1, (void **)&db));
    OK(pk_gpu_mem_set(dctx, db, 0xab, xb + 1));
    pk_gpu_op_t hu = pkt_op(PK_GPU_FIELD_COPY, esize, W, hout[0] + misalign, hb, 0);
    pk_gpu_op_t du = pkt_op(PK_GPU_FIELD_COPY, esize, W, dout[0] + misalign, db, 0);
    OK(pk_gpu_unpack(hctx, hl, c.start, c.length, r, &hu, 1));
    OK(pk_gpu_unpack(dctx, dl, dstart, dlen, r, &du, 1));
    unsigned char *got = download(db, xb + 1);
    first_diff(hb, got, xb + 1, "local unpack", t);
    free(got);
    free(hb);
    pk_gpu_mem_free(dctx, db);
    for (int k = 0; k < 5; k++) {
      free(hout[k]);
      pk_gpu_mem_free(dctx, dout[k]);
    }
  }
  /* Gathered unpack. */
  unsigned char *dg = dev_copy(gathered_h, rb * (size_t)c.T + 1);
  unsigned char *hb = malloc(xb + 1), *db = NULL;
  memset(hb, 0x5c, xb + 1);
  OK(pk_gpu_mem_alloc(dctx, xb + 1, (void **)&db));
  OK(pk_gpu_mem_set(dctx, db, 0x5c, xb + 1));
  pk_gpu_op_t hu = pkt_op(PK_GPU_FIELD_COPY, esize, W, gathered_h, hb, 0);
  pk_gpu_op_t du = pkt_op(PK_GPU_FIELD_COPY, esize, W, dg, db, 0);
  OK(pk_gpu_unpack(hctx, hl, c.start, c.length, -1, &hu, 1));
  OK(pk_gpu_unpack(dctx, dl, dstart, dlen, -1, &du, 1));
  unsigned char *got = download(db, xb + 1);
  first_diff(hb, got, xb + 1, "gathered unpack", t);
  free(got);
  free(hb);
  pk_gpu_mem_free(dctx, db);
  pk_gpu_mem_free(dctx, dg);
  free(gathered_h);
  pk_gpu_mem_free(dctx, dx);
  pk_gpu_mem_free(dctx, dids);
  pk_gpu_mem_free(dctx, dstart);
  pk_gpu_mem_free(dctx, dlen);
  pk_gpu_layout_destroy(hl);
  pk_gpu_layout_destroy(dl);
  free(x);
  free(ids);
  case_free(&c);
}

static void test_random_layouts(void) {
  pkt_rng_t rng = {0xc0da};
  static const int es[4] = {1, 2, 4, 8};
  static const int64_t ws[6] = {1, 3, 7, 8, 33, 257};
  for (int t = 0; t < 400; t++) {
    compare_case(&rng, t, es[t % 4], ws[(t / 4) % 6], (size_t)(t % 7 == 0 ? t % 16 : 0));
  }
}

static void test_spans(void) {
  pkt_rng_t rng = {0x5a5};
  static const int es[4] = {1, 2, 4, 8};
  for (int t = 0; t < 100; t++) {
    int32_t B = (int32_t)pkt_range(&rng, 1, 70), S = (int32_t)pkt_range(&rng, 0, 700);
    int esize = es[t % 4];
    size_t mb = (size_t)B * S * esize;
    unsigned char *mask = calloc(mb + 8, 1);
    bool hole = false;
    for (int32_t b = 0; b < B; b++) {
      int32_t len = (int32_t)pkt_range(&rng, 0, S), st = (int32_t)pkt_range(&rng, 0, S - len);
      for (int32_t s = st; s < st + len; s++) {
        mask[((size_t)b * S + s) * esize] = 1;
      }
      if (len > 2 && t % 5 == 0 && b == 0) {
        mask[((size_t)b * S + st + 1) * esize] = 0;
        hole = true;
      }
    }
    int32_t *hs = malloc(4 * (size_t)B), *hl = malloc(4 * (size_t)B);
    int hrc = pk_gpu_spans(hctx, mask, esize, B, S, hs, hl);
    EXPECT(hrc == (hole ? PK_GPU_EINVAL : 0), "spans host rc %d", hrc);
    void *dm = dev_copy(mask, mb + 8);
    int32_t *ds = NULL, *dlen = NULL;
    OK(pk_gpu_mem_alloc(dctx, 4 * (size_t)B, (void **)&ds));
    OK(pk_gpu_mem_alloc(dctx, 4 * (size_t)B, (void **)&dlen));
    OK(pk_gpu_spans(dctx, dm, esize, B, S, ds, dlen));
    int drc = pk_gpu_ctx_check(dctx);
    EXPECT(drc == hrc, "spans cuda check rc %d, host %d", drc, hrc);
    unsigned char *gs = download(ds, 4 * (size_t)B), *gl = download(dlen, 4 * (size_t)B);
    first_diff((unsigned char *)hs, gs, 4 * (size_t)B, "spans start", t);
    first_diff((unsigned char *)hl, gl, 4 * (size_t)B, "spans length", t);
    free(gs);
    free(gl);
    free(hs);
    free(hl);
    free(mask);
    pk_gpu_mem_free(dctx, dm);
    pk_gpu_mem_free(dctx, ds);
    pk_gpu_mem_free(dctx, dlen);
  }
}

/* A bad span on the device: the call succeeds, the check reports it, and
 * the output equals the host backend's (the row counted as empty). */
static void test_bad_span(void) {
  const int32_t seqs[2] = {0, 1}, cu[3] = {0, 4, 8}, len[2] = {3, 5};
  int64_t x[12];
  for (int k = 0; k < 12; k++) {
    x[k] = k + 1;
  }
  pk_gpu_layout_desc_t d = pkt_desc(2, 6, 2, seqs, cu, 1, PK_GPU_CP_ZIGZAG);
  pk_gpu_layout_t *l = NULL;
  OK(pk_gpu_layout_create(dctx, &d, &l));
  int64_t *dx = dev_copy(x, sizeof x);
  int32_t *dlen = dev_copy(len, sizeof len);
  int64_t *dout = NULL;
  OK(pk_gpu_mem_alloc(dctx, 64, (void **)&dout));
  pk_gpu_op_t op = pkt_op(PK_GPU_FIELD_COPY, 8, 1, dx, dout, 0);
  OK(pk_gpu_pack(dctx, l, NULL, dlen, 0, &op, 1));
  int rc = pk_gpu_ctx_check(dctx);
  EXPECT(rc == PK_GPU_EINVAL && strstr(pk_gpu_last_error(), "length[1] = 5"), "check rc %d", rc);
  EXPECT(pk_gpu_ctx_check(dctx) == 0, "the check clears the error");
  int64_t got[8];
  OK(pk_gpu_mem_download(dctx, got, dout, sizeof got));
  const int64_t want[8] = {1, 2, 3, 0, 0, 0, 0, 0};
  EXPECT(memcmp(got, want, sizeof want) == 0, "bad row packed as empty");
  pk_gpu_mem_free(dctx, dx);
  pk_gpu_mem_free(dctx, dlen);
  pk_gpu_mem_free(dctx, dout);
  pk_gpu_layout_destroy(l);
}

/* Wide rows (several blocks per tensor, grid-stride loops). */
static void test_wide(void) {
  pkt_rng_t rng = {0x1de};
  const int32_t B = 16, S = 512, W = 2048, n = 16, cp = 2;
  int32_t seqs[16], len[16], start[16], cu[17] = {0};
  for (int32_t b = 0; b < B; b++) {
    seqs[b] = b;
    len[b] = (int32_t)pkt_range(&rng, 0, S);
    start[b] = (int32_t)pkt_range(&rng, 0, S - len[b]);
    cu[b + 1] = cu[b] + (len[b] + 3) / 4 * 4;
  }
  size_t xb = (size_t)B * S * W * 2;
  unsigned char *x = malloc(xb);
  for (size_t k = 0; k < xb; k++) {
    x[k] = (unsigned char)(k * 31 + 7);
  }
  pk_gpu_layout_desc_t d = pkt_desc(B, S, n, seqs, cu, cp, PK_GPU_CP_ZIGZAG);
  pk_gpu_layout_t *hl = NULL, *dl = NULL;
  OK(pk_gpu_layout_create(hctx, &d, &hl));
  OK(pk_gpu_layout_create(dctx, &d, &dl));
  size_t ob = (size_t)pk_gpu_layout_local_tokens(hl) * W * 2;
  unsigned char *dx = dev_copy(x, xb), *hout = malloc(ob + 1), *dout = NULL;
  int32_t *ds = dev_copy(start, sizeof start), *dlen = dev_copy(len, sizeof len);
  OK(pk_gpu_mem_alloc(dctx, ob + 1, (void **)&dout));
  pk_gpu_op_t hop = pkt_op(PK_GPU_FIELD_COPY, 2, W, x, hout, 0x3f80);
  pk_gpu_op_t dop = pkt_op(PK_GPU_FIELD_COPY, 2, W, dx, dout, 0x3f80);
  OK(pk_gpu_pack(hctx, hl, start, len, 1, &hop, 1));
  OK(pk_gpu_pack(dctx, dl, ds, dlen, 1, &dop, 1));
  unsigned char *got = download(dout, ob);
  first_diff(hout, got, ob, "wide pack", 0);
  free(got);
  free(hout);
  free(x);
  pk_gpu_mem_free(dctx, dx);
  pk_gpu_mem_free(dctx, dout);
  pk_gpu_mem_free(dctx, ds);
  pk_gpu_mem_free(dctx, dlen);
  pk_gpu_layout_destroy(hl);
  pk_gpu_layout_destroy(dl);
}

/* A 1-rank NCCL communicator: self moves are copies, a self send/recv pair
 * in one group works, and the CP gather path (cp = 1) unpacks. */
static void test_nccl_one_rank(void) {
  if (!(pk_gpu_build_flags() & PK_GPU_HAVE_NCCL)) {
    printf("note: built without NCCL, the NCCL part is skipped\n");
    return;
  }
  unsigned char id[PK_GPU_NCCL_ID_BYTES];
  void *comm = NULL;
  pk_gpu_transport_t *tp = NULL;
  OK(pk_gpu_nccl_unique_id(id));
  OK(pk_gpu_nccl_comm_init(1, id, 0, 0, &comm));
  OK(pk_gpu_nccl_transport_create(comm, NULL, &tp));
  if (tp == NULL) {
    return;
  }
  const int64_t rows[3] = {2, 0, 3};
  const int32_t off[2] = {0, 3}, sids[3] = {0, 1, 2}, dids[3] = {2, 1, 0};
  pk_gpu_xitem_t items[3];
  OK(pk_gpu_xitems_from_assignments(1, 3, rows, off, sids, off, dids, items));
  unsigned char src[40], want[40];
  for (int k = 0; k < 40; k++) {
    src[k] = (unsigned char)(k + 1);
  }
  memcpy(want, src + 16, 24); /* Sequence 2 (3 rows of 8 bytes) first. */
  memcpy(want + 24, src, 16);
  unsigned char *dsrc = dev_copy(src, 40), *ddst = NULL;
  OK(pk_gpu_mem_alloc(dctx, 40, (void **)&ddst));
  pk_gpu_xstats_t st;
  OK(pk_gpu_exchange(tp, items, 3, 8, dsrc, ddst, &st));
  EXPECT(st.copies == 2 && st.sends == 0 && st.recvs == 0, "self moves are copies");
  OK(pk_gpu_ctx_sync(dctx));
  unsigned char got[40];
  OK(pk_gpu_mem_download(dctx, got, ddst, 40));
  EXPECT(memcmp(got, want, 40) == 0, "1-rank exchange result");
  OK(tp->group_start(tp->impl));
  OK(tp->send(tp->impl, dsrc, 40, 0));
  OK(tp->recv(tp->impl, ddst, 40, 0));
  OK(tp->group_end(tp->impl));
  OK(pk_gpu_ctx_sync(dctx));
  OK(pk_gpu_mem_download(dctx, got, ddst, 40));
  EXPECT(memcmp(got, src, 40) == 0, "self send/recv pair");
  /* Gather + unpack with cp = 1. */
  const int32_t seqs[2] = {1, 0}, len[2] = {2, 3}, cu[3] = {0, 3, 5};
  int64_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  pk_gpu_layout_desc_t d = pkt_desc(2, 4, 2, seqs, cu, 1, PK_GPU_CP_ZIGZAG);
  pk_gpu_layout_t *l = NULL;
  OK(pk_gpu_layout_create(dctx, &d, &l));
  int64_t *dx = dev_copy(x, sizeof x), *dp = NULL, *dg = NULL, *dback = NULL;
  int32_t *dlen = dev_copy(len, sizeof len);
  OK(pk_gpu_mem_alloc(dctx, 5 * 8, (void **)&dp));
  OK(pk_gpu_mem_alloc(dctx, 5 * 8, (void **)&dg));
  OK(pk_gpu_mem_alloc(dctx, 8 * 8, (void **)&dback));
  pk_gpu_op_t op = pkt_op(PK_GPU_FIELD_COPY, 8, 1, dx, dp, 0);
  OK(pk_gpu_pack(dctx, l, NULL, dlen, 0, &op, 1));
  pk_gpu_op_t u = pkt_op(PK_GPU_FIELD_COPY, 8, 1, dp, dback, 0);
  void *g[1] = {dg};
  OK(pk_gpu_cp_gather_unpack(dctx, tp, l, NULL, dlen, &u, 1, g));
  OK(pk_gpu_ctx_sync(dctx));
  int64_t back[8];
  OK(pk_gpu_mem_download(dctx, back, dback, sizeof back));
  const int64_t wantb[8] = {1, 2, 0, 0, 5, 6, 7, 0};
  EXPECT(memcmp(back, wantb, sizeof wantb) == 0, "1-rank gather-unpack");
  pk_gpu_layout_destroy(l);
  pk_gpu_mem_free(dctx, dx);
  pk_gpu_mem_free(dctx, dp);
  pk_gpu_mem_free(dctx, dg);
  pk_gpu_mem_free(dctx, dback);
  pk_gpu_mem_free(dctx, dlen);
  pk_gpu_mem_free(dctx, dsrc);
  pk_gpu_mem_free(dctx, ddst);
  pk_gpu_nccl_transport_destroy(tp);
  pk_gpu_nccl_comm_destroy(comm);
}

/* Dynamic-CP groups: for every group size and both shard layouts, each
 * GPU's shard (two tensors and the padding mask in one launch) on the CUDA
 * backend equals the host backend's, and the mask equals
 * pk_gpu_dcp_padding_mask (verl's semantics). */
static void test_dcp_groups(void) {
  pkt_rng_t rng = {0xdc9a};
  for (int t = 0; t < 64; t++) {
    int32_t c = (int32_t[]){1, 2, 4, 8}[t % 4], algo = (t / 4) % 2, tp = 1 + (t / 8) % 2;
    int32_t n = (int32_t)pkt_range(&rng, 1, 6), len[6], cu_real[7], cu[7], seqs[6];
    int32_t b = n, s = 1;
    for (int32_t i = 0; i < n; i++) {
      len[i] = (int32_t)pkt_range(&rng, 0, 70);
      s = len[i] + 1 > s ? len[i] + 1 : s;
      seqs[i] = n - 1 - i;
    }
    OK(pk_gpu_dcp_cu(n, len, c, tp, algo, 0, cu_real, cu));
    int32_t start[6] = {0}, length[6] = {0};
    for (int32_t i = 0; i < n; i++) {
      length[seqs[i]] = len[i];
      start[seqs[i]] = (int32_t)pkt_range(&rng, 0, s - len[i]);
    }
    size_t nx = (size_t)b * (size_t)s;
    int64_t *x = malloc(sizeof(int64_t) * nx);
    uint16_t *h = malloc(sizeof(uint16_t) * nx * 5);
    for (size_t k = 0; k < nx; k++) {
      x[k] = (int64_t)pkt_next(&rng);
    }
    for (size_t k = 0; k < nx * 5; k++) {
      h[k] = (uint16_t)pkt_next(&rng);
    }
    pk_gpu_layout_desc_t d = pkt_desc(b, s, n, seqs, cu, c, algo);
    pk_gpu_layout_t *hl = NULL, *dl = NULL;
    OK(pk_gpu_layout_create(hctx, &d, &hl));
    OK(pk_gpu_layout_create(dctx, &d, &dl));
    int64_t local = pk_gpu_layout_local_tokens(hl);
    void *dx = dev_copy(x, sizeof(int64_t) * nx), *dh = dev_copy(h, sizeof(uint16_t) * nx * 5);
    void *dstart = dev_copy(start, sizeof start), *dlen = dev_copy(length, sizeof length);
    size_t ob = (size_t)local * (8 + 10 + 1) + 1;
    unsigned char *hout = malloc(ob), *want = malloc((size_t)local + 1);
    void *dout = NULL;
    OK(pk_gpu_mem_alloc(dctx, ob, &dout));
    for (int32_t r = 0; r < c; r++) {
      unsigned char *hp[3] = {hout, hout + local * 8, hout + local * 18};
      unsigned char *dp[3] = {dout, (unsigned char *)dout + local * 8,
                              (unsigned char *)dout + local * 18};
      pk_gpu_op_t hops[3] = {pkt_op(PK_GPU_FIELD_COPY, 8, 1, x, hp[0], 0),
                             pkt_op(PK_GPU_FIELD_COPY, 2, 5, h, hp[1], 0x7fc0),
                             pkt_op(PK_GPU_FIELD_VALID, 1, 1, NULL, hp[2], 1)};
      pk_gpu_op_t dops[3] = {pkt_op(PK_GPU_FIELD_COPY, 8, 1, dx, dp[0], 0),
                             pkt_op(PK_GPU_FIELD_COPY, 2, 5, dh, dp[1], 0x7fc0),
                             pkt_op(PK_GPU_FIELD_VALID, 1, 1, NULL, dp[2], 1)};
      hops[2].value_bits = 0;
      dops[2].value_bits = 0;
      OK(pk_gpu_pack(hctx, hl, start, length, r, hops, 3));
      OK(pk_gpu_pack(dctx, dl, dstart, dlen, r, dops, 3));
      unsigned char *got = download(dout, ob - 1);
      first_diff(hout, got, ob - 1, "dcp shard", t);
      OK(pk_gpu_dcp_padding_mask(n, len, cu, c, algo, r, want));
      EXPECT(local == 0 || memcmp(want, got + local * 18, (size_t)local) == 0,
             "case %d (c %d, algo %d, rank %d): CUDA padding mask differs from verl's", t, (int)c,
             (int)algo, (int)r);
      free(got);
    }
    OK(pk_gpu_ctx_check(dctx));
    pk_gpu_layout_destroy(hl);
    pk_gpu_layout_destroy(dl);
    pk_gpu_mem_free(dctx, dx);
    pk_gpu_mem_free(dctx, dh);
    pk_gpu_mem_free(dctx, dstart);
    pk_gpu_mem_free(dctx, dlen);
    pk_gpu_mem_free(dctx, dout);
    free(x);
    free(h);
    free(hout);
    free(want);
  }
}

int main(void) {
  if (!(pk_gpu_build_flags() & PK_GPU_HAVE_CUDA)) {
    printf("SKIP: libpackd_gpu was built without the CUDA backend (PK_GPU_CUDA=OFF)\n");
    return SKIP;
  }
  if (pk_gpu_backend_available(PK_GPU_BACKEND_CUDA) != 0) {
    printf("SKIP: %s\n", pk_gpu_last_error());
    return SKIP;
  }
  if (pk_gpu_ctx_create(PK_GPU_BACKEND_HOST, 0, &hctx) != 0 ||
      pk_gpu_ctx_create(PK_GPU_BACKEND_CUDA, 0, &dctx) != 0) {
    fprintf(stderr, "context: %s\n", pk_gpu_last_error());
    return 1;
  }
  test_random_layouts();
  test_spans();
  test_bad_span();
  test_wide();
  test_dcp_groups();
  test_nccl_one_rank();
  pk_gpu_ctx_destroy(dctx);
  pk_gpu_ctx_destroy(hctx);
  printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
