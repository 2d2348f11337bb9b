/* The HTTP listener for metrics and probes (see http.h). Each connection owns
 * a TCP handle, an idle timer and an exchange (an http_parser and the
 * answer); it answers the first complete request and closes. The exchange
 * knows nothing of sockets, so it is also driven directly from bytes. */
#include "http.h"

#include <http_parser.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "pk_error.h"

#define PK_HTTP_URL_MAX 2048

typedef struct conn conn_t;

struct pk_http {
  uv_loop_t *loop;
  uv_tcp_t server;
  pk_http_route_fn route;
  void *user;
  conn_t *conns;      /* Open connections, newest first. */
  conn_t *conns_tail; /* The oldest open connection. */
  int nconns;
  pk_http_limits_t limits;
  int closing;
  int handles; /* Handles not yet closed by libuv (server + connections). */
};

struct pk_http_exchange {
  pk_http_route_fn route;
  void *user;
  http_parser parser;
  char url[PK_HTTP_URL_MAX];
  size_t url_len;
  int url_too_long;
  int answered; /* The answer is decided; further bytes are ignored. */
  char *out;    /* Head and body of the answer; NULL when answered without memory. */
  size_t out_len;
};

struct conn {
  pk_http_t *http;
  conn_t *prev, *next;
  uv_tcp_t tcp;
  uv_timer_t timer;
  pk_http_exchange_t ex;
  int open_handles;
  uv_write_t write_req;
  struct sockaddr_storage peer; /* Address of the client (the port is ignored). */
  uint64_t t_accept;            /* uv_now at accept, ms. */
  uint64_t t_last;              /* uv_now at the last byte received, ms. */
};

static int on_url(http_parser *p, const char *at, size_t len);
static int on_message_complete(http_parser *p);

/* Constant: shared by every exchange, on any thread. */
static const http_parser_settings g_settings = {
    .on_url = on_url,
    .on_message_complete = on_message_complete,
};

const char *pk_http_reason(int status) {
  switch (status) {
  case 200:
    return "OK";
  case 400:
    return "Bad Request";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 414:
    return "URI Too Long";
  case 500:
    return "Internal Server Error";
  case 503:
    return "Service Unavailable";
  default:
    return "Unknown";
  }
}

static void maybe_free_http(pk_http_t *h) {
  if (h->closing && h->handles == 0)
    free(h);
}

static void on_conn_handle_closed(uv_handle_t *handle) {
  conn_t *c = handle->data;
  if (--c->open_handles > 0)
    return;
  pk_http_t *h = c->http;
  free(c->ex.out);
  free(c);
  h->handles--;
  maybe_free_http(h);
}

static void conn_close(conn_t *c) {
  if (uv_is_closing((uv_handle_t *)&c->tcp))
    return;
  pk_http_t *h = c->http;
  if (c->prev)
    c->prev->next = c->next;
  else
    h->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  else
    h->conns_tail = c->prev;
  h->nconns--;
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
  uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
}

static void on_written(uv_write_t *req, int status) {
  conn_close(req->data);
}

/* Decides the answer: status line, headers and body (none for HEAD) in one
 * malloc'd buffer. Out of memory leaves ex->out NULL (the connection then
 * closes without an answer). */
static void answer(pk_http_exchange_t *ex, int status, const char *content_type, const char *body,
                   size_t body_len, int head_only) {
  ex->answered = 1;
  char head[256];
  int hl = snprintf(head, sizeof head,
                    "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                    "Connection: close\r\n\r\n",
                    status, pk_http_reason(status), content_type, body_len);
  if (hl < 0 || (size_t)hl >= sizeof head)
    return;
  size_t total = (size_t)hl + (head_only ? 0 : body_len);
  ex->out = malloc(total);
  if (ex->out == NULL)
    return;
  memcpy(ex->out, head, (size_t)hl);
  if (!head_only && body_len > 0)
    memcpy(ex->out + hl, body, body_len);
  ex->out_len = total;
}

static void answer_text(pk_http_exchange_t *ex, int status, const char *text) {
  answer(ex, status, "text/plain; charset=utf-8", text, strlen(text), 0);
}

static int on_url(http_parser *p, const char *at, size_t len) {
  pk_http_exchange_t *ex = p->data;
  if (ex->url_len + len >= sizeof ex->url) {
    ex->url_too_long = 1;
    return 0;
  }
  memcpy(ex->url + ex->url_len, at, len);
  ex->url_len += len;
  ex->url[ex->url_len] = '\0';
  return 0;
}

static int on_message_complete(http_parser *p) {
  pk_http_exchange_t *ex = p->data;
  if (ex->answered)
    return 0;
  if (ex->url_too_long) {
    answer_text(ex, 414, "URI too long\n");
    return 0;
  }
  char *q = strchr(ex->url, '?');
  if (q != NULL)
    *q = '\0';
  const char *method = http_method_str((enum http_method)p->method);
  int head_only = p->method == HTTP_HEAD;
  if (p->method != HTTP_GET && p->method != HTTP_HEAD) {
    answer_text(ex, 405, "only GET and HEAD are supported\n");
    return 0;
  }
  pk_http_reply_t reply = {404, "text/plain; charset=utf-8", NULL, 0};
  ex->route(ex->user, method, ex->url, &reply);
  answer(ex, reply.status, reply.content_type, reply.body ? reply.body : "", reply.body_len,
         head_only);
  free(reply.body);
  PK_LOG_DEBUG("http %s %s -> %d", method, ex->url, reply.status);
  return 0;
}

static void exchange_init(pk_http_exchange_t *ex, pk_http_route_fn route, void *user) {
  memset(ex, 0, sizeof *ex);
  ex->route = route;
  ex->user = user;
  http_parser_init(&ex->parser, HTTP_REQUEST);
  ex->parser.data = ex;
}

pk_http_exchange_t *pk_http_exchange_new(pk_http_route_fn route, void *user) {
  pk_http_exchange_t *ex = malloc(sizeof *ex);
  if (ex != NULL)
    exchange_init(ex, route, user);
  return ex;
}

int pk_http_exchange_feed(pk_http_exchange_t *ex, const char *data, size_t len) {
  if (ex->answered || len == 0)
    return ex->answered;
  size_t done = http_parser_execute(&ex->parser, &g_settings, data, len);
  if (!ex->answered && (HTTP_PARSER_ERRNO(&ex->parser) != HPE_OK || done != len)) {
    char msg[128];
    snprintf(msg, sizeof msg, "malformed request: %s\n",
             http_errno_name(HTTP_PARSER_ERRNO(&ex->parser)));
    answer_text(ex, 400, msg);
  }
  return ex->answered;
}

const char *pk_http_exchange_answer(const pk_http_exchange_t *ex, size_t *len) {
  *len = ex->out_len;
  return ex->out;
}

void pk_http_exchange_free(pk_http_exchange_t *ex) {
  if (ex == NULL)
    return;
  free(ex->out);
  free(ex);
}

/* Writes the decided answer, then closes the connection. */
static void send_answer(conn_t *c) {
  uv_read_stop((uv_stream_t *)&c->tcp);
  if (c->ex.out == NULL) {
    conn_close(c);
    return;
  }
  uv_buf_t buf = uv_buf_init(c->ex.out, (unsigned)c->ex.out_len);
  c->write_req.data = c;
  if (uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &buf, 1, on_written) != 0)
    conn_close(c);
}

static uint64_t ms_of(double seconds) {
  double ms = seconds * 1000.0;
  return ms < 1.0 ? 1 : (uint64_t)ms;
}

static void on_timeout(uv_timer_t *t) {
  conn_t *c = t->data;
  if (c->ex.answered)
    return;
  if (c->http->limits.timed_out != NULL)
    atomic_fetch_add(c->http->limits.timed_out, 1);
  conn_close(c);
}

/* (Re)arms the connection's timer for the earlier of its two deadlines:
 * the header deadline from accept, and the idle deadline from the last
 * byte. */
static void arm_timer(conn_t *c) {
  pk_http_t *h = c->http;
  uint64_t now = uv_now(h->loop);
  uint64_t header_at = c->t_accept + ms_of(h->limits.header_timeout);
  uint64_t idle_at = c->t_last + ms_of(h->limits.idle_timeout);
  uint64_t at = header_at < idle_at ? header_at : idle_at;
  uv_timer_start(&c->timer, on_timeout, at > now ? at - now : 0, 0);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  (void)handle;
  size_t n = suggested < 4096 ? suggested : 4096;
  buf->base = malloc(n);
  buf->len = buf->base ? n : 0;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = stream->data;
  if (nread < 0) {
    free(buf->base);
    if (!c->ex.answered)
      conn_close(c);
    return;
  }
  if (nread > 0 && !c->ex.answered) {
    c->t_last = uv_now(c->http->loop);
    if (pk_http_exchange_feed(&c->ex, buf->base, (size_t)nread))
      send_answer(c);
    else
      arm_timer(c);
  }
  free(buf->base);
}

/* Two peers are the same client address (the port differs per
 * connection). */
static int same_peer(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
  if (a->ss_family != b->ss_family)
    return 0;
  if (a->ss_family == AF_INET)
    return memcmp(&((const struct sockaddr_in *)a)->sin_addr,
                  &((const struct sockaddr_in *)b)->sin_addr, sizeof(struct in_addr)) == 0;
  if (a->ss_family == AF_INET6)
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
  return 1; /* Unknown families count as one peer. */
}

/* Closes the oldest connection (of `peer`, or of anyone when peer is NULL)
 * that has not sent a complete request, to make room for a new one.
 * Returns 0, or -1 when every such connection is already being answered. */
static int evict_oldest(pk_http_t *h, const struct sockaddr_storage *peer) {
  for (conn_t *c = h->conns_tail; c != NULL; c = c->prev) {
    if (c->ex.answered || (peer != NULL && !same_peer(&c->peer, peer)))
      continue;
    if (h->limits.evicted != NULL)
      atomic_fetch_add(h->limits.evicted, 1);
    conn_close(c);
    return 0;
  }
  return -1;
}

static void on_connection(uv_stream_t *server, int status) {
  pk_http_t *h = server->data;
  if (status < 0 || h->closing)
    return;
  conn_t *c = calloc(1, sizeof *c);
  if (c == NULL)
    return;
  c->http = h;
  uv_tcp_init(h->loop, &c->tcp);
  uv_timer_init(h->loop, &c->timer);
  c->tcp.data = c;
  c->timer.data = c;
  c->open_handles = 2;
  h->handles++;
  /* Accepted first, so that a refused connection leaves the backlog. */
  int ok = uv_accept(server, (uv_stream_t *)&c->tcp) == 0;
  int plen = sizeof c->peer;
  if (ok && uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&c->peer, &plen) != 0)
    memset(&c->peer, 0, sizeof c->peer);
  if (ok) {
    int same = 0;
    for (conn_t *o = h->conns; o != NULL; o = o->next)
      same += same_peer(&o->peer, &c->peer);
    if (same >= h->limits.max_conns_per_peer && evict_oldest(h, &c->peer) != 0)
      ok = 0;
    if (ok && h->nconns >= h->limits.max_conns && evict_oldest(h, NULL) != 0)
      ok = 0;
  }
  c->next = h->conns;
  if (h->conns)
    h->conns->prev = c;
  else
    h->conns_tail = c;
  h->conns = c;
  h->nconns++;
  if (!ok) {
    conn_close(c);
    return;
  }
  exchange_init(&c->ex, h->route, h->user);
  c->t_accept = c->t_last = uv_now(h->loop);
  arm_timer(c);
  uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

void pk_http_default_limits(pk_http_limits_t *limits) {
  memset(limits, 0, sizeof *limits);
  limits->max_conns = 256;
  limits->max_conns_per_peer = 64;
  limits->header_timeout = 5.0;
  limits->idle_timeout = 2.0;
}

void pk_http_set_limits(pk_http_t *h, const pk_http_limits_t *limits) {
  h->limits = *limits;
  if (h->limits.max_conns < 1)
    h->limits.max_conns = 1;
  if (h->limits.max_conns_per_peer < 1)
    h->limits.max_conns_per_peer = 1;
}

int pk_http_connections(const pk_http_t *h) {
  return h != NULL ? h->nconns : 0;
}

static void on_server_closed(uv_handle_t *handle) {
  pk_http_t *h = handle->data;
  h->handles--;
  maybe_free_http(h);
}

int pk_http_start(uv_loop_t *loop, const char *hostport, pk_http_route_fn route, void *user,
                  pk_http_t **out, int *bound_port, char *err, size_t errlen) {
  *out = NULL;

  char host[PK_HOSTPORT_MAX];
  int port;
  if (pk_parse_hostport(hostport, host, sizeof host, &port) != PK_OK) {
    snprintf(err, errlen, "metrics address \"%s\" is not HOST:PORT", hostport);
    return PK_EINVAL;
  }
  struct sockaddr_storage addr;
  int rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
  if (rc != 0)
    rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr);
  if (rc != 0) {
    snprintf(err, errlen, "metrics address \"%s\": \"%s\" is not a numeric IPv4 or IPv6 address",
             hostport, host);
    return PK_EINVAL;
  }
  pk_http_t *h = calloc(1, sizeof *h);
  if (h == NULL)
    return PK_ENOMEM;
  h->loop = loop;
  h->route = route;
  h->user = user;
  pk_http_default_limits(&h->limits);
  uv_tcp_init(loop, &h->server);
  h->server.data = h;
  h->handles = 1;
  rc = uv_tcp_bind(&h->server, (const struct sockaddr *)&addr, 0);
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)&h->server, 511, on_connection);
  if (rc != 0) {
    snprintf(err, errlen, "cannot listen for metrics on %s: %s", hostport, uv_strerror(rc));
    h->closing = 1;
    uv_close((uv_handle_t *)&h->server, on_server_closed);
    return PK_EINVAL;
  }
  struct sockaddr_storage bound;
  int blen = sizeof bound;
  *bound_port = port;
  if (uv_tcp_getsockname(&h->server, (struct sockaddr *)&bound, &blen) == 0) {
    if (bound.ss_family == AF_INET)
      *bound_port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
    else if (bound.ss_family == AF_INET6)
      *bound_port = ntohs(((struct sockaddr_in6 *)&bound)->sin6_port);
  }
  *out = h;
  return PK_OK;
}

void pk_http_close(pk_http_t *h) {
  if (h == NULL || h->closing)
    return;
  h->closing = 1;
  while (h->conns != NULL)
    conn_close(h->conns);
  uv_close((uv_handle_t *)&h->server, on_server_closed);
}
