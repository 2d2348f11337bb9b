/* What keying plan ids costs: the unkeyed id (XXH3-128 of the canonical
 * request bytes, pk_codec_plan_id) against the server's keyed id
 * (HMAC-SHA256 of the same bytes, pk_plan_id_keyed), one thread, on one
 * decoded request. Both re-pack the request into its canonical form, so the
 * difference is the hash alone. Prints the median and the minimum of each
 * over N runs, and the canonical size.
 *
 * usage: bench_plan_id REQUEST.bin [N]
 * REQUEST.bin is a binary packd.v1.PlanRequest (packctl plan --dry-run
 * --save-request). The key is random, as a server without
 * --plan-id-secret-file has; its source does not change the cost. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_args.h"
#include "clock.h"
#include "codec.h"
#include "plan_id.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Counts the bytes a protobuf-c buffer is given. */
typedef struct count_sink {
  ProtobufCBuffer base;
  size_t n;
} count_sink_t;

static void count_append(ProtobufCBuffer *b, size_t len, const uint8_t *data) {
  (void)data;
  ((count_sink_t *)b)->n += len;
}

int main(int argc, char **argv) {
  size_t len = 0;
  int n = 0;
  uint8_t *buf = bench_read_args(argc, argv, &len, &n);
  if (buf == NULL)
    return 2;

  char err[512];
  Packd__V1__PlanRequest *msg = NULL;
  pk_request_t req;
  if (pk_codec_decode_request(buf, len, &msg, &req, err, sizeof err) != 0) {
    fprintf(stderr, "decode: %s\n", err);
    return 1;
  }
  pk_plan_id_key_t *key = NULL;
  if (pk_plan_id_key_create(NULL, &key, err, sizeof err) != 0) {
    fprintf(stderr, "key: %s\n", err);
    return 1;
  }
  count_sink_t count = {{count_append}, 0};
  pk_codec_plan_id_pack(msg, &count.base);

  double *plain = calloc((size_t)n, sizeof(double));
  double *keyed = calloc((size_t)n, sizeof(double));
  char id[PK_PLAN_ID_LEN];
  for (int i = 0; i < n; i++) {
    double t0 = pk_monotonic_seconds();
    pk_codec_plan_id(msg, id, sizeof id);
    double t1 = pk_monotonic_seconds();
    pk_plan_id_keyed(key, msg, id, sizeof id);
    double t2 = pk_monotonic_seconds();
    plain[i] = (t1 - t0) * 1e3;
    keyed[i] = (t2 - t1) * 1e3;
  }
  qsort(plain, (size_t)n, sizeof(double), cmp_double);
  qsort(keyed, (size_t)n, sizeof(double), cmp_double);
  printf("sequences %zu, canonical bytes %zu, runs %d\n", req.n, count.n, n);
  printf("%-28s median %.3f ms  min %.3f ms\n", "unkeyed (XXH3-128)", plain[n / 2], plain[0]);
  printf("%-28s median %.3f ms  min %.3f ms\n", "keyed (HMAC-SHA256)", keyed[n / 2], keyed[0]);
  free(plain);
  free(keyed);
  pk_plan_id_key_destroy(key);
  pk_codec_free_request(msg);
  free(buf);
  return 0;
}
