/* Moving rows between ranks over a transport: the DP exchange from one
 * assignment to another, and the CP all-gather followed by the unpack map.
 * Every rank derives its calls from the same global item list, so the
 * sends of a pair (a -> b) and the receives of b from a come out in the same
 * canonical order on both sides (NCCL matches p2p calls per peer in order). */
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"

int pk_gpu_xitems_from_assignments(int32_t nranks, int32_t nseq, const int64_t *rows,
                                   const int32_t *src_off, const int32_t *src_ids,
                                   const int32_t *dst_off, const int32_t *dst_ids,
                                   pk_gpu_xitem_t *items) {
  int rc = 0;
  uint8_t *seen = NULL;
  PK_GPU_REQUIRE(nranks >= 1, PK_GPU_EINVAL, "nranks = %d: must be >= 1", (int)nranks);
  PK_GPU_REQUIRE(nseq >= 0, PK_GPU_EINVAL, "nseq = %d: must be >= 0", (int)nseq);
  PK_GPU_REQUIRE(
      src_off != NULL && dst_off != NULL &&
          ((rows != NULL && src_ids != NULL && dst_ids != NULL && items != NULL) || nseq == 0),
      PK_GPU_EINVAL, "rows, offsets, ids and items are required");
  seen = malloc((size_t)nseq + 1);
  PK_GPU_REQUIRE(seen != NULL, PK_GPU_ENOMEM, "assignments of %d sequences: out of memory",
                 (int)nseq);
  for (int side = 0; side < 2; side++) {
    const int32_t *off = side == 0 ? src_off : dst_off;
    const int32_t *ids = side == 0 ? src_ids : dst_ids;
    const char *name = side == 0 ? "src" : "dst";
    memset(seen, 0, (size_t)nseq + 1);
    PK_GPU_REQUIRE(off[0] == 0 && off[nranks] == nseq, PK_GPU_EINVAL,
                   "%s_off: must start at 0 and end at nseq = %d (got %d .. %d)", name, (int)nseq,
                   (int)off[0], (int)off[nranks]);
    for (int32_t k = 0; k < nranks; k++) {
      PK_GPU_REQUIRE(off[k + 1] >= off[k], PK_GPU_EINVAL,
                     "%s_off[%d] = %d < %s_off[%d] = %d: must not decrease", name, (int)k + 1,
                     (int)off[k + 1], name, (int)k, (int)off[k]);
      int64_t at = 0;
      for (int32_t p = off[k]; p < off[k + 1]; p++) {
        int32_t id = ids[p];
        PK_GPU_REQUIRE(id >= 0 && id < nseq, PK_GPU_EINVAL, "%s_ids[%d] = %d: expected 0..%d", name,
                       (int)p, (int)id, (int)nseq - 1);
        PK_GPU_REQUIRE(!seen[id], PK_GPU_EINVAL, "%s_ids[%d] = %d: sequence assigned twice", name,
                       (int)p, (int)id);
        PK_GPU_REQUIRE(rows[id] >= 0, PK_GPU_EINVAL, "rows[%d] = %lld: must be >= 0", (int)id,
                       (long long)rows[id]);
        seen[id] = 1;
        if (side == 0) {
          items[id].src_rank = k;
          items[id].src_row = at;
        } else {
          items[id].dst_rank = k;
          items[id].dst_row = at;
        }
        items[id].rows = rows[id];
        at += rows[id];
      }
    }
  }
out:
  free(seen);
  return rc;
}

/* Sort context for qsort (single-threaded per call; the array of indices
 * carries the items pointer). */
typedef struct {
  const pk_gpu_xitem_t *it;
  int64_t idx;
} xref_t;

static int cmp3(int64_t a, int64_t b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

static int by_dst(const void *pa, const void *pb) {
  const xref_t *a = pa, *b = pb;
  int c = cmp3(a->it->dst_rank, b->it->dst_rank);
  c = c ? c : cmp3(a->it->dst_row, b->it->dst_row);
  return c ? c : cmp3(a->idx, b->idx);
}

static int by_pair(const void *pa, const void *pb) {
  const xref_t *a = pa, *b = pb;
  int c = cmp3(a->it->src_rank, b->it->src_rank);
  c = c ? c : cmp3(a->it->dst_rank, b->it->dst_rank);
  c = c ? c : cmp3(a->it->src_row, b->it->src_row);
  c = c ? c : cmp3(a->it->dst_row, b->it->dst_row);
  return c ? c : cmp3(a->idx, b->idx);
}

/* Checks the items the same way on every rank. */
static int check_items(const pk_gpu_transport_t *tp, const pk_gpu_xitem_t *items, int64_t n,
                       int64_t row_bytes) {
  int rc = 0;
  xref_t *refs = NULL;
  PK_GPU_REQUIRE(tp != NULL && tp->size >= 1 && tp->rank >= 0 && tp->rank < tp->size, PK_GPU_EINVAL,
                 "transport: rank %d of size %d is not valid", tp ? (int)tp->rank : -1,
                 tp ? (int)tp->size : 0);
  PK_GPU_REQUIRE(row_bytes >= 1, PK_GPU_EINVAL, "row_bytes = %lld: must be >= 1",
                 (long long)row_bytes);
  PK_GPU_REQUIRE(n >= 0 && (items != NULL || n == 0), PK_GPU_EINVAL,
                 "nitems = %lld with items = %p", (long long)n, (const void *)items);
  refs = malloc(sizeof(xref_t) * ((size_t)n + 1));
  PK_GPU_REQUIRE(refs != NULL, PK_GPU_ENOMEM, "exchange of %lld items: out of memory",
                 (long long)n);
  int64_t m = 0;
  for (int64_t k = 0; k < n; k++) {
    const pk_gpu_xitem_t *x = &items[k];
    PK_GPU_REQUIRE(x->src_rank >= 0 && x->src_rank < tp->size && x->dst_rank >= 0 &&
                       x->dst_rank < tp->size,
                   PK_GPU_EINVAL, "items[%lld]: ranks %d -> %d outside 0..%d", (long long)k,
                   (int)x->src_rank, (int)x->dst_rank, (int)tp->size - 1);
    PK_GPU_REQUIRE(x->rows >= 0 && x->src_row >= 0 && x->dst_row >= 0, PK_GPU_EINVAL,
                   "items[%lld]: rows %lld, src_row %lld, dst_row %lld must be >= 0", (long long)k,
                   (long long)x->rows, (long long)x->src_row, (long long)x->dst_row);
    PK_GPU_REQUIRE(x->rows <= INT64_MAX / row_bytes - x->dst_row &&
                       x->rows <= INT64_MAX / row_bytes - x->src_row,
                   PK_GPU_EINVAL, "items[%lld]: %lld rows of %lld bytes overflow", (long long)k,
                   (long long)x->rows, (long long)row_bytes);
    if (x->rows > 0) {
      refs[m].it = x;
      refs[m].idx = k;
      m++;
    }
  }
  qsort(refs, (size_t)m, sizeof *refs, by_dst);
  for (int64_t k = 1; k < m; k++) {
    const pk_gpu_xitem_t *a = refs[k - 1].it, *b = refs[k].it;
    PK_GPU_REQUIRE(a->dst_rank != b->dst_rank || a->dst_row + a->rows <= b->dst_row, PK_GPU_EINVAL,
                   "items[%lld] and items[%lld] both write rank %d's rows from %lld",
                   (long long)refs[k - 1].idx, (long long)refs[k].idx, (int)b->dst_rank,
                   (long long)b->dst_row);
  }
out:
  free(refs);
  return rc;
}

int pk_gpu_exchange(const pk_gpu_transport_t *tp, const pk_gpu_xitem_t *items, int64_t nitems,
                    int64_t row_bytes, const void *src, void *dst, pk_gpu_xstats_t *stats) {
  int rc = 0;
  xref_t *refs = NULL;
  pk_gpu_xstats_t st;
  memset(&st, 0, sizeof st);
  PK_GPU_CHECK(check_items(tp, items, nitems, row_bytes));
  const int32_t me = tp->rank;
  const unsigned char *s = src;
  unsigned char *d = dst;
  refs = malloc(sizeof(xref_t) * ((size_t)nitems + 1));
  PK_GPU_REQUIRE(refs != NULL, PK_GPU_ENOMEM, "exchange of %lld items: out of memory",
                 (long long)nitems);
  int64_t m = 0;
  for (int64_t k = 0; k < nitems; k++) {
    const pk_gpu_xitem_t *x = &items[k];
    if (x->rows == 0 || (x->src_rank != me && x->dst_rank != me)) {
      continue; /* Zero-row items are skipped on both sides. */
    }
    PK_GPU_REQUIRE((x->src_rank != me || s != NULL) && (x->dst_rank != me || d != NULL),
                   PK_GPU_EINVAL, "items[%lld] moves rows of rank %d but src/dst is NULL",
                   (long long)k, (int)me);
    if (x->src_rank == me && x->dst_rank == me) {
      size_t bytes = (size_t)(x->rows * row_bytes);
      PK_GPU_CHECK(
          tp->copy(tp->impl, d + x->dst_row * row_bytes, s + x->src_row * row_bytes, bytes));
      st.copies++;
      st.bytes_copied += (int64_t)bytes;
      continue;
    }
    refs[m].it = x;
    refs[m].idx = k;
    m++;
  }
  qsort(refs, (size_t)m, sizeof *refs, by_pair);
  if (m > 0) {
    PK_GPU_CHECK(tp->group_start(tp->impl));
    int group_rc = 0;
    for (int64_t k = 0; k < m && group_rc == 0;) {
      /* Merge a run of items adjacent on both sides. */
      const pk_gpu_xitem_t *a = refs[k].it;
      int64_t rows = a->rows, e = k + 1;
      while (e < m && refs[e].it->src_rank == a->src_rank && refs[e].it->dst_rank == a->dst_rank &&
             refs[e].it->src_row == a->src_row + rows && refs[e].it->dst_row == a->dst_row + rows) {
        rows += refs[e].it->rows;
        e++;
      }
      size_t bytes = (size_t)(rows * row_bytes);
      if (a->src_rank == me) {
        group_rc = tp->send(tp->impl, s + a->src_row * row_bytes, bytes, a->dst_rank);
        st.sends++;
        st.bytes_sent += (int64_t)bytes;
      } else {
        group_rc = tp->recv(tp->impl, d + a->dst_row * row_bytes, bytes, a->src_rank);
        st.recvs++;
        st.bytes_recv += (int64_t)bytes;
      }
      k = e;
    }
    /* The group is always closed, even after a failed post. */
    int end_rc = tp->group_end(tp->impl);
    rc = group_rc != 0 ? group_rc : end_rc;
  }
out:
  if (stats != NULL) {
    *stats = st;
  }
  free(refs);
  return rc;
}

int pk_gpu_cp_gather_unpack(pk_gpu_ctx_t *ctx, const pk_gpu_transport_t *tp,
                            const pk_gpu_layout_t *layout, const int32_t *start,
                            const int32_t *length, const pk_gpu_op_t *ops, int32_t nops,
                            void *const *gather) {
  int rc = 0;
  pk_gpu_op_t g[PK_GPU_MAX_OPS];
  PK_GPU_REQUIRE(ctx != NULL && tp != NULL && layout != NULL, PK_GPU_EINVAL,
                 "ctx, transport and layout are required");
  PK_GPU_REQUIRE(tp->size == layout->host.cp && tp->rank >= 0 && tp->rank < tp->size, PK_GPU_EINVAL,
                 "transport of size %d (rank %d) for a layout with cp = %d", (int)tp->size,
                 (int)tp->rank, (int)layout->host.cp);
  PK_GPU_REQUIRE(nops >= 0 && nops <= PK_GPU_MAX_OPS && (ops != NULL || nops == 0), PK_GPU_EINVAL,
                 "nops = %d: expected 0..%d", (int)nops, PK_GPU_MAX_OPS);
  PK_GPU_REQUIRE(gather != NULL || nops == 0, PK_GPU_EINVAL,
                 "gather = NULL: one [T, W] buffer "
                 "per op is required");
  for (int32_t k = 0; k < nops; k++) {
    PK_GPU_REQUIRE(ops[k].field == PK_GPU_FIELD_COPY, PK_GPU_EINVAL,
                   "ops[%d].field = %d: gather-unpack only moves tensors (COPY)", (int)k,
                   (int)ops[k].field);
    PK_GPU_REQUIRE(ops[k].elem_size >= 1 && ops[k].elem_size <= 8 && ops[k].width >= 1 &&
                       ops[k].width <= INT64_MAX / 64,
                   PK_GPU_EINVAL, "ops[%d]: elem_size %d, width %lld", (int)k,
                   (int)ops[k].elem_size, (long long)ops[k].width);
    PK_GPU_REQUIRE(gather[k] != NULL || layout->host.total == 0, PK_GPU_EINVAL, "gather[%d] = NULL",
                   (int)k);
    g[k] = ops[k];
    g[k].src = gather[k];
  }
  for (int32_t k = 0; k < nops; k++) {
    size_t bytes = (size_t)(layout->host.local * ops[k].width * ops[k].elem_size);
    PK_GPU_CHECK(tp->all_gather(tp->impl, ops[k].src, gather[k], bytes));
  }
  PK_GPU_CHECK(pk_gpu_unpack(ctx, layout, start, length, -1, g, nops));
out:
  return rc;
}
