/* Server metrics: lock-free counters and histograms that the worker threads
 * update, and the Prometheus text exposition (format 0.0.4) that the HTTP
 * listener serves on /metrics.
 *
 * pk_metrics_t is a plain struct of atomics: create it zeroed with
 * pk_metrics_init; it owns no memory. pk_metrics_render returns a malloc'd
 * buffer that the caller frees with free(). */
#ifndef PK_METRICS_H
#define PK_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decode_budget.h"
#include "grpc_status_names.h"
#include "plan_cache.h"
#include "plan_store.h"

typedef enum {
  PK_METHOD_PLAN = 0,
  PK_METHOD_GET_RANK_PLAN = 1,
  PK_METHOD_HEALTH_CHECK = 2,
  PK_METHOD_UNKNOWN = 3, /* Any method packd does not implement. */
  PK_METHOD_COUNT = 4,
} pk_method_t;

/* Why a call was stopped before its answer was decided (planning, queued
 * or in the debug delay). */
typedef enum {
  PK_STOP_NONE = 0,
  PK_STOP_CANCELLED = 1, /* The client cancelled or its connection went away. */
  PK_STOP_DEADLINE = 2,  /* The call's deadline passed. */
  PK_STOP_SHUTDOWN = 3,  /* The shutdown's grace period ended. */
  PK_STOP_REASONS = 4,
} pk_stop_reason_t;

/* "cancelled", "deadline", "shutdown" (labels and logs); "none" for 0. */
const char *pk_stop_reason_name(int reason);

/* Histogram bucket upper bounds (the +Inf bucket is implied). */
#define PK_SECONDS_BUCKETS 18
#define PK_SEQ_BUCKETS 12

typedef struct pk_histogram {
  atomic_uint_fast64_t buckets[PK_SECONDS_BUCKETS + 1]; /* Non-cumulative; last is +Inf. */
  atomic_uint_fast64_t count;
  atomic_uint_fast64_t sum_units; /* Sum in nanoseconds (seconds histograms) or units. */
} pk_histogram_t;

typedef struct pk_metrics {
  atomic_uint_fast64_t requests[PK_METHOD_COUNT][PK_GRPC_CODE_COUNT];
  pk_histogram_t latency[PK_METHOD_COUNT]; /* Seconds, from accept to final batch start. */
  pk_histogram_t plan_seconds;             /* Planner time only. */
  pk_histogram_t encode_seconds;           /* Codec encode plus protobuf packing. */
  pk_histogram_t plan_sequences;           /* Sequences per planned request. */
  pk_histogram_t store_write_seconds;      /* Plan's write to the plan store. */
  pk_histogram_t store_read_seconds;       /* GetRankPlan's read from the plan store. */
  atomic_int_fast64_t inflight;
  atomic_uint_fast64_t deadline_skipped;         /* Calls answered DEADLINE_EXCEEDED unplanned. */
  atomic_uint_fast64_t rejected_inflight;        /* Calls refused by --max-inflight. */
  atomic_uint_fast64_t stopped[PK_STOP_REASONS]; /* Calls stopped, by pk_stop_reason_t. */
  pk_histogram_t stop_seconds;         /* From a stop condition to the planner returning. */
  atomic_uint_fast64_t http_evicted;   /* Metrics-port connections closed to make room. */
  atomic_uint_fast64_t http_timed_out; /* Metrics-port connections closed by a timeout. */
  double start_time;                   /* Unix time of start-up. */
} pk_metrics_t;

/* What the renderer needs besides the counters. */
typedef struct pk_metrics_view {
  const pk_cache_stats_t *cache; /* NULL: the cache lines are left out. */
  bool serving;
  const char *version;      /* packd version for packd_build_info. */
  const char *grpc_version; /* grpc core version string. */
  int workers;
  int max_inflight;
  int64_t resident_bytes;           /* < 0: unknown, left out. */
  const pk_store_stats_t *store;    /* NULL: no plan store; its lines are left out. */
  int large_workers;                /* Workers large Plans may use at once. */
  int64_t queued_small;             /* Calls waiting for a worker, small lane. */
  int64_t queued_large;             /* Calls waiting for a worker, large lane. */
  int64_t running_large;            /* Large Plans being planned. */
  int64_t http_conns;               /* Open metrics-port connections. */
  const pk_decode_budget_t *decode; /* NULL: the decoded-bytes lines are left out. */
} pk_metrics_view_t;

void pk_metrics_init(pk_metrics_t *m, double start_time);

/* The method name as used in labels and logs ("Plan", "GetRankPlan",
 * "Check", "unknown"). */
const char *pk_method_name(pk_method_t method);

/* The canonical gRPC name of a status code ("OK", "INVALID_ARGUMENT"), or
 * "UNKNOWN" for a value out of range. */
const char *pk_grpc_code_name(int code);

/* Records one finished call. */
void pk_metrics_request(pk_metrics_t *m, pk_method_t method, int code, double seconds);

/* Records one planned request: sequences, planner time and encode time. */
void pk_metrics_plan(pk_metrics_t *m, uint64_t sequences, double plan_seconds,
                     double encode_seconds);

/* Adds a value to a seconds histogram or to the sequences histogram. */
void pk_histogram_observe_seconds(pk_histogram_t *h, double seconds);
void pk_histogram_observe_sequences(pk_histogram_t *h, uint64_t n);

/* Renders everything as Prometheus text. Returns 0 and a malloc'd,
 * NUL-terminated buffer in *out (length in *len), or PK_ENOMEM. */
int pk_metrics_render(const pk_metrics_t *m, const pk_metrics_view_t *view, char **out,
                      size_t *len);

/* This process's resident set size in bytes from /proc/self/statm, or -1. */
int64_t pk_resident_bytes(void);

#endif
