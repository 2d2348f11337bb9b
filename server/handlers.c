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

/* The packed plan: every RankPlan packed once, back to back (the cache's
 * format, and what GetRankPlan returns), and the PlanResponse built around
 * them. */
typedef struct packed_plan {
  uint8_t *ranks; /* All ranks; rank r at [off[r], off[r+1]). */
  size_t *off;    /* n_ranks + 1 offsets. */
  uint8_t *resp;  /* The packed PlanResponse. */
  size_t resp_len;
} packed_plan_t;

/* Bytes of v as a protobuf varint. */
static size_t varint_size(size_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

static uint8_t *put_varint(uint8_t *p, size_t v) {
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
}

/* Packs resp once: each rank into pp->ranks, then the response as
 * [plan_id] [tag + length + rank]... [stats], which is byte for byte what
 * protobuf-c packs for the whole message (fields in number order; the test
 * test_packed_response_equals_protobuf_c checks it) without walking the
 * ranks twice. Returns 0, PK_ENOMEM, or PK_EINVAL when the response would
 * exceed max_bytes (pp->resp_len then holds its size). */
static int pack_plan(Packd__V1__PlanResponse *resp, int64_t max_bytes, packed_plan_t *pp) {
  size_t n = resp->n_ranks;
  memset(pp, 0, sizeof *pp);
  pp->off = malloc((n + 1) * sizeof *pp->off);
  if (pp->off == NULL)
    return PK_ENOMEM;
  Packd__V1__PlanResponse head = PACKD__V1__PLAN_RESPONSE__INIT;
  Packd__V1__PlanResponse tail = PACKD__V1__PLAN_RESPONSE__INIT;
  head.plan_id = resp->plan_id;
  tail.stats = resp->stats;
  size_t head_len = packd__v1__plan_response__get_packed_size(&head);
  size_t tail_len = packd__v1__plan_response__get_packed_size(&tail);
  size_t total = head_len + tail_len;
  pp->off[0] = 0;
  for (size_t r = 0; r < n; r++) {
    size_t len = packd__v1__rank_plan__get_packed_size(resp->ranks[r]);
    pp->off[r + 1] = pp->off[r] + len;
    total += 1 + varint_size(len) + len; /* Tag of field 2 (one byte), length, bytes. */
  }
  pp->resp_len = total;
  if ((int64_t)total > max_bytes)
    return PK_EINVAL;
  pp->ranks = malloc(pp->off[n] > 0 ? pp->off[n] : 1);
  pp->resp = malloc(total > 0 ? total : 1);
  if (pp->ranks == NULL || pp->resp == NULL)
    return PK_ENOMEM;
  uint8_t *p = pp->resp;
  p += packd__v1__plan_response__pack(&head, p);
  for (size_t r = 0; r < n; r++) {
    size_t len = pp->off[r + 1] - pp->off[r];
    packd__v1__rank_plan__pack(resp->ranks[r], pp->ranks + pp->off[r]);
    *p++ = (uint8_t)((2u << 3) | 2u); /* Field 2 (ranks), length-delimited. */
    p = put_varint(p, len);
    memcpy(p, pp->ranks + pp->off[r], len);
    p += len;
  }
  p += packd__v1__plan_response__pack(&tail, p);
  return (size_t)(p - pp->resp) == total ? PK_OK : PK_EINTERNAL;
}

static void packed_plan_free(packed_plan_t *pp) {
  free(pp->ranks);
  free(pp->off);
  free(pp->resp);
}

size_t pk_pack_plan_response(Packd__V1__PlanResponse *resp, uint8_t **out) {
  packed_plan_t pp;
  *out = NULL;
  size_t len = 0;
  if (pack_plan(resp, INT64_MAX, &pp) == PK_OK) {
    *out = pp.resp;
    len = pp.resp_len;
    pp.resp = NULL;
  }
  packed_plan_free(&pp);
  return len;
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
  pk_plan_id_for(env->plan_id_key, msg, reply->plan_id, sizeof reply->plan_id);
  if (reply->plan_id[0] == '\0') {
    pk_codec_free_request(msg);
    pk_reply_error(reply, PK_GRPC_INTERNAL, "plan_id: the keyed id could not be computed");
    return;
  }

  double t0 = pk_monotonic_seconds();
  pk_plan_t *plan = NULL;
  rc = pk_plan_limited(&preq, &env->plan_limits, &plan, err, sizeof err);
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
  /* GetRankPlan answers carry the plan_id; the codec puts it into every
   * rank already, so the packed ranks serve both. Should a rank lack it,
   * it is set for the packing and put back before the response is freed. */
  char **saved = NULL;
  for (size_t r = 0; r < resp->n_ranks && saved == NULL; r++)
    if (resp->ranks[r]->plan_id == NULL || strcmp(resp->ranks[r]->plan_id, reply->plan_id) != 0)
      saved = calloc(resp->n_ranks, sizeof *saved);
  if (saved != NULL) {
    for (size_t r = 0; r < resp->n_ranks; r++) {
      saved[r] = resp->ranks[r]->plan_id;
      resp->ranks[r]->plan_id = reply->plan_id;
    }
  }
  packed_plan_t pp;
  rc = pack_plan(resp, env->max_message_bytes, &pp);
  size_t n_ranks = resp->n_ranks;
  if (saved != NULL) {
    for (size_t r = 0; r < resp->n_ranks; r++)
      resp->ranks[r]->plan_id = saved[r];
    free(saved);
  }
  pk_codec_free_response(resp);
  if (rc == PK_EINVAL) {
    pk_reply_error(reply, PK_GRPC_RESOURCE_EXHAUSTED,
                   "the plan for %llu sequences is %zu bytes, over --max-message-bytes %lld",
                   (unsigned long long)reply->sequences, pp.resp_len,
                   (long long)env->max_message_bytes);
  } else if (rc != PK_OK) {
    pk_reply_error(reply, PK_GRPC_RESOURCE_EXHAUSTED, "cannot allocate %zu bytes for the plan",
                   pp.resp_len);
  } else {
    reply->bytes = pp.resp;
    reply->len = pp.resp_len;
    pp.resp = NULL;
    if (env->store != NULL) {
      /* A failed write leaves the plan on this server only; the store logs
       * the outage once and counts it. */
      char why[512];
      double ts = pk_monotonic_seconds();
      (void)pk_plan_store_put(env->store, reply->plan_id, (uint32_t)n_ranks, pp.ranks, pp.off, why,
                              sizeof why);
      if (env->metrics != NULL)
        pk_histogram_observe_seconds(&env->metrics->store_write_seconds,
                                     pk_monotonic_seconds() - ts);
    }
    if (env->cache != NULL) {
      /* The cache owns the rank bytes from here on, also when it refuses
       * them (a plan larger than the cache is simply not kept). */
      pk_plan_cache_put(env->cache, reply->plan_id, (uint32_t)n_ranks, pp.ranks, pp.off, env->now);
      pp.ranks = NULL;
    }
    reply->code = PK_GRPC_OK;
  }
  packed_plan_free(&pp);
  double t2 = pk_monotonic_seconds();
  if (env->metrics != NULL && reply->code == PK_GRPC_OK)
    pk_metrics_plan(env->metrics, reply->sequences, t1 - t0, t2 - t1);
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
