/* Unit tests of server/http.c: a real libuv loop and real TCP connections on
 * loopback. A client thread sends raw requests (whole, or one byte per write)
 * and reads each answer to the end; the loop thread runs the listener. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "http.h"
#include "pk_error.h"

#define N_CASES 7

typedef struct shared {
  int port;
  uv_async_t done;
  pk_http_t *http;
  char answers[N_CASES][1024];
  char seen_paths[N_CASES][128];
  int nseen;
} shared_t;

static void route(void *user, const char *method, const char *path, pk_http_reply_t *reply) {
  shared_t *sh = user;
  if (sh->nseen < N_CASES)
    snprintf(sh->seen_paths[sh->nseen++], sizeof sh->seen_paths[0], "%s %s", method, path);
  if (strcmp(path, "/hello") == 0 || strcmp(path, "/readyz") == 0) {
    reply->status = 200;
    reply->body = strdup("hello body\n");
    reply->body_len = strlen(reply->body);
  } else {
    reply->status = 404;
    reply->body = strdup("nope\n");
    reply->body_len = 5;
  }
}

/* Sends req (one byte per write when slow) and reads until the server closes. */
static void exchange(int port, const char *req, int slow, char *out, size_t outlen) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    snprintf(out, outlen, "connect failed");
    close(fd);
    return;
  }
  size_t n = strlen(req);
  if (slow) {
    for (size_t i = 0; i < n; i++) {
      if (write(fd, req + i, 1) != 1)
        break;
      struct timespec ts = {0, 200000};
      nanosleep(&ts, NULL);
    }
  } else if (write(fd, req, n) != (ssize_t)n) {
    snprintf(out, outlen, "write failed");
  }
  size_t got = 0;
  for (;;) {
    ssize_t r = read(fd, out + got, outlen - 1 - got);
    if (r <= 0)
      break;
    got += (size_t)r;
    if (got == outlen - 1)
      break;
  }
  out[got] = '\0';
  close(fd);
}

static void *client_main(void *arg) {
  shared_t *sh = arg;
  const char *reqs[N_CASES] = {
      "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /missing HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /readyz?probe=1 HTTP/1.0\r\n\r\n",
      "POST /hello HTTP/1.1\r\nContent-Length: 2\r\n\r\nab",
      "HEAD /hello HTTP/1.1\r\n\r\n",
      "THIS IS NOT HTTP\r\n\r\n",
      "GET /hello HTTP/1.1\r\nHost: slow\r\n\r\n",
  };
  for (int i = 0; i < N_CASES; i++)
    exchange(sh->port, reqs[i], i == N_CASES - 1, sh->answers[i], sizeof sh->answers[i]);
  uv_async_send(&sh->done);
  return NULL;
}

static void on_done(uv_async_t *a) {
  shared_t *sh = a->data;
  pk_http_close(sh->http);
  uv_close((uv_handle_t *)a, NULL);
}

static void test_requests_and_answers(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  shared_t sh;
  memset(&sh, 0, sizeof sh);
  char err[256];
  assert_int_equal(
      pk_http_start(&loop, "127.0.0.1:0", route, &sh, &sh.http, &sh.port, err, sizeof err), PK_OK);
  assert_true(sh.port > 0);
  uv_async_init(&loop, &sh.done, on_done);
  sh.done.data = &sh;
  pthread_t t;
  pthread_create(&t, NULL, client_main, &sh);
  uv_run(&loop, UV_RUN_DEFAULT);
  pthread_join(t, NULL);
  assert_int_equal(uv_loop_close(&loop), 0);

  assert_non_null(strstr(sh.answers[0], "HTTP/1.1 200 OK\r\n"));
  assert_non_null(strstr(sh.answers[0], "Content-Length: 11\r\n"));
  assert_non_null(strstr(sh.answers[0], "\r\n\r\nhello body\n"));
  assert_non_null(strstr(sh.answers[1], "HTTP/1.1 404 Not Found"));
  assert_non_null(strstr(sh.answers[2], "200 OK"));
  assert_non_null(strstr(sh.answers[3], "405 Method Not Allowed"));
  assert_non_null(strstr(sh.answers[4], "200 OK"));
  assert_non_null(strstr(sh.answers[4], "Content-Length: 11"));
  assert_null(strstr(sh.answers[4], "hello body")); /* HEAD: no body. */
  assert_non_null(strstr(sh.answers[5], "400 Bad Request"));
  assert_non_null(strstr(sh.answers[6], "hello body"));
  /* The route saw paths without their query string; POST and garbage never
   * reached it. */
  assert_int_equal(sh.nseen, 5);
  assert_string_equal(sh.seen_paths[0], "GET /hello");
  assert_string_equal(sh.seen_paths[2], "GET /readyz");
  assert_string_equal(sh.seen_paths[3], "HEAD /hello");
}

static void test_port_in_use_fails_loudly(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  shared_t sh;
  memset(&sh, 0, sizeof sh);
  char err[256];
  pk_http_t *first = NULL, *second = NULL;
  int port = 0, port2 = 0;
  assert_int_equal(pk_http_start(&loop, "127.0.0.1:0", route, &sh, &first, &port, err, sizeof err),
                   PK_OK);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  assert_int_not_equal(pk_http_start(&loop, addr, route, &sh, &second, &port2, err, sizeof err),
                       PK_OK);
  assert_null(second);
  assert_non_null(strstr(err, addr));
  assert_non_null(strstr(err, "address already in use"));
  assert_int_not_equal(
      pk_http_start(&loop, "not-an-ip:80", route, &sh, &second, &port2, err, sizeof err), PK_OK);
  assert_non_null(strstr(err, "not-an-ip"));
  pk_http_close(first);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
}

/* Feeds text to a new exchange in reads of `chunk` bytes, each in a buffer
 * of exactly that size; returns the answer (a copy, "" when none). */
static char *feed(shared_t *sh, const char *text, size_t chunk, int *done) {
  pk_http_exchange_t *ex = pk_http_exchange_new(route, sh);
  assert_non_null(ex);
  size_t n = strlen(text);
  *done = 0;
  for (size_t off = 0; off < n; off += chunk) {
    size_t k = n - off < chunk ? n - off : chunk;
    char *buf = malloc(k);
    assert_non_null(buf);
    memcpy(buf, text + off, k);
    *done = pk_http_exchange_feed(ex, buf, k);
    free(buf);
  }
  size_t len = 0;
  const char *ans = pk_http_exchange_answer(ex, &len);
  char *copy = calloc(1, len + 1);
  assert_non_null(copy);
  if (ans != NULL)
    memcpy(copy, ans, len);
  pk_http_exchange_free(ex);
  return copy;
}

/* The exchange without sockets: the same answers whole or byte by byte,
 * nothing before the request is complete, and bytes after the answer
 * ignored. */
static void test_exchange_without_sockets(void **state) {
  (void)state;
  shared_t sh;
  memset(&sh, 0, sizeof sh);
  int done;
  char *a = feed(&sh, "GET /hello?x=1 HTTP/1.1\r\nHost: x\r\n\r\nGARBAGE", 4096, &done);
  assert_true(done);
  assert_non_null(strstr(a, "HTTP/1.1 200 OK\r\n"));
  assert_non_null(strstr(a, "\r\n\r\nhello body\n"));
  free(a);
  a = feed(&sh, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n", 1, &done);
  assert_true(done);
  assert_non_null(strstr(a, "hello body"));
  free(a);
  a = feed(&sh, "GET /hello HTTP/1.1\r\nHost: x\r\n", 3, &done);
  assert_false(done);
  assert_string_equal(a, "");
  free(a);
  a = feed(&sh, "DELETE /hello HTTP/1.1\r\n\r\n", 5, &done);
  assert_true(done);
  assert_non_null(strstr(a, "405 Method Not Allowed"));
  free(a);
  a = feed(&sh, "\x01\x02 nonsense\r\n\r\n", 2, &done);
  assert_true(done);
  assert_non_null(strstr(a, "400 Bad Request"));
  free(a);
  /* A URL longer than the listener keeps: 414, and the route never sees it. */
  char big[3000] = "GET /";
  memset(big + 5, 'a', 2500);
  strcpy(big + 2505, " HTTP/1.1\r\n\r\n");
  int before = sh.nseen;
  a = feed(&sh, big, 700, &done);
  assert_true(done);
  assert_non_null(strstr(a, "414 URI Too Long"));
  assert_int_equal(sh.nseen, before);
  free(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_requests_and_answers),
      cmocka_unit_test(test_port_in_use_fails_loudly),
      cmocka_unit_test(test_exchange_without_sockets),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
