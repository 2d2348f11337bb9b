/* packd.v1.Planner/Plan for dynamic context parallelism (handlers.h,
 * pk_handle_plan_dcp): the request's dynamic-CP fields -> pk_dcp_plan under
 * the server's limits and the call's stop -> PlanResponse.dynamic_cp. */
#include <stdlib.h>

#include "clock.h"
#include "codec.h"
#include "codec_dcp.h"
#include "handlers.h"

void pk_handle_plan_dcp(const pk_handler_env_t *env, const Packd__V1__PlanRequest *msg,
                        pk_reply_t *reply) {
  char err[sizeof reply->message];
  err[0] = '\0';
  pk_dcp_request_t req;
  int rc = pk_codec_dcp_request(msg, &req, err, sizeof err);
  if (rc != PK_OK) {
    pk_reply_error(reply, pk_status_from_error(rc), "%s", err);
    return;
  }
  double t0 = pk_monotonic_seconds();
  pk_dcp_plan_t *plan = NULL;
  rc = pk_dcp_plan(&req, &env->plan_limits, &plan, err, sizeof err);
  double t1 = pk_monotonic_seconds();
  if (rc != PK_OK) {
    pk_reply_error(reply, pk_status_from_error(rc), "%s", err[0] ? err : pk_strerror(rc));
    return;
  }
  uint8_t *bytes = NULL;
  size_t len = 0;
  rc = pk_codec_pack_dcp_plan(plan, &req, reply->plan_id, env->max_message_bytes, &bytes, &len);
  pk_dcp_plan_free(plan);
  if (rc == PK_EINVAL) {
    pk_reply_error(reply, PK_GRPC_RESOURCE_EXHAUSTED,
                   "the plan for %llu sequences is %zu bytes, over --max-message-bytes %lld",
                   (unsigned long long)reply->sequences, len, (long long)env->max_message_bytes);
    return;
  }
  if (rc != PK_OK) {
    pk_reply_error(reply, pk_status_from_error(rc), "cannot encode the plan: %s", pk_strerror(rc));
    return;
  }
  reply->bytes = bytes;
  reply->len = len;
  reply->code = PK_GRPC_OK;
  if (env->metrics != NULL)
    pk_metrics_plan(env->metrics, reply->sequences, t1 - t0, pk_monotonic_seconds() - t1);
}
