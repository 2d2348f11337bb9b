/* packctl's input parsing on buffers (client/c/packctl_input.c,
 * packctl_parse_input): lengths files and JSON manifests given as exactly
 * `size` bytes with no NUL after them (each test copies its text into a
 * buffer of that size, so ASan catches a read past the end), and the errors
 * that name the source and the line or field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "packctl_input.h"
#include "packctl_request.h"
#include "pk_error.h"

/* Parses text as size bytes of a buffer that ends right after them. */
static int parse(const char *text, Packd__V1__PlanRequest **out, char *err, size_t errlen) {
  size_t size = strlen(text);
  char *buf = malloc(size == 0 ? 1 : size);
  assert_non_null(buf);
  memcpy(buf, text, size);
  *out = packctl_request_new();
  assert_non_null(*out);
  int rc = packctl_parse_input("mem", buf, size, *out, err, errlen);
  free(buf);
  return rc;
}

static void test_lengths_without_nul(void **state) {
  (void)state;
  Packd__V1__PlanRequest *req;
  char err[256];
  assert_int_equal(parse("# x\n100 700\n\n33 100   # c\n17", &req, err, sizeof err), 0);
  assert_int_equal(req->n_lengths, 3);
  assert_int_equal(req->lengths[0], 800);
  assert_int_equal(req->lengths[2], 17);
  assert_int_equal(req->n_loss_tokens, 3);
  assert_int_equal(req->loss_tokens[1], 100);
  assert_int_equal(req->loss_tokens[2], 17);
  packd__v1__plan_request__free_unpacked(req, NULL);

  assert_int_equal(parse("5\n6", &req, err, sizeof err), 0);
  assert_int_equal(req->n_lengths, 2);
  assert_int_equal(req->n_loss_tokens, 0);
  packd__v1__plan_request__free_unpacked(req, NULL);
}

static void test_manifest_after_blanks(void **state) {
  (void)state;
  Packd__V1__PlanRequest *req;
  char err[256];
  assert_int_equal(
      parse(" \r\n\t{\"lengths\": [1, \"2\"], \"parallel\": {\"dp\": 2, \"cpAlgo\": \"ulysses\"}}",
            &req, err, sizeof err),
      0);
  assert_int_equal(req->n_lengths, 2);
  assert_int_equal(req->lengths[1], 2);
  assert_non_null(req->parallel);
  assert_int_equal(req->parallel->dp, 2);
  packd__v1__plan_request__free_unpacked(req, NULL);
}

/* Empty and blank-only buffers: the whitespace scan must stop at size. */
static void test_empty_and_blank(void **state) {
  (void)state;
  Packd__V1__PlanRequest *req;
  char err[256];
  assert_int_equal(parse("", &req, err, sizeof err), PK_EINVAL);
  assert_non_null(strstr(err, "mem: no sequence lengths found"));
  packd__v1__plan_request__free_unpacked(req, NULL);
  assert_int_equal(parse(" \n\t\r\n", &req, err, sizeof err), PK_EINVAL);
  assert_non_null(strstr(err, "no sequence lengths"));
  packd__v1__plan_request__free_unpacked(req, NULL);
}

static void test_errors_name_the_place(void **state) {
  (void)state;
  Packd__V1__PlanRequest *req;
  char err[256];
  assert_int_equal(parse("1\n2 x\n", &req, err, sizeof err), PK_EINVAL);
  assert_non_null(strstr(err, "mem:2:"));
  packd__v1__plan_request__free_unpacked(req, NULL);
  assert_int_equal(parse("{\"lengths\": [1], \"nope\": 1}", &req, err, sizeof err), PK_EINVAL);
  assert_non_null(strstr(err, "unknown field 'nope'"));
  packd__v1__plan_request__free_unpacked(req, NULL);
  assert_int_equal(parse("{\"lengths\": [1]", &req, err, sizeof err), PK_EINVAL);
  assert_non_null(strstr(err, "invalid JSON manifest"));
  packd__v1__plan_request__free_unpacked(req, NULL);
}

/* A misspelt manifest key names the source, the field path and the field
 * meant, spelt as the key was; a key far from every field gets no guess. */
static void test_manifest_suggests_the_field(void **state) {
  (void)state;
  Packd__V1__PlanRequest *req;
  char err[256];
  assert_int_equal(
      parse("{\"lengths\": [1], \"batching\": {\"miniBaches\": 2}}", &req, err, sizeof err),
      PK_EINVAL);
  assert_string_equal(err, "mem: unknown field 'batching.miniBaches'; did you mean "
                           "'batching.miniBatches'?");
  packd__v1__plan_request__free_unpacked(req, NULL);
  assert_int_equal(parse("{\"lengths\": [1], \"lenghts\": [2]}", &req, err, sizeof err), PK_EINVAL);
  assert_string_equal(err, "mem: unknown field 'lenghts'; did you mean 'lengths'?");
  packd__v1__plan_request__free_unpacked(req, NULL);
  assert_int_equal(
      parse("{\"lengths\": [1], \"layout\": {\"qqqqqqqq\": 1}}", &req, err, sizeof err), PK_EINVAL);
  assert_string_equal(err, "mem: unknown field 'layout.qqqqqqqq'");
  packd__v1__plan_request__free_unpacked(req, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lengths_without_nul),
      cmocka_unit_test(test_manifest_after_blanks),
      cmocka_unit_test(test_empty_and_blank),
      cmocka_unit_test(test_errors_name_the_place),
      cmocka_unit_test(test_manifest_suggests_the_field),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
