/* Error codes, messages and the build description of libpackd_gpu. */
#include <stdarg.h>
#include <stdio.h>

#include "gpu_internal.h"

#ifndef PK_GPU_VERSION_STRING
#define PK_GPU_VERSION_STRING "0.1.0"
#endif

/* The last failure message of each thread. */
static _Thread_local char pk_gpu_errmsg[512];

const char *pk_gpu_strerror(int code) {
  switch (code) {
  case PK_GPU_OK:
    return "ok";
  case PK_GPU_EINVAL:
    return "invalid argument";
  case PK_GPU_EPRECOND:
    return "failed precondition";
  case PK_GPU_ENOMEM:
    return "out of memory";
  case PK_GPU_EINTERNAL:
    return "internal error";
  case PK_GPU_ENOTSUP:
    return "not supported";
  case PK_GPU_EDEVICE:
    return "device error";
  case PK_GPU_ETIMEOUT:
    return "timed out";
  default:
    return "unknown error";
  }
}

const char *pk_gpu_last_error(void) {
  return pk_gpu_errmsg;
}

int pk_gpu_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pk_gpu_errmsg, sizeof pk_gpu_errmsg, fmt, ap);
  va_end(ap);
  return code;
}

int pk_gpu_report_bad(const pk_gpu_bad_t *bad) {
  switch (bad->kind) {
  case 0:
    return 0;
  case PK_GPU_BAD_LENGTH:
    return pk_gpu_fail(PK_GPU_EINVAL,
                       "length[%d] = %lld: a span must be >= 0 and fit the sequence's slot "
                       "(cu_seqlens_padded); the row was treated as empty",
                       (int)bad->row, (long long)bad->value);
  case PK_GPU_BAD_START:
    return pk_gpu_fail(PK_GPU_EINVAL,
                       "start[%d] = %lld: a span must lie inside the padded row "
                       "(0 <= start, start + length <= seqlen); the row was treated as empty",
                       (int)bad->row, (long long)bad->value);
  case PK_GPU_BAD_HOLE:
    return pk_gpu_fail(PK_GPU_EINVAL,
                       "mask row %d: valid columns are not one contiguous run (first at %lld); "
                       "its length was set to -1",
                       (int)bad->row, (long long)bad->value);
  default:
    return pk_gpu_fail(PK_GPU_EINTERNAL, "unknown bad-data kind %d", (int)bad->kind);
  }
}

int pk_gpu_build_flags(void) {
  int flags = 0;
#ifdef PK_GPU_WITH_CUDA
  flags |= PK_GPU_HAVE_CUDA;
#endif
#ifdef PK_GPU_WITH_NCCL
  flags |= PK_GPU_HAVE_NCCL;
#endif
  return flags;
}

const char *pk_gpu_version(void) {
  return PK_GPU_VERSION_STRING;
}
