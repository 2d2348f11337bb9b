/* Flags and PACKD_* environment variables (see config.h). One table lists
 * every setting; parsing, usage text and the start-up line all read it. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "decode_budget.h"
#include "pk_error.h"
#include "pk_planner.h"
#include "security.h"
#include "store_format.h"

_Static_assert(PK_CONFIG_URL_MAX == PK_STORE_URL_MAX, "one URL bound");
_Static_assert(PK_CONFIG_PREFIX_MAX == PK_STORE_PREFIX_MAX, "one prefix bound");

/* K_URL: a plan store URL, checked by pk_store_url_parse; K_PATH: a file
 * name, read later; K_PREFIX: a store key prefix. */
typedef enum {
  K_HOSTPORT,
  K_IPPORT, /* HOST:PORT whose host is a numeric IPv4 or IPv6 address. */
  K_INT,
  K_BYTES,
  K_SECONDS,
  K_LEVEL,
  K_FLAG,
  K_URL,
  K_PATH,
  K_PREFIX
} kind_t;

typedef struct setting {
  const char *flag; /* Without the leading "--". */
  const char *env;  /* NULL: no variable. */
  kind_t kind;
  size_t offset;    /* Of the field in pk_server_config_t. */
  int64_t min, max; /* For K_INT and K_BYTES. */
  const char *help;
} setting_t;

#define OFF(f) offsetof(pk_server_config_t, f)

static const setting_t k_settings[] = {
    {"listen", "PACKD_LISTEN", K_HOSTPORT, OFF(listen), 0, 0,
     "gRPC address HOST:PORT (port 0: any free port)"},
    {"metrics-listen", "PACKD_METRICS_LISTEN", K_IPPORT, OFF(metrics_listen), 0, 0,
     "HTTP address for /metrics, /healthz, /readyz (numeric IPv4 or [IPv6])"},
    {"workers", "PACKD_WORKERS", K_INT, OFF(workers), 1, 256,
     "completion-queue threads; planning runs on them"},
    {"max-inflight", "PACKD_MAX_INFLIGHT", K_INT, OFF(max_inflight), 1, 1000000,
     "calls accepted and not finished; beyond it RESOURCE_EXHAUSTED"},
    {"max-message-bytes", "PACKD_MAX_MESSAGE_BYTES", K_BYTES, OFF(max_message_bytes), 1024,
     INT32_MAX, "largest gRPC message received or sent (suffix K, M, G)"},
    {"max-decoded-bytes", "PACKD_MAX_DECODED_BYTES", K_BYTES, OFF(max_decoded_bytes), 0, INT64_MAX,
     "request bytes held while decoding, all calls together; beyond it RESOURCE_EXHAUSTED "
     "(0: a quarter of the container's memory, at least --max-message-bytes)"},
    {"log-refused-interval", "PACKD_LOG_REFUSED_INTERVAL", K_SECONDS, OFF(log_refused_interval), 0,
     0, "seconds between log lines of failed calls with one status code (0: one per call)"},
    {"max-sequences", "PACKD_MAX_SEQUENCES", K_INT, OFF(max_sequences), 0, 1 << 25,
     "sequences per Plan request; more get RESOURCE_EXHAUSTED before planning (0: no limit)"},
    {"max-plan-bytes", "PACKD_MAX_PLAN_BYTES", K_BYTES, OFF(max_plan_bytes), 0, INT64_MAX,
     "estimated plan size above which a Plan is refused before planning (0: no limit)"},
    {"cache-bytes", "PACKD_CACHE_BYTES", K_BYTES, OFF(cache_bytes), 0, INT64_MAX,
     "plan cache bound in bytes; 0 disables GetRankPlan"},
    {"cache-ttl", "PACKD_CACHE_TTL", K_SECONDS, OFF(cache_ttl), 0, 0,
     "seconds a plan stays available to GetRankPlan"},
    {"grace-period", "PACKD_GRACE_PERIOD", K_SECONDS, OFF(grace_period), 0, 0,
     "seconds to finish calls in flight after SIGTERM/SIGINT"},
    {"drain-delay", "PACKD_DRAIN_DELAY", K_SECONDS, OFF(drain_delay), 0, 0,
     "seconds Health reports NOT_SERVING before the listener closes"},
    {"log-level", "PACKD_LOG_LEVEL", K_LEVEL, OFF(log_level), 0, 0,
     "debug, info, warn, error or off"},
    {"plan-store", "PACKD_PLAN_STORE", K_URL, OFF(plan_store), 0, 0,
     "redis://[:PASSWORD@]HOST:PORT[/DB] shared by replicas for GetRankPlan"},
    {"plan-store-password-file", "PACKD_PLAN_STORE_PASSWORD_FILE", K_PATH,
     OFF(plan_store_password_file), 0, 0, "file whose first line is the store's password"},
    {"plan-store-prefix", "PACKD_PLAN_STORE_PREFIX", K_PREFIX, OFF(plan_store_prefix), 0, 0,
     "prefix of every key packd writes to the store"},
    {"plan-store-optional", "PACKD_PLAN_STORE_OPTIONAL", K_FLAG, OFF(plan_store_optional), 0, 0,
     "serve even when the store refuses the password at start-up (default: exit 2)"},
    /* Security (tls.h, auth.h, plan_id.h): files read at start-up; the token
     * file again on SIGHUP and when it changes. */
    {"tls-cert", "PACKD_TLS_CERT", K_PATH, OFF(tls_cert), 0, 0,
     "PEM certificate chain: gRPC is served over TLS (needs --tls-key)"},
    {"tls-key", "PACKD_TLS_KEY", K_PATH, OFF(tls_key), 0, 0, "PEM private key of --tls-cert"},
    {"tls-client-ca", "PACKD_TLS_CLIENT_CA", K_PATH, OFF(tls_client_ca), 0, 0,
     "PEM CA certificates: clients must present a certificate they signed (mTLS)"},
    {"auth-token-file", "PACKD_AUTH_TOKEN_FILE", K_PATH, OFF(auth_token_file), 0, 0,
     "file of accepted bearer tokens, one a line; re-read on SIGHUP and on change"},
    {"plan-id-secret-file", "PACKD_PLAN_ID_SECRET_FILE", K_PATH, OFF(plan_id_secret_file), 0, 0,
     "secret that keys plan ids, shared by the replicas of one plan store"},
    {"debug-delay-ms", "PACKD_DEBUG_DELAY_MS", K_INT, OFF(debug_delay_ms), 0, 600000,
     "testing only: sleep this long before handling each Plan"},
    {"large-request-bytes", "PACKD_LARGE_REQUEST_BYTES", K_BYTES, OFF(large_request_bytes), 1,
     INT64_MAX, "Plan requests of at least this size are large (see --large-workers)"},
    {"large-workers", "PACKD_LARGE_WORKERS", K_INT, OFF(large_workers), 0, 256,
     "workers that large Plans may use at once (0: workers - 1, at least 1)"},
    {"http-max-conns", "PACKD_HTTP_MAX_CONNS", K_INT, OFF(http_max_conns), 2, 100000,
     "open connections on the metrics port; at the limit the oldest unanswered one is closed"},
    {"http-max-conns-per-peer", "PACKD_HTTP_MAX_CONNS_PER_PEER", K_INT,
     OFF(http_max_conns_per_peer), 1, 100000,
     "open metrics-port connections of one peer address; beyond it its oldest is closed"},
    {"http-header-timeout", "PACKD_HTTP_HEADER_TIMEOUT", K_SECONDS, OFF(http_header_timeout), 0, 0,
     "seconds a metrics-port connection has to send a complete request header"},
    {"http-idle-timeout", "PACKD_HTTP_IDLE_TIMEOUT", K_SECONDS, OFF(http_idle_timeout), 0, 0,
     "seconds a metrics-port connection may send nothing before its request is complete"},
    {"help", NULL, K_FLAG, OFF(show_help), 0, 0, "print this text and exit"},
    {"version", NULL, K_FLAG, OFF(show_version), 0, 0, "print the version and exit"},
};
#define N_SETTINGS (sizeof k_settings / sizeof k_settings[0])

void pk_config_defaults(pk_server_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  snprintf(cfg->listen, sizeof cfg->listen, "127.0.0.1:50051");
  snprintf(cfg->metrics_listen, sizeof cfg->metrics_listen, "127.0.0.1:9464");
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  cfg->workers = ncpu < 2 ? 2 : (ncpu > 64 ? 64 : (int)ncpu);
  cfg->max_inflight = 1024;
  /* 64 MiB: a request with 1,000,000 sequences (lengths, loss tokens and
   * groups) is at most about 20 MB, and its plan about 16 MB. */
  cfg->max_message_bytes = 64LL << 20;
  /* Refuse what cannot be answered before planning it: 4 Mi sequences
   * plan in seconds; the estimate is compared with the largest message. */
  /* 0: pk_decode_budget_default, from the container's memory at start. */
  cfg->max_decoded_bytes = 0;
  /* A refused client is seen in the log within 10 s; the count on the next
   * line says how many more there were. */
  cfg->log_refused_interval = 10.0;
  cfg->max_sequences = (int)PK_DEFAULT_MAX_SEQUENCES;
  cfg->max_plan_bytes = (int64_t)PK_DEFAULT_MAX_PLAN_BYTES;
  cfg->cache_bytes = 256LL << 20;
  cfg->cache_ttl = 300.0;
  cfg->grace_period = 10.0;
  cfg->drain_delay = 1.0;
  cfg->log_level = PK_LOG_INFO;
  snprintf(cfg->plan_store_prefix, sizeof cfg->plan_store_prefix, "packd:");
  /* 1 MiB holds about half a million sequence lengths (2 bytes each below
   * 16384): plans that occupy a worker for a long time. */
  cfg->large_request_bytes = 1LL << 20;
  cfg->large_workers = 0;
  /* A probe or a scrape sends its header in one packet and is answered in
   * well under a millisecond on the loop; these bounds only limit clients
   * that hold connections without asking. */
  cfg->http_max_conns = 256;
  cfg->http_max_conns_per_peer = 64;
  cfg->http_header_timeout = 5.0;
  cfg->http_idle_timeout = 2.0;
}

int pk_parse_hostport(const char *s, char *host, size_t hostlen, int *port) {
  if (s == NULL || *s == '\0')
    return PK_EINVAL;
  const char *colon;
  const char *h = s;
  size_t hl;
  if (s[0] == '[') {
    const char *close = strchr(s, ']');
    if (close == NULL || close[1] != ':')
      return PK_EINVAL;
    h = s + 1;
    hl = (size_t)(close - h);
    colon = close + 1;
  } else {
    colon = strrchr(s, ':');
    if (colon == NULL || memchr(s, ':', (size_t)(colon - s)) != NULL)
      return PK_EINVAL;
    hl = (size_t)(colon - s);
  }
  if (hl == 0 || hl >= hostlen)
    return PK_EINVAL;
  const char *p = colon + 1;
  if (*p == '\0')
    return PK_EINVAL;
  long v = 0;
  for (; *p; p++) {
    if (*p < '0' || *p > '9')
      return PK_EINVAL;
    v = v * 10 + (*p - '0');
    if (v > 65535)
      return PK_EINVAL;
  }
  memcpy(host, h, hl);
  host[hl] = '\0';
  *port = (int)v;
  return PK_OK;
}

int pk_parse_bytes(const char *s, int64_t *out) {
  if (s == NULL || *s < '0' || *s > '9')
    return PK_EINVAL;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0)
    return PK_EINVAL;
  int shift = 0;
  if (*end == 'K' || *end == 'k')
    shift = 10;
  else if (*end == 'M' || *end == 'm')
    shift = 20;
  else if (*end == 'G' || *end == 'g')
    shift = 30;
  if (shift != 0) {
    end++;
    if (*end == 'i' || *end == 'I')
      end++;
    if (*end == 'B' || *end == 'b')
      end++;
  } else if (*end == 'B' || *end == 'b') {
    end++;
  }
  if (*end != '\0')
    return PK_EINVAL;
  if (v > ((unsigned long long)INT64_MAX >> shift))
    return PK_EINVAL;
  *out = (int64_t)(v << shift);
  return PK_OK;
}

int pk_parse_seconds(const char *s, double *out) {
  if (s == NULL || ((*s < '0' || *s > '9') && *s != '.'))
    return PK_EINVAL;
  errno = 0;
  char *end;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || !isfinite(v) || v < 0)
    return PK_EINVAL;
  if (strcmp(end, "ms") == 0)
    v /= 1000.0;
  else if (strcmp(end, "s") != 0 && *end != '\0')
    return PK_EINVAL;
  if (v > 1e9)
    return PK_EINVAL;
  *out = v;
  return PK_OK;
}

/* Applies one value to one setting. `origin` names where it came from
 * ("--workers" or "PACKD_WORKERS") for the error message. */
static int apply(pk_server_config_t *cfg, const setting_t *st, const char *value,
                 const char *origin, char *err, size_t errlen) {
  char *field = (char *)cfg + st->offset;
  switch (st->kind) {
  case K_HOSTPORT:
  case K_IPPORT: {
    char host[PK_HOSTPORT_MAX];
    int port;
    if (pk_parse_hostport(value, host, sizeof host, &port) != PK_OK) {
      snprintf(err, errlen, "%s: \"%s\" is not HOST:PORT with a port from 0 to 65535", origin,
               value);
      return PK_EINVAL;
    }
    /* The metrics listener binds with libuv, which takes numeric addresses
     * only; a name is refused here, as a usage error, rather than at bind
     * time as a start-up failure. */
    unsigned char addr[sizeof(struct in6_addr)];
    if (st->kind == K_IPPORT && inet_pton(AF_INET, host, addr) != 1 &&
        inet_pton(AF_INET6, host, addr) != 1) {
      snprintf(err, errlen,
               "%s: \"%s\": \"%s\" is not a numeric IPv4 or [IPv6] address (names such as "
               "localhost are not resolved; use 127.0.0.1)",
               origin, value, host);
      return PK_EINVAL;
    }
    snprintf(field, PK_HOSTPORT_MAX, "%s", value);
    return PK_OK;
  }
  case K_INT: {
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || v < st->min || v > st->max) {
      snprintf(err, errlen, "%s: \"%s\" is not an integer from %" PRId64 " to %" PRId64, origin,
               value, st->min, st->max);
      return PK_EINVAL;
    }
    *(int *)field = (int)v;
    return PK_OK;
  }
  case K_BYTES: {
    int64_t v;
    if (pk_parse_bytes(value, &v) != PK_OK || v < st->min || v > st->max) {
      snprintf(err, errlen,
               "%s: \"%s\" is not a byte count from %" PRId64 " to %" PRId64
               " (suffix K, M or G allowed)",
               origin, value, st->min, st->max);
      return PK_EINVAL;
    }
    *(int64_t *)field = v;
    return PK_OK;
  }
  case K_SECONDS: {
    double v;
    if (pk_parse_seconds(value, &v) != PK_OK) {
      snprintf(err, errlen, "%s: \"%s\" is not a number of seconds >= 0 (e.g. 10, 2.5, 500ms)",
               origin, value);
      return PK_EINVAL;
    }
    *(double *)field = v;
    return PK_OK;
  }
  case K_LEVEL: {
    pk_log_level_t lv;
    if (pk_log_level_parse(value, &lv) != PK_OK) {
      snprintf(err, errlen, "%s: \"%s\" is not one of debug, info, warn, error, off", origin,
               value);
      return PK_EINVAL;
    }
    *(pk_log_level_t *)field = lv;
    return PK_OK;
  }
  case K_FLAG:
    /* A flag carries no value; its variable says 1/true/yes or 0/false/no. */
    if (value[0] == '\0' || strcasecmp(value, "1") == 0 || strcasecmp(value, "true") == 0 ||
        strcasecmp(value, "yes") == 0) {
      *(bool *)field = true;
    } else if (strcasecmp(value, "0") == 0 || strcasecmp(value, "false") == 0 ||
               strcasecmp(value, "no") == 0) {
      *(bool *)field = false;
    } else {
      snprintf(err, errlen, "%s: \"%.64s\" is not 1, true, yes, 0, false or no", origin, value);
      return PK_EINVAL;
    }
    return PK_OK;
  case K_URL: {
    pk_store_url_t u;
    char why[400];
    /* Empty turns the store off (a variable set by a template to ""). */
    if (value[0] != '\0' && pk_store_url_parse(value, &u, why, sizeof why) != PK_OK) {
      snprintf(err, errlen, "%s: %s", origin, why);
      return PK_EINVAL;
    }
    snprintf(field, PK_CONFIG_URL_MAX, "%s", value);
    return PK_OK;
  }
  case K_PATH:
    if (strlen(value) >= PK_CONFIG_PATH_MAX) {
      snprintf(err, errlen, "%s: the path is longer than %d characters", origin,
               PK_CONFIG_PATH_MAX - 1);
      return PK_EINVAL;
    }
    snprintf(field, PK_CONFIG_PATH_MAX, "%s", value);
    return PK_OK;
  case K_PREFIX:
    if (pk_store_prefix_check(value) != PK_OK) {
      snprintf(err, errlen, "%s: \"%.80s\" is not 1 to %d printable characters without spaces",
               origin, value, PK_CONFIG_PREFIX_MAX - 1);
      return PK_EINVAL;
    }
    snprintf(field, PK_CONFIG_PREFIX_MAX, "%s", value);
    return PK_OK;
  }
  return PK_EINVAL;
}

/* Settings that are only wrong together. */
static int check_plan_store(const pk_server_config_t *cfg, char *err, size_t errlen) {
  if (cfg->plan_store_password_file[0] != '\0') {
    pk_store_url_t u;
    char why[400];
    if (cfg->plan_store[0] == '\0') {
      snprintf(err, errlen, "--plan-store-password-file is set but --plan-store is not");
      return PK_EINVAL;
    }
    if (pk_store_url_parse(cfg->plan_store, &u, why, sizeof why) == PK_OK && u.has_password) {
      snprintf(err, errlen,
               "--plan-store has a password and --plan-store-password-file is set too; give it "
               "in one place (the file keeps it out of the process list and the environment)");
      return PK_EINVAL;
    }
  }
  return PK_OK;
}

/* The admission and HTTP settings that have bounds K_SECONDS cannot say. */
static int check_admission(const pk_server_config_t *cfg, char *err, size_t errlen) {
  if (cfg->http_header_timeout < 0.001 || cfg->http_header_timeout > 3600) {
    snprintf(err, errlen, "--http-header-timeout: %gs is not from 1ms to 3600s",
             cfg->http_header_timeout);
    return PK_EINVAL;
  }
  if (cfg->http_idle_timeout < 0.001 || cfg->http_idle_timeout > 3600) {
    snprintf(err, errlen, "--http-idle-timeout: %gs is not from 1ms to 3600s",
             cfg->http_idle_timeout);
    return PK_EINVAL;
  }
  /* A budget below one message would refuse the largest request forever. */
  if (cfg->max_decoded_bytes > 0 && cfg->max_decoded_bytes < cfg->max_message_bytes) {
    snprintf(err, errlen,
             "--max-decoded-bytes: %" PRId64 " is below --max-message-bytes %" PRId64
             " (one largest request must fit in the budget)",
             cfg->max_decoded_bytes, cfg->max_message_bytes);
    return PK_EINVAL;
  }
  return PK_OK;
}

static const char *process_getenv(const char *name, void *user) {
  (void)user;
  return getenv(name);
}

int pk_config_load(pk_server_config_t *cfg, int argc, char *const *argv, pk_getenv_fn getenv_fn,
                   void *user, char *err, size_t errlen) {
  if (errlen > 0)
    err[0] = '\0';
  if (getenv_fn == NULL)
    getenv_fn = process_getenv;
  for (size_t i = 0; i < N_SETTINGS; i++) {
    const setting_t *st = &k_settings[i];
    if (st->env == NULL)
      continue;
    const char *v = getenv_fn(st->env, user);
    if (v == NULL || *v == '\0')
      continue;
    int rc = apply(cfg, st, v, st->env, err, errlen);
    if (rc != PK_OK)
      return rc;
  }
  for (int a = 1; a < argc; a++) {
    const char *arg = argv[a];
    if (strncmp(arg, "--", 2) != 0) {
      snprintf(err, errlen, "unexpected argument \"%s\" (flags start with --; see --help)", arg);
      return PK_EINVAL;
    }
    const char *name = arg + 2;
    const char *eq = strchr(name, '=');
    size_t nl = eq ? (size_t)(eq - name) : strlen(name);
    const setting_t *st = NULL;
    for (size_t i = 0; i < N_SETTINGS; i++) {
      if (strlen(k_settings[i].flag) == nl && strncmp(k_settings[i].flag, name, nl) == 0) {
        st = &k_settings[i];
        break;
      }
    }
    if (st == NULL) {
      snprintf(err, errlen, "unknown flag \"%.*s\" (see --help)", (int)(nl + 2), arg);
      return PK_EINVAL;
    }
    char origin[64];
    snprintf(origin, sizeof origin, "--%s", st->flag);
    const char *value;
    if (st->kind == K_FLAG) {
      if (eq != NULL) {
        snprintf(err, errlen, "%s takes no value, got \"%s\"", origin, eq + 1);
        return PK_EINVAL;
      }
      value = "";
    } else if (eq != NULL) {
      value = eq + 1;
    } else if (a + 1 < argc) {
      value = argv[++a];
    } else {
      snprintf(err, errlen, "%s needs a value", origin);
      return PK_EINVAL;
    }
    int rc = apply(cfg, st, value, origin, err, errlen);
    if (rc != PK_OK)
      return rc;
  }
  int rc = check_plan_store(cfg, err, errlen);
  if (rc == PK_OK)
    rc = check_admission(cfg, err, errlen);
  if (rc != PK_OK)
    return rc;
  return pk_security_check(cfg, err, errlen);
}

void pk_config_describe(const pk_server_config_t *cfg, char *buf, size_t len) {
  /* The store is named without its password. */
  char store[PK_STORE_HOST_MAX + 32] = "off";
  pk_store_url_t u;
  char why[400];
  if (cfg->plan_store[0] != '\0' &&
      pk_store_url_parse(cfg->plan_store, &u, why, sizeof why) == PK_OK)
    pk_store_url_describe(&u, store, sizeof store);
  snprintf(buf, len,
           "listen=%s metrics_listen=%s workers=%d max_inflight=%d max_message_bytes=%" PRId64
           " cache_bytes=%" PRId64
           " cache_ttl=%gs grace_period=%gs drain_delay=%gs log_level=%s plan_store=%s%s%s%s",
           cfg->listen, cfg->metrics_listen, cfg->workers, cfg->max_inflight,
           cfg->max_message_bytes, cfg->cache_bytes, cfg->cache_ttl, cfg->grace_period,
           cfg->drain_delay, pk_log_level_name(cfg->log_level), store,
           cfg->plan_store[0] != '\0' ? " plan_store_prefix=" : "",
           cfg->plan_store[0] != '\0' ? cfg->plan_store_prefix : "",
           cfg->debug_delay_ms > 0 ? " debug_delay_ms=set" : "");
  size_t used = strnlen(buf, len);
  if (used < len)
    snprintf(buf + used, len - used, " max_sequences=%d max_plan_bytes=%" PRId64,
             cfg->max_sequences, cfg->max_plan_bytes);
  /* Security: what is on, never a file's contents. */
  used = strnlen(buf, len);
  if (used < len)
    snprintf(buf + used, len - used, " tls=%s auth=%s plan_id_key=%s",
             cfg->tls_cert[0] == '\0' ? "off" : (cfg->tls_client_ca[0] != '\0' ? "mtls" : "tls"),
             cfg->auth_token_file[0] != '\0' ? "token" : "off",
             cfg->plan_id_secret_file[0] != '\0' ? "file" : "random");
  used = strnlen(buf, len);
  if (used < len)
    snprintf(buf + used, len - used,
             " large_request_bytes=%" PRId64 " large_workers=%d http_max_conns=%d"
             " http_max_conns_per_peer=%d http_header_timeout=%gs http_idle_timeout=%gs",
             cfg->large_request_bytes, pk_config_large_workers(cfg), cfg->http_max_conns,
             cfg->http_max_conns_per_peer, cfg->http_header_timeout, cfg->http_idle_timeout);
  used = strnlen(buf, len);
  if (used < len)
    snprintf(buf + used, len - used, " max_decoded_bytes=%" PRId64 " log_refused_interval=%gs",
             cfg->max_decoded_bytes > 0 ? cfg->max_decoded_bytes
                                        : pk_decode_budget_default(cfg->max_message_bytes),
             cfg->log_refused_interval);
}

int pk_config_large_workers(const pk_server_config_t *cfg) {
  int n = cfg->large_workers > 0 ? cfg->large_workers : cfg->workers - 1;
  if (n > cfg->workers)
    n = cfg->workers;
  return n < 1 ? 1 : n;
}

void pk_config_usage(FILE *out, const char *argv0) {
  pk_server_config_t d;
  pk_config_defaults(&d);
  fprintf(out,
          "usage: %s [flags]\n\n"
          "packd plans the batching of variable-length sequences over gRPC\n"
          "(packd.v1.Planner/Plan, packd.v1.Planner/GetRankPlan, grpc.health.v1.Health/Check).\n"
          "Every flag also reads an environment variable; flags win.\n\n",
          argv0);
  for (size_t i = 0; i < N_SETTINGS; i++) {
    const setting_t *st = &k_settings[i];
    char def[PK_HOSTPORT_MAX + 16] = "";
    const char *field = (const char *)&d + st->offset;
    switch (st->kind) {
    case K_HOSTPORT:
    case K_IPPORT:
      snprintf(def, sizeof def, "%s", field);
      break;
    case K_INT:
      snprintf(def, sizeof def, "%d", *(const int *)field);
      break;
    case K_BYTES:
      snprintf(def, sizeof def, "%" PRId64, *(const int64_t *)field);
      break;
    case K_SECONDS:
      snprintf(def, sizeof def, "%g", *(const double *)field);
      break;
    case K_LEVEL:
      snprintf(def, sizeof def, "%s", pk_log_level_name(*(const pk_log_level_t *)field));
      break;
    case K_FLAG:
    case K_PATH:
      break;
    case K_URL:
      snprintf(def, sizeof def, "none: plans stay on the server that made them");
      break;
    case K_PREFIX:
      snprintf(def, sizeof def, "%s", field);
      break;
    }
    fprintf(out, "  --%-24s %-30s %s", st->flag, st->env ? st->env : "", st->help);
    if (def[0] != '\0')
      fprintf(out, " (default %s)", def);
    fputc('\n', out);
  }
  fprintf(out, "\nSignals: SIGTERM or SIGINT drains and exits 0; a second one cancels calls.\n"
               "SIGHUP re-reads --auth-token-file.\n");
}
