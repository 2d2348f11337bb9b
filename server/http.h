/* A small HTTP/1.1 listener on the libuv loop for /metrics, /healthz and
 * /readyz. Requests are parsed with libhttp-parser; every answer closes the
 * connection. Runs on the loop thread only (libuv is not thread-safe).
 *
 * Ownership: pk_http_start allocates the listener; pk_http_close closes every
 * handle and frees it once libuv has closed them (keep running the loop). */
#ifndef PK_HTTP_H
#define PK_HTTP_H

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
