/* The host fake transport: ranks are threads of one process and every
 * NCCL-style call is replayed with memcpy. send/recv posted inside a group
 * are matched per (source, destination) pair in order, like NCCL; a receive
 * whose size differs from the matching send fails on both sides, and an
 * operation whose partner never comes fails with PK_GPU_ETIMEOUT instead of
 * hanging. A hub that saw a failure is not reusable. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_internal.h"

typedef struct fake_msg {
  const void *buf;
  size_t bytes;
  int32_t src, dst;
  int state; /* 0 posted, 1 received, 2 size mismatch. */
  size_t recv_bytes;
  struct fake_msg *next;
} fake_msg_t;

typedef struct fake_op {
  bool is_send;
  void *buf;
  size_t bytes;
  int32_t peer;
} fake_op_t;

typedef struct fake_rank {
  pk_gpu_transport_t tp;
  struct pk_gpu_fake_hub *hub;
  int32_t rank;
  int depth; /* Group nesting depth. */
  fake_op_t *ops;
  size_t nops, cap;
  pk_gpu_fake_stats_t stats;
} fake_rank_t;

struct pk_gpu_fake_hub {
  int32_t n;
  int32_t timeout_ms;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  fake_msg_t **head; /* n*n FIFOs indexed src*n + dst. */
  fake_msg_t **tail;
  fake_rank_t *ranks;
  /* all_gather state. */
  const void **gsend;
  size_t *gbytes;
  int32_t barrived;
  int64_t bgen;
};

static struct timespec deadline(const pk_gpu_fake_hub_t *hub) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t ns = ts.tv_nsec + (int64_t)(hub->timeout_ms % 1000) * 1000000;
  ts.tv_sec += hub->timeout_ms / 1000 + ns / 1000000000;
  ts.tv_nsec = (long)(ns % 1000000000);
  return ts;
}

/* Waits on the hub's condition; returns false at the deadline. */
static bool wait_until(pk_gpu_fake_hub_t *hub, const struct timespec *ts) {
  return pthread_cond_timedwait(&hub->cv, &hub->mu, ts) != ETIMEDOUT;
}

static void queue_remove(pk_gpu_fake_hub_t *hub, fake_msg_t *m) {
  size_t q = (size_t)m->src * (size_t)hub->n + (size_t)m->dst;
  fake_msg_t *prev = NULL;
  for (fake_msg_t *it = hub->head[q]; it != NULL; prev = it, it = it->next) {
    if (it == m) {
      if (prev) {
        prev->next = it->next;
      } else {
        hub->head[q] = it->next;
      }
      if (hub->tail[q] == it) {
        hub->tail[q] = prev;
      }
      return;
    }
  }
}

/* Posts the group's sends, completes its receives in order, then waits
 * until every send was received. Called with the hub's lock held. */
static int run_group(fake_rank_t *fr) {
  pk_gpu_fake_hub_t *hub = fr->hub;
  int rc = 0;
  size_t nsend = 0;
  fake_msg_t **mine = calloc(fr->nops + 1, sizeof *mine);
  if (mine == NULL) {
    return pk_gpu_fail(PK_GPU_ENOMEM, "fake transport: out of memory");
  }
  for (size_t k = 0; k < fr->nops; k++) {
    fake_op_t *op = &fr->ops[k];
    if (!op->is_send) {
      continue;
    }
    fake_msg_t *m = calloc(1, sizeof *m);
    if (m == NULL) {
      rc = pk_gpu_fail(PK_GPU_ENOMEM, "fake transport: out of memory");
      break;
    }
    m->buf = op->buf;
    m->bytes = op->bytes;
    m->src = fr->rank;
    m->dst = op->peer;
    size_t q = (size_t)m->src * (size_t)hub->n + (size_t)m->dst;
    if (hub->tail[q]) {
      hub->tail[q]->next = m;
    } else {
      hub->head[q] = m;
    }
    hub->tail[q] = m;
    mine[nsend++] = m;
  }
  pthread_cond_broadcast(&hub->cv);
  struct timespec ts = deadline(hub);
  for (size_t k = 0; k < fr->nops && rc == 0; k++) {
    fake_op_t *op = &fr->ops[k];
    if (op->is_send) {
      continue;
    }
    size_t q = (size_t)op->peer * (size_t)hub->n + (size_t)fr->rank;
    while (hub->head[q] == NULL) {
      if (!wait_until(hub, &ts)) {
        rc = pk_gpu_fail(PK_GPU_ETIMEOUT,
                         "fake transport: rank %d's recv of %zu bytes from rank %d found no "
                         "matching send within %d ms",
                         (int)fr->rank, op->bytes, (int)op->peer, (int)hub->timeout_ms);
        break;
      }
    }
    if (rc != 0) {
      break;
    }
    fake_msg_t *m = hub->head[q];
    queue_remove(hub, m);
    m->recv_bytes = op->bytes;
    if (m->bytes != op->bytes) {
      m->state = 2;
      rc = pk_gpu_fail(PK_GPU_EINTERNAL,
                       "fake transport: rank %d's recv of %zu bytes from rank %d matched a send "
                       "of %zu bytes",
                       (int)fr->rank, op->bytes, (int)op->peer, m->bytes);
    } else {
      if (m->bytes > 0) {
        memcpy(op->buf, m->buf, m->bytes);
      }
      m->state = 1;
    }
    pthread_cond_broadcast(&hub->cv);
  }
  for (size_t k = 0; k < nsend; k++) {
    fake_msg_t *m = mine[k];
    while (m->state == 0 && rc == 0) {
      if (!wait_until(hub, &ts)) {
        rc = pk_gpu_fail(PK_GPU_ETIMEOUT,
                         "fake transport: rank %d's send of %zu bytes to rank %d was never "
                         "received within %d ms (no matching recv)",
                         (int)fr->rank, m->bytes, (int)m->dst, (int)hub->timeout_ms);
      }
    }
    if (m->state == 0) {
      queue_remove(hub, m); /* Never leave a pointer to the caller's buffer behind. */
    } else if (m->state == 2 && rc == 0) {
      rc = pk_gpu_fail(PK_GPU_EINTERNAL,
                       "fake transport: rank %d's send of %zu bytes to rank %d matched a recv "
                       "of %zu bytes",
                       (int)fr->rank, m->bytes, (int)m->dst, m->recv_bytes);
    }
    free(m);
  }
  free(mine);
  fr->nops = 0;
  return rc;
}

static int fake_group_start(void *impl) {
  fake_rank_t *fr = impl;
  pthread_mutex_lock(&fr->hub->mu);
  fr->depth++;
  pthread_mutex_unlock(&fr->hub->mu);
  return 0;
}

static int fake_group_end(void *impl) {
  fake_rank_t *fr = impl;
  int rc = 0;
  pthread_mutex_lock(&fr->hub->mu);
  if (fr->depth == 0) {
    rc = pk_gpu_fail(PK_GPU_EINVAL, "fake transport: rank %d: group_end without group_start",
                     (int)fr->rank);
  } else if (--fr->depth == 0) {
    fr->stats.groups++;
    rc = run_group(fr);
  }
  pthread_mutex_unlock(&fr->hub->mu);
  return rc;
}

static int post(fake_rank_t *fr, bool is_send, void *buf, size_t bytes, int32_t peer) {
  int rc = 0;
  pk_gpu_fake_hub_t *hub = fr->hub;
  pthread_mutex_lock(&hub->mu);
  if (peer < 0 || peer >= hub->n) {
    rc = pk_gpu_fail(PK_GPU_EINVAL, "fake transport: peer = %d outside 0..%d", (int)peer,
                     (int)hub->n - 1);
    goto out;
  }
  if (fr->nops == fr->cap) {
    size_t cap = fr->cap ? 2 * fr->cap : 16;
    fake_op_t *ops = realloc(fr->ops, cap * sizeof *ops);
    if (ops == NULL) {
      rc = pk_gpu_fail(PK_GPU_ENOMEM, "fake transport: out of memory");
      goto out;
    }
    fr->ops = ops;
    fr->cap = cap;
  }
  fr->ops[fr->nops++] = (fake_op_t){is_send, buf, bytes, peer};
  if (is_send) {
    fr->stats.sends++;
    fr->stats.bytes_sent += (int64_t)bytes;
  } else {
    fr->stats.recvs++;
    fr->stats.bytes_recv += (int64_t)bytes;
  }
  fr->stats.zero_byte_p2p += bytes == 0;
  fr->stats.self_p2p += peer == fr->rank;
  if (fr->depth == 0) { /* Outside a group: a group of one. */
    fr->stats.groups++;
    rc = run_group(fr);
  }
out:
  pthread_mutex_unlock(&hub->mu);
  return rc;
}

static int fake_send(void *impl, const void *buf, size_t bytes, int32_t peer) {
  return post(impl, true, (void *)(uintptr_t)buf, bytes, peer);
}

static int fake_recv(void *impl, void *buf, size_t bytes, int32_t peer) {
  return post(impl, false, buf, bytes, peer);
}

static int fake_copy(void *impl, void *dst, const void *src, size_t bytes) {
  fake_rank_t *fr = impl;
  if (bytes > 0) {
    memcpy(dst, src, bytes);
  }
  pthread_mutex_lock(&fr->hub->mu);
  fr->stats.copies++;
  pthread_mutex_unlock(&fr->hub->mu);
  return 0;
}

/* A barrier of all ranks; called with the lock held. */
static int barrier(fake_rank_t *fr) {
  pk_gpu_fake_hub_t *hub = fr->hub;
  int64_t gen = hub->bgen;
  if (++hub->barrived == hub->n) {
    hub->barrived = 0;
    hub->bgen++;
    pthread_cond_broadcast(&hub->cv);
    return 0;
  }
  struct timespec ts = deadline(hub);
  while (hub->bgen == gen) {
    if (!wait_until(hub, &ts)) {
      return pk_gpu_fail(PK_GPU_ETIMEOUT,
                         "fake transport: rank %d waited %d ms in all_gather for the other ranks",
                         (int)fr->rank, (int)hub->timeout_ms);
    }
  }
  return 0;
}

static int fake_all_gather(void *impl, const void *send, void *recv, size_t bytes) {
  fake_rank_t *fr = impl;
  pk_gpu_fake_hub_t *hub = fr->hub;
  int rc = 0;
  pthread_mutex_lock(&hub->mu);
  fr->stats.gathers++;
  hub->gsend[fr->rank] = send;
  hub->gbytes[fr->rank] = bytes;
  rc = barrier(fr);
  if (rc == 0) {
    for (int32_t k = 0; k < hub->n && rc == 0; k++) {
      if (hub->gbytes[k] != bytes) {
        rc = pk_gpu_fail(PK_GPU_EINTERNAL,
                         "fake transport: all_gather of %zu bytes on rank %d but %zu on rank %d",
                         bytes, (int)fr->rank, hub->gbytes[k], (int)k);
      }
    }
    for (int32_t k = 0; k < hub->n && rc == 0 && bytes > 0; k++) {
      memcpy((unsigned char *)recv + (size_t)k * bytes, hub->gsend[k], bytes);
    }
    /* Nobody leaves before everybody has read the send buffers. */
    int rc2 = barrier(fr);
    rc = rc != 0 ? rc : rc2;
  }
  pthread_mutex_unlock(&hub->mu);
  return rc;
}

int pk_gpu_fake_hub_create(int32_t nranks, int32_t timeout_ms, pk_gpu_fake_hub_t **out) {
  int rc = 0;
  pk_gpu_fake_hub_t *hub = NULL;
  PK_GPU_REQUIRE(out != NULL, PK_GPU_EINVAL, "out = NULL");
  *out = NULL;
  PK_GPU_REQUIRE(nranks >= 1 && nranks <= 4096, PK_GPU_EINVAL, "nranks = %d: expected 1..4096",
                 (int)nranks);
  PK_GPU_REQUIRE(timeout_ms >= 0, PK_GPU_EINVAL, "timeout_ms = %d: must be >= 0", (int)timeout_ms);
  hub = calloc(1, sizeof *hub);
  PK_GPU_REQUIRE(hub != NULL, PK_GPU_ENOMEM, "fake hub: out of memory");
  pthread_mutex_init(&hub->mu, NULL);
  pthread_cond_init(&hub->cv, NULL);
  hub->n = nranks;
  hub->timeout_ms = timeout_ms == 0 ? 10000 : timeout_ms;
  size_t nn = (size_t)nranks * (size_t)nranks;
  hub->head = calloc(nn, sizeof *hub->head);
  hub->tail = calloc(nn, sizeof *hub->tail);
  hub->ranks = calloc((size_t)nranks, sizeof *hub->ranks);
  hub->gsend = calloc((size_t)nranks, sizeof *hub->gsend);
  hub->gbytes = calloc((size_t)nranks, sizeof *hub->gbytes);
  if (!hub->head || !hub->tail || !hub->ranks || !hub->gsend || !hub->gbytes) {
    pk_gpu_fake_hub_destroy(hub);
    hub = NULL;
    PK_GPU_REQUIRE(false, PK_GPU_ENOMEM, "fake hub of %d ranks: out of memory", (int)nranks);
  }
  for (int32_t r = 0; r < nranks; r++) {
    fake_rank_t *fr = &hub->ranks[r];
    fr->hub = hub;
    fr->rank = r;
    fr->tp.impl = fr;
    fr->tp.rank = r;
    fr->tp.size = nranks;
    fr->tp.group_start = fake_group_start;
    fr->tp.group_end = fake_group_end;
    fr->tp.send = fake_send;
    fr->tp.recv = fake_recv;
    fr->tp.copy = fake_copy;
    fr->tp.all_gather = fake_all_gather;
  }
  *out = hub;
out:
  return rc;
}

void pk_gpu_fake_hub_destroy(pk_gpu_fake_hub_t *hub) {
  if (hub == NULL) {
    return;
  }
  pthread_mutex_destroy(&hub->mu);
  pthread_cond_destroy(&hub->cv);
  for (int32_t r = 0; hub->ranks != NULL && r < hub->n; r++) {
    free(hub->ranks[r].ops);
  }
  free(hub->head);
  free(hub->tail);
  free(hub->ranks);
  free(hub->gsend);
  free(hub->gbytes);
  free(hub);
}

const pk_gpu_transport_t *pk_gpu_fake_transport(pk_gpu_fake_hub_t *hub, int32_t rank) {
  if (hub == NULL || rank < 0 || rank >= hub->n) {
    pk_gpu_fail(PK_GPU_EINVAL, "fake transport: rank %d outside the hub", (int)rank);
    return NULL;
  }
  return &hub->ranks[rank].tp;
}

int pk_gpu_fake_stats(pk_gpu_fake_hub_t *hub, int32_t rank, pk_gpu_fake_stats_t *out) {
  if (hub == NULL || out == NULL || rank < 0 || rank >= hub->n) {
    return pk_gpu_fail(PK_GPU_EINVAL, "fake stats: rank %d outside the hub", (int)rank);
  }
  pthread_mutex_lock(&hub->mu);
  *out = hub->ranks[rank].stats;
  pthread_mutex_unlock(&hub->mu);
  return 0;
}
