/* Micro-batch layouts: validation, creation (metadata uploaded once through
 * the backend) and the pure host helpers that compute cu_seqlens, the CP
 * index map and the per-rank real lengths. */
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"

/* Checks cu_pad (n+1 entries) for a CP layout; sets *total. */
static int check_cu(int32_t n, const int32_t *cu_pad, int32_t cp, int32_t algo, int64_t *total) {
  int rc = 0;
  PK_GPU_REQUIRE(n >= 0, PK_GPU_EINVAL, "nseqs = %d: must be >= 0", (int)n);
  PK_GPU_REQUIRE(cp >= 1 && cp <= PK_GPU_MAX_CP, PK_GPU_EINVAL, "cp = %d: expected 1..%d", (int)cp,
                 PK_GPU_MAX_CP);
  PK_GPU_REQUIRE(algo == PK_GPU_CP_ZIGZAG || algo == PK_GPU_CP_ULYSSES, PK_GPU_EINVAL,
                 "cp_algo = %d: expected 0 (zigzag) or 1 (ulysses)", (int)algo);
  PK_GPU_REQUIRE(cu_pad != NULL, PK_GPU_EINVAL, "cu_seqlens_padded = NULL: n+1 entries needed");
  PK_GPU_REQUIRE(cu_pad[0] == 0, PK_GPU_EINVAL, "cu_seqlens_padded[0] = %d: must be 0",
                 (int)cu_pad[0]);
  for (int32_t k = 0; k < n; k++) {
    int64_t plen = (int64_t)cu_pad[k + 1] - cu_pad[k];
    PK_GPU_REQUIRE(plen >= 0, PK_GPU_EINVAL,
                   "cu_seqlens_padded[%d] = %d < cu_seqlens_padded[%d] = %d: must not decrease",
                   (int)k + 1, (int)cu_pad[k + 1], (int)k, (int)cu_pad[k]);
    PK_GPU_REQUIRE(cp == 1 || algo != PK_GPU_CP_ZIGZAG || plen % (2 * cp) == 0, PK_GPU_EINVAL,
                   "cu_seqlens_padded[%d..%d]: slot of %lld tokens is not a multiple of "
                   "2*cp = %d (zigzag)",
                   (int)k, (int)k + 1, (long long)plen, 2 * (int)cp);
  }
  *total = cu_pad[n];
  PK_GPU_REQUIRE(*total % cp == 0, PK_GPU_EINVAL,
                 "cu_seqlens_padded[%d] = %lld tokens: not a multiple of cp = %d", (int)n,
                 (long long)*total, (int)cp);
out:
  return rc;
}

int pk_gpu_layout_create(pk_gpu_ctx_t *ctx, const pk_gpu_layout_desc_t *d, pk_gpu_layout_t **out) {
  int rc = 0;
  pk_gpu_layout_t *l = NULL;
  uint8_t *seen = NULL;
  PK_GPU_REQUIRE(out != NULL, PK_GPU_EINVAL, "out = NULL: a place for the layout is required");
  *out = NULL;
  PK_GPU_REQUIRE(ctx != NULL && d != NULL, PK_GPU_EINVAL, "ctx and desc are required");
  PK_GPU_REQUIRE(d->batch >= 0, PK_GPU_EINVAL, "batch = %d: must be >= 0", (int)d->batch);
  PK_GPU_REQUIRE(d->seqlen >= 0, PK_GPU_EINVAL, "seqlen = %d: must be >= 0", (int)d->seqlen);
  int32_t cp = d->cp == 0 ? 1 : d->cp;
  int64_t total = 0;
  PK_GPU_CHECK(check_cu(d->nseqs, d->cu_pad, cp, d->cp_algo, &total));
  int32_t n = d->nseqs;
  PK_GPU_REQUIRE(d->seqs != NULL || n == 0, PK_GPU_EINVAL, "seqs = NULL with nseqs = %d", (int)n);
  seen = calloc((size_t)d->batch + 1, 1);
  l = calloc(1, sizeof *l);
  PK_GPU_REQUIRE(seen != NULL && l != NULL, PK_GPU_ENOMEM, "layout: out of memory");
  l->host_rows = malloc(sizeof(int32_t) * ((size_t)n + 1));
  l->host_cu = malloc(sizeof(int64_t) * ((size_t)n + 1));
  PK_GPU_REQUIRE(l->host_rows != NULL && l->host_cu != NULL, PK_GPU_ENOMEM,
                 "layout of %d sequences: out of memory", (int)n);
  for (int32_t k = 0; k < n; k++) {
    int32_t row = d->seqs[k];
    PK_GPU_REQUIRE(row >= 0 && row < d->batch, PK_GPU_EINVAL,
                   "seqs[%d] = %d: not a row of the batch (0..%d)", (int)k, (int)row,
                   (int)d->batch - 1);
    PK_GPU_REQUIRE(!seen[row], PK_GPU_EINVAL, "seqs[%d] = %d: row listed twice", (int)k, (int)row);
    seen[row] = 1;
    l->host_rows[k] = row;
  }
  l->host_rows[n] = 0;
  for (int32_t k = 0; k <= n; k++) {
    l->host_cu[k] = d->cu_pad[k];
  }
  l->ctx = ctx;
  l->host.n = n;
  l->host.cp = cp;
  l->host.algo = cp == 1 ? PK_GPU_CP_ZIGZAG : d->cp_algo;
  l->host.batch = d->batch;
  l->host.seqlen = d->seqlen;
  l->host.total = total;
  l->host.local = total / cp;
  l->host.rows = l->host_rows;
  l->host.cu = l->host_cu;
  pk_map_bucket_count(&l->host);
  if (l->host.nbuckets > 0) {
    l->host_bucket = malloc(sizeof(int32_t) * (size_t)l->host.nbuckets);
    PK_GPU_REQUIRE(l->host_bucket != NULL, PK_GPU_ENOMEM,
                   "layout search table of %d entries: out of memory", (int)l->host.nbuckets);
    pk_map_bucket_fill(&l->host, l->host_bucket);
  }
  l->host.bucket = l->host_bucket;
  l->dev = l->host;
  PK_GPU_CHECK(ctx->ops->layout_upload(ctx, l));
  *out = l;
  l = NULL;
out:
  if (l != NULL) {
    free(l->host_rows);
    free(l->host_cu);
    free(l->host_bucket);
    free(l);
  }
  free(seen);
  return rc;
}

void pk_gpu_layout_destroy(pk_gpu_layout_t *l) {
  if (l == NULL) {
    return;
  }
  l->ctx->ops->layout_free(l->ctx, l);
  free(l->host_rows);
  free(l->host_cu);
  free(l->host_bucket);
  free(l);
}

int64_t pk_gpu_layout_tokens(const pk_gpu_layout_t *l) {
  return l->host.total;
}

int64_t pk_gpu_layout_local_tokens(const pk_gpu_layout_t *l) {
  return l->host.local;
}

int pk_gpu_cu_from_lengths(int32_t n, const int32_t *lengths, int32_t align, int32_t *cu_real,
                           int32_t *cu_pad) {
  int rc = 0;
  PK_GPU_REQUIRE(n >= 0, PK_GPU_EINVAL, "n = %d: must be >= 0", (int)n);
  PK_GPU_REQUIRE(align >= 1, PK_GPU_EINVAL, "align = %d: must be >= 1", (int)align);
  PK_GPU_REQUIRE((lengths != NULL || n == 0) && cu_real != NULL && cu_pad != NULL, PK_GPU_EINVAL,
                 "lengths, cu_real and cu_pad are required");
  int64_t real = 0, pad = 0;
  cu_real[0] = 0;
  cu_pad[0] = 0;
  for (int32_t k = 0; k < n; k++) {
    PK_GPU_REQUIRE(lengths[k] >= 0, PK_GPU_EINVAL, "lengths[%d] = %d: must be >= 0", (int)k,
                   (int)lengths[k]);
    real += lengths[k];
    pad += ((int64_t)lengths[k] + align - 1) / align * align;
    PK_GPU_REQUIRE(pad <= INT32_MAX, PK_GPU_EINVAL,
                   "lengths[0..%d]: %lld padded tokens overflow int32 cu_seqlens", (int)k,
                   (long long)pad);
    cu_real[k + 1] = (int32_t)real;
    cu_pad[k + 1] = (int32_t)pad;
  }
out:
  return rc;
}

/* A host meta view of cu_pad for the helpers below; cu64 has n+1 entries. */
static int helper_meta(int32_t n, const int32_t *cu_pad, int32_t cp, int32_t algo, int32_t rank,
                       int64_t **cu64, pk_gpu_meta_t *m) {
  int rc = 0;
  int64_t total = 0;
  *cu64 = NULL;
  PK_GPU_CHECK(check_cu(n, cu_pad, cp, algo, &total));
  PK_GPU_REQUIRE(rank >= 0 && rank < cp, PK_GPU_EINVAL, "rank = %d: expected 0..%d", (int)rank,
                 (int)cp - 1);
  *cu64 = malloc(sizeof(int64_t) * ((size_t)n + 1));
  PK_GPU_REQUIRE(*cu64 != NULL, PK_GPU_ENOMEM, "cu_seqlens of %d sequences: out of memory", (int)n);
  for (int32_t k = 0; k <= n; k++) {
    (*cu64)[k] = cu_pad[k];
  }
  memset(m, 0, sizeof *m);
  m->n = n;
  m->cp = cp;
  m->algo = cp == 1 ? PK_GPU_CP_ZIGZAG : algo;
  m->total = total;
  m->local = total / cp;
  m->cu = *cu64;
out:
  return rc;
}

int pk_gpu_cp_index_map(int32_t n, const int32_t *cu_pad, int32_t cp, int32_t cp_algo, int32_t rank,
                        int64_t *out) {
  int rc = 0;
  int64_t *cu64 = NULL;
  pk_gpu_meta_t m;
  PK_GPU_CHECK(helper_meta(n, cu_pad, cp, cp_algo, rank, &cu64, &m));
  PK_GPU_REQUIRE(out != NULL || m.local == 0, PK_GPU_EINVAL, "out = NULL: T/cp = %lld entries",
                 (long long)m.local);
  for (int64_t j = 0; j < m.local; j++) {
    int64_t g;
    int32_t i = pk_map_local(&m, rank, j, &g);
    out[j] = m.cu[i] + g;
  }
out:
  free(cu64);
  return rc;
}

int pk_gpu_cp_real_cu(int32_t n, const int32_t *lengths, const int32_t *cu_pad, int32_t cp,
                      int32_t cp_algo, int32_t rank, int32_t *out) {
  int rc = 0;
  int64_t *cu64 = NULL;
  pk_gpu_meta_t m;
  PK_GPU_CHECK(helper_meta(n, cu_pad, cp, cp_algo, rank, &cu64, &m));
  PK_GPU_REQUIRE((lengths != NULL || n == 0) && out != NULL, PK_GPU_EINVAL,
                 "lengths and out are required");
  int64_t acc = 0;
  out[0] = 0;
  for (int32_t i = 0; i < n; i++) {
    int64_t plen = m.cu[i + 1] - m.cu[i];
    int64_t len = lengths[i];
    PK_GPU_REQUIRE(len >= 0 && len <= plen, PK_GPU_EINVAL,
                   "lengths[%d] = %lld: must be 0..%lld (its slot)", (int)i, (long long)len,
                   (long long)plen);
    int64_t mine = 0;
    if (cp == 1) {
      mine = len;
    } else if (m.algo == PK_GPU_CP_ZIGZAG) {
      int64_t c = plen / (2 * cp);
      int64_t v1 = len - (int64_t)rank * c, v2 = len - (2 * (int64_t)cp - 1 - rank) * c;
      mine = (v1 < 0 ? 0 : v1 > c ? c : v1) + (v2 < 0 ? 0 : v2 > c ? c : v2);
    } else {
      /* Valid tokens [cu[i], cu[i]+len) intersected with this rank's shard. */
      int64_t lo = (int64_t)rank * m.local, hi = lo + m.local;
      int64_t a = m.cu[i] > lo ? m.cu[i] : lo, b = m.cu[i] + len < hi ? m.cu[i] + len : hi;
      mine = b > a ? b - a : 0;
    }
    acc += mine;
    out[i + 1] = (int32_t)acc;
  }
out:
  free(cu64);
  return rc;
}
