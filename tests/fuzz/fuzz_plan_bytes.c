/* libFuzzer target: request bytes -> decode -> validate -> plan -> encode,
 * through pk_plan_bytes, the path of the embedded Python mode and of every
 * RPC. The fuzzer is after memory errors and undefined behaviour, not
 * throughput, so inputs that would make one plan slow are skipped before
 * planning (the limits below; decoding alone still sees every input):
 *   at most PK_FUZZ_MAX_SEQS lengths, loss tokens and groups;
 *   dp, pp, vpp, mini_batches, min_micro_batches and microbatch_group at most
 *   PK_FUZZ_MAX_DEGREE each (their product sizes the plan).
 * The fuzz build always has the planner's self-checks (PK_SELF_CHECK), so a
 * stage that breaks its contract answers PK_EINTERNAL, which is a crash
 * here. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "packd/v1/packd.pb-c.h"

#define PK_FUZZ_MAX_SEQS 4096
#define PK_FUZZ_MAX_DEGREE 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int too_slow(const Packd__V1__PlanRequest *m) {
  if (m->n_lengths > PK_FUZZ_MAX_SEQS || m->n_loss_tokens > PK_FUZZ_MAX_SEQS ||
      m->n_groups > PK_FUZZ_MAX_SEQS)
    return 1;
  const Packd__V1__Parallel *p = m->parallel;
  if (p != NULL && (p->dp > PK_FUZZ_MAX_DEGREE || p->pp > PK_FUZZ_MAX_DEGREE ||
                    p->vpp > PK_FUZZ_MAX_DEGREE || p->microbatch_group > PK_FUZZ_MAX_DEGREE))
    return 1;
  const Packd__V1__Batching *b = m->batching;
  if (b != NULL &&
      (b->mini_batches > PK_FUZZ_MAX_DEGREE || b->min_micro_batches > PK_FUZZ_MAX_DEGREE))
    return 1;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* protobuf-c reads through the pointer even for 0 bytes. */
  static const uint8_t empty[1] = {0};
  const uint8_t *buf = size == 0 ? empty : data;
  Packd__V1__PlanRequest *m = packd__v1__plan_request__unpack(NULL, size, buf);
  if (m == NULL)
    return 0;
  int skip = too_slow(m);
  packd__v1__plan_request__free_unpacked(m, NULL);
  if (skip)
    return 0;

  uint8_t *resp = NULL;
  size_t resp_len = 0;
  char err[512];
  err[0] = '\0';
  int rc = pk_plan_bytes(buf, size, &resp, &resp_len, err, sizeof err);
  if (rc == 0) {
    /* The answer must be a well-formed PlanResponse. */
    Packd__V1__PlanResponse *r =
        packd__v1__plan_response__unpack(NULL, resp_len, resp_len == 0 ? empty : resp);
    if (r == NULL)
      abort();
    packd__v1__plan_response__free_unpacked(r, NULL);
    pk_codec_free_bytes(resp);
  } else if (resp != NULL || memchr(err, '\0', sizeof err) == NULL) {
    abort();
  } else if (rc == PK_EINTERNAL) {
    /* A broken invariant: this build has the planner's self-checks
     * (PK_SELF_CHECK), which answer PK_EINTERNAL naming the stage. */
    abort();
  }
  return 0;
}
