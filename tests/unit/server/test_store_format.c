/* Unit tests of server/store_format.c: the plan store URL parser (every
 * part, defaults, escapes, and inputs that must be refused with a message
 * that never shows the password), the password file, the key, and the
 * value envelope: a round trip, and every single-byte change, cut, and
 * foreign plan id refused.
 *
 * The envelope is what stands between a shared store and a wrong plan, so
 * the test flips each byte of real envelopes and checks that not one
 * changed value is accepted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pk_error.h"
#include "store_format.h"

static void parse_ok(const char *url, const char *host, int port, int db, const char *user,
                     const char *password) {
  pk_store_url_t u;
  char err[512] = "";
  if (pk_store_url_parse(url, &u, err, sizeof err) != PK_OK)
    fail_msg("\"%s\" should parse: %s", url, err);
  assert_string_equal(u.host, host);
  assert_int_equal(u.port, port);
  assert_int_equal(u.db, db);
  assert_string_equal(u.user, user);
  assert_string_equal(u.password, password);
  assert_int_equal(u.has_password, password[0] != '\0');
}

static void test_url_parts_and_defaults(void **state) {
  (void)state;
  parse_ok("redis://127.0.0.1:6380", "127.0.0.1", 6380, 0, "", "");
  parse_ok("redis://redis.ml-infra.svc:6379/3", "redis.ml-infra.svc", 6379, 3, "", "");
  parse_ok("redis://store", "store", 6379, 0, "", "");
  parse_ok("redis://store/", "store", 6379, 0, "", "");
  parse_ok("redis://store/12", "store", 6379, 12, "", "");
  parse_ok("redis://[::1]:7000/1", "::1", 7000, 1, "", "");
  parse_ok("redis://:s3cret@h:1", "h", 1, 0, "", "s3cret");
  parse_ok("redis://packd:pw@h:2/5", "h", 2, 5, "packd", "pw");
  /* The last '@' ends the user info: a password may hold '@', ':' and '/'. */
  parse_ok("redis://:a@b:c/d@h:3", "h", 3, 0, "", "a@b:c/d");
  parse_ok("redis://:p%40ss%2Fw%3Ad@h:4", "h", 4, 0, "", "p@ss/w:d");
}

static void parse_bad(const char *url, const char *must, const char *secret) {
  pk_store_url_t u;
  char err[512] = "";
  if (pk_store_url_parse(url, &u, err, sizeof err) != PK_EINVAL)
    fail_msg("\"%s\" should be refused", url);
  if (strstr(err, must) == NULL)
    fail_msg("the error for \"%s\" should say \"%s\": %s", url, must, err);
  if (secret != NULL && strstr(err, secret) != NULL)
    fail_msg("the error for \"%s\" shows the password: %s", url, err);
}

static void test_url_refusals(void **state) {
  (void)state;
  parse_bad("", "empty", NULL);
  parse_bad("rediss://:topsecret@h:6380", "TLS", "topsecret");
  parse_bad("rediss://h", "hiredis", NULL);
  parse_bad("http://h:1", "not a redis:// URL", NULL);
  parse_bad("unix:///run/redis.sock", "not a redis:// URL", NULL);
  parse_bad("redis://", "host is empty", NULL);
  parse_bad("redis://:1", "host is empty", NULL);
  parse_bad("redis://h:0", "port", NULL);
  parse_bad("redis://h:65536", "port", NULL);
  parse_bad("redis://h:6x", "port", NULL);
  parse_bad("redis://h:", "port", NULL);
  parse_bad("redis://h/x", "database", NULL);
  parse_bad("redis://h/-1", "database", NULL);
  parse_bad("redis://h/0?timeout=1", "query parameters", NULL);
  parse_bad("redis://h h:1", "host", NULL);
  parse_bad("redis://[::1:1", "closing", NULL);
  parse_bad("redis://[zz]:1", "IPv6", NULL);
  parse_bad("redis://justapassword@h:1", ":PASSWORD@", "justapassword");
  parse_bad("redis://:@h:1", "empty", NULL);
  parse_bad("redis://:bad%zzpass@h:1", "escape", "bad%zzpass");
  parse_bad("redis://:nul%00byte@h:1", "escape", "nul%00byte");
  parse_bad("redis://:hunter2@h:99999", "port", "hunter2");
  char longurl[PK_STORE_URL_MAX + 10];
  memset(longurl, 'a', sizeof longurl - 1);
  memcpy(longurl, "redis://", 8);
  longurl[sizeof longurl - 1] = '\0';
  parse_bad(longurl, "longer than", NULL);
}

static void test_url_describe_and_mask(void **state) {
  (void)state;
  pk_store_url_t u;
  char err[256], buf[300];
  assert_int_equal(pk_store_url_parse("redis://u:pw@[::1]:7000/2", &u, err, sizeof err), PK_OK);
  pk_store_url_describe(&u, buf, sizeof buf);
  assert_string_equal(buf, "redis://[::1]:7000/2");
  assert_int_equal(pk_store_url_parse("redis://:pw@store", &u, err, sizeof err), PK_OK);
  pk_store_url_describe(&u, buf, sizeof buf);
  assert_string_equal(buf, "redis://store:6379/0");
  pk_store_url_mask("redis://u:pw@h:1/0", buf, sizeof buf);
  assert_string_equal(buf, "redis://u:***@h:1/0");
  pk_store_url_mask("redis://pw@h:1", buf, sizeof buf);
  assert_string_equal(buf, "redis://***@h:1");
  pk_store_url_mask("redis://h:1", buf, sizeof buf);
  assert_string_equal(buf, "redis://h:1");
}

static void test_prefix_key_and_password_file(void **state) {
  (void)state;
  assert_int_equal(pk_store_prefix_check("packd:"), PK_OK);
  assert_int_equal(pk_store_prefix_check("team-a/packd:{x}:"), PK_OK);
  assert_int_equal(pk_store_prefix_check(""), PK_EINVAL);
  assert_int_equal(pk_store_prefix_check("has space"), PK_EINVAL);
  assert_int_equal(pk_store_prefix_check("tab\t"), PK_EINVAL);
  char longp[PK_STORE_PREFIX_MAX + 1];
  memset(longp, 'p', PK_STORE_PREFIX_MAX);
  longp[PK_STORE_PREFIX_MAX] = '\0';
  assert_int_equal(pk_store_prefix_check(longp), PK_EINVAL);
  char key[128];
  assert_int_equal(pk_store_key(key, sizeof key, "packd:", "abc"), 9);
  assert_string_equal(key, "packd:abc");
  assert_int_equal(pk_store_key(key, 9, "packd:", "abc"), 0);

  char path[] = "/tmp/packd-pw-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  char pw[64], err[512];
  assert_int_equal(write(fd, "s3cret\r\nsecond line\n", 20), 20);
  close(fd);
  assert_int_equal(pk_store_read_password_file(path, pw, sizeof pw, err, sizeof err), PK_OK);
  assert_string_equal(pw, "s3cret");
  FILE *f = fopen(path, "w");
  fputs("no-newline", f);
  fclose(f);
  assert_int_equal(pk_store_read_password_file(path, pw, sizeof pw, err, sizeof err), PK_OK);
  assert_string_equal(pw, "no-newline");
  f = fopen(path, "w");
  fputs("\n", f);
  fclose(f);
  assert_int_equal(pk_store_read_password_file(path, pw, sizeof pw, err, sizeof err), PK_EINVAL);
  assert_non_null(strstr(err, "empty"));
  unlink(path);
  assert_int_equal(pk_store_read_password_file(path, pw, sizeof pw, err, sizeof err), PK_EINVAL);
  assert_non_null(strstr(err, path));
}

/* One envelope of `n` payload bytes; free with free(). */
static uint8_t *make(const char *id, const char *version, uint32_t rank, uint32_t nranks, size_t n,
                     size_t *len) {
  uint8_t *payload = malloc(n + 1);
  for (size_t i = 0; i < n; i++)
    payload[i] = (uint8_t)(i * 131 + 7);
  *len = pk_store_envelope_size(id, version, n);
  uint8_t *v = malloc(*len);
  assert_int_equal(pk_store_envelope_write(v, id, version, rank, nranks, payload, n), *len);
  free(payload);
  return v;
}

static void test_envelope_round_trip(void **state) {
  (void)state;
  const size_t sizes[] = {0, 1, 31, 4096};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t len;
    uint8_t *v = make("82a180d946dcb95f2be63e315405e8f8", "0.1.0", 3, 8, sizes[k], &len);
    pk_store_envelope_t e;
    char why[160] = "";
    assert_int_equal(
        pk_store_envelope_open(v, len, "82a180d946dcb95f2be63e315405e8f8", &e, why, sizeof why), 0);
    assert_int_equal(e.rank, 3);
    assert_int_equal(e.nranks, 8);
    assert_string_equal(e.version, "0.1.0");
    assert_int_equal(e.payload_len, sizes[k]);
    for (size_t i = 0; i < sizes[k]; i++)
      assert_int_equal(e.payload[i], (uint8_t)(i * 131 + 7));
    free(v);
  }
  /* Arguments out of range write nothing. */
  uint8_t buf[256];
  assert_int_equal(pk_store_envelope_write(buf, "", "v", 0, 1, NULL, 0), 0);
  assert_int_equal(pk_store_envelope_write(buf, "id", "v", 1, 1, NULL, 0), 0);
  char longv[40];
  memset(longv, 'v', 39);
  longv[39] = '\0';
  assert_int_equal(pk_store_envelope_write(buf, "id", longv, 0, 1, NULL, 0), 0);
}

static void expect_refused(const uint8_t *v, size_t len, const char *id, const char *must) {
  pk_store_envelope_t e;
  char why[160] = "";
  if (pk_store_envelope_open(v, len, id, &e, why, sizeof why) == 0)
    fail_msg("a damaged value of %zu bytes was accepted", len);
  if (must != NULL && strstr(why, must) == NULL)
    fail_msg("the reason should say \"%s\": %s", must, why);
}

static void test_envelope_refuses_every_change(void **state) {
  (void)state;
  const char *id = "5ffad8210e1baa00adf2b81dc4510126";
  size_t len;
  uint8_t *v = make(id, "0.1.0", 1, 4, 300, &len);
  /* Every bit of every byte: not one flip may pass. */
  for (size_t i = 0; i < len; i++)
    for (int b = 0; b < 8; b++) {
      v[i] ^= (uint8_t)(1u << b);
      expect_refused(v, len, id, NULL);
      v[i] ^= (uint8_t)(1u << b);
    }
  /* Cut short anywhere, or one byte longer. */
  for (size_t n = 0; n < len; n++)
    expect_refused(v, n, id, NULL);
  uint8_t *longer = malloc(len + 1);
  memcpy(longer, v, len);
  longer[len] = 0;
  expect_refused(longer, len + 1, id, "lengths");
  free(longer);
  expect_refused(v, 10, id, "shorter");
  /* A valid value of another plan is foreign, whatever key holds it. */
  expect_refused(v, len, "5ffad8210e1baa00adf2b81dc4510127", "names plan");
  expect_refused(v, len, "5ffad8210e1baa00", "names plan");
  /* Garbage that someone SET by hand. */
  expect_refused((const uint8_t *)"garbage garbage garbage garbage garbage", 39, id, "magic");
  free(v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_url_parts_and_defaults),
      cmocka_unit_test(test_url_refusals),
      cmocka_unit_test(test_url_describe_and_mask),
      cmocka_unit_test(test_prefix_key_and_password_file),
      cmocka_unit_test(test_envelope_round_trip),
      cmocka_unit_test(test_envelope_refuses_every_change),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
