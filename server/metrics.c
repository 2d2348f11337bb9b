/* Metrics counters and the Prometheus text exposition (see metrics.h). */
#include "metrics.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pk_error.h"

static const double k_seconds_bounds[PK_SECONDS_BUCKETS] = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,    0.1,    0.25,    0.5,    1.0,   2.5,    5.0,   10.0, 30.0};

static const double k_seq_bounds[PK_SEQ_BUCKETS] = {
    1, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216};

static const char *const k_method_names[PK_METHOD_COUNT] = {"Plan", "GetRankPlan", "Check",
                                                            "unknown"};

void pk_metrics_init(pk_metrics_t *m, double start_time) {
  memset(m, 0, sizeof *m);
  m->start_time = start_time;
}

const char *pk_method_name(pk_method_t method) {
  if ((int)method < 0 || method >= PK_METHOD_COUNT)
    return "unknown";
  return k_method_names[method];
}

const char *pk_grpc_code_name(int code) {
  return pk_grpc_status_name(code);
}

static void observe(pk_histogram_t *h, const double *bounds, size_t nb, double v, uint64_t units) {
  size_t i = 0;
  while (i < nb && v > bounds[i])
    i++;
  atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->sum_units, units, memory_order_relaxed);
}

void pk_histogram_observe_seconds(pk_histogram_t *h, double seconds) {
  if (seconds < 0)
    seconds = 0;
  observe(h, k_seconds_bounds, PK_SECONDS_BUCKETS, seconds, (uint64_t)(seconds * 1e9 + 0.5));
}

void pk_histogram_observe_sequences(pk_histogram_t *h, uint64_t n) {
  observe(h, k_seq_bounds, PK_SEQ_BUCKETS, (double)n, n);
}

void pk_metrics_request(pk_metrics_t *m, pk_method_t method, int code, double seconds) {
  if ((int)method < 0 || method >= PK_METHOD_COUNT)
    method = PK_METHOD_UNKNOWN;
  if (code < 0 || code >= PK_GRPC_CODE_COUNT)
    code = 2; /* UNKNOWN */
  atomic_fetch_add_explicit(&m->requests[method][code], 1, memory_order_relaxed);
  pk_histogram_observe_seconds(&m->latency[method], seconds);
}

void pk_metrics_plan(pk_metrics_t *m, uint64_t sequences, double plan_seconds,
                     double encode_seconds) {
  pk_histogram_observe_sequences(&m->plan_sequences, sequences);
  pk_histogram_observe_seconds(&m->plan_seconds, plan_seconds);
  pk_histogram_observe_seconds(&m->encode_seconds, encode_seconds);
}

int64_t pk_resident_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL)
    return -1;
  long long size = 0, resident = 0;
  int n = fscanf(f, "%lld %lld", &size, &resident);
  fclose(f);
  if (n != 2)
    return -1;
  return (int64_t)resident * (int64_t)sysconf(_SC_PAGESIZE);
}

/* A growable text buffer; `failed` sticks once an allocation fails. */
typedef struct sbuf {
  char *p;
  size_t len, cap;
  int failed;
} sbuf_t;

static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(sbuf_t *b, const char *fmt, ...) {
  if (b->failed)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->failed = 1;
      return;
    }
    if ((size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t ncap = b->cap * 2 + (size_t)n;
    char *np = realloc(b->p, ncap);
    if (np == NULL) {
      b->failed = 1;
      return;
    }
    b->p = np;
    b->cap = ncap;
  }
}

static void header(sbuf_t *b, const char *name, const char *type, const char *help) {
  sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static uint64_t ld(const atomic_uint_fast64_t *a) {
  return atomic_load_explicit(a, memory_order_relaxed);
}

/* One histogram series. `labels` is "" or `key="value"`; `scale` turns the
 * stored sum units into the exposed unit. */
static void histogram(sbuf_t *b, const char *name, const char *labels, const pk_histogram_t *h,
                      const double *bounds, size_t nb, double scale) {
  uint64_t cum = 0;
  const char *sep = labels[0] ? "," : "";
  for (size_t i = 0; i < nb; i++) {
    cum += ld(&h->buckets[i]);
    sb_printf(b, "%s_bucket{%s%sle=\"%g\"} %" PRIu64 "\n", name, labels, sep, bounds[i], cum);
  }
  cum += ld(&h->buckets[nb]);
  sb_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, sep, cum);
  const char *open = labels[0] ? "{" : "";
  const char *close = labels[0] ? "}" : "";
  sb_printf(b, "%s_sum%s%s%s %.9g\n", name, open, labels, close, (double)ld(&h->sum_units) * scale);
  /* The count is the +Inf bucket by construction, so readers never see the
   * two disagree even while workers update the histogram. */
  sb_printf(b, "%s_count%s%s%s %" PRIu64 "\n", name, open, labels, close, cum);
}

/* The plan store's lines (--plan-store set). */
static void render_store(sbuf_t *b, const pk_metrics_t *m, const pk_store_stats_t *st) {
  header(b, "packd_plan_store_up", "gauge",
         "1 while the last connection or command to the plan store succeeded.");
  sb_printf(b, "packd_plan_store_up{store=\"%s\"} %d\n", st->where ? st->where : "",
            st->up ? 1 : 0);
  header(b, "packd_plan_store_errors_total", "counter",
         "Connections and commands to the plan store that failed, by operation.");
  sb_printf(b, "packd_plan_store_errors_total{op=\"write\"} %" PRIu64 "\n", st->errors_write);
  sb_printf(b, "packd_plan_store_errors_total{op=\"read\"} %" PRIu64 "\n", st->errors_read);
  sb_printf(b, "packd_plan_store_errors_total{op=\"probe\"} %" PRIu64 "\n", st->errors_probe);
  header(b, "packd_plan_store_writes_total", "counter",
         "Plans written to the plan store (ok) or answered without it (skipped).");
  sb_printf(b, "packd_plan_store_writes_total{result=\"ok\"} %" PRIu64 "\n", st->writes_ok);
  sb_printf(b, "packd_plan_store_writes_total{result=\"skipped\"} %" PRIu64 "\n",
            st->writes_skipped);
  header(b, "packd_plan_store_reads_total", "counter",
         "Plans fetched from the plan store by GetRankPlan, by outcome.");
  static const char *const names[] = {"hit", "absent", "unavailable", "corrupt"};
  uint64_t v[] = {st->reads_hit, st->reads_absent, st->reads_unavailable, st->reads_corrupt};
  for (int i = 0; i < 4; i++)
    sb_printf(b, "packd_plan_store_reads_total{result=\"%s\"} %" PRIu64 "\n", names[i], v[i]);
  header(b, "packd_plan_store_corrupt_total", "counter",
         "Store values refused by the envelope check (checksum, plan id, rank, size).");
  sb_printf(b, "packd_plan_store_corrupt_total %" PRIu64 "\n", st->corrupt);
  header(b, "packd_plan_store_coalesced_total", "counter",
         "GetRankPlan calls answered by another call's fetch of the same plan.");
  sb_printf(b, "packd_plan_store_coalesced_total %" PRIu64 "\n", st->coalesced);
  header(b, "packd_plan_store_connects_total", "counter", "Connections opened to the plan store.");
  sb_printf(b, "packd_plan_store_connects_total %" PRIu64 "\n", st->connects);
  header(b, "packd_plan_store_outages_total", "counter", "Times the plan store was marked down.");
  sb_printf(b, "packd_plan_store_outages_total %" PRIu64 "\n", st->outages);
  header(b, "packd_plan_store_replay_queued", "gauge",
         "Plans the store missed (down, stalled), waiting to be written when it is back.");
  sb_printf(b, "packd_plan_store_replay_queued %" PRIu64 "\n", st->replay_queued);
  header(b, "packd_plan_store_replay_queued_bytes", "gauge",
         "Bytes held by the replay queue (bounded by PACKD_PLAN_STORE_REPLAY_BYTES).");
  sb_printf(b, "packd_plan_store_replay_queued_bytes %" PRIu64 "\n", st->replay_queued_bytes);
  header(b, "packd_plan_store_replay_total", "counter",
         "Missed plan writes by outcome: written when the store was back, dropped for room "
         "(oldest first), or expired before it was back.");
  sb_printf(b, "packd_plan_store_replay_total{result=\"written\"} %" PRIu64 "\n", st->replayed);
  sb_printf(b, "packd_plan_store_replay_total{result=\"dropped\"} %" PRIu64 "\n",
            st->replay_dropped);
  sb_printf(b, "packd_plan_store_replay_total{result=\"expired\"} %" PRIu64 "\n",
            st->replay_expired);
  header(b, "packd_plan_store_write_duration_seconds", "histogram",
         "Time Plan spent writing a plan to the store (also when it failed).");
  histogram(b, "packd_plan_store_write_duration_seconds", "", &m->store_write_seconds,
            k_seconds_bounds, PK_SECONDS_BUCKETS, 1e-9);
  header(b, "packd_plan_store_read_duration_seconds", "histogram",
         "Time GetRankPlan spent on the store after a plan cache miss.");
  histogram(b, "packd_plan_store_read_duration_seconds", "", &m->store_read_seconds,
            k_seconds_bounds, PK_SECONDS_BUCKETS, 1e-9);
}

const char *pk_stop_reason_name(int reason) {
  switch (reason) {
  case PK_STOP_CANCELLED:
    return "cancelled";
  case PK_STOP_DEADLINE:
    return "deadline";
  case PK_STOP_SHUTDOWN:
    return "shutdown";
  default:
    return "none";
  }
}

int pk_metrics_render(const pk_metrics_t *m, const pk_metrics_view_t *view, char **out,
                      size_t *len) {
  sbuf_t b = {malloc(16384), 0, 16384, 0};
  if (b.p == NULL)
    return PK_ENOMEM;
  b.p[0] = '\0';

  header(&b, "packd_build_info", "gauge", "Build information; the value is always 1.");
  sb_printf(&b, "packd_build_info{version=\"%s\",grpc_core=\"%s\"} 1\n",
            view->version ? view->version : "", view->grpc_version ? view->grpc_version : "");

  header(&b, "packd_serving", "gauge", "1 while Health/Check reports SERVING, 0 when draining.");
  sb_printf(&b, "packd_serving %d\n", view->serving ? 1 : 0);

  header(&b, "packd_requests_total", "counter", "Finished gRPC calls by method and status code.");
  for (int mt = 0; mt < PK_METHOD_COUNT; mt++) {
    for (int c = 0; c < PK_GRPC_CODE_COUNT; c++) {
      uint64_t v = ld(&m->requests[mt][c]);
      /* OK is always present so that rates start at zero; other codes
       * appear once they happen. */
      if (v == 0 && c != 0)
        continue;
      sb_printf(&b, "packd_requests_total{method=\"%s\",code=\"%s\"} %" PRIu64 "\n",
                k_method_names[mt], pk_grpc_status_name(c), v);
    }
  }

  header(&b, "packd_request_duration_seconds", "histogram",
         "Time from accepting a call to starting its answer, by method.");
  for (int mt = 0; mt < PK_METHOD_COUNT; mt++) {
    char labels[64];
    snprintf(labels, sizeof labels, "method=\"%s\"", k_method_names[mt]);
    histogram(&b, "packd_request_duration_seconds", labels, &m->latency[mt], k_seconds_bounds,
              PK_SECONDS_BUCKETS, 1e-9);
  }

  header(&b, "packd_plan_sequences", "histogram", "Sequences per planned request.");
  histogram(&b, "packd_plan_sequences", "", &m->plan_sequences, k_seq_bounds, PK_SEQ_BUCKETS, 1.0);
  header(&b, "packd_plan_duration_seconds", "histogram", "Planner time per planned request.");
  histogram(&b, "packd_plan_duration_seconds", "", &m->plan_seconds, k_seconds_bounds,
            PK_SECONDS_BUCKETS, 1e-9);
  header(&b, "packd_encode_duration_seconds", "histogram",
         "Time to build and pack the PlanResponse and the cached rank plans.");
  histogram(&b, "packd_encode_duration_seconds", "", &m->encode_seconds, k_seconds_bounds,
            PK_SECONDS_BUCKETS, 1e-9);

  header(&b, "packd_inflight_calls", "gauge", "Calls accepted and not yet finished.");
  sb_printf(&b, "packd_inflight_calls %" PRIdFAST64 "\n",
            atomic_load_explicit(&m->inflight, memory_order_relaxed));
  header(&b, "packd_max_inflight_calls", "gauge", "The --max-inflight bound.");
  sb_printf(&b, "packd_max_inflight_calls %d\n", view->max_inflight);
  header(&b, "packd_workers", "gauge", "Completion-queue worker threads.");
  sb_printf(&b, "packd_workers %d\n", view->workers);
  header(&b, "packd_rejected_inflight_total", "counter",
         "Calls answered RESOURCE_EXHAUSTED because --max-inflight was reached.");
  sb_printf(&b, "packd_rejected_inflight_total %" PRIu64 "\n", ld(&m->rejected_inflight));
  header(&b, "packd_deadline_skipped_total", "counter",
         "Calls whose deadline had passed before work started; answered without planning.");
  sb_printf(&b, "packd_deadline_skipped_total %" PRIu64 "\n", ld(&m->deadline_skipped));

  header(&b, "packd_stopped_total", "counter",
         "Calls stopped before their answer was decided, by reason (planning stopped, or "
         "taken out of the queue).");
  for (int r = 1; r < PK_STOP_REASONS; r++)
    sb_printf(&b, "packd_stopped_total{reason=\"%s\"} %" PRIu64 "\n", pk_stop_reason_name(r),
              ld(&m->stopped[r]));
  header(&b, "packd_stop_latency_seconds", "histogram",
         "Time from a stop condition (client gone, deadline, end of grace) to the planner "
         "returning.");
  histogram(&b, "packd_stop_latency_seconds", "", &m->stop_seconds, k_seconds_bounds,
            PK_SECONDS_BUCKETS, 1e-9);
  header(&b, "packd_large_workers", "gauge", "Workers large Plans may use at once.");
  sb_printf(&b, "packd_large_workers %d\n", view->large_workers);
  header(&b, "packd_queued_calls", "gauge", "Calls waiting for a worker, by lane.");
  sb_printf(&b, "packd_queued_calls{lane=\"small\"} %" PRId64 "\n", view->queued_small);
  sb_printf(&b, "packd_queued_calls{lane=\"large\"} %" PRId64 "\n", view->queued_large);
  header(&b, "packd_running_large_plans", "gauge", "Large Plans being planned.");
  sb_printf(&b, "packd_running_large_plans %" PRId64 "\n", view->running_large);
  header(&b, "packd_http_connections", "gauge", "Open connections on the metrics port.");
  sb_printf(&b, "packd_http_connections %" PRId64 "\n", view->http_conns);
  header(&b, "packd_http_evicted_total", "counter",
         "Metrics-port connections without a complete request closed to make room for new ones.");
  sb_printf(&b, "packd_http_evicted_total %" PRIu64 "\n", ld(&m->http_evicted));
  header(&b, "packd_http_timed_out_total", "counter",
         "Metrics-port connections closed by --http-header-timeout or --http-idle-timeout.");
  sb_printf(&b, "packd_http_timed_out_total %" PRIu64 "\n", ld(&m->http_timed_out));

  if (view->decode != NULL) {
    const pk_decode_budget_t *d = view->decode;
    header(&b, "packd_decoded_bytes_limit", "gauge",
           "The --max-decoded-bytes budget of request bytes held while decoding, all calls.");
    sb_printf(&b, "packd_decoded_bytes_limit %" PRId64 "\n", d->limit);
    header(&b, "packd_decoded_bytes", "gauge",
           "Request bytes (received and inflated) held by calls now.");
    sb_printf(&b, "packd_decoded_bytes %" PRIdFAST64 "\n", atomic_load(&d->used));
    header(&b, "packd_decoded_bytes_peak", "gauge", "The most request bytes held at once.");
    sb_printf(&b, "packd_decoded_bytes_peak %" PRIdFAST64 "\n", atomic_load(&d->peak));
    header(&b, "packd_decode_budget_refused_total", "counter",
           "Calls answered RESOURCE_EXHAUSTED because --max-decoded-bytes was reached.");
    sb_printf(&b, "packd_decode_budget_refused_total %" PRIu64 "\n", ld(&d->refused));
    header(&b, "packd_memory_trims_total", "counter",
           "Times free memory was returned to the system after a burst of large requests.");
    sb_printf(&b, "packd_memory_trims_total %" PRIu64 "\n", ld(&d->trims));
  }

  if (view->cache != NULL) {
    const pk_cache_stats_t *cs = view->cache;
    header(&b, "packd_plan_cache_entries", "gauge", "Plans held for GetRankPlan.");
    sb_printf(&b, "packd_plan_cache_entries %" PRIu64 "\n", cs->entries);
    header(&b, "packd_plan_cache_bytes", "gauge", "Bytes held by the plan cache.");
    sb_printf(&b, "packd_plan_cache_bytes %" PRIu64 "\n", cs->bytes);
    header(&b, "packd_plan_cache_max_bytes", "gauge", "The --cache-bytes bound.");
    sb_printf(&b, "packd_plan_cache_max_bytes %" PRIu64 "\n", cs->max_bytes);
    header(&b, "packd_plan_cache_hits_total", "counter",
           "GetRankPlan lookups that found the plan.");
    sb_printf(&b, "packd_plan_cache_hits_total %" PRIu64 "\n", cs->hits);
    header(&b, "packd_plan_cache_misses_total", "counter",
           "GetRankPlan lookups that did not find the plan.");
    sb_printf(&b, "packd_plan_cache_misses_total %" PRIu64 "\n", cs->misses);
    header(&b, "packd_plan_cache_evictions_total", "counter",
           "Plans removed to stay under --cache-bytes.");
    sb_printf(&b, "packd_plan_cache_evictions_total %" PRIu64 "\n", cs->evictions);
    header(&b, "packd_plan_cache_expired_total", "counter",
           "Plans removed because they outlived --cache-ttl.");
    sb_printf(&b, "packd_plan_cache_expired_total %" PRIu64 "\n", cs->expired);
  }

  if (view->store != NULL)
    render_store(&b, m, view->store);

  header(&b, "process_start_time_seconds", "gauge", "Start time of the process since the epoch.");
  sb_printf(&b, "process_start_time_seconds %.3f\n", m->start_time);
  if (view->resident_bytes >= 0) {
    header(&b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    sb_printf(&b, "process_resident_memory_bytes %" PRId64 "\n", view->resident_bytes);
  }

  if (b.failed) {
    free(b.p);
    return PK_ENOMEM;
  }
  *out = b.p;
  *len = b.len;
  return PK_OK;
}
