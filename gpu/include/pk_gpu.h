/* The packd GPU agent: applies a micro-batch layout to a worker's tensors.
 *
 * Two backends sit behind one function table and give the same bytes:
 * PK_GPU_BACKEND_HOST (plain C on host memory; the oracle) and
 * PK_GPU_BACKEND_CUDA (kernels launched on a caller-given stream, all
 * pointers are device pointers). Every operation of one call runs in one
 * launch on the CUDA backend, without host synchronisation, so a sequence of
 * pack/unpack calls can be captured in a CUDA graph once its layouts exist.
 *
 * Layouts (docs/design.md, "Layouts"):
 * a padded batch [B, S, W] holds in row b the valid tokens
 * [start[b], start[b] + length[b]). A micro-batch takes the rows seqs[0..n)
 * in that order; sequence i owns the slot [cu_pad[i], cu_pad[i+1]) of the
 * packed stream of T = cu_pad[n] tokens: valid tokens first, then the fill
 * value. Context parallelism (CP > 1) gives rank r only T/CP of them:
 *   zigzag:  chunks r and 2*CP-1-r of every slot (chunk c_i = plen_i/(2*CP)),
 *            at local offset cu_pad[i]/CP (TransformerEngine's
 *            thd_get_partitioned_indices order); every slot length must be a
 *            multiple of 2*CP;
 *   ulysses: the contiguous shard [r*T/CP, (r+1)*T/CP); T must be a multiple
 *            of CP.
 *
 * Ownership: the caller owns every buffer passed in. Contexts, layouts and
 * fake hubs are allocated here and freed by their *_destroy function.
 * Errors: functions return 0 or a negative pk_gpu_error; the thread's last
 * failure is described (field and value named) by pk_gpu_last_error(). */
#ifndef PK_GPU_H
#define PK_GPU_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define PK_GPU_API __attribute__((visibility("default")))
#else
#define PK_GPU_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The shared codes have the values of server/planner/pk_error.h. */
enum pk_gpu_error {
  PK_GPU_OK = 0,
  PK_GPU_EINVAL = -1,    /* A bad argument or bad data (a span, a mask row). */
  PK_GPU_EPRECOND = -2,  /* Valid arguments that do not fit together. */
  PK_GPU_ENOMEM = -3,    /* An allocation failed. */
  PK_GPU_EINTERNAL = -4, /* A bug, or peers that disagree in an exchange. */
  PK_GPU_ENOTSUP = -7,   /* Not built with CUDA or NCCL, or no CUDA device. */
  PK_GPU_EDEVICE = -8,   /* The CUDA runtime or NCCL reported an error. */
  PK_GPU_ETIMEOUT = -9,  /* A fake-transport peer never posted its side. */
};

/* A static name for a code, e.g. "invalid argument". Never NULL. */
PK_GPU_API const char *pk_gpu_strerror(int code);
/* The message of the last failure on the calling thread (thread-local
 * storage owned by the library, valid until the thread's next failing call).
 * "" when nothing failed yet. Never NULL. */
PK_GPU_API const char *pk_gpu_last_error(void);

/* Bit 0: the CUDA backend is compiled in; bit 1: NCCL is compiled in. */
#define PK_GPU_HAVE_CUDA 1
#define PK_GPU_HAVE_NCCL 2
PK_GPU_API int pk_gpu_build_flags(void);
/* "0.1.0" or similar; static. */
PK_GPU_API const char *pk_gpu_version(void);

typedef enum { PK_GPU_BACKEND_HOST = 0, PK_GPU_BACKEND_CUDA = 1 } pk_gpu_backend_t;
typedef enum { PK_GPU_CP_ZIGZAG = 0, PK_GPU_CP_ULYSSES = 1 } pk_gpu_cp_algo_t;

/* 0 when the backend can run here; PK_GPU_ENOTSUP with a message otherwise
 * (CUDA not compiled in, or no device visible). */
PK_GPU_API int pk_gpu_backend_available(pk_gpu_backend_t backend);

/* ---- Context --------------------------------------------------------- */

typedef struct pk_gpu_ctx pk_gpu_ctx_t;

/* Creates a context for one backend. CUDA: selects `device` (cudaSetDevice)
 * and allocates a small status word there; the stream is the legacy default
 * stream until pk_gpu_ctx_set_stream. Host: device is ignored. The caller
 * frees the context with pk_gpu_ctx_destroy. */
PK_GPU_API int pk_gpu_ctx_create(pk_gpu_backend_t backend, int device, pk_gpu_ctx_t **out);
PK_GPU_API void pk_gpu_ctx_destroy(pk_gpu_ctx_t *ctx);
PK_GPU_API pk_gpu_backend_t pk_gpu_ctx_backend(const pk_gpu_ctx_t *ctx);
/* CUDA: a cudaStream_t for the following calls (NULL: default stream).
 * Host: ignored. */
PK_GPU_API int pk_gpu_ctx_set_stream(pk_gpu_ctx_t *ctx, void *stream);
/* Bad data found by a kernel (a span outside its slot, a mask row with a
 * hole) cannot be returned by an asynchronous call: the kernel writes safe
 * values (the row counts as empty), and records the first such error in the
 * context. This waits for the stream, returns that error (PK_GPU_EINVAL with
 * a message naming the row and value) and clears it; 0 when there was none.
 * The host backend also returns such errors from the call itself. */
PK_GPU_API int pk_gpu_ctx_check(pk_gpu_ctx_t *ctx);
/* Waits for the context's stream (host: returns 0 at once). */
PK_GPU_API int pk_gpu_ctx_sync(pk_gpu_ctx_t *ctx);

/* Memory of the context's backend, for tests, benchmarks and C callers
 * without an allocator of their own (CUDA: cudaMalloc on the context's
 * device; host: malloc). The caller frees it with pk_gpu_mem_free. */
PK_GPU_API int pk_gpu_mem_alloc(pk_gpu_ctx_t *ctx, size_t bytes, void **out);
PK_GPU_API void pk_gpu_mem_free(pk_gpu_ctx_t *ctx, void *p);
/* Host memory -> backend memory and back; both wait for the stream. */
PK_GPU_API int pk_gpu_mem_upload(pk_gpu_ctx_t *ctx, void *dst, const void *src, size_t bytes);
PK_GPU_API int pk_gpu_mem_download(pk_gpu_ctx_t *ctx, void *dst, const void *src, size_t bytes);
/* Sets bytes of backend memory to `byte` (in stream order, no wait). */
PK_GPU_API int pk_gpu_mem_set(pk_gpu_ctx_t *ctx, void *dst, int byte, size_t bytes);

/* ---- Layout of one micro-batch --------------------------------------- */

typedef struct pk_gpu_layout_desc {
  int32_t batch;         /* B: rows of the padded tensors, >= 0. */
  int32_t seqlen;        /* S: columns of the padded tensors, >= 0. */
  int32_t nseqs;         /* n: sequences of the micro-batch, >= 0. */
  const int32_t *seqs;   /* n distinct rows in [0, B), in packed order. Host memory. */
  const int32_t *cu_pad; /* n+1 slot offsets: 0, non-decreasing. Host memory. */
  int32_t cp;            /* Context-parallel size, 1..1024; 0 means 1. */
  int32_t cp_algo;       /* pk_gpu_cp_algo_t. */
} pk_gpu_layout_desc_t;

typedef struct pk_gpu_layout pk_gpu_layout_t;

/* Validates a layout and uploads its metadata once (CUDA: a stream-ordered
 * allocation filled by small kernels that carry the bytes as parameters: no
 * synchronisation, no pinned memory, capturable in a graph). The
 * caller frees it with pk_gpu_layout_destroy (CUDA: freed in stream order on
 * the context's current stream). The layout belongs to `ctx` and must not
 * outlive it. */
PK_GPU_API int pk_gpu_layout_create(pk_gpu_ctx_t *ctx, const pk_gpu_layout_desc_t *desc,
                                    pk_gpu_layout_t **out);
PK_GPU_API void pk_gpu_layout_destroy(pk_gpu_layout_t *layout);
/* T, the packed tokens of all CP ranks together. */
PK_GPU_API int64_t pk_gpu_layout_tokens(const pk_gpu_layout_t *layout);
/* T / CP, the packed tokens of one CP rank. */
PK_GPU_API int64_t pk_gpu_layout_local_tokens(const pk_gpu_layout_t *layout);

/* ---- Operations -------------------------------------------------------- */

typedef enum {
  /* pack: x[row, start+g, :] for valid offsets g < len, fill elsewhere.
   * unpack: the only field allowed. */
  PK_GPU_FIELD_COPY = 0,
  /* pack: next-token labels built per sequence: x[row, start+g+1, :] when
   * g+1 < len, fill (e.g. -100) elsewhere. Never crosses sequences. */
  PK_GPU_FIELD_LABELS = 1,
  /* pack, no src, width 1, elem 4 or 8: g, the offset in the padded slot
   * (TransformerEngine / Megatron RoPE convention). */
  PK_GPU_FIELD_POS_OFFSET = 2,
  /* pack, no src, width 1, elem 4 or 8: g for valid tokens and g - len for
   * the slot's padding (HF: every sequence and the padding run start at 0). */
  PK_GPU_FIELD_POS_RESTART = 3,
  /* pack, no src: value_bits on valid tokens, fill_bits on padding. */
  PK_GPU_FIELD_VALID = 4,
} pk_gpu_field_t;

/* One tensor of a pack or unpack call. Element bits are little-endian: the
 * low elem_size bytes of fill_bits / value_bits are written as is. */
typedef struct pk_gpu_op {
  int32_t field;       /* pk_gpu_field_t. */
  int32_t elem_size;   /* 1, 2, 4 or 8 bytes. */
  int64_t width;       /* W >= 1 elements per token. */
  const void *src;     /* pack: [B, S, W]; unpack: [T/CP, W] local or [T, W] gathered. */
  void *dst;           /* pack: [T/CP, W]; unpack: [B, S, W] (rows not in seqs untouched). */
  uint64_t fill_bits;  /* Element written in padding (pack) or non-valid slots (unpack). */
  uint64_t value_bits; /* PK_GPU_FIELD_VALID: element written on valid tokens. */
} pk_gpu_op_t;

/* Most ops in one call. */
#define PK_GPU_MAX_OPS 64

/* Per-row spans of an attention mask [B, S] whose elements are elem_size
 * bytes (1: bool/int8, 2, 4: int32, 8: int64; any non-zero bit is valid).
 * Writes start[b] (first valid column, 0 for an empty row) and length[b]
 * (valid count). A row whose valid columns are not one contiguous run gets
 * length -1 and is reported as bad data. start/length have B int32 entries in
 * the backend's memory. */
PK_GPU_API int pk_gpu_spans(pk_gpu_ctx_t *ctx, const void *mask, int32_t elem_size, int32_t batch,
                            int32_t seqlen, int32_t *start, int32_t *length);

/* Packs up to PK_GPU_MAX_OPS tensors of the micro-batch into this CP rank's
 * part (cp_rank in [0, CP)) in one launch. start may be NULL (every row starts
 * at column 0, right padding); length is required. start/length have B int32
 * entries in the backend's memory. A span that does not fit its slot
 * (len < 0, len > plen_i, start < 0, start+len > S) makes that sequence empty
 * and is reported as bad data. */
PK_GPU_API int pk_gpu_pack(pk_gpu_ctx_t *ctx, const pk_gpu_layout_t *layout, const int32_t *start,
                           const int32_t *length, int32_t cp_rank, const pk_gpu_op_t *ops,
                           int32_t nops);

/* Unpacks up to PK_GPU_MAX_OPS tensors (field COPY) back to [B, S, W]: the rows
 * seqs get valid tokens from src and fill_bits (normally 0) in every other
 * column. cp_rank in [0, CP): src is that rank's [T/CP, W] part and tokens
 * held by other ranks are filled too; cp_rank = -1: src is every rank's part
 * gathered in rank order, [T, W]. */
PK_GPU_API int pk_gpu_unpack(pk_gpu_ctx_t *ctx, const pk_gpu_layout_t *layout, const int32_t *start,
                             const int32_t *length, int32_t cp_rank, const pk_gpu_op_t *ops,
                             int32_t nops);

/* ---- Host helpers (pure functions on host memory) ---------------------- */

/* cu_real[k] = sum of lengths before k, cu_pad[k] = sum of the lengths
 * rounded up to `align` (>= 1). Both n+1 entries, caller-owned. */
PK_GPU_API int pk_gpu_cu_from_lengths(int32_t n, const int32_t *lengths, int32_t align,
                                      int32_t *cu_real, int32_t *cu_pad);
/* The global packed index of every local token of `rank` (T/CP entries,
 * int64, caller-owned); TransformerEngine's thd_get_partitioned_indices for
 * zigzag. */
PK_GPU_API int pk_gpu_cp_index_map(int32_t n, const int32_t *cu_pad, int32_t cp, int32_t cp_algo,
                                   int32_t rank, int64_t *out);
/* The real (valid) cu_seqlens of `rank` (n+1 entries): per sequence, the
 * valid tokens that rank holds. For zigzag they are a prefix of its local
 * slot; for ulysses they are counted in its shard. */
PK_GPU_API int pk_gpu_cp_real_cu(int32_t n, const int32_t *lengths, const int32_t *cu_pad,
                                 int32_t cp, int32_t cp_algo, int32_t rank, int32_t *out);

/* ---- Dynamic context parallelism ----------------------------------------
 *
 * Each packed micro-batch (slot) splits the DP x CP pool into groups; a
 * group of c GPUs runs its sequences as one packed stream with CP size c.
 * That stream is an ordinary layout (pk_gpu_layout_desc_t with cp = c and
 * the group's cu_seqlens_padded), so pack gives a GPU its shard (cp_rank =
 * its index in the group; c = 1 is the whole stream), unpack restores the
 * rows of the padded batch (its sample order) and pk_gpu_cp_gather_unpack
 * gathers a group's shards. cp_algo PK_GPU_CP_ULYSSES is the contiguous
 * shard [r*T/c, (r+1)*T/c). */

/* The slot alignment of a group of group_size GPUs with tensor parallelism
 * tp: 2*c*tp for zigzag with c > 1, c*tp otherwise (contiguous, or c = 1),
 * the rule Megatron-Core and verl use for dynamic-CP micro-batches. */
PK_GPU_API int pk_gpu_dcp_align(int32_t group_size, int32_t tp, int32_t cp_algo, int32_t *align);
/* cu_real / cu_pad (n+1 entries) of a group's stream: every length rounded
 * up to pk_gpu_dcp_align; when min_local_rows > 0 and the stream is shorter
 * than group_size * min_local_rows, the last slot grows to that total
 * (verl's min_local_rows). Zigzag groups of c > 1 need an even
 * min_local_rows, so that the grown slot stays a multiple of 2*c. */
PK_GPU_API int pk_gpu_dcp_cu(int32_t n, const int32_t *lengths, int32_t group_size, int32_t tp,
                             int32_t cp_algo, int32_t min_local_rows, int32_t *cu_real,
                             int32_t *cu_pad);
/* The padding mask of GPU `rank` of the group (cu_pad[n]/group_size entries,
 * caller-owned): 1 where the local row is slot padding, 0 where it holds a
 * real token (verl's _dcp_padding_mask, True = padding). The CUDA backend
 * writes the same mask with pk_gpu_pack and field PK_GPU_FIELD_VALID
 * (value_bits 0, fill_bits 1). */
PK_GPU_API int pk_gpu_dcp_padding_mask(int32_t n, const int32_t *lengths, const int32_t *cu_pad,
                                       int32_t group_size, int32_t cp_algo, int32_t rank,
                                       uint8_t *out);

/* ---- Transport between ranks (NCCL, a host fake, or the caller's own) -- */

/* A transport replays NCCL's call sequence. Every function returns 0 or a
 * negative pk_gpu_error. send/recv between group_start and group_end are
 * matched per peer in order; copy is a local (self) move; all_gather writes
 * every rank's `bytes` in rank order into recv (size * bytes). */
typedef struct pk_gpu_transport {
  void *impl;
  int32_t rank;
  int32_t size;
  int (*group_start)(void *impl);
  int (*group_end)(void *impl);
  int (*send)(void *impl, const void *buf, size_t bytes, int32_t peer);
  int (*recv)(void *impl, void *buf, size_t bytes, int32_t peer);
  int (*copy)(void *impl, void *dst, const void *src, size_t bytes);
  int (*all_gather)(void *impl, const void *send, void *recv, size_t bytes);
} pk_gpu_transport_t;

/* One block of rows to move: `rows` rows of row_bytes from src_rank's buffer
 * at row src_row to dst_rank's buffer at row dst_row. */
typedef struct pk_gpu_xitem {
  int32_t src_rank;
  int32_t dst_rank;
  int64_t src_row;
  int64_t dst_row;
  int64_t rows;
} pk_gpu_xitem_t;

/* Builds the items that take every sequence from a source assignment to a
 * target assignment. Assignments are per-rank ordered lists in CSR form:
 * the sequences of rank k are ids[off[k] .. off[k+1]); each rank's buffer
 * holds its sequences back to back, rows[s] rows each. Every sequence must
 * appear exactly once in each assignment. items: nseq entries, caller-owned;
 * item s moves sequence s. */
PK_GPU_API int pk_gpu_xitems_from_assignments(int32_t nranks, int32_t nseq, const int64_t *rows,
                                              const int32_t *src_off, const int32_t *src_ids,
                                              const int32_t *dst_off, const int32_t *dst_ids,
                                              pk_gpu_xitem_t *items);

/* Items that route every sequence from where it starts to every rank that
 * needs it (Megatron-Core's reroute to dynamic-CP groups: a sequence goes to
 * each GPU of its group). src: each sequence exactly once; dst: each
 * sequence on one or more ranks, at most once per rank. Each rank's buffer
 * holds its sequences back to back, rows[s] rows each. items: dst_off[nranks]
 * entries, caller-owned; item p fills destination position p. Run them with
 * pk_gpu_exchange. */
PK_GPU_API int pk_gpu_xitems_route(int32_t nranks, int32_t nseq, const int64_t *rows,
                                   const int32_t *src_off, const int32_t *src_ids,
                                   const int32_t *dst_off, const int32_t *dst_ids,
                                   pk_gpu_xitem_t *items);

/* Counts of what one rank posted in an exchange. */
typedef struct pk_gpu_xstats {
  int64_t sends, recvs, copies;
  int64_t bytes_sent, bytes_recv, bytes_copied;
} pk_gpu_xstats_t;

/* Runs this rank's part (tp->rank) of an exchange. Every rank calls it with
 * the same items. Moves to self are copies; other moves are grouped
 * send/recv per peer in a canonical order, adjacent items merged, zero-row
 * items skipped on both sides. Items are validated identically on every
 * rank (ranks in range, no two items writing the same destination row), so
 * bad items fail on all ranks before anything is posted. stats may be NULL. */
PK_GPU_API int pk_gpu_exchange(const pk_gpu_transport_t *tp, const pk_gpu_xitem_t *items,
                               int64_t nitems, int64_t row_bytes, const void *src, void *dst,
                               pk_gpu_xstats_t *stats);

/* CP all-gather + unpack: for each op (field COPY), all-gathers src (this
 * rank's [T/CP, W] part, tp->rank = the CP rank, tp->size = CP) into
 * gather[k] ([T, W], caller-owned, same memory as src), then unpacks the
 * gathered stream into dst. The transport must run on the context's stream. */
PK_GPU_API int pk_gpu_cp_gather_unpack(pk_gpu_ctx_t *ctx, const pk_gpu_transport_t *tp,
                                       const pk_gpu_layout_t *layout, const int32_t *start,
                                       const int32_t *length, const pk_gpu_op_t *ops, int32_t nops,
                                       void *const *gather);

/* ---- Host fake transport: ranks are threads of one process ------------- */

typedef struct pk_gpu_fake_hub pk_gpu_fake_hub_t;

/* A hub for `nranks` threads. A posted operation that finds no partner
 * within timeout_ms fails with PK_GPU_ETIMEOUT (0: 10000 ms). Freed with
 * pk_gpu_fake_hub_destroy once every thread is done. */
PK_GPU_API int pk_gpu_fake_hub_create(int32_t nranks, int32_t timeout_ms, pk_gpu_fake_hub_t **out);
PK_GPU_API void pk_gpu_fake_hub_destroy(pk_gpu_fake_hub_t *hub);
/* The transport of one rank; owned by the hub. */
PK_GPU_API const pk_gpu_transport_t *pk_gpu_fake_transport(pk_gpu_fake_hub_t *hub, int32_t rank);

typedef struct pk_gpu_fake_stats {
  int64_t groups, sends, recvs, copies, gathers;
  int64_t zero_byte_p2p; /* send/recv of 0 bytes (the exchange never posts one). */
  int64_t self_p2p;      /* send/recv to the own rank. */
  int64_t bytes_sent, bytes_recv;
} pk_gpu_fake_stats_t;
/* What `rank` posted since the hub was created. */
PK_GPU_API int pk_gpu_fake_stats(pk_gpu_fake_hub_t *hub, int32_t rank, pk_gpu_fake_stats_t *out);

/* ---- NCCL transport (PK_GPU_ENOTSUP when not built with NCCL) ---------- */

#define PK_GPU_NCCL_ID_BYTES 128
/* ncclGetUniqueId into id (PK_GPU_NCCL_ID_BYTES bytes). */
PK_GPU_API int pk_gpu_nccl_unique_id(void *id);
/* ncclCommInitRank on CUDA device `device`; *comm is an ncclComm_t that the
 * caller frees with pk_gpu_nccl_comm_destroy. */
PK_GPU_API int pk_gpu_nccl_comm_init(int32_t nranks, const void *id, int32_t rank, int device,
                                     void **comm);
PK_GPU_API void pk_gpu_nccl_comm_destroy(void *comm);
/* A transport over an existing ncclComm_t running on `stream`
 * (cudaStream_t). The caller keeps the communicator and frees the transport
 * with pk_gpu_nccl_transport_destroy. */
PK_GPU_API int pk_gpu_nccl_transport_create(void *comm, void *stream, pk_gpu_transport_t **out);
PK_GPU_API void pk_gpu_nccl_transport_destroy(pk_gpu_transport_t *tp);

#ifdef __cplusplus
}
#endif

#endif
