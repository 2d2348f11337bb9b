/* packd: the planning service. main() wires the pieces together: the
 * configuration, the plan cache, the plan store shared with other replicas
 * (--plan-store), the metrics, the gRPC server (worker threads) and the libuv
 * loop on this thread, which owns signals, timers and the HTTP listener for
 * /metrics, /healthz and /readyz.
 *
 * Shutdown on SIGTERM or SIGINT: Health/Check and /readyz turn NOT_SERVING at
 * once; after --drain-delay the gRPC listener closes and calls in flight
 * finish; after --grace-period the planning still running is stopped and
 * answered UNAVAILABLE (and a second later whatever is left is cancelled);
 * when the last call is gone the process exits 0. A second signal skips the
 * waiting and stops and cancels at once.
 *
 * SIGHUP re-reads --auth-token-file at once (the calls also notice a
 * changed file by themselves, auth.h), so bearer tokens rotate without a
 * restart; a file that cannot be used keeps the tokens loaded before. */
#include <grpc/grpc.h>
#include <grpc/support/log.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "clock.h"
#include "config.h"
#include "grpc_server.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
#include "pk_error.h"
#include "plan_cache.h"
#include "plan_store.h"
#include "store_format.h"

#ifndef PK_VERSION_STRING
#define PK_VERSION_STRING "0.0.0"
#endif

typedef struct app {
  pk_server_config_t cfg;
  uv_loop_t *loop;
  pk_plan_cache_t *cache;
  pk_plan_store_t *store; /* NULL without --plan-store. */
  pk_metrics_t metrics;
  pk_grpc_server_t *grpc;
  pk_http_t *http;
  uv_signal_t sigterm, sigint;
  uv_signal_t sighup; /* Re-reads the token file. */
  uv_timer_t expire_timer, drain_timer, grace_timer, backstop_timer;
  uv_async_t stopped_async;
  int signals;         /* Signals received so far. */
  int listener_closed; /* pk_grpc_server_shutdown was called. */
  int closing;         /* Handles are being closed; the loop is ending. */
} app_t;

static void on_stopped_from_worker(void *user) {
  app_t *app = user;
  /* The only libuv call that is safe from another thread. */
  uv_async_send(&app->stopped_async);
}

static void close_handles(app_t *app) {
  if (app->closing)
    return;
  app->closing = 1;
  uv_close((uv_handle_t *)&app->sigterm, NULL);
  uv_close((uv_handle_t *)&app->sigint, NULL);
  uv_close((uv_handle_t *)&app->sighup, NULL);
  uv_close((uv_handle_t *)&app->expire_timer, NULL);
  uv_close((uv_handle_t *)&app->drain_timer, NULL);
  uv_close((uv_handle_t *)&app->grace_timer, NULL);
  uv_close((uv_handle_t *)&app->backstop_timer, NULL);
  uv_close((uv_handle_t *)&app->stopped_async, NULL);
  pk_http_close(app->http);
  app->http = NULL;
}

static void on_stopped_async(uv_async_t *a) {
  app_t *app = a->data;
  PK_LOG_INFO("all calls finished; exiting");
  close_handles(app);
}

/* Time given to the answers of stopped calls to reach their clients before
 * the transport cancels whatever is left. The planner stops within about
 * 100 ms of its stop flag; the rest is for sending. */
#define PK_SHUTDOWN_FLUSH_MS 1000

static void on_backstop_timer(uv_timer_t *t) {
  app_t *app = t->data;
  long long left = (long long)atomic_load(&app->metrics.inflight);
  if (left > 0)
    PK_LOG_WARN("%lld calls still unanswered %dms after the grace period: cancelling them", left,
                PK_SHUTDOWN_FLUSH_MS);
  pk_grpc_server_cancel_all(app->grpc);
}

static void on_grace_timer(uv_timer_t *t) {
  app_t *app = t->data;
  long long left = (long long)atomic_load(&app->metrics.inflight);
  if (left > 0)
    PK_LOG_WARN("grace period of %gs is over: stopping %lld calls still in flight (answered "
                "UNAVAILABLE)",
                app->cfg.grace_period, left);
  pk_grpc_server_abort(app->grpc);
  uv_timer_start(&app->backstop_timer, on_backstop_timer, PK_SHUTDOWN_FLUSH_MS, 0);
}

static void close_listener(app_t *app) {
  if (app->listener_closed)
    return;
  app->listener_closed = 1;
  uv_timer_stop(&app->drain_timer);
  PK_LOG_INFO("closing the gRPC listener; %lld calls in flight get up to %gs to finish",
              (long long)atomic_load(&app->metrics.inflight), app->cfg.grace_period);
  pk_grpc_server_shutdown(app->grpc);
  uv_timer_start(&app->grace_timer, on_grace_timer, (uint64_t)(app->cfg.grace_period * 1000.0), 0);
}

static void on_drain_timer(uv_timer_t *t) {
  close_listener(t->data);
}

static void on_signal(uv_signal_t *h, int signum) {
  app_t *app = h->data;
  app->signals++;
  if (app->signals == 1) {
    PK_LOG_INFO("received %s: health is NOT_SERVING; the listener closes in %gs",
                signum == SIGTERM ? "SIGTERM" : "SIGINT", app->cfg.drain_delay);
    pk_grpc_server_set_serving(app->grpc, false);
    if (app->cfg.drain_delay > 0)
      uv_timer_start(&app->drain_timer, on_drain_timer, (uint64_t)(app->cfg.drain_delay * 1000.0),
                     0);
    else
      close_listener(app);
  } else {
    PK_LOG_WARN("received a second signal: stopping and cancelling every call now");
    pk_grpc_server_set_serving(app->grpc, false);
    close_listener(app);
    pk_grpc_server_abort(app->grpc);
    pk_grpc_server_cancel_all(app->grpc);
  }
}

static void on_sighup(uv_signal_t *h, int signum) {
  app_t *app = h->data;
  (void)signum;
  char msg[768];
  if (pk_grpc_server_reload_auth(app->grpc, msg, sizeof msg) == PK_OK)
    PK_LOG_INFO("received SIGHUP: %s", msg);
  else
    PK_LOG_ERROR("received SIGHUP: %s", msg);
}

static void on_expire_timer(uv_timer_t *t) {
  app_t *app = t->data;
  size_t n = pk_plan_cache_expire(app->cache, pk_monotonic_seconds());
  if (n > 0)
    PK_LOG_DEBUG("plan cache: %zu plans expired", n);
}

static void set_text(pk_http_reply_t *r, int status, const char *text) {
  r->status = status;
  r->content_type = "text/plain; charset=utf-8";
  r->body = strdup(text);
  r->body_len = r->body ? strlen(text) : 0;
}

static void route(void *user, const char *method, const char *path, pk_http_reply_t *reply) {
  app_t *app = user;
  (void)method;
  if (strcmp(path, "/metrics") == 0) {
    pk_cache_stats_t cs;
    pk_store_stats_t ss;
    pk_plan_cache_stats(app->cache, &cs);
    if (app->store != NULL)
      pk_plan_store_stats(app->store, &ss);
    pk_metrics_view_t view = {
        .cache = &cs,
        .serving = pk_grpc_server_serving(app->grpc),
        .version = PK_VERSION_STRING,
        .grpc_version = grpc_version_string(),
        .workers = app->cfg.workers,
        .max_inflight = app->cfg.max_inflight,
        .resident_bytes = pk_resident_bytes(),
        .store = app->store != NULL ? &ss : NULL,
        .large_workers = pk_config_large_workers(&app->cfg),
        .http_conns = pk_http_connections(app->http),
        .decode = pk_grpc_server_decode_budget(app->grpc),
    };
    pk_grpc_server_queue_stats(app->grpc, &view.queued_small, &view.queued_large,
                               &view.running_large);
    char *text = NULL;
    size_t len = 0;
    if (pk_metrics_render(&app->metrics, &view, &text, &len) != PK_OK) {
      set_text(reply, 500, "cannot render metrics: out of memory\n");
      return;
    }
    reply->status = 200;
    reply->content_type = "text/plain; version=0.0.4; charset=utf-8";
    reply->body = text;
    reply->body_len = len;
  } else if (strcmp(path, "/healthz") == 0) {
    set_text(reply, 200, "ok\n");
  } else if (strcmp(path, "/readyz") == 0) {
    if (pk_grpc_server_serving(app->grpc))
      set_text(reply, 200, "ready\n");
    else
      set_text(reply, 503, "draining\n");
  } else if (strcmp(path, "/") == 0) {
    set_text(reply, 200, "packd: /metrics /healthz /readyz\n");
  } else {
    set_text(reply, 404, "not found; try /metrics, /healthz or /readyz\n");
  }
}

/* gRPC core writes its log lines to stderr in its own format. While the
 * gRPC port is being bound, a failure (a port in use) would print a long
 * core line before packd's own message, which already names the address
 * and the likely cause; so during that window the core's lines go to
 * packd's log at debug level. At all other times they go through packd's
 * log at their own level, so stderr has one format. GRPC_VERBOSITY still
 * decides which core lines are produced at all (errors by default). */
static atomic_int g_grpc_binding;

static void route_grpc_log(gpr_log_func_args *args) {
  if (atomic_load(&g_grpc_binding) || args->severity == GPR_LOG_SEVERITY_DEBUG) {
    PK_LOG_DEBUG("grpc core: %s (%s:%d)", args->message, args->file, args->line);
  } else if (args->severity == GPR_LOG_SEVERITY_INFO) {
    PK_LOG_INFO("grpc core: %s (%s:%d)", args->message, args->file, args->line);
  } else {
    PK_LOG_ERROR("grpc core: %s (%s:%d)", args->message, args->file, args->line);
  }
}

static void host_of(const char *hostport, char *host, size_t len) {
  int port;
  if (pk_parse_hostport(hostport, host, len, &port) != PK_OK)
    snprintf(host, len, "?");
}

int main(int argc, char **argv) {
  /* A client that disappears must not kill the server with SIGPIPE. */
  signal(SIGPIPE, SIG_IGN);

  static app_t app;
  char err[512];
  pk_config_defaults(&app.cfg);
  if (pk_config_load(&app.cfg, argc, argv, NULL, NULL, err, sizeof err) != PK_OK) {
    fprintf(stderr, "packd: %s\n", err);
    return 2;
  }
  if (app.cfg.show_help) {
    pk_config_usage(stdout, "packd");
    pk_plan_store_usage(stdout);
    return 0;
  }
  if (app.cfg.show_version) {
    printf("packd %s (grpc core %s)\n", PK_VERSION_STRING, grpc_version_string());
    return 0;
  }
  pk_log_set_level(app.cfg.log_level);

  int rc = pk_plan_cache_create((uint64_t)app.cfg.cache_bytes, app.cfg.cache_ttl, &app.cache);
  if (rc != PK_OK) {
    PK_LOG_ERROR("cannot create the plan cache: %s", pk_strerror(rc));
    return 1;
  }
  pk_metrics_init(&app.metrics, pk_wall_seconds());
  if (app.cfg.plan_store[0] != '\0') {
    /* A bad URL, password file or tunable is a configuration error (exit
     * 2); a store that is down is not: packd serves and reconnects. */
    static char password[PK_STORE_SECRET_MAX];
    if (app.cfg.plan_store_password_file[0] != '\0' &&
        pk_store_read_password_file(app.cfg.plan_store_password_file, password, sizeof password,
                                    err, sizeof err) != PK_OK) {
      fprintf(stderr, "packd: --plan-store-password-file: %s\n", err);
      pk_plan_cache_destroy(app.cache);
      return 2;
    }
    pk_plan_store_options_t so = {
        .url = app.cfg.plan_store,
        .password = password,
        .prefix = app.cfg.plan_store_prefix,
        .version = PK_VERSION_STRING,
        .ttl = app.cfg.cache_ttl,
        .workers = app.cfg.workers,
        .cache = app.cache,
        .max_value_bytes = app.cfg.max_message_bytes,
        .optional = app.cfg.plan_store_optional,
    };
    rc = pk_plan_store_open(&so, &app.store, err, sizeof err);
    memset(password, 0, sizeof password);
    if (rc != PK_OK) {
      fprintf(stderr, "packd: %s\n", err);
      pk_plan_cache_destroy(app.cache);
      return rc == PK_EINVAL ? 2 : 1;
    }
  }
  app.loop = uv_default_loop();

  int metrics_port = 0, grpc_port = 0;
  rc = pk_http_start(app.loop, app.cfg.metrics_listen, route, &app, &app.http, &metrics_port, err,
                     sizeof err);
  if (rc != PK_OK) {
    PK_LOG_ERROR("%s", err);
    uv_run(app.loop, UV_RUN_DEFAULT);
    uv_loop_close(app.loop);
    pk_plan_store_close(app.store);
    pk_plan_cache_destroy(app.cache);
    return 1;
  }
  pk_http_limits_t hl = {
      .max_conns = app.cfg.http_max_conns,
      .max_conns_per_peer = app.cfg.http_max_conns_per_peer,
      .header_timeout = app.cfg.http_header_timeout,
      .idle_timeout = app.cfg.http_idle_timeout,
      .evicted = &app.metrics.http_evicted,
      .timed_out = &app.metrics.http_timed_out,
  };
  pk_http_set_limits(app.http, &hl);

  gpr_set_log_function(route_grpc_log);
  grpc_init();
  atomic_store(&g_grpc_binding, 1);
  rc = pk_grpc_server_start(&app.cfg, app.cache, app.store, &app.metrics, on_stopped_from_worker,
                            &app, &app.grpc, &grpc_port, err, sizeof err);
  atomic_store(&g_grpc_binding, 0);
  if (rc != PK_OK) {
    PK_LOG_ERROR("%s", err);
    pk_http_close(app.http);
    uv_run(app.loop, UV_RUN_DEFAULT);
    uv_loop_close(app.loop);
    grpc_shutdown();
    pk_plan_store_close(app.store);
    pk_plan_cache_destroy(app.cache);
    return 1;
  }

  uv_async_init(app.loop, &app.stopped_async, on_stopped_async);
  app.stopped_async.data = &app;
  uv_signal_init(app.loop, &app.sigterm);
  uv_signal_init(app.loop, &app.sigint);
  app.sigterm.data = app.sigint.data = &app;
  uv_signal_start(&app.sigterm, on_signal, SIGTERM);
  uv_signal_start(&app.sigint, on_signal, SIGINT);
  uv_signal_init(app.loop, &app.sighup);
  app.sighup.data = &app;
  uv_signal_start(&app.sighup, on_sighup, SIGHUP);
  uv_timer_init(app.loop, &app.expire_timer);
  uv_timer_init(app.loop, &app.drain_timer);
  uv_timer_init(app.loop, &app.grace_timer);
  uv_timer_init(app.loop, &app.backstop_timer);
  app.expire_timer.data = app.drain_timer.data = app.grace_timer.data = &app;
  app.backstop_timer.data = &app;
  uv_timer_start(&app.expire_timer, on_expire_timer, 1000, 1000);

  char desc[1536], ghost[PK_HOSTPORT_MAX], mhost[PK_HOSTPORT_MAX];
  pk_config_describe(&app.cfg, desc, sizeof desc);
  host_of(app.cfg.listen, ghost, sizeof ghost);
  host_of(app.cfg.metrics_listen, mhost, sizeof mhost);
  PK_LOG_INFO("packd %s (grpc core %s) serving grpc=%s:%d metrics=http://%s:%d/metrics "
              "grpc_port=%d metrics_port=%d %s",
              PK_VERSION_STRING, grpc_version_string(), ghost, grpc_port, mhost, metrics_port,
              grpc_port, metrics_port, desc);

  uv_run(app.loop, UV_RUN_DEFAULT);

  pk_grpc_server_destroy(app.grpc);
  uv_loop_close(app.loop);
  grpc_shutdown();
  /* No handler runs any more: the workers are joined. */
  pk_plan_store_close(app.store);
  pk_plan_cache_destroy(app.cache);
  PK_LOG_INFO("stopped");
  return 0;
}
