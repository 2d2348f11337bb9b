/* The gRPC C core server of packd (see grpc_server.h).
 *
 * Every request handed to gRPC (grpc_server_request_*call) uses one heap
 * context; the out-parameters of a request live in that context, because
 * gRPC writes them even when it fails the request at shutdown. A call that
 * arrived has three operations in gRPC at most, each with its own tag
 * inside the context: the close op (RECV_CLOSE_ON_SERVER, started at once,
 * so that a client that leaves is noticed while the call waits or plans),
 * the message op (RECV_MESSAGE, started only once the call is
 * authenticated and admitted: the methods are registered without a payload
 * so that no body is read before) and the final batch (the answer). The
 * context is freed when all have completed (a reference count), and only
 * then is the call counted and logged, with the close op's verdict.
 *
 * A count of live contexts, guarded by one mutex together with the posting
 * of new requests, tells when the server has really stopped: after the
 * shutdown tag *and* after the last context is freed (the tag may arrive
 * while calls are still finishing). */
#include "grpc_server.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "call_stop.h"
#include "clock.h"
#include "grpc_int_arg.h"
#include "handlers.h"
#include "log.h"
#include "log_limit.h"
#include "pk_error.h"
#include "request_body.h"
#include "security.h"
#include "work_queue.h"

typedef enum { K_PLAN = 0, K_GET_RANK = 1, K_HEALTH = 2, K_GENERIC = 3, K_KINDS = 4 } kind_t;

static const char *const k_paths[K_GENERIC] = {
    "/packd.v1.Planner/Plan",
    "/packd.v1.Planner/GetRankPlan",
    "/grpc.health.v1.Health/Check",
};

static const pk_method_t k_kind_method[K_KINDS] = {PK_METHOD_PLAN, PK_METHOD_GET_RANK_PLAN,
                                                   PK_METHOD_HEALTH_CHECK, PK_METHOD_UNKNOWN};

/* Completion-queue threads. Two, so that one reading a large request does
 * not hold up a Health/Check on another connection. */
#define PK_CQ_THREADS 2

/* The most bytes a GetRankPlan or Health/Check request may inflate to: a
 * plan id and a rank, or a service name, with room for unknown fields. */
#define PK_SMALL_REQUEST_BYTES (64 << 10)

/* What a completion-queue tag points to. */
typedef enum { TAG_REQUEST = 0, TAG_CLOSE = 1, TAG_FINAL = 2, TAG_MESSAGE = 3 } tag_kind_t;

typedef struct call_ctx call_ctx_t;
typedef struct ctx_tag {
  call_ctx_t *ctx;
  tag_kind_t kind;
} ctx_tag_t;

struct call_ctx {
  pk_work_item_t work; /* First member: a queue item is its context. */
  pk_grpc_server_t *srv;
  kind_t kind;
  ctx_tag_t t_request, t_close, t_final, t_message;
  /* Out-parameters of the request; gRPC fills them. */
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array md;
  grpc_byte_buffer *payload;
  grpc_call_details details; /* Generic requests only. */
  int no_payload;            /* The call arrived without its message. */
  /* Operations in gRPC (close op, message, final batch); the last to
   * complete frees the context. */
  atomic_int refs;
  int cancelled;       /* Written by gRPC when the close op completes. */
  pk_call_stop_t stop; /* The flag the planner polls (call_stop.h). */
  atomic_int answered; /* The answer is decided; a later stop changes nothing. */
  /* The answer. */
  grpc_slice status_details;
  int has_status_details;
  grpc_byte_buffer *reply_bb;
  int code;
  int counted_inflight;
  double t_accept;
  uint64_t sequences;
  char plan_id[40];
  char note[512]; /* Status message, for the log line. */
};

struct pk_grpc_server {
  pk_server_config_t cfg;
  grpc_server *server;
  grpc_completion_queue *cq;
  void *methods[K_GENERIC];
  pthread_t cq_threads[PK_CQ_THREADS];
  int n_cq_threads;
  pthread_t *workers;
  int n_workers;
  pk_work_queue_t queue;
  pk_plan_cache_t *cache;
  pk_plan_store_t *store;
  pk_metrics_t *metrics;
  pk_security_t *security;   /* TLS credentials, tokens, plan id key (security.h). */
  pk_decode_budget_t budget; /* Request bytes in flight (decode_budget.h). */
  pk_log_limit_t log_limit;  /* Refused calls' log lines (log_limit.h). */
  pk_stopped_fn on_stopped;
  void *user;
  atomic_bool serving;
  pk_server_stop_t stop; /* Set when the grace period is over: stop everything. */
  pthread_mutex_t mu;
  int shutdown_started;
  int shutdown_done;
  int stopped_signalled;
  int forced; /* Idle connections were closed after the last call. */
  long contexts;
  char shutdown_tag; /* Its address is the shutdown tag. */
};

/* Under s->mu: tells the controlling thread once that everything is over. */
static int take_stop_locked(pk_grpc_server_t *s) {
  if (s->shutdown_done && s->contexts == 0 && !s->stopped_signalled) {
    s->stopped_signalled = 1;
    return 1;
  }
  return 0;
}

static void free_ctx(call_ctx_t *ctx) {
  pk_grpc_server_t *s = ctx->srv;
  grpc_metadata_array_destroy(&ctx->md);
  if (ctx->kind == K_GENERIC)
    grpc_call_details_destroy(&ctx->details);
  if (ctx->payload != NULL)
    grpc_byte_buffer_destroy(ctx->payload);
  if (ctx->reply_bb != NULL)
    grpc_byte_buffer_destroy(ctx->reply_bb);
  if (ctx->has_status_details)
    grpc_slice_unref(ctx->status_details);
  if (ctx->call != NULL)
    grpc_call_unref(ctx->call);
  if (ctx->counted_inflight)
    atomic_fetch_sub(&s->metrics->inflight, 1);
  free(ctx);
  pthread_mutex_lock(&s->mu);
  s->contexts--;
  int stop = take_stop_locked(s);
  /* Shutdown waits for every client connection to close, and an idle
   * client may keep its connection for seconds after the GOAWAY. Once the
   * last call is answered nothing is left to wait for: disconnect them. */
  int force = s->shutdown_started && !s->shutdown_done && s->contexts == 0 && !s->forced;
  if (force)
    s->forced = 1;
  pthread_mutex_unlock(&s->mu);
  if (force)
    grpc_server_cancel_all_calls(s->server);
  if (stop)
    s->on_stopped(s->user);
}

/* Keeps one more request of `kind` pending; s->mu is held. Does nothing
 * once shutdown has begun. Returns 0, or -1 when no request could be
 * posted. */
static int post_request_locked(pk_grpc_server_t *s, kind_t kind) {
  if (s->shutdown_started)
    return 0;
  call_ctx_t *ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) {
    PK_LOG_ERROR("out of memory posting a %s request", pk_method_name(k_kind_method[kind]));
    return -1;
  }
  ctx->srv = s;
  ctx->kind = kind;
  ctx->t_request = (ctx_tag_t){ctx, TAG_REQUEST};
  ctx->t_close = (ctx_tag_t){ctx, TAG_CLOSE};
  ctx->t_final = (ctx_tag_t){ctx, TAG_FINAL};
  ctx->t_message = (ctx_tag_t){ctx, TAG_MESSAGE};
  atomic_init(&ctx->refs, 0);
  pk_call_stop_init(&ctx->stop, &s->stop, INFINITY);
  atomic_init(&ctx->answered, 0);
  grpc_metadata_array_init(&ctx->md);
  grpc_call_error err;
  if (kind == K_GENERIC) {
    grpc_call_details_init(&ctx->details);
    err = grpc_server_request_call(s->server, &ctx->call, &ctx->details, &ctx->md, s->cq, s->cq,
                                   &ctx->t_request);
  } else {
    /* No payload: the message is received by start_receive, after the call
     * is authenticated and admitted. */
    err =
        grpc_server_request_registered_call(s->server, s->methods[kind], &ctx->call, &ctx->deadline,
                                            &ctx->md, NULL, s->cq, s->cq, &ctx->t_request);
  }
  if (err != GRPC_CALL_OK) {
    grpc_metadata_array_destroy(&ctx->md);
    if (kind == K_GENERIC)
      grpc_call_details_destroy(&ctx->details);
    free(ctx);
    PK_LOG_ERROR("cannot post a %s request: grpc_call_error %d",
                 pk_method_name(k_kind_method[kind]), (int)err);
    return -1;
  }
  s->contexts++;
  return 0;
}

static int post_request(pk_grpc_server_t *s, kind_t kind) {
  pthread_mutex_lock(&s->mu);
  int rc = post_request_locked(s, kind);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* Records and logs a finished call, then frees its context. */
static void finish_call(call_ctx_t *ctx) {
  pk_grpc_server_t *s = ctx->srv;
  double secs = pk_monotonic_seconds() - ctx->t_accept;
  int code = ctx->code;
  int reason = pk_call_stop_reason(&ctx->stop);
  if (reason != PK_STOP_NONE) {
    /* Stopped before its answer was decided: the answer already says why. */
    code = pk_call_stop_code(reason);
  } else if (ctx->cancelled && (code == PK_GRPC_OK || ctx->no_payload)) {
    /* The answer did not reach the client (it left, its deadline passed,
     * or the server cancelled it at the end of shutdown): the call is
     * counted by why, never by the answer it did not get. */
    if (pk_call_stop_near_deadline(&ctx->stop, pk_monotonic_seconds()))
      code = PK_GRPC_DEADLINE_EXCEEDED;
    else if (pk_server_stop_aborting(&s->stop))
      code = PK_GRPC_UNAVAILABLE;
    else
      code = PK_GRPC_CANCELLED;
    snprintf(ctx->note, sizeof ctx->note, "the call ended before its answer was delivered");
  }
  pk_method_t method = k_kind_method[ctx->kind];
  pk_metrics_request(s->metrics, method, code, secs);
  if (code == PK_GRPC_INTERNAL) {
    PK_LOG_ERROR("rpc %s code=%s %.3fms seqs=%llu plan_id=%s: %s", pk_method_name(method),
                 pk_grpc_code_name(code), secs * 1e3, (unsigned long long)ctx->sequences,
                 ctx->plan_id[0] ? ctx->plan_id : "-", ctx->note);
  } else if (code != PK_GRPC_OK) {
    /* Refused and failed calls: at most one line per code and interval, with
     * the count of those left out (a client without a token must not fill
     * the log). */
    uint64_t more = 0;
    if (pk_log_limit_admit(&s->log_limit, code, pk_monotonic_seconds(), &more)) {
      char tail[96] = "";
      if (more > 0)
        snprintf(tail, sizeof tail, " (and %llu more %s calls since the last such line)",
                 (unsigned long long)more, pk_grpc_code_name(code));
      PK_LOG_WARN("rpc %s code=%s %.3fms seqs=%llu plan_id=%s: %s%s", pk_method_name(method),
                  pk_grpc_code_name(code), secs * 1e3, (unsigned long long)ctx->sequences,
                  ctx->plan_id[0] ? ctx->plan_id : "-", ctx->note, tail);
    }
  } else if (pk_log_enabled(PK_LOG_DEBUG)) {
    pk_log(PK_LOG_DEBUG, "rpc %s code=OK %.3fms seqs=%llu plan_id=%s", pk_method_name(method),
           secs * 1e3, (unsigned long long)ctx->sequences, ctx->plan_id[0] ? ctx->plan_id : "-");
  }
  free_ctx(ctx);
}

/* Drops one reference (a completed op, or an op that was never started);
 * the last one finishes the call. */
static void release(call_ctx_t *ctx) {
  if (atomic_fetch_sub(&ctx->refs, 1) == 1)
    finish_call(ctx);
}

/* Starts the final batch of a call: initial metadata, the message (on
 * success) and the status. Takes reply->bytes. */
static void send_answer(call_ctx_t *ctx, pk_reply_t *reply) {
  atomic_store(&ctx->answered, 1);
  grpc_op ops[3];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[n].data.send_initial_metadata.count = 0;
  n++;
  if (reply->code == PK_GRPC_OK && reply->bytes != NULL) {
    grpc_slice slice;
    if (reply->len > 0) {
      /* gRPC frees the bytes with free() when it is done: no copy. */
      slice = grpc_slice_new(reply->bytes, reply->len, free);
    } else {
      free(reply->bytes);
      slice = grpc_empty_slice();
    }
    reply->bytes = NULL;
    ctx->reply_bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = ctx->reply_bb;
    n++;
  } else {
    free(reply->bytes);
    reply->bytes = NULL;
  }
  ctx->status_details = grpc_slice_from_copied_string(reply->message);
  ctx->has_status_details = 1;
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.trailing_metadata_count = 0;
  ops[n].data.send_status_from_server.status = (grpc_status_code)reply->code;
  ops[n].data.send_status_from_server.status_details = &ctx->status_details;
  n++;

  ctx->code = reply->code;
  ctx->sequences = reply->sequences;
  memcpy(ctx->plan_id, reply->plan_id, sizeof ctx->plan_id);
  if (reply->code != PK_GRPC_OK)
    snprintf(ctx->note, sizeof ctx->note, "%s", reply->message);
  grpc_call_error err = grpc_call_start_batch(ctx->call, ops, n, &ctx->t_final, NULL);
  if (err != GRPC_CALL_OK) {
    PK_LOG_ERROR("grpc_call_start_batch failed: grpc_call_error %d", (int)err);
    ctx->code = PK_GRPC_INTERNAL;
    release(ctx);
  }
}

/* The most bytes a request of this kind may decode to. */
static int64_t body_limit(const call_ctx_t *ctx) {
  return ctx->kind == K_PLAN ? ctx->srv->cfg.max_message_bytes : PK_SMALL_REQUEST_BYTES;
}

/* Runs the handler of a registered method on the request bytes: the
 * message is read (and inflated) here, under the decoded-bytes budget, and
 * its bytes are held, and charged, until the handler returns. */
static void run_handler(call_ctx_t *ctx, pk_reply_t *reply) {
  pk_grpc_server_t *s = ctx->srv;
  if (ctx->payload == NULL) {
    pk_reply_error(reply, PK_GRPC_INVALID_ARGUMENT, "request: the call carried no message");
    return;
  }
  pk_request_body_t body;
  char why[sizeof reply->message];
  pk_body_result_t br =
      pk_request_body_read(ctx->payload, body_limit(ctx), &s->budget, &body, why, sizeof why);
  /* The request is in `body` now (or refused); drop the buffer before
   * planning so that a large request is not held twice. */
  grpc_byte_buffer_destroy(ctx->payload);
  ctx->payload = NULL;
  if (br != PK_BODY_OK) {
    pk_reply_error(reply, br == PK_BODY_BAD ? PK_GRPC_INVALID_ARGUMENT : PK_GRPC_RESOURCE_EXHAUSTED,
                   "%s", why);
    return;
  }

  pk_handler_env_t env = {
      .cache = s->cache,
      .metrics = s->metrics,
      .max_message_bytes = s->cfg.max_message_bytes,
      .plan_limits = {.max_sequences = (uint64_t)s->cfg.max_sequences,
                      .max_plan_bytes = (uint64_t)s->cfg.max_plan_bytes,
                      .should_stop = pk_call_stop_poll,
                      .stop_arg = &ctx->stop},
      .serving = atomic_load(&s->serving),
      .now = pk_monotonic_seconds(),
      .store = s->store,
      .plan_id_key = pk_security_plan_id_key(s->security),
  };
  switch (ctx->kind) {
  case K_PLAN:
    pk_handle_plan(&env, body.bytes, body.len, reply);
    break;
  case K_GET_RANK:
    pk_handle_get_rank_plan(&env, body.bytes, body.len, reply);
    break;
  case K_HEALTH:
    pk_handle_health_check(&env, body.bytes, body.len, reply);
    break;
  default:
    pk_reply_error(reply, PK_GRPC_INTERNAL, "no handler");
    break;
  }
  pk_request_body_free(&body);
}

/* On a planning worker: a Plan or GetRankPlan taken off the queue. */
static void work_call(call_ctx_t *ctx) {
  pk_grpc_server_t *s = ctx->srv;
  pk_reply_t reply;
  memset(&reply, 0, sizeof reply);
  if (ctx->kind == K_PLAN && s->cfg.debug_delay_ms > 0)
    pk_call_stop_sleep(&ctx->stop, s->cfg.debug_delay_ms);
  if (pk_call_stop_poll(&ctx->stop)) {
    if (pk_call_stop_reason(&ctx->stop) == PK_STOP_DEADLINE)
      atomic_fetch_add(&s->metrics->deadline_skipped, 1);
    pk_call_stop_reply(&ctx->stop, &reply, "before the server started the call", s->metrics);
  } else {
    run_handler(ctx, &reply);
    if (reply.code != PK_GRPC_OK && pk_call_stop_reason(&ctx->stop) != PK_STOP_NONE) {
      /* The planner returned PK_ECANCELED (or a stage that was stopped
       * failed on that account): say why, and how long the stop took from
       * its cause to the planner's return. */
      pk_histogram_observe_seconds(&s->metrics->stop_seconds,
                                   pk_monotonic_seconds() - atomic_load(&ctx->stop.t_stop));
      pk_call_stop_reply(&ctx->stop, &reply, "while planning", s->metrics);
      PK_LOG_INFO("plan of %llu sequences stopped (%s): %s", (unsigned long long)reply.sequences,
                  pk_stop_reason_name(pk_call_stop_reason(&ctx->stop)), reply.message);
    }
  }
  pk_work_queue_done(&s->queue, &ctx->work);
  send_answer(ctx, &reply);
}

static void *worker_main(void *arg) {
  pk_grpc_server_t *s = arg;
  pk_work_item_t *it;
  while ((it = pk_work_queue_pop(&s->queue)) != NULL)
    work_call((call_ctx_t *)it);
  return NULL;
}

/* The call's deadline on the monotonic clock of pk_monotonic_seconds(). */
static double deadline_mono(const call_ctx_t *ctx) {
  gpr_timespec dl = ctx->deadline;
  if (gpr_time_cmp(dl, gpr_inf_future(dl.clock_type)) == 0)
    return INFINITY;
  gpr_timespec now = gpr_now(GPR_CLOCK_MONOTONIC);
  gpr_timespec left = gpr_time_sub(gpr_convert_clock_type(dl, GPR_CLOCK_MONOTONIC), now);
  return pk_monotonic_seconds() + (double)left.tv_sec + (double)left.tv_nsec * 1e-9;
}

/* Starts receiving the message of an admitted call; TAG_MESSAGE reports
 * it (on_message). Returns false when gRPC refused the op. */
static bool start_receive(call_ctx_t *ctx) {
  atomic_fetch_add(&ctx->refs, 1);
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &ctx->payload;
  grpc_call_error err = grpc_call_start_batch(ctx->call, &op, 1, &ctx->t_message, NULL);
  if (err != GRPC_CALL_OK) {
    atomic_fetch_sub(&ctx->refs, 1);
    PK_LOG_ERROR("cannot receive a call's message: grpc_call_error %d", (int)err);
    return false;
  }
  return true;
}

/* On a completion-queue thread: a new call arrived on a pending request,
 * with its metadata only. Every call is authenticated first, from its
 * metadata (only Health/Check needs no token); an unknown method is then
 * answered UNIMPLEMENTED, and a call over --max-inflight or arriving while
 * the server aborts is answered at once. Only an admitted call's message is
 * received (start_receive): a client without credentials never has its body
 * read or inflated. */
static void start_call(call_ctx_t *ctx) {
  pk_grpc_server_t *s = ctx->srv;
  ctx->t_accept = pk_monotonic_seconds();
  ctx->stop.deadline = ctx->kind == K_GENERIC ? INFINITY : deadline_mono(ctx);
  long inflight = (long)atomic_fetch_add(&s->metrics->inflight, 1) + 1;
  ctx->counted_inflight = 1;

  /* The close op first: it reports a client that leaves while the call
   * waits or plans. One reference for it, one for the answer. */
  atomic_store(&ctx->refs, 2);
  grpc_op close_op;
  memset(&close_op, 0, sizeof close_op);
  close_op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  close_op.data.recv_close_on_server.cancelled = &ctx->cancelled;
  grpc_call_error err = grpc_call_start_batch(ctx->call, &close_op, 1, &ctx->t_close, NULL);
  if (err != GRPC_CALL_OK) {
    PK_LOG_ERROR("cannot watch a call for cancellation: grpc_call_error %d", (int)err);
    atomic_store(&ctx->refs, 1);
  }

  pk_reply_t reply;
  memset(&reply, 0, sizeof reply);
  if (pk_security_authorize(s->security, ctx->kind == K_HEALTH, &ctx->md, reply.message,
                            sizeof reply.message) != PK_OK) {
    reply.code = GRPC_STATUS_UNAUTHENTICATED;
  } else if (ctx->kind == K_GENERIC) {
    char *path = grpc_slice_to_c_string(ctx->details.method);
    pk_reply_error(&reply, PK_GRPC_UNIMPLEMENTED, "method %.120s is not implemented by packd",
                   path ? path : "?");
    gpr_free(path);
  } else if (ctx->kind != K_HEALTH && inflight > s->cfg.max_inflight) {
    atomic_fetch_add(&s->metrics->rejected_inflight, 1);
    pk_reply_error(&reply, PK_GRPC_RESOURCE_EXHAUSTED,
                   "server busy: %ld calls in flight, over --max-inflight %d; retry later",
                   inflight, s->cfg.max_inflight);
  } else if (ctx->kind != K_HEALTH && pk_server_stop_aborting(&s->stop)) {
    pk_call_stop_set(&ctx->stop, PK_STOP_SHUTDOWN, atomic_load(&s->stop.t_abort));
    pk_call_stop_reply(&ctx->stop, &reply, "before the server started the call", s->metrics);
  } else if (start_receive(ctx)) {
    return;
  } else {
    pk_reply_error(&reply, PK_GRPC_INTERNAL, "cannot receive the call's message");
  }
  send_answer(ctx, &reply);
}

/* On a completion-queue thread: the message of an admitted call arrived
 * (or the call ended without one). Health is answered here (no planning,
 * no blocking); Plan and GetRankPlan go to the admission queue. The
 * message op's reference is dropped last. */
static void on_message(call_ctx_t *ctx, int success) {
  pk_grpc_server_t *s = ctx->srv;
  pk_reply_t reply;
  memset(&reply, 0, sizeof reply);
  ctx->no_payload = !success || ctx->payload == NULL;
  if (ctx->no_payload) {
    pk_reply_error(&reply, PK_GRPC_INVALID_ARGUMENT, "request: the call carried no message");
  } else if (ctx->kind == K_HEALTH) {
    run_handler(ctx, &reply);
  } else if (pk_server_stop_aborting(&s->stop)) {
    pk_call_stop_set(&ctx->stop, PK_STOP_SHUTDOWN, atomic_load(&s->stop.t_abort));
    pk_call_stop_reply(&ctx->stop, &reply, "before the server started the call", s->metrics);
  } else {
    int large = ctx->kind == K_PLAN &&
                (int64_t)grpc_byte_buffer_length(ctx->payload) >= s->cfg.large_request_bytes;
    pk_work_queue_push(&s->queue, &ctx->work, large);
    release(ctx);
    return;
  }
  send_answer(ctx, &reply);
  release(ctx);
}

/* On a completion-queue thread: the close op completed. When the client
 * left before the answer was decided, the planner's poll sees the flag; a
 * call still waiting in the queue is answered now instead of when a
 * worker would reach it. */
static void on_close(call_ctx_t *ctx) {
  pk_grpc_server_t *s = ctx->srv;
  if (ctx->cancelled && !atomic_load(&ctx->answered)) {
    pk_call_stop_client_left(&ctx->stop, pk_monotonic_seconds());
    if (pk_work_queue_remove(&s->queue, &ctx->work)) {
      pk_reply_t reply;
      memset(&reply, 0, sizeof reply);
      pk_call_stop_reply(&ctx->stop, &reply, "while the call waited for a worker", s->metrics);
      send_answer(ctx, &reply);
    }
  }
  release(ctx);
}

/* Handles one completion-queue event. */
static void process_event(pk_grpc_server_t *s, grpc_event ev) {
  if (ev.type != GRPC_OP_COMPLETE)
    return;
  if (ev.tag == &s->shutdown_tag) {
    pthread_mutex_lock(&s->mu);
    s->shutdown_done = 1;
    int stop = take_stop_locked(s);
    pthread_mutex_unlock(&s->mu);
    if (stop)
      s->on_stopped(s->user);
    return;
  }
  ctx_tag_t *tag = ev.tag;
  call_ctx_t *ctx = tag->ctx;
  switch (tag->kind) {
  case TAG_FINAL:
    release(ctx);
    break;
  case TAG_CLOSE:
    on_close(ctx);
    break;
  case TAG_MESSAGE:
    on_message(ctx, ev.success);
    break;
  case TAG_REQUEST:
    if (!ev.success) {
      /* The server is shutting down and failed this pending request. */
      free_ctx(ctx);
    } else {
      /* Replace the request first, so the next call of this method can be
       * taken while this one is being handled. */
      post_request(s, ctx->kind);
      start_call(ctx);
    }
    break;
  }
}

static void *cq_main(void *arg) {
  pk_grpc_server_t *s = arg;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN)
      break;
    process_event(s, ev);
  }
  return NULL;
}

static void ignore_stopped(void *user) {
  (void)user;
}

/* Stops a started server and frees it; only for failures during start-up.
 * With completion-queue threads running they drain the queue and this
 * thread waits; without any, this thread drains it. */
static void stop_at_start(pk_grpc_server_t *s) {
  bool drain_here = s->n_cq_threads == 0;
  s->on_stopped = ignore_stopped;
  pk_grpc_server_shutdown(s);
  grpc_server_cancel_all_calls(s->server);
  for (;;) {
    pthread_mutex_lock(&s->mu);
    int done = s->stopped_signalled;
    pthread_mutex_unlock(&s->mu);
    if (done)
      break;
    if (drain_here) {
      process_event(s, grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL));
    } else {
      struct timespec ts = {0, 1000000L};
      nanosleep(&ts, NULL);
    }
  }
  pk_grpc_server_destroy(s);
}

int pk_grpc_server_start(const pk_server_config_t *cfg, pk_plan_cache_t *cache,
                         pk_plan_store_t *store, pk_metrics_t *metrics, pk_stopped_fn on_stopped,
                         void *user, pk_grpc_server_t **out, int *bound_port, char *err,
                         size_t errlen) {
  *out = NULL;
  pk_grpc_server_t *s = calloc(1, sizeof *s);
  if (s == NULL)
    return PK_ENOMEM;
  s->cfg = *cfg;
  s->cache = cache;
  s->store = store;
  s->metrics = metrics;
  s->on_stopped = on_stopped;
  s->user = user;
  s->workers = calloc((size_t)cfg->workers, sizeof *s->workers);
  if (s->workers == NULL) {
    free(s);
    return PK_ENOMEM;
  }
  int rc = pk_security_open(cfg, &s->security, err, errlen);
  if (rc != PK_OK) {
    free(s->workers);
    free(s);
    return rc;
  }
  atomic_init(&s->serving, true);
  pk_server_stop_init(&s->stop);
  pthread_mutex_init(&s->mu, NULL);
  pk_work_queue_init(&s->queue, pk_config_large_workers(cfg));
  pk_decode_budget_init(&s->budget, cfg->max_decoded_bytes > 0
                                        ? cfg->max_decoded_bytes
                                        : pk_decode_budget_default(cfg->max_message_bytes));
  pk_log_limit_init(&s->log_limit, cfg->log_refused_interval);

  int maxmsg = cfg->max_message_bytes > INT32_MAX ? INT32_MAX : (int)cfg->max_message_bytes;
  grpc_arg args[] = {
      pk_grpc_int_arg(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, maxmsg),
      pk_grpc_int_arg(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, maxmsg),
      /* Off, so that a second server on the same port fails to bind instead
       * of silently sharing it. */
      pk_grpc_int_arg(GRPC_ARG_ALLOW_REUSEPORT, 0),
      pk_grpc_int_arg(GRPC_ARG_KEEPALIVE_TIME_MS, 60000),
      pk_grpc_int_arg(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000),
      pk_grpc_int_arg(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1),
      /* Accept client keepalive pings as often as every 10 s. */
      pk_grpc_int_arg(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000),
      pk_grpc_int_arg(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0),
      /* Off: a compressed message is inflated by request_body.c, after the
       * call is authenticated and under the decoded-bytes budget. */
      pk_grpc_int_arg(GRPC_ARG_ENABLE_PER_MESSAGE_DECOMPRESSION, 0),
  };
  grpc_channel_args cargs = {sizeof args / sizeof args[0], args};
  s->server = grpc_server_create(&cargs, NULL);
  s->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(s->server, s->cq, NULL);
  for (int k = 0; k < K_GENERIC; k++)
    s->methods[k] =
        grpc_server_register_method(s->server, k_paths[k], NULL, GRPC_SRM_PAYLOAD_NONE, 0);

  grpc_server_credentials *creds = pk_security_credentials(s->security);
  int port = creds != NULL ? grpc_server_add_http2_port(s->server, cfg->listen, creds) : 0;
  if (creds != NULL)
    grpc_server_credentials_release(creds);
  if (port == 0) {
    snprintf(err, errlen,
             "cannot listen for gRPC on %s: the address is in use, not local or not valid "
             "(another packd on this port?)",
             cfg->listen);
    grpc_server_destroy(s->server);
    grpc_completion_queue_shutdown(s->cq);
    while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(s->cq);
    pk_work_queue_destroy(&s->queue);
    pthread_mutex_destroy(&s->mu);
    pk_security_close(s->security);
    free(s->workers);
    free(s);
    return PK_EINVAL;
  }
  *bound_port = port;
  grpc_server_start(s->server);

  /* Pending requests: a few per method, replaced as each call arrives (the
   * completion-queue threads never block, so calls are taken at once); a
   * generic one catches unknown methods. */
  int per_kind = cfg->workers < 2 ? 2 : cfg->workers;
  for (int k = 0; k < K_KINDS; k++) {
    int want = (k == K_PLAN || k == K_GET_RANK) ? per_kind : 2;
    for (int i = 0; i < want; i++)
      post_request(s, (kind_t)k);
  }

  for (int i = 0; i < PK_CQ_THREADS; i++) {
    if (pthread_create(&s->cq_threads[i], NULL, cq_main, s) != 0)
      break;
    s->n_cq_threads++;
  }
  for (int i = 0; i < cfg->workers && s->n_cq_threads > 0; i++) {
    if (pthread_create(&s->workers[i], NULL, worker_main, s) != 0) {
      PK_LOG_ERROR("could start only %d of %d workers", i, cfg->workers);
      break;
    }
    s->n_workers++;
  }
  if (s->n_workers == 0) {
    snprintf(err, errlen, "cannot start the server's threads");
    stop_at_start(s);
    return PK_ENOMEM;
  }
  *out = s;
  return PK_OK;
}

void pk_grpc_server_set_serving(pk_grpc_server_t *s, bool serving) {
  atomic_store(&s->serving, serving);
}

bool pk_grpc_server_serving(const pk_grpc_server_t *s) {
  return atomic_load(&((pk_grpc_server_t *)s)->serving);
}

void pk_grpc_server_shutdown(pk_grpc_server_t *s) {
  pthread_mutex_lock(&s->mu);
  int already = s->shutdown_started;
  if (!already) {
    /* Calls that arrived but wait inside gRPC for a pending request would be
     * cancelled by the shutdown. Post enough requests to take them (up to
     * the in-flight bound, which answers the excess RESOURCE_EXHAUSTED), so
     * that every call the server received is answered. The shutdown then
     * fails the requests left over. */
    int extra = s->cfg.max_inflight < 4096 ? s->cfg.max_inflight : 4096;
    for (int k = 0; k < K_GENERIC; k++)
      for (int i = 0; i < extra; i++)
        if (post_request_locked(s, (kind_t)k) != 0)
          break;
  }
  s->shutdown_started = 1;
  pthread_mutex_unlock(&s->mu);
  if (!already)
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
}

void pk_grpc_server_abort(pk_grpc_server_t *s) {
  if (!pk_server_stop_abort(&s->stop))
    return;
  /* Running plans see the flag at their next poll. Calls still waiting for
   * a worker are answered here, now. */
  pk_work_item_t *it;
  while ((it = pk_work_queue_take_any(&s->queue)) != NULL) {
    call_ctx_t *ctx = (call_ctx_t *)it;
    pk_call_stop_set(&ctx->stop, PK_STOP_SHUTDOWN, atomic_load(&s->stop.t_abort));
    pk_reply_t reply;
    memset(&reply, 0, sizeof reply);
    pk_call_stop_reply(&ctx->stop, &reply, "while the call waited for a worker", s->metrics);
    send_answer(ctx, &reply);
  }
}

void pk_grpc_server_cancel_all(pk_grpc_server_t *s) {
  grpc_server_cancel_all_calls(s->server);
}

void pk_grpc_server_queue_stats(pk_grpc_server_t *s, int64_t *queued_small, int64_t *queued_large,
                                int64_t *running_large) {
  *queued_small = (int64_t)pk_work_queue_depth(&s->queue, 0);
  *queued_large = (int64_t)pk_work_queue_depth(&s->queue, 1);
  *running_large = pk_work_queue_running_large(&s->queue);
}

const pk_decode_budget_t *pk_grpc_server_decode_budget(const pk_grpc_server_t *s) {
  return &s->budget;
}

void pk_grpc_server_destroy(pk_grpc_server_t *s) {
  if (s == NULL)
    return;
  /* Every call is finished (on_stopped ran): the workers wait on an empty
   * queue and the completion-queue threads on a queue with no work left. */
  pk_work_queue_close(&s->queue);
  for (int i = 0; i < s->n_workers; i++)
    pthread_join(s->workers[i], NULL);
  grpc_completion_queue_shutdown(s->cq);
  for (int i = 0; i < s->n_cq_threads; i++)
    pthread_join(s->cq_threads[i], NULL);
  free(s->workers);
  grpc_server_destroy(s->server);
  grpc_completion_queue_destroy(s->cq);
  pk_work_queue_destroy(&s->queue);
  pthread_mutex_destroy(&s->mu);
  pk_security_close(s->security);
  free(s);
}

int pk_grpc_server_reload_auth(pk_grpc_server_t *s, char *msg, size_t msglen) {
  return pk_security_reload(s->security, msg, msglen);
}
