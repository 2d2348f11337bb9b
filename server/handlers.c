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

/* Packs every rank of resp (with plan_id set, as GetRankPlan returns it)
 * back to back and stores them in the cache. A plan too large for the cache
 * is simply not kept; GetRankPlan then answers NOT_FOUND. */
static void cache_ranks(const pk_handler_env_t *env, Packd__V1__PlanResponse *resp,
                        const char *plan_id) {
  size_t n = resp->n_ranks;
  size_t *off = malloc((n + 1) * sizeof *off);
  if (off == NULL)
    return;
  off[0] = 0;
  for (size_t r = 0; r < n; r++) {
    Packd__V1__RankPlan *rk = resp->ranks[r];
    char *saved = rk->plan_id;
    rk->plan_id = (char *)plan_id;
    off[r + 1] = off[r] + packd__v1__rank_plan__get_packed_size(rk);
    rk->plan_id = saved;
  }
  uint8_t *data = malloc(off[n] > 0 ? off[n] : 1);
  if (data == NULL) {
    free(off);
    return;
  }
  for (size_t r = 0; r < n; r++) {
    Packd__V1__RankPlan *rk = resp->ranks[r];
    char *saved = rk->plan_id;
    rk->plan_id = (char *)plan_id;
    packd__v1__rank_plan__pack(rk, data + off[r]);
    rk->plan_id = saved;
  }
  /* The cache owns data from here on, also when it refuses the entry. */
  pk_plan_cache_put(env->cache, plan_id, (uint32_t)n, data, off, env->now);
  free(off);
}

void pk_handle_plan(const pk_handler_env_t *env, const uint8_t *req, size_t len,
                    pk_reply_t *reply) {
  reply_reset(reply);
  char err[sizeof reply->message];
  err[0] = '\0';
  Packd__V1__PlanRequest *msg = NULL;
  pk_request_t preq;
  int rc = pk_codec_decode_request(req, len, &msg, &preq, err, sizeof err);
  if (rc != PK_OK) {
    pk_reply_error(reply, pk_status_from_error(rc), "%s",
                   err[0] ? err : "request is not a valid packd.v1.PlanRequest");
    return;
  }
  reply->sequences = preq.n;
  pk_codec_plan_id(msg, reply->plan_id, sizeof reply->plan_id);

  double t0 = pk_monotonic_seconds();
  pk_plan_t *plan = NULL;
  rc = pk_plan(&preq, &plan, err, sizeof err);
  double t1 = pk_monotonic_seconds();
  if (rc != PK_OK) {
    pk_codec_free_request(msg);
    pk_reply_error(reply, pk_status_from_error(rc), "%s", err[0] ? err : pk_strerror(rc));
    return;
  }
  Packd__V1__PlanResponse *resp = NULL;
  rc = pk_codec_encode_plan(plan, reply->plan_id, &resp);
  pk_plan_free(plan);
  pk_codec_free_request(msg);
  if (rc != PK_OK) {
    pk_reply_error(reply, pk_status_from_error(rc), "cannot encode the plan: %s", pk_strerror(rc));
    return;
  }
  size_t size = packd__v1__plan_response__get_packed_size(resp);
  if ((int64_t)size > env->max_message_bytes) {
    pk_codec_free_response(resp);
    pk_reply_error(reply, PK_GRPC_RESOURCE_EXHAUSTED,
                   "the plan for %llu sequences is %zu bytes, over --max-message-bytes %lld",
                   (unsigned long long)reply->sequences, size, (long long)env->max_message_bytes);
    return;
  }
  reply->bytes = malloc(size > 0 ? size : 1);
  if (reply->bytes == NULL) {
    pk_codec_free_response(resp);
    pk_reply_error(reply, PK_GRPC_RESOURCE_EXHAUSTED, "cannot allocate %zu bytes for the plan",
                   size);
    return;
  }
  reply->len = packd__v1__plan_response__pack(resp, reply->bytes);
  if (env->cache != NULL)
    cache_ranks(env, resp, reply->plan_id);
  pk_codec_free_response(resp);
  double t2 = pk_monotonic_seconds();
  if (env->metrics != NULL)
    pk_metrics_plan(env->metrics, reply->sequences, t1 - t0, t2 - t1);
  reply->code = PK_GRPC_OK;
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
  if (rc == PK_ENOTFOUND) {
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
