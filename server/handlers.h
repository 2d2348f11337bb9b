/* The RPC handlers of packd, on bytes: each takes the packed request message
 * and produces a gRPC status, a message naming the field and the value, and
 * (on success) the packed response. No gRPC types here, so the handlers run
 * the same in the server and in unit tests.
 *
 * Ownership: the request bytes stay the caller's. reply->bytes is malloc'd by
 * the handler; the caller owns it and frees it with free() (the server hands
 * it to gRPC without a copy). */
#ifndef PK_HANDLERS_H
#define PK_HANDLERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grpc_status_names.h"
#include "metrics.h"
#include "pk_planner.h"
#include "plan_cache.h"
#include "plan_store.h"

/* The service names Health/Check knows. "" is the whole server. */
#define PK_SERVICE_PLANNER "packd.v1.Planner"

typedef struct pk_handler_env {
  pk_plan_cache_t *cache;    /* May be NULL: plans are not kept. */
  pk_metrics_t *metrics;     /* May be NULL: nothing is recorded. */
  int64_t max_message_bytes; /* A response larger than this is refused. */
  bool serving;              /* What Health/Check reports. */
  double now;                /* Monotonic seconds, for the cache. */
  pk_plan_store_t *store;    /* May be NULL: plans are not shared with other servers. */
  pk_limits_t plan_limits;   /* Checked before planning; zero fields: no limit. */
  /* Keys plan ids (plan_id.h); NULL: the unkeyed pk_codec_plan_id. */
  const struct pk_plan_id_key *plan_id_key;
} pk_handler_env_t;

typedef struct pk_reply {
  int code;          /* gRPC status code. */
  char message[512]; /* Status details; empty on success. */
  uint8_t *bytes;    /* Packed response message, or NULL. */
  size_t len;
  uint64_t sequences; /* Plan: sequences in the request (for logs). */
  char plan_id[40];   /* Plan and GetRankPlan: the plan id, when known. */
} pk_reply_t;

/* packd.v1.Planner/Plan: decode, plan, encode, write the ranks to the plan
 * store (when there is one) and keep them in the cache. The store write
 * comes before the answer, so a trainer that has the plan can hand its id to
 * workers that ask any replica; a failed write does not fail the Plan. */
void pk_handle_plan(const pk_handler_env_t *env, const uint8_t *req, size_t len, pk_reply_t *reply);

/* packd.v1.Planner/GetRankPlan: one rank of a plan from the cache or, on a
 * miss, from the plan store (which then fills the cache). NOT_FOUND naming
 * the plan_id when it is not (or no longer) there; with a store, only when
 * the store answered that it has no such plan. UNAVAILABLE, naming the
 * store, when the store cannot be asked or holds a value that fails its
 * checks. */
void pk_handle_get_rank_plan(const pk_handler_env_t *env, const uint8_t *req, size_t len,
                             pk_reply_t *reply);

/* grpc.health.v1.Health/Check: SERVING or NOT_SERVING for "" and
 * "packd.v1.Planner"; NOT_FOUND for any other service. */
void pk_handle_health_check(const pk_handler_env_t *env, const uint8_t *req, size_t len,
                            pk_reply_t *reply);

/* Fills reply with a status and a formatted message and no bytes. */
void pk_reply_error(pk_reply_t *reply, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
