/* The RPC handlers on bytes (see handlers.h). Data flows one way: request
 * bytes -> codec -> planner -> codec -> response bytes; the cache keeps each
 * rank's packed RankPlan for GetRankPlan. */
#include "handlers.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "codec.h"
#include "grpc/health/v1/health.pb-c.h"
#include "packd/v1/packd.pb-c.h"
#include "pk_planner.h"
#include "plan_id.h"

void pk_reply_error(pk_reply_t *reply, int code, const char *fmt, ...) {
  reply->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reply->message, sizeof reply->message, fmt, ap);
  va_end(ap);
  free(reply->bytes);
  reply->bytes = NULL;
  reply->len = 0;
}

static void reply_reset(pk_reply_t *reply) {
  memset(reply, 0, sizeof *reply);
}

/* The keyed plan id (plan_id.h) for pk_plan_request. */
static void keyed_plan_id(const void *key, const Packd__V1__PlanRequest *msg, char *id,
                          size_t idlen) {
  pk_plan_id_for(key, msg, id, idlen);
}

void pk_handle_plan(const pk_handler_env_t *env, const uint8_t *req, size_t len,
                    pk_reply_t *reply) {
  reply_reset(reply);
  char err[sizeof reply->message];
  pk_plan_call_t call = {.limits = env->plan_limits,
                         .max_bytes = env->max_message_bytes,
                         .plan_id = keyed_plan_id,
                         .plan_id_arg = env->plan_id_key};
  int rc = pk_plan_request(req, len, &call, err, sizeof err);
  reply->sequences = call.sequences;
  snprintf(reply->plan_id, sizeof reply->plan_id, "%s", call.id);
  if (rc != PK_OK) {
    pk_reply_error(reply, pk_status_from_error(rc), "%s", err[0] ? err : pk_strerror(rc));
    return;
  }
  pk_packed_plan_t *pp = &call.packed;
  reply->bytes = pp->resp;
  reply->len = pp->resp_len;
  pp->resp = NULL;
  /* The rank bytes are every DP rank's RankPlan, or for a dynamic-CP plan
   * every GPU's slice of it: the same cache and store keep both. */
  if (env->store != NULL && pp->n_ranks > 0) {
    /* A failed write leaves the plan on this server only; the store logs
     * the outage once and counts it. */
    char why[512];
    double ts = pk_monotonic_seconds();
    (void)pk_plan_store_put(env->store, reply->plan_id, (uint32_t)pp->n_ranks, pp->ranks, pp->off,
                            why, sizeof why);
    if (env->metrics != NULL)
      pk_histogram_observe_seconds(&env->metrics->store_write_seconds, pk_monotonic_seconds() - ts);
  }
  if (env->cache != NULL && pp->n_ranks > 0) {
    /* The cache owns the rank bytes from here on, also when it refuses
     * them (a plan larger than the cache is simply not kept). */
    pk_plan_cache_put(env->cache, reply->plan_id, (uint32_t)pp->n_ranks, pp->ranks, pp->off,
                      env->now);
    pp->ranks = NULL;
  }
  reply->code = PK_GRPC_OK;
  pk_packed_plan_free(pp);
  if (env->metrics != NULL)
    pk_metrics_plan(env->metrics, reply->sequences, call.plan_seconds, call.pack_seconds);
}

typedef struct sink {
  uint8_t *bytes;
  size_t len;
  int failed;
} sink_t;

static void copy_sink(void *user, const uint8_t *bytes, size_t len) {
  sink_t *s = user;
  s->bytes = malloc(len > 0 ? len : 1);
  if (s->bytes == NULL) {
    s->failed = 1;
    return;
  }
  memcpy(s->bytes, bytes, len);
  s->len = len;
}

/* GetRankPlan after a plan cache miss: ask the plan store. */
static void from_store(const pk_handler_env_t *env, const char *plan_id, uint32_t rank,
                       pk_reply_t *reply) {
  uint8_t *bytes = NULL;
  size_t len = 0;
  uint32_t nranks = 0;
  char msg[sizeof reply->message];
  double ts = pk_monotonic_seconds();
  pk_store_result_t sr =
      pk_plan_store_get_rank(env->store, plan_id, rank, &bytes, &len, &nranks, msg, sizeof msg);
  if (env->metrics != NULL)
    pk_histogram_observe_seconds(&env->metrics->store_read_seconds, pk_monotonic_seconds() - ts);
  switch (sr) {
  case PK_STORE_OK:
    reply->code = PK_GRPC_OK;
    reply->bytes = bytes;
    reply->len = len;
    return;
  case PK_STORE_ABSENT:
    pk_reply_error(reply, PK_GRPC_NOT_FOUND,
                   "plan_id \"%.64s\" is not in this server's plan cache, and the %s; plan again",
                   plan_id, msg);
    break;
  case PK_STORE_BAD_RANK:
    pk_reply_error(reply, PK_GRPC_INVALID_ARGUMENT,
                   "dp_rank: %u is out of range; plan \"%.64s\" has %u ranks", rank, plan_id,
                   nranks);
    break;
  case PK_STORE_NOMEM:
    pk_reply_error(reply, PK_GRPC_RESOURCE_EXHAUSTED, "%s", msg);
    break;
  case PK_STORE_UNAVAILABLE:
  case PK_STORE_CORRUPT:
    pk_reply_error(reply, PK_GRPC_UNAVAILABLE, "%s", msg);
    break;
  }
  free(bytes);
}

void pk_handle_get_rank_plan(const pk_handler_env_t *env, const uint8_t *req, size_t len,
                             pk_reply_t *reply) {
  reply_reset(reply);
  Packd__V1__GetRankPlanRequest *msg = packd__v1__get_rank_plan_request__unpack(NULL, len, req);
  if (msg == NULL) {
    pk_reply_error(reply, PK_GRPC_INVALID_ARGUMENT,
                   "request: %zu bytes are not a valid packd.v1.GetRankPlanRequest", len);
    return;
  }
  if (msg->plan_id == NULL || msg->plan_id[0] == '\0') {
    pk_reply_error(reply, PK_GRPC_INVALID_ARGUMENT, "plan_id: is empty");
    packd__v1__get_rank_plan_request__free_unpacked(msg, NULL);
    return;
  }
  snprintf(reply->plan_id, sizeof reply->plan_id, "%s", msg->plan_id);
  sink_t s = {NULL, 0, 0};
  uint32_t nranks = 0;
  int rc = PK_ENOTFOUND;
  if (env->cache != NULL)
    rc = pk_plan_cache_get_rank(env->cache, msg->plan_id, msg->dp_rank, env->now, copy_sink, &s,
                                &nranks);
  if (rc == PK_ENOTFOUND && env->store != NULL) {
    from_store(env, msg->plan_id, msg->dp_rank, reply);
  } else if (rc == PK_ENOTFOUND) {
    pk_reply_error(reply, PK_GRPC_NOT_FOUND,
                   "plan_id \"%.64s\" is not in the plan cache (expired, evicted or never planned "
                   "here); plan again",
                   msg->plan_id);
  } else if (rc == PK_EINVAL) {
    pk_reply_error(reply, PK_GRPC_INVALID_ARGUMENT,
                   "dp_rank: %u is out of range; plan \"%.64s\" has %u ranks", msg->dp_rank,
                   msg->plan_id, nranks);
  } else if (s.failed) {
    pk_reply_error(reply, PK_GRPC_RESOURCE_EXHAUSTED, "cannot allocate the rank plan");
  } else {
    reply->code = PK_GRPC_OK;
    reply->bytes = s.bytes;
    reply->len = s.len;
    s.bytes = NULL;
  }
  free(s.bytes);
  packd__v1__get_rank_plan_request__free_unpacked(msg, NULL);
}

void pk_handle_health_check(const pk_handler_env_t *env, const uint8_t *req, size_t len,
                            pk_reply_t *reply) {
  reply_reset(reply);
  Grpc__Health__V1__HealthCheckRequest *msg =
      grpc__health__v1__health_check_request__unpack(NULL, len, req);
  if (msg == NULL) {
    pk_reply_error(reply, PK_GRPC_INVALID_ARGUMENT,
                   "request: %zu bytes are not a valid grpc.health.v1.HealthCheckRequest", len);
    return;
  }
  const char *svc = msg->service ? msg->service : "";
  if (svc[0] != '\0' && strcmp(svc, PK_SERVICE_PLANNER) != 0) {
    pk_reply_error(reply, PK_GRPC_NOT_FOUND, "service \"%.200s\" is unknown; known: \"\", \"%s\"",
                   svc, PK_SERVICE_PLANNER);
    grpc__health__v1__health_check_request__free_unpacked(msg, NULL);
    return;
  }
  grpc__health__v1__health_check_request__free_unpacked(msg, NULL);
  Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  resp.status = env->serving ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                             : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
  size_t size = grpc__health__v1__health_check_response__get_packed_size(&resp);
  reply->bytes = malloc(size > 0 ? size : 1);
  if (reply->bytes == NULL) {
    pk_reply_error(reply, PK_GRPC_RESOURCE_EXHAUSTED, "cannot allocate the health answer");
    return;
  }
  reply->len = grpc__health__v1__health_check_response__pack(&resp, reply->bytes);
  reply->code = PK_GRPC_OK;
}
