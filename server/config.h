/* The packd server's configuration: command-line flags, each with a PACKD_*
 * environment variable. Precedence: built-in defaults < environment < flags.
 *
 * The configuration is a plain value type with fixed-size strings; nothing in
 * it is allocated, so it needs no free function. */
#ifndef PK_CONFIG_H
#define PK_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "log.h"

#define PK_HOSTPORT_MAX 256
#define PK_CONFIG_URL_MAX 1024 /* Equal to PK_STORE_URL_MAX. */
#define PK_CONFIG_PATH_MAX 1024
#define PK_CONFIG_PREFIX_MAX 64 /* Equal to PK_STORE_PREFIX_MAX. */

typedef struct pk_server_config {
  char listen[PK_HOSTPORT_MAX];         /* gRPC HOST:PORT; port 0 picks a free port. */
  char metrics_listen[PK_HOSTPORT_MAX]; /* HTTP HOST:PORT for /metrics; port 0 picks one. */
  int workers;                          /* Completion-queue threads that also plan. */
  int max_inflight;                     /* Calls accepted and not finished; more get
                                         * RESOURCE_EXHAUSTED. */
  int64_t max_message_bytes;            /* gRPC receive and send limit, per message
                                         * (also after inflating a compressed one). */
  int64_t max_decoded_bytes;            /* Request bytes in memory, all calls together
                                         * (decode_budget.h); 0: a quarter of the memory. */
  double log_refused_interval;          /* Seconds between log lines of one refusal
                                         * code (log_limit.h); 0: every call. */
  int max_sequences;                    /* Plan requests with more are refused; 0: none. */
  int64_t max_plan_bytes;               /* Plans estimated larger are refused; 0: none. */
  int64_t cache_bytes;                  /* Plan cache bound in bytes. */
  double cache_ttl;                     /* Plan cache age bound, seconds. */
  double grace_period;                  /* Seconds to finish calls after a signal. */
  double drain_delay;                   /* Seconds Health says NOT_SERVING before the
                                         * listener closes. */
  pk_log_level_t log_level;
  char plan_store[PK_CONFIG_URL_MAX]; /* redis:// URL of the shared plan store; "" = none. */
  char plan_store_password_file[PK_CONFIG_PATH_MAX]; /* "" = the URL's password, if any. */
  char plan_store_prefix[PK_CONFIG_PREFIX_MAX];      /* Key prefix in the store. */
  bool plan_store_optional; /* A store refusing the password does not stop start-up. */
  /* Transport security and authentication (tls.h, auth.h, plan_id.h); "" = off. */
  char tls_cert[PK_CONFIG_PATH_MAX];            /* PEM certificate chain served to clients. */
  char tls_key[PK_CONFIG_PATH_MAX];             /* PEM private key of tls_cert. */
  char tls_client_ca[PK_CONFIG_PATH_MAX];       /* PEM CAs; set: client certificates required. */
  char auth_token_file[PK_CONFIG_PATH_MAX];     /* Accepted bearer tokens, one a line. */
  char plan_id_secret_file[PK_CONFIG_PATH_MAX]; /* Key of plan ids; "" = random per process. */
  int debug_delay_ms;                           /* Testing only: sleep before each Plan. */
  /* Admission and the HTTP port's connection limits (grpc_server.c,
   * work_queue.h, http.c). */
  int64_t large_request_bytes; /* Plan requests of at least this many bytes are large. */
  int large_workers;           /* Workers large Plans may use at once; 0: workers - 1. */
  int http_max_conns;          /* Open HTTP connections, all peers together. */
  int http_max_conns_per_peer; /* Open HTTP connections of one peer address. */
  double http_header_timeout;  /* Seconds from accept to a complete request header. */
  double http_idle_timeout;    /* Seconds a connection may send nothing before its header. */
  bool show_help;              /* --help was given; print usage and exit 0. */
  bool show_version;           /* --version was given. */
} pk_server_config_t;

/* Looks up an environment variable; returns NULL when unset. Tests pass their
 * own table instead of the process environment. */
typedef const char *(*pk_getenv_fn)(const char *name, void *user);

/* Fills *cfg with the built-in defaults. */
void pk_config_defaults(pk_server_config_t *cfg);

/* Applies the environment (through getenv_fn; NULL means the process
 * environment) and then the flags argv[1..argc-1] to *cfg, which should hold
 * the defaults. Flags are "--name value" or "--name=value". Returns 0, or
 * PK_EINVAL with a message in err that names the flag or variable and the
 * value. */
int pk_config_load(pk_server_config_t *cfg, int argc, char *const *argv, pk_getenv_fn getenv_fn,
                   void *user, char *err, size_t errlen);

/* Writes the effective configuration as one line of key=value pairs. */
void pk_config_describe(const pk_server_config_t *cfg, char *buf, size_t len);

/* The workers large Plans may use at once: --large-workers, or workers - 1
 * when it is 0; never more than the workers and at least 1 (with one
 * worker, small and large calls share it). */
int pk_config_large_workers(const pk_server_config_t *cfg);

/* Prints the usage text with every flag, its variable and its default. */
void pk_config_usage(FILE *out, const char *argv0);

/* Splits "HOST:PORT" (HOST may be "[v6addr]") into host and port. Returns 0
 * or PK_EINVAL. */
int pk_parse_hostport(const char *s, char *host, size_t hostlen, int *port);

/* Parses a byte count with an optional binary suffix K, M or G ("64M").
 * Returns 0 or PK_EINVAL. */
int pk_parse_bytes(const char *s, int64_t *out);

/* Parses a non-negative number of seconds with an optional "s" or "ms"
 * suffix ("2.5", "500ms"). Returns 0 or PK_EINVAL. */
int pk_parse_seconds(const char *s, double *out);

#endif
