/* The NCCL transport: grouped ncclSend/ncclRecv, device-to-device copies for
 * self moves and ncclAllGather, all on one CUDA stream. Built only when NCCL
 * and CUDA are found; otherwise every entry point returns PK_GPU_ENOTSUP. */
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"

#ifdef PK_GPU_WITH_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

_Static_assert(sizeof(ncclUniqueId) == PK_GPU_NCCL_ID_BYTES, "ncclUniqueId size changed");

#define PK_NCCL_CHECK(expr)                                                                        \
  do {                                                                                             \
    ncclResult_t r_ = (expr);                                                                      \
    if (r_ != ncclSuccess) {                                                                       \
      return pk_gpu_fail(PK_GPU_EDEVICE, "%s:%d: %s: %s", __FILE__, __LINE__, #expr,               \
                         ncclGetErrorString(r_));                                                  \
    }                                                                                              \
  } while (0)

typedef struct nccl_tp {
  pk_gpu_transport_t tp; /* First member: the public pointer is the struct. */
  ncclComm_t comm;
  cudaStream_t stream;
  int device; /* The communicator's CUDA device. */
} nccl_tp_t;

static int nccl_group_start(void *impl) {
  PK_NCCL_CHECK(ncclGroupStart());
  return 0;
}

static int nccl_group_end(void *impl) {
  PK_NCCL_CHECK(ncclGroupEnd());
  return 0;
}

static int nccl_send(void *impl, const void *buf, size_t bytes, int32_t peer) {
  nccl_tp_t *t = impl;
  PK_NCCL_CHECK(ncclSend(buf, bytes, ncclUint8, peer, t->comm, t->stream));
  return 0;
}

static int nccl_recv(void *impl, void *buf, size_t bytes, int32_t peer) {
  nccl_tp_t *t = impl;
  PK_NCCL_CHECK(ncclRecv(buf, bytes, ncclUint8, peer, t->comm, t->stream));
  return 0;
}

static int nccl_copy(void *impl, void *dst, const void *src, size_t bytes) {
  nccl_tp_t *t = impl;
  /* This library's CUDA runtime has its own current device: select the
   * communicator's for the copy and restore the caller's. */
  int prev = -1;
  cudaError_t e = cudaGetDevice(&prev);
  if (e == cudaSuccess && prev != t->device) {
    e = cudaSetDevice(t->device);
  }
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, t->stream);
  }
  if (prev >= 0 && prev != t->device) {
    cudaSetDevice(prev);
  }
  if (e != cudaSuccess) {
    return pk_gpu_fail(PK_GPU_EDEVICE, "self move of %zu bytes: cudaMemcpyAsync: %s", bytes,
                       cudaGetErrorString(e));
  }
  return 0;
}

static int nccl_all_gather(void *impl, const void *send, void *recv, size_t bytes) {
  nccl_tp_t *t = impl;
  PK_NCCL_CHECK(ncclAllGather(send, recv, bytes, ncclUint8, t->comm, t->stream));
  return 0;
}

int pk_gpu_nccl_unique_id(void *id) {
  if (id == NULL) {
    return pk_gpu_fail(PK_GPU_EINVAL, "id = NULL: %d bytes are needed", PK_GPU_NCCL_ID_BYTES);
  }
  ncclUniqueId u;
  PK_NCCL_CHECK(ncclGetUniqueId(&u));
  memcpy(id, &u, sizeof u);
  return 0;
}

int pk_gpu_nccl_comm_init(int32_t nranks, const void *id, int32_t rank, int device, void **comm) {
  if (id == NULL || comm == NULL || nranks < 1 || rank < 0 || rank >= nranks) {
    return pk_gpu_fail(PK_GPU_EINVAL, "nccl comm: rank %d of %d (id and comm required)", (int)rank,
                       (int)nranks);
  }
  ncclUniqueId u;
  memcpy(&u, id, sizeof u);
  /* NCCL binds the communicator to the current device: select `device`
   * for the call and restore the caller's afterwards. */
  int prev = -1;
  cudaError_t e = cudaGetDevice(&prev);
  if (e == cudaSuccess && prev != device) {
    e = cudaSetDevice(device);
  }
  if (e != cudaSuccess) {
    return pk_gpu_fail(PK_GPU_EDEVICE, "nccl comm: selecting CUDA device %d: %s", device,
                       cudaGetErrorString(e));
  }
  ncclComm_t c = NULL;
  ncclResult_t r = ncclCommInitRank(&c, nranks, u, rank);
  if (prev >= 0 && prev != device) {
    cudaSetDevice(prev);
  }
  if (r != ncclSuccess) {
    return pk_gpu_fail(PK_GPU_EDEVICE, "ncclCommInitRank (rank %d of %d on device %d): %s",
                       (int)rank, (int)nranks, device, ncclGetErrorString(r));
  }
  *comm = c;
  return 0;
}

void pk_gpu_nccl_comm_destroy(void *comm) {
  if (comm != NULL) {
    ncclCommDestroy((ncclComm_t)comm);
  }
}

int pk_gpu_nccl_transport_create(void *comm, void *stream, pk_gpu_transport_t **out) {
  if (comm == NULL || out == NULL) {
    return pk_gpu_fail(PK_GPU_EINVAL, "nccl transport: comm and out are required");
  }
  *out = NULL;
  int size = 0, rank = 0, device = 0;
  PK_NCCL_CHECK(ncclCommCount((ncclComm_t)comm, &size));
  PK_NCCL_CHECK(ncclCommUserRank((ncclComm_t)comm, &rank));
  PK_NCCL_CHECK(ncclCommCuDevice((ncclComm_t)comm, &device));
  nccl_tp_t *t = calloc(1, sizeof *t);
  if (t == NULL) {
    return pk_gpu_fail(PK_GPU_ENOMEM, "nccl transport: out of memory");
  }
  t->comm = (ncclComm_t)comm;
  t->stream = (cudaStream_t)stream;
  t->device = device;
  t->tp.impl = t;
  t->tp.rank = rank;
  t->tp.size = size;
  t->tp.group_start = nccl_group_start;
  t->tp.group_end = nccl_group_end;
  t->tp.send = nccl_send;
  t->tp.recv = nccl_recv;
  t->tp.copy = nccl_copy;
  t->tp.all_gather = nccl_all_gather;
  *out = &t->tp;
  return 0;
}

void pk_gpu_nccl_transport_destroy(pk_gpu_transport_t *tp) {
  free(tp); /* tp is the first member of its nccl_tp_t. */
}

#else

static int no_nccl(void) {
  return pk_gpu_fail(PK_GPU_ENOTSUP, "libpackd_gpu was built without NCCL (configure gpu/ with "
                                     "CUDA and NCCL found; see gpu/README.md)");
}

int pk_gpu_nccl_unique_id(void *id) {
  return no_nccl();
}

int pk_gpu_nccl_comm_init(int32_t nranks, const void *id, int32_t rank, int device, void **comm) {
  return no_nccl();
}

void pk_gpu_nccl_comm_destroy(void *comm) {}

int pk_gpu_nccl_transport_create(void *comm, void *stream, pk_gpu_transport_t **out) {
  if (out != NULL) {
    *out = NULL;
  }
  return no_nccl();
}

void pk_gpu_nccl_transport_destroy(pk_gpu_transport_t *tp) {}

#endif
