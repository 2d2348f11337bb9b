/* Unit tests of the server's security pieces: the bearer-token set
 * (server/auth.c: file format, full comparison, reload that keeps the old
 * tokens on failure, a replaced file noticed without a signal), keyed plan ids (server/plan_id.c: a
 * fixed HMAC-SHA256 vector made with the openssl command, agreement with OpenSSL's one-shot HMAC
 * over the codec's canonical bytes, different keys, the unkeyed id without a key) and the start-up
 * checks (server/security.c, tls.c) that name the flag. Files are real files in a temporary folder.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "auth.h"
#include "codec.h"
#include "config.h"
#include "pk_error.h"
#include "plan_id.h"
#include "security.h"

static char g_dir[64];

/* Writes text to a new file of the test folder; returns its path. */
static const char *write_file(const char *name, const char *text) {
  static char paths[8][128];
  static int next;
  char *p = paths[next++ % 8];
  snprintf(p, 128, "%s/%s", g_dir, name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  return p;
}

static int setup_dir(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/pk-test-security-XXXXXX");
  return mkdtemp(g_dir) == NULL ? -1 : 0;
}

static int teardown_dir(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

/* ---- auth ---------------------------------------------------------------- */

/* Checks one authorization value against a; NULL sends no metadata. */
static int check_value(pk_auth_t *a, const char *value, char *why, size_t whylen) {
  grpc_metadata md;
  memset(&md, 0, sizeof md);
  grpc_metadata_array arr = {0, 0, NULL};
  if (value != NULL) {
    md.key = grpc_slice_from_static_string("authorization");
    md.value = grpc_slice_from_static_string(value);
    arr.count = arr.capacity = 1;
    arr.metadata = &md;
  }
  return pk_auth_check(a, &arr, why, whylen);
}

static void test_token_file_format(void **state) {
  (void)state;
  char err[512];
  int n = 0;
  const char *good = write_file("good", "# comment\n\n  tok-one \t\ntok-two\r\n# another\n");
  assert_int_equal(pk_auth_check_file(good, &n, err, sizeof err), PK_OK);
  assert_int_equal(n, 2);
  assert_int_equal(pk_auth_check_file(write_file("empty", "\n# none\n"), &n, err, sizeof err),
                   PK_EINVAL);
  assert_non_null(strstr(err, "holds no token"));
  assert_int_equal(pk_auth_check_file(write_file("space", "two words\n"), &n, err, sizeof err),
                   PK_EINVAL);
  assert_non_null(strstr(err, "line 1"));
  assert_int_equal(pk_auth_check_file("/nonexistent/tokens", &n, err, sizeof err), PK_EINVAL);
  assert_non_null(strstr(err, "cannot read"));
  /* A token one byte over the bound. */
  char *longtok = malloc(PK_AUTH_MAX_TOKEN_LEN + 3);
  memset(longtok, 'x', PK_AUTH_MAX_TOKEN_LEN + 1);
  longtok[PK_AUTH_MAX_TOKEN_LEN + 1] = '\n';
  longtok[PK_AUTH_MAX_TOKEN_LEN + 2] = '\0';
  assert_int_equal(pk_auth_check_file(write_file("long", longtok), &n, err, sizeof err), PK_EINVAL);
  assert_non_null(strstr(err, "longer than"));
  longtok[PK_AUTH_MAX_TOKEN_LEN] = '\n';
  longtok[PK_AUTH_MAX_TOKEN_LEN + 1] = '\0';
  assert_int_equal(pk_auth_check_file(write_file("max", longtok), &n, err, sizeof err), PK_OK);
  free(longtok);
}

static void test_token_check_and_reload(void **state) {
  (void)state;
  char err[512], why[512];
  const char *path = write_file("tokens", "alpha-token\nbeta-token\n");
  pk_auth_t *a = NULL;
  assert_int_equal(pk_auth_create(path, &a, err, sizeof err), PK_OK);
  assert_int_equal(check_value(a, "Bearer alpha-token", why, sizeof why), PK_OK);
  assert_int_equal(check_value(a, "bearer beta-token", why, sizeof why), PK_OK);
  assert_int_equal(check_value(a, NULL, why, sizeof why), PK_EINVAL);
  assert_non_null(strstr(why, "requires a bearer token"));
  assert_int_equal(check_value(a, "Basic YWxwaGE=", why, sizeof why), PK_EINVAL);
  assert_non_null(strstr(why, "Bearer <token>"));
  /* Prefixes, extensions and another case are wrong tokens. */
  static const char *const wrong[] = {"Bearer alpha-toke", "Bearer alpha-token2",
                                      "Bearer ALPHA-TOKEN", "Bearer ", "Bearer alpha-token "};
  for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
    assert_int_equal(check_value(a, wrong[i], why, sizeof why), PK_EINVAL);
    assert_null(strstr(why, "alpha"));
  }
  /* Rotation: the new set replaces the old one. */
  write_file("tokens", "gamma-token\n");
  int n = 0;
  assert_int_equal(pk_auth_reload(a, &n, err, sizeof err), PK_OK);
  assert_int_equal(n, 1);
  assert_int_equal(check_value(a, "Bearer alpha-token", why, sizeof why), PK_EINVAL);
  assert_int_equal(check_value(a, "Bearer gamma-token", why, sizeof why), PK_OK);
  /* A file that cannot be used keeps the tokens loaded before. */
  write_file("tokens", "# emptied\n");
  assert_int_equal(pk_auth_reload(a, &n, err, sizeof err), PK_EINVAL);
  assert_int_equal(check_value(a, "Bearer gamma-token", why, sizeof why), PK_OK);
  pk_auth_destroy(a);
}

/* Replaces the file the way a Secret volume does: a new file renamed over
 * the old one (a new inode). */
static void replace_file(const char *name, const char *text) {
  char tmp[64], path[128];
  snprintf(tmp, sizeof tmp, "%s.new", name);
  const char *fresh = write_file(tmp, text);
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  assert_int_equal(rename(fresh, path), 0);
}

static void test_token_file_change_is_noticed(void **state) {
  (void)state;
  char err[512], why[512];
  pk_auth_t *a = NULL;
  assert_int_equal(pk_auth_create(write_file("rotating", "first-token\n"), &a, err, sizeof err),
                   PK_OK);
  pk_auth_set_check_interval(a, 0);
  assert_int_equal(check_value(a, "Bearer first-token", why, sizeof why), PK_OK);
  replace_file("rotating", "first-token\nsecond-token\n");
  assert_int_equal(check_value(a, "Bearer second-token", why, sizeof why), PK_OK);
  replace_file("rotating", "second-token\n");
  assert_int_equal(check_value(a, "Bearer first-token", why, sizeof why), PK_EINVAL);
  assert_int_equal(check_value(a, "Bearer second-token", why, sizeof why), PK_OK);
  /* A broken file keeps the tokens; so does a file that disappeared. */
  replace_file("rotating", "# nothing\n");
  assert_int_equal(check_value(a, "Bearer second-token", why, sizeof why), PK_OK);
  char path[128];
  snprintf(path, sizeof path, "%s/rotating", g_dir);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(check_value(a, "Bearer second-token", why, sizeof why), PK_OK);
  replace_file("rotating", "third-token\n");
  assert_int_equal(check_value(a, "Bearer third-token", why, sizeof why), PK_OK);
  pk_auth_destroy(a);
}

/* ---- plan ids ------------------------------------------------------------ */

/* lengths [1, 2, 3], parallel.dp 2: canonical bytes 12 03 01 02 03 2a 02 08 02. */
static Packd__V1__PlanRequest *small_request(Packd__V1__Parallel *par, uint32_t *lengths) {
  static Packd__V1__PlanRequest req;
  packd__v1__plan_request__init(&req);
  packd__v1__parallel__init(par);
  par->dp = 2;
  lengths[0] = 1;
  lengths[1] = 2;
  lengths[2] = 3;
  req.lengths = lengths;
  req.n_lengths = 3;
  req.parallel = par;
  return &req;
}

static void test_keyed_id_vector(void **state) {
  (void)state;
  char err[512], id[PK_PLAN_ID_LEN], again[PK_PLAN_ID_LEN], other[PK_PLAN_ID_LEN];
  Packd__V1__Parallel par;
  uint32_t lengths[3];
  Packd__V1__PlanRequest *req = small_request(&par, lengths);

  /* Made with:
   *   printf 'unit-test-plan-id-secret' > s.txt
   *   K=$(openssl dgst -sha256 -hex s.txt | awk '{print $2}')
   *   printf '\x12\x03\x01\x02\x03\x2a\x02\x08\x02' |
   *     openssl dgst -sha256 -mac HMAC -macopt hexkey:$K | cut -c1-32 (of the digest) */
  const char *path = write_file("secret", "unit-test-plan-id-secret\n");
  pk_plan_id_key_t *key = NULL;
  assert_int_equal(pk_plan_id_key_create(path, &key, err, sizeof err), PK_OK);
  pk_plan_id_keyed(key, req, id, sizeof id);
  assert_string_equal(id, "017f5d890d17366317cd3e59077fbca3");
  pk_plan_id_for(key, req, again, sizeof again);
  assert_string_equal(again, id);

  /* The same bytes through OpenSSL's one-shot HMAC. */
  uint8_t scratch[64];
  ProtobufCBufferSimple canon = PROTOBUF_C_BUFFER_SIMPLE_INIT(scratch);
  pk_codec_plan_id_pack(req, &canon.base);
  static const uint8_t want_bytes[] = {0x12, 0x03, 0x01, 0x02, 0x03, 0x2a, 0x02, 0x08, 0x02};
  assert_int_equal(canon.len, sizeof want_bytes);
  assert_memory_equal(canon.data, want_bytes, sizeof want_bytes);
  uint8_t k[SHA256_DIGEST_LENGTH], mac[SHA256_DIGEST_LENGTH];
  unsigned maclen = 0;
  SHA256((const uint8_t *)"unit-test-plan-id-secret", 24, k);
  HMAC(EVP_sha256(), k, sizeof k, canon.data, canon.len, mac, &maclen);
  PROTOBUF_C_BUFFER_SIMPLE_CLEAR(&canon);
  char hex[33];
  for (int i = 0; i < 16; i++)
    snprintf(hex + 2 * i, 3, "%02x", mac[i]);
  assert_string_equal(hex, id);

  /* Another secret, a random key and no key: three other ids, same format. */
  pk_plan_id_key_t *k2 = NULL, *rnd = NULL;
  assert_int_equal(pk_plan_id_key_create(write_file("secret2", "unit-test-plan-id-secreT\n"), &k2,
                                         err, sizeof err),
                   PK_OK);
  assert_int_equal(pk_plan_id_key_create(NULL, &rnd, err, sizeof err), PK_OK);
  pk_plan_id_keyed(k2, req, other, sizeof other);
  assert_string_not_equal(other, id);
  pk_plan_id_keyed(rnd, req, other, sizeof other);
  assert_string_not_equal(other, id);
  assert_int_equal(strlen(other), 32);
  char unkeyed[PK_PLAN_ID_LEN], via_for[PK_PLAN_ID_LEN];
  pk_codec_plan_id(req, unkeyed, sizeof unkeyed);
  pk_plan_id_for(NULL, req, via_for, sizeof via_for);
  assert_string_equal(via_for, unkeyed);
  assert_string_not_equal(unkeyed, id);

  /* Too small a buffer gets "", never a partial id. */
  char tiny[8] = "junk";
  pk_plan_id_keyed(key, req, tiny, sizeof tiny);
  assert_string_equal(tiny, "");
  pk_plan_id_key_destroy(key);
  pk_plan_id_key_destroy(k2);
  pk_plan_id_key_destroy(rnd);
}

static void test_secret_file_errors(void **state) {
  (void)state;
  char err[512];
  assert_int_equal(pk_plan_id_check_file(write_file("short", "fifteen-bytes!!\n"), err, sizeof err),
                   PK_EINVAL);
  assert_non_null(strstr(err, "at least 16"));
  assert_int_equal(pk_plan_id_check_file(write_file("ok16", "sixteen-bytes!!!\n"), err, sizeof err),
                   PK_OK);
  assert_int_equal(pk_plan_id_check_file("/nonexistent/secret", err, sizeof err), PK_EINVAL);
}

/* ---- start-up checks ----------------------------------------------------- */

static void expect_refused(const char *flag, const char *value, const char *flag2,
                           const char *value2, const char *must) {
  pk_server_config_t cfg;
  pk_config_defaults(&cfg);
  char err[512];
  const char *argv[] = {"packd", flag, value, flag2, value2};
  int argc = flag2 != NULL ? 5 : 3;
  assert_int_equal(pk_config_load(&cfg, argc, (char *const *)argv, NULL, NULL, err, sizeof err),
                   PK_EINVAL);
  if (strstr(err, must) == NULL)
    fail_msg("\"%s\" not in \"%s\"", must, err);
}

static void test_startup_checks_name_the_flag(void **state) {
  (void)state;
  const char *pem = write_file("not-a-cert.pem", "hello\n");
  expect_refused("--tls-cert", pem, NULL, NULL, "--tls-cert is set but --tls-key is not");
  expect_refused("--tls-key", pem, NULL, NULL, "--tls-key is set but --tls-cert is not");
  expect_refused("--tls-client-ca", pem, NULL, NULL, "--tls-client-ca is set but --tls-cert");
  expect_refused("--tls-cert", pem, "--tls-key", pem, "--tls-cert: ");
  expect_refused("--tls-cert", "/nonexistent/c.pem", "--tls-key", pem, "--tls-cert: cannot read");
  expect_refused("--auth-token-file", write_file("t0", ""), NULL, NULL, "--auth-token-file: ");
  expect_refused("--plan-id-secret-file", write_file("s0", "x"), NULL, NULL,
                 "--plan-id-secret-file: ");

  pk_server_config_t cfg;
  pk_config_defaults(&cfg);
  char err[512];
  const char *argv[] = {"packd", "--auth-token-file", write_file("t1", "tok\n"),
                        "--plan-id-secret-file", write_file("s1", "0123456789abcdef\n")};
  assert_int_equal(pk_config_load(&cfg, 5, (char *const *)argv, NULL, NULL, err, sizeof err),
                   PK_OK);
  pk_security_t *sec = NULL;
  assert_int_equal(pk_security_open(&cfg, &sec, err, sizeof err), PK_OK);
  assert_non_null(pk_security_plan_id_key(sec));
  grpc_metadata_array none = {0, 0, NULL};
  char why[512];
  assert_int_equal(pk_security_authorize(sec, 1, &none, why, sizeof why), PK_OK);
  assert_int_equal(pk_security_authorize(sec, 0, &none, why, sizeof why), PK_EINVAL);
  pk_security_close(sec);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_token_file_format),
      cmocka_unit_test(test_token_check_and_reload),
      cmocka_unit_test(test_token_file_change_is_noticed),
      cmocka_unit_test(test_keyed_id_vector),
      cmocka_unit_test(test_secret_file_errors),
      cmocka_unit_test(test_startup_checks_name_the_flag),
  };
  return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
