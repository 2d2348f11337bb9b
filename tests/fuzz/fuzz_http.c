/* libFuzzer target: the metrics listener's request handling (server/http.c)
 * without sockets, through the same exchange the listener feeds each read
 * into. The first input byte picks the read size (1..256 bytes), so requests
 * split across reads are covered as well as whole ones; the route answers
 * like the real one (a body for known paths, 404 otherwise). Every decided
 * answer must be a complete HTTP/1.1 head. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void route(void *user, const char *method, const char *path, pk_http_reply_t *reply) {
  (void)user;
  if (strlen(method) == 0)
    abort();
  if (strcmp(path, "/metrics") == 0 || strcmp(path, "/healthz") == 0) {
    reply->status = 200;
    reply->body = strdup("ok\n");
    reply->body_len = reply->body != NULL ? 3 : 0;
  } else if (strcmp(path, "/readyz") == 0) {
    reply->status = 503;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  size_t chunk = (size_t)data[0] + 1;
  data++;
  size--;
  pk_http_exchange_t *ex = pk_http_exchange_new(route, NULL);
  if (ex == NULL)
    return 0;
  int done = 0;
  for (size_t off = 0; off < size; off += chunk) {
    size_t n = size - off < chunk ? size - off : chunk;
    /* Each read in its own exact-size buffer, as the listener's reads are. */
    char *buf = malloc(n);
    if (buf == NULL)
      break;
    memcpy(buf, data + off, n);
    done = pk_http_exchange_feed(ex, buf, n);
    free(buf);
  }
  size_t len = 0;
  const char *ans = pk_http_exchange_answer(ex, &len);
  if (done && ans != NULL) {
    if (len < 12 || memcmp(ans, "HTTP/1.1 ", 9) != 0)
      abort();
  } else if (!done && ans != NULL) {
    abort();
  }
  pk_http_exchange_free(ex);
  return 0;
}
