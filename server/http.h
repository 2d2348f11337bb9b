/* A small HTTP/1.1 listener on the libuv loop for /metrics, /healthz and
 * /readyz. Requests are parsed with libhttp-parser; every answer closes the
 * connection. Runs on the loop thread only (libuv is not thread-safe).
 *
 * Room for fresh requests: a connection that has not sent a complete
 * request within the header timeout, or that sends nothing for the idle
 * timeout, is closed. When a new connection finds its peer or the whole
 * listener at its limit, the oldest connection of that peer (or of all)
 * that has not sent a complete request yet is closed to make room, rather
 * than the new one being refused: stalled connections then cannot keep a
 * probe out, whoever opened them.
 *
 * Ownership: pk_http_start allocates the listener; pk_http_close closes every
 * handle and frees it once libuv has closed them (keep running the loop). */
#ifndef PK_HTTP_H
#define PK_HTTP_H

#include <stdatomic.h>
#include <stddef.h>
#include <uv.h>

typedef struct pk_http pk_http_t;

/* The answer to one request. The route fills it; body is malloc'd (or NULL)
 * and the listener frees it after writing. content_type is a static string. */
typedef struct pk_http_reply {
  int status; /* 200, 404, 503, ... */
  const char *content_type;
  char *body;
  size_t body_len;
} pk_http_reply_t;

/* Decides the answer for a request with `method` ("GET") and `path` (the URL
 * without its query string). Called on the loop thread. */
typedef void (*pk_http_route_fn)(void *user, const char *method, const char *path,
                                 pk_http_reply_t *reply);

/* Binds HOST:PORT (port 0 picks one; *bound_port gets the real port) and
 * starts accepting. Returns 0, or a negative pk_error code with a message in
 * err naming the address and the system error. */
int pk_http_start(uv_loop_t *loop, const char *hostport, pk_http_route_fn route, void *user,
                  pk_http_t **out, int *bound_port, char *err, size_t errlen);

/* Bounds on the connections of the listener. Every connection answers one
 * request and closes; these bounds only matter for clients that open
 * connections and do not ask (stalled, slow or hostile), which must not
 * keep probes and scrapes out. */
typedef struct pk_http_limits {
  int max_conns;          /* Open connections, all peers. */
  int max_conns_per_peer; /* Open connections of one peer address (any port). */
  double header_timeout;  /* Seconds from accept to a complete request header. */
  double idle_timeout;    /* Seconds without a byte before the request is complete. */
  /* Counters the listener adds to (may be NULL): connections closed to make
   * room, and connections closed by a timeout. */
  atomic_uint_fast64_t *evicted;
  atomic_uint_fast64_t *timed_out;
} pk_http_limits_t;

/* The limits pk_http_start uses until pk_http_set_limits: 256 connections,
 * 64 per peer, 5 s for the header, 2 s idle. */
void pk_http_default_limits(pk_http_limits_t *limits);

/* Replaces the limits; applies to connections accepted from now on (and to
 * the eviction of older ones). */
void pk_http_set_limits(pk_http_t *h, const pk_http_limits_t *limits);

/* Open connections; 0 for NULL. */
int pk_http_connections(const pk_http_t *h);

/* Stops listening and closes every open connection. NULL is allowed. */
void pk_http_close(pk_http_t *h);

/* One request's parsing and answer without sockets: the listener feeds each
 * read of a connection into an exchange and writes its answer; tests and the
 * fuzz target feed bytes directly. Not thread-safe; one exchange per
 * connection. */
typedef struct pk_http_exchange pk_http_exchange_t;

/* A new exchange that asks `route` for the answer; NULL when out of memory. */
pk_http_exchange_t *pk_http_exchange_new(pk_http_route_fn route, void *user);

/* Feeds len more bytes of the request. Returns 1 once the answer is decided
 * (a complete request, or 400/405/414), 0 while more bytes are needed; bytes
 * fed after that are ignored. */
int pk_http_exchange_feed(pk_http_exchange_t *ex, const char *data, size_t len);

/* The answer (status line, headers, body) and its length; NULL before it is
 * decided, or when memory ran out building it. Owned by the exchange. */
const char *pk_http_exchange_answer(const pk_http_exchange_t *ex, size_t *len);

void pk_http_exchange_free(pk_http_exchange_t *ex);

/* The reason phrase of a status code ("OK", "Not Found"). */
const char *pk_http_reason(int status);

#endif
