/* Ranks as threads on the host fake transport, for the tests of the
 * sequence exchange and of dynamic-CP routing: one job per rank runs
 * pk_gpu_exchange and keeps its return code, its last error and its
 * statistics. Include after <cmocka.h> (run_ranks asserts). */
#ifndef PK_GPU_TEST_EXCHANGE_H
#define PK_GPU_TEST_EXCHANGE_H

#include <pthread.h>
#include <stdio.h>

#include "gpu_test_util.h"

#define MAXR 8

typedef struct {
  pk_gpu_fake_hub_t *hub;
  int32_t rank;
  const pk_gpu_xitem_t *items;
  int64_t nitems, row_bytes;
  const unsigned char *src;
  unsigned char *dst;
  int rc;
  char msg[512];
  pk_gpu_xstats_t stats;
} xjob_t;

static inline void *xrun(void *arg) {
  xjob_t *j = arg;
  const pk_gpu_transport_t *tp = pk_gpu_fake_transport(j->hub, j->rank);
  j->rc = pk_gpu_exchange(tp, j->items, j->nitems, j->row_bytes, j->src, j->dst, &j->stats);
  snprintf(j->msg, sizeof j->msg, "%s", pk_gpu_last_error());
  return NULL;
}

/* Runs fn on jobs[0..n) in n threads and waits for them all. */
static inline void run_ranks(xjob_t *jobs, int32_t n, void *(*fn)(void *)) {
  pthread_t th[MAXR];
  for (int32_t r = 0; r < n; r++)
    assert_int_equal(pthread_create(&th[r], NULL, fn, &jobs[r]), 0);
  for (int32_t r = 0; r < n; r++)
    pthread_join(th[r], NULL);
}

#endif
