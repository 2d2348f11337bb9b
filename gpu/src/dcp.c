/* Dynamic context parallelism: the per-group pieces a GPU needs when every
 * packed micro-batch (slot) splits the DP x CP pool into groups of
 * different sizes c. A group's packed stream is an ordinary layout with
 * cp = c (pk_gpu_layout_create), so shards, unpack and the CP all-gather
 * reuse the fixed-CP machinery; this file adds the group's slot alignment,
 * its padding mask, and the routing of sequences to every GPU of their
 * group. */
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"

int pk_gpu_dcp_align(int32_t group_size, int32_t tp, int32_t cp_algo, int32_t *align) {
  int rc = 0;
  PK_GPU_REQUIRE(align != NULL, PK_GPU_EINVAL, "align = NULL: a place for the result is required");
  PK_GPU_REQUIRE(group_size >= 1 && group_size <= PK_GPU_MAX_CP, PK_GPU_EINVAL,
                 "group_size = %d: expected 1..%d", (int)group_size, PK_GPU_MAX_CP);
  PK_GPU_REQUIRE(tp >= 1 && tp <= PK_GPU_MAX_CP, PK_GPU_EINVAL, "tp = %d: expected 1..%d", (int)tp,
                 PK_GPU_MAX_CP);
  PK_GPU_REQUIRE(cp_algo == PK_GPU_CP_ZIGZAG || cp_algo == PK_GPU_CP_ULYSSES, PK_GPU_EINVAL,
                 "cp_algo = %d: expected 0 (zigzag) or 1 (contiguous)", (int)cp_algo);
  /* Zigzag cuts every slot into 2c chunks; a group of one GPU cuts nothing,
   * so only tensor parallelism's sequence split remains. */
  *align = tp * group_size * (cp_algo == PK_GPU_CP_ZIGZAG && group_size > 1 ? 2 : 1);
out:
  return rc;
}

int pk_gpu_dcp_cu(int32_t n, const int32_t *lengths, int32_t group_size, int32_t tp,
                  int32_t cp_algo, int32_t min_local_rows, int32_t *cu_real, int32_t *cu_pad) {
  int rc = 0;
  int32_t align = 0;
  PK_GPU_CHECK(pk_gpu_dcp_align(group_size, tp, cp_algo, &align));
  PK_GPU_REQUIRE(min_local_rows >= 0, PK_GPU_EINVAL, "min_local_rows = %d: must be >= 0",
                 (int)min_local_rows);
  PK_GPU_CHECK(pk_gpu_cu_from_lengths(n, lengths, align, cu_real, cu_pad));
  int64_t want = (int64_t)group_size * min_local_rows;
  if (want > cu_pad[n]) {
    /* The last slot grows so that every GPU of the group holds at least
     * min_local_rows rows; a stream without sequences cannot grow. */
    PK_GPU_REQUIRE(n > 0, PK_GPU_EINVAL,
                   "min_local_rows = %d with no sequences: there is no slot to extend",
                   (int)min_local_rows);
    PK_GPU_REQUIRE(want <= INT32_MAX, PK_GPU_EINVAL,
                   "min_local_rows = %d: %lld rows overflow int32 cu_seqlens", (int)min_local_rows,
                   (long long)want);
    /* cu_pad[n-1] is a multiple of 2c, so the grown slot is one exactly
     * when c * min_local_rows is, i.e. min_local_rows is even. */
    PK_GPU_REQUIRE(cp_algo != PK_GPU_CP_ZIGZAG || group_size == 1 || min_local_rows % 2 == 0,
                   PK_GPU_EINVAL,
                   "min_local_rows = %d: zigzag groups of %d need an even value (the grown last "
                   "slot must stay a multiple of 2*c = %d)",
                   (int)min_local_rows, (int)group_size, 2 * (int)group_size);
    cu_pad[n] = (int32_t)want;
  }
out:
  return rc;
}

int pk_gpu_dcp_padding_mask(int32_t n, const int32_t *lengths, const int32_t *cu_pad,
                            int32_t group_size, int32_t cp_algo, int32_t rank, uint8_t *out) {
  int rc = 0;
  int64_t *map = NULL;
  int32_t c = group_size;
  int64_t local = 0;
  PK_GPU_REQUIRE(n >= 0 && (n == 0 || lengths != NULL) && cu_pad != NULL, PK_GPU_EINVAL,
                 "lengths and cu_seqlens_padded are required (n = %d)", (int)n);
  PK_GPU_REQUIRE(c >= 1, PK_GPU_EINVAL, "group_size = %d: must be >= 1", (int)c);
  PK_GPU_REQUIRE(cu_pad[n] >= 0, PK_GPU_EINVAL, "cu_seqlens_padded[%d] = %d: must be >= 0", (int)n,
                 (int)cu_pad[n]);
  /* pk_gpu_cp_index_map validates the rest of cu_pad, the algorithm and the
   * rank. */
  local = cu_pad[n] / c;
  map = malloc(sizeof(int64_t) * ((size_t)local + 1));
  PK_GPU_REQUIRE(map != NULL, PK_GPU_ENOMEM, "padding mask of %lld rows: out of memory",
                 (long long)local);
  PK_GPU_CHECK(pk_gpu_cp_index_map(n, cu_pad, c, cp_algo, rank, map));
  PK_GPU_REQUIRE(out != NULL || local == 0, PK_GPU_EINVAL, "out = NULL: %lld entries needed",
                 (long long)local);
  for (int32_t i = 0; i < n; i++) {
    PK_GPU_REQUIRE(lengths[i] >= 0 && lengths[i] <= cu_pad[i + 1] - cu_pad[i], PK_GPU_EINVAL,
                   "lengths[%d] = %d: must be 0..%d (its slot)", (int)i, (int)lengths[i],
                   (int)(cu_pad[i + 1] - cu_pad[i]));
  }
  /* A row is padding unless it lies in the first lengths[i] tokens of its
   * slot i. Global indices of the local rows never decrease (a contiguous
   * shard is one run; zigzag takes two chunks of each slot in slot order),
   * so one forward walk finds every slot. */
  int32_t i = 0;
  for (int64_t j = 0; j < local; j++) {
    int64_t g = map[j];
    while (i < n && g >= cu_pad[i + 1]) {
      i++;
    }
    out[j] = (uint8_t) !(i < n && g - cu_pad[i] < lengths[i]);
  }
out:
  free(map);
  return rc;
}

int pk_gpu_xitems_route(int32_t nranks, int32_t nseq, const int64_t *rows, const int32_t *src_off,
                        const int32_t *src_ids, const int32_t *dst_off, const int32_t *dst_ids,
                        pk_gpu_xitem_t *items) {
  int rc = 0;
  int32_t *src_rank = NULL;
  int64_t *src_row = NULL;
  int32_t *last_dst = NULL;
  PK_GPU_REQUIRE(nranks >= 1, PK_GPU_EINVAL, "nranks = %d: must be >= 1", (int)nranks);
  PK_GPU_REQUIRE(nseq >= 0, PK_GPU_EINVAL, "nseq = %d: must be >= 0", (int)nseq);
  PK_GPU_REQUIRE(src_off != NULL && dst_off != NULL, PK_GPU_EINVAL,
                 "src_off and dst_off are required");
  PK_GPU_REQUIRE(src_off[0] == 0 && src_off[nranks] == nseq, PK_GPU_EINVAL,
                 "src_off: must start at 0 and end at nseq = %d (got %d .. %d)", (int)nseq,
                 (int)src_off[0], (int)src_off[nranks]);
  PK_GPU_REQUIRE(dst_off[0] == 0 && dst_off[nranks] >= 0, PK_GPU_EINVAL,
                 "dst_off: must start at 0 (got %d .. %d)", (int)dst_off[0], (int)dst_off[nranks]);
  int32_t nitems = dst_off[nranks];
  PK_GPU_REQUIRE(nseq == 0 || (rows != NULL && src_ids != NULL), PK_GPU_EINVAL,
                 "rows and src_ids are required");
  PK_GPU_REQUIRE(nitems == 0 || (dst_ids != NULL && items != NULL), PK_GPU_EINVAL,
                 "dst_ids and items are required (%d destinations)", (int)nitems);
  src_rank = malloc(sizeof(int32_t) * ((size_t)nseq + 1));
  src_row = malloc(sizeof(int64_t) * ((size_t)nseq + 1));
  last_dst = malloc(sizeof(int32_t) * ((size_t)nseq + 1));
  PK_GPU_REQUIRE(src_rank != NULL && src_row != NULL && last_dst != NULL, PK_GPU_ENOMEM,
                 "routing of %d sequences: out of memory", (int)nseq);
  for (int32_t s = 0; s < nseq; s++) {
    src_rank[s] = -1;
    last_dst[s] = -1;
  }
  /* Where every sequence starts: exactly one rank holds it. */
  for (int32_t k = 0; k < nranks; k++) {
    PK_GPU_REQUIRE(src_off[k + 1] >= src_off[k], PK_GPU_EINVAL,
                   "src_off[%d] = %d < src_off[%d] = %d: must not decrease", (int)k + 1,
                   (int)src_off[k + 1], (int)k, (int)src_off[k]);
    int64_t at = 0;
    for (int32_t p = src_off[k]; p < src_off[k + 1]; p++) {
      int32_t id = src_ids[p];
      PK_GPU_REQUIRE(id >= 0 && id < nseq, PK_GPU_EINVAL, "src_ids[%d] = %d: expected 0..%d",
                     (int)p, (int)id, (int)nseq - 1);
      PK_GPU_REQUIRE(src_rank[id] < 0, PK_GPU_EINVAL, "src_ids[%d] = %d: sequence held twice",
                     (int)p, (int)id);
      PK_GPU_REQUIRE(rows[id] >= 0, PK_GPU_EINVAL, "rows[%d] = %lld: must be >= 0", (int)id,
                     (long long)rows[id]);
      src_rank[id] = k;
      src_row[id] = at;
      at += rows[id];
    }
  }
  /* Where it goes: any number of ranks (every GPU of its group), at most
   * once per rank, and at least one rank so that no sequence is dropped. */
  for (int32_t k = 0; k < nranks; k++) {
    PK_GPU_REQUIRE(dst_off[k + 1] >= dst_off[k], PK_GPU_EINVAL,
                   "dst_off[%d] = %d < dst_off[%d] = %d: must not decrease", (int)k + 1,
                   (int)dst_off[k + 1], (int)k, (int)dst_off[k]);
    int64_t at = 0;
    for (int32_t p = dst_off[k]; p < dst_off[k + 1]; p++) {
      int32_t id = dst_ids[p];
      PK_GPU_REQUIRE(id >= 0 && id < nseq, PK_GPU_EINVAL, "dst_ids[%d] = %d: expected 0..%d",
                     (int)p, (int)id, (int)nseq - 1);
      PK_GPU_REQUIRE(last_dst[id] != k, PK_GPU_EINVAL,
                     "dst_ids[%d] = %d: sequence listed twice for rank %d", (int)p, (int)id,
                     (int)k);
      last_dst[id] = k;
      items[p].src_rank = src_rank[id];
      items[p].src_row = src_row[id];
      items[p].dst_rank = k;
      items[p].dst_row = at;
      items[p].rows = rows[id];
      at += rows[id];
    }
  }
  for (int32_t s = 0; s < nseq; s++) {
    PK_GPU_REQUIRE(last_dst[s] >= 0, PK_GPU_EINVAL,
                   "sequence %d: no destination rank (it would be dropped)", (int)s);
  }
out:
  free(src_rank);
  free(src_row);
  free(last_dst);
  return rc;
}
