/* Where the server's time goes for one Plan request, phase by phase, in one
 * thread without gRPC: decode (protobuf-c + codec), plan id, planner, codec
 * encode (protobuf-c structs), packing (every rank once, the response around
 * them) and freeing. Prints the median and the minimum of each phase over N
 * runs.
 *
 * usage: bench_handler_phases REQUEST.bin [N]
 * REQUEST.bin is a binary packd.v1.PlanRequest, e.g. from
 *   packctl plan --dry-run --save-request REQUEST.bin --dp 64 --max-tokens 32768 \
 *     --sample 4096 bench/workloads/azure_conv_2023.txt */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_args.h"
#include "clock.h"
#include "codec.h"
#include "handlers.h"

enum { P_DECODE, P_ID, P_PLAN, P_ENCODE, P_PACK, P_FREE, P_COUNT };
static const char *const k_names[P_COUNT] = {"decode",       "plan id", "plan",
                                             "codec encode", "pack",    "free"};

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  size_t len = 0;
  int n = 0;
  uint8_t *buf = bench_read_args(argc, argv, &len, &n);
  if (buf == NULL)
    return 2;

  double *t[P_COUNT];
  for (int p = 0; p < P_COUNT; p++)
    t[p] = calloc((size_t)n, sizeof(double));
  size_t resp_len = 0, seqs = 0;
  for (int i = 0; i < n; i++) {
    char err[512];
    double t0 = pk_monotonic_seconds();
    Packd__V1__PlanRequest *msg = NULL;
    pk_request_t req;
    if (pk_codec_decode_request(buf, len, &msg, &req, err, sizeof err) != 0) {
      fprintf(stderr, "decode: %s\n", err);
      return 1;
    }
    double t1 = pk_monotonic_seconds();
    char id[40];
    pk_codec_plan_id(msg, id, sizeof id);
    double t2 = pk_monotonic_seconds();
    pk_plan_t *plan = NULL;
    if (pk_plan(&req, &plan, err, sizeof err) != 0) {
      fprintf(stderr, "plan: %s\n", err);
      return 1;
    }
    double t3 = pk_monotonic_seconds();
    Packd__V1__PlanResponse *resp = NULL;
    if (pk_codec_encode_plan(plan, id, &resp) != 0) {
      fprintf(stderr, "encode failed\n");
      return 1;
    }
    double t4 = pk_monotonic_seconds();
    uint8_t *out = NULL;
    resp_len = pk_pack_plan_response(resp, &out);
    double t5 = pk_monotonic_seconds();
    seqs = req.n;
    free(out);
    pk_codec_free_response(resp);
    pk_plan_free(plan);
    pk_codec_free_request(msg);
    double t6 = pk_monotonic_seconds();
    t[P_DECODE][i] = t1 - t0;
    t[P_ID][i] = t2 - t1;
    t[P_PLAN][i] = t3 - t2;
    t[P_ENCODE][i] = t4 - t3;
    t[P_PACK][i] = t5 - t4;
    t[P_FREE][i] = t6 - t5;
  }
  printf("request %zu bytes, %zu sequences; response %zu bytes; %d runs\n", len, seqs, resp_len, n);
  printf("%-14s %12s %12s\n", "phase", "median ms", "min ms");
  double med_total = 0;
  for (int p = 0; p < P_COUNT; p++) {
    qsort(t[p], (size_t)n, sizeof(double), cmp_double);
    printf("%-14s %12.4f %12.4f\n", k_names[p], t[p][n / 2] * 1e3, t[p][0] * 1e3);
    med_total += t[p][n / 2];
    free(t[p]);
  }
  printf("%-14s %12.4f\n", "sum of medians", med_total * 1e3);
  free(buf);
  return 0;
}
