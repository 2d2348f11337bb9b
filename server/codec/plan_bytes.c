/* One Plan request from bytes to bytes: the path of the server's handler,
 * of pk_plan_bytes (libpackd.so, `packctl plan --local`) and of the
 * plan-bytes fuzz target, in one function. Data flows one way: decode the
 * request (codec), refuse it over the sequence count, validate it, refuse
 * it over the size estimate and compute its plan id (the admission check,
 * after validation and before planning), plan it (planner), and pack the
 * plan with the one encoder (pk_codec_pack_plan). It lives apart from
 * codec.c so that the codec only translates between messages and planner
 * types and never plans.
 *
 * Memory: the packed plan is the only thing that outlives a call; the
 * decoded request and the plan are freed on every path through the one
 * exit label. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "codec.h"
#include "codec_check.h"
#include "codec_dcp.h"

/* What the admission check needs: the call and its decoded message. */
typedef struct admission {
  pk_plan_call_t *call;
  const Packd__V1__PlanRequest *msg;
} admission_t;

/* The admission check: the size estimate against max_plan_bytes, then the
 * plan id (which an admitted request needs and a refused one does not). */
static int admit(void *arg, const pk_plan_shape_t *shape, char *err, size_t errlen) {
  admission_t *a = arg;
  pk_plan_call_t *call = a->call;
  int rc = pk_codec_admit_size(&call->limits, shape, err, errlen);
  if (rc != PK_OK)
    return rc;
  if (call->plan_id != NULL)
    call->plan_id(call->plan_id_arg, a->msg, call->id, sizeof call->id);
  else
    pk_codec_plan_id(a->msg, call->id, sizeof call->id);
  if (call->id[0] == '\0') {
    pk_codec_msg(err, errlen, "plan_id: the keyed id could not be computed");
    return PK_EINTERNAL;
  }
  return PK_OK;
}

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The dynamic-CP branch of pk_plan_request (msg sets parallel.dynamic_cp):
 * the codec's request, the plan id, pk_dcp_plan under the call's limits and
 * stop, and the dynamic-CP encoder; the same timings and messages. */
static int plan_dcp(const Packd__V1__PlanRequest *msg, pk_plan_call_t *call, char *err,
                    size_t errlen) {
  pk_dcp_request_t r;
  pk_dcp_plan_t *plan = NULL;
  int rc = pk_codec_dcp_request(msg, &r, err, errlen);
  PK_CODEC_CHECK(rc == PK_OK, rc);
  if (call->plan_id != NULL)
    call->plan_id(call->plan_id_arg, msg, call->id, sizeof call->id);
  else
    pk_codec_plan_id(msg, call->id, sizeof call->id);
  if (call->id[0] == '\0') {
    pk_codec_msg(err, errlen, "plan_id: the keyed id could not be computed");
    rc = PK_EINTERNAL;
    goto done;
  }
  if (call->limits.max_plan_bytes != 0) {
    /* Every slot answers an entry of at least 4 bytes per GPU: refuse a
     * plan whose least slot count already passes the limit, before
     * planning it (invalid requests fall through to the planner's
     * message). */
    uint32_t slots = 0;
    uint64_t pool = (uint64_t)r.dp * (r.cp ? r.cp : 1);
    if (pk_dcp_step_lower_bound(&r, &slots) >= 0 &&
        (uint64_t)slots * pool * 4 > call->limits.max_plan_bytes) {
      rc = PK_ELIMIT;
      if (err != NULL && errlen > 0)
        snprintf(err, errlen,
                 "response: %llu GPUs x at least %u slots need at least %llu bytes, over the "
                 "limit max_plan_bytes = %llu",
                 (unsigned long long)pool, slots, (unsigned long long)slots * pool * 4,
                 (unsigned long long)call->limits.max_plan_bytes);
      goto done;
    }
  }
  double t0 = seconds();
  rc = pk_dcp_plan(&r, &call->limits, &plan, err, errlen);
  double t1 = seconds();
  call->plan_seconds = t1 - t0;
  PK_CODEC_CHECK(rc == PK_OK, rc);
  rc = pk_codec_pack_dcp_plan(plan, call->id, call->max_bytes, call->response_only, &call->packed);
  call->pack_seconds = seconds() - t1;
  if (rc == PK_ELIMIT && err != NULL && errlen > 0 &&
      (int64_t)call->packed.resp_len > call->max_bytes)
    snprintf(err, errlen,
             "response: the plan for %llu sequences is %zu bytes, over the limit "
             "max_message_bytes = %lld",
             (unsigned long long)call->sequences, call->packed.resp_len,
             (long long)call->max_bytes);
  else if (rc == PK_ELIMIT && err != NULL && errlen > 0)
    /* The GPUs' parts are kept for GetRankPlan, and a plan store refuses
     * to read a plan whose parts together pass this same limit. */
    snprintf(err, errlen,
             "response: the %u GPUs' rank plans for %llu sequences are %zu bytes together "
             "(each group is in the part of every GPU it spans), over the limit "
             "max_message_bytes = %lld",
             plan->pool, (unsigned long long)call->sequences, call->packed.ranks_len,
             (long long)call->max_bytes);
  else if (rc == PK_ENOMEM)
    pk_codec_msg(err, errlen, "response: out of memory while encoding the plan");
  else if (rc != PK_OK)
    pk_codec_msg(err, errlen, "response: internal error while encoding the plan");
done:
  pk_dcp_plan_free(plan);
  return rc;
}

int pk_plan_request(const uint8_t *req, size_t req_len, pk_plan_call_t *call, char *err,
                    size_t errlen) {
  int rc = PK_OK;
  Packd__V1__PlanRequest *msg = NULL;
  pk_plan_t *plan = NULL;
  pk_request_t r;
  call->sequences = 0;
  call->id[0] = '\0';
  call->plan_seconds = call->pack_seconds = 0;
  pk_packed_plan_t *packed = &call->packed;
  *packed = (pk_packed_plan_t){0};
  if (err != NULL && errlen > 0)
    err[0] = '\0';

  rc = pk_codec_decode_request(req, req_len, &msg, &r, err, errlen);
  if (rc != PK_OK && (err == NULL || errlen == 0 || err[0] == '\0'))
    pk_codec_msg(err, errlen, "request is not a valid packd.v1.PlanRequest");
  PK_CODEC_CHECK(rc == PK_OK, rc);
  call->sequences = r.n;
  if (pk_codec_is_dcp(msg)) {
    rc = plan_dcp(msg, call, err, errlen);
    goto done;
  }
  admission_t a = {call, msg};
  pk_limits_t limits = call->limits;
  limits.admit = admit;
  limits.admit_arg = &a;
  double t0 = seconds();
  rc = pk_plan_limited(&r, &limits, &plan, err, errlen);
  double t1 = seconds();
  call->plan_seconds = t1 - t0;
  PK_CODEC_CHECK(rc == PK_OK, rc);
  rc = pk_codec_pack_plan(plan, call->id, call->max_bytes, packed);
  call->pack_seconds = seconds() - t1;
  if (rc == PK_ELIMIT && err != NULL && errlen > 0)
    snprintf(err, errlen,
             "response: the plan for %llu sequences is %zu bytes, over the limit "
             "max_message_bytes = %lld",
             (unsigned long long)call->sequences, packed->resp_len, (long long)call->max_bytes);
  else if (rc == PK_ENOMEM && err != NULL && errlen > 0)
    snprintf(err, errlen, "response: cannot allocate %zu bytes for the plan", packed->resp_len);
  else if (rc != PK_OK)
    pk_codec_msg(err, errlen, "response: internal error while encoding the plan");
done:
  if (rc != PK_OK)
    pk_packed_plan_free(packed);
  pk_plan_free(plan);
  pk_codec_free_request(msg);
  return rc;
}

int pk_plan_bytes(const uint8_t *req, size_t req_len, uint8_t **resp, size_t *resp_len, char *err,
                  size_t errlen) {
  /* The server's default limits: the embedded mode refuses what it would. */
  pk_plan_call_t call = {.limits = {.max_sequences = PK_DEFAULT_MAX_SEQUENCES,
                                    .max_plan_bytes = PK_DEFAULT_MAX_PLAN_BYTES},
                         .max_bytes = INT64_MAX,
                         .response_only = true};
  *resp = NULL;
  *resp_len = 0;
  int rc = pk_plan_request(req, req_len, &call, err, errlen);
  if (rc == PK_OK) {
    *resp = call.packed.resp;
    *resp_len = call.packed.resp_len;
    call.packed.resp = NULL;
  }
  pk_packed_plan_free(&call.packed);
  return rc;
}
