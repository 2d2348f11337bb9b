/* Regression tests for inputs found by the libFuzzer targets (tests/fuzz):
 * each reproduces the exact bytes through pk_plan_bytes (the fuzz target's
 * path), and a readable request of the same shape. Built into the ASan/UBSan
 * unit build, where the original failures abort. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec.h"
#include "pk_error.h"

/* Plans req; returns the pk_plan_bytes code with the message in err. */
static int plan_request(const Packd__V1__PlanRequest *req, char *err, size_t errlen) {
  size_t len = packd__v1__plan_request__get_packed_size(req);
  uint8_t *buf = malloc(len == 0 ? 1 : len);
  assert_non_null(buf);
  assert_int_equal(packd__v1__plan_request__pack(req, buf), len);
  uint8_t *resp = NULL;
  size_t resp_len = 0;
  int rc = pk_plan_bytes(buf, len, &resp, &resp_len, err, errlen);
  pk_codec_free_bytes(resp);
  free(buf);
  return rc;
}

/* crash-e577347254958078713d44bce52803878064f2f2 (fuzz_plan_bytes): lengths
 * {0, 0, 805306359}, dp 1, PADDED, KK_COUNT, no max_tokens (plus an unknown
 * field). Without a cap the three rows of width 805306359 make one
 * micro-batch of 2.4e9 padded tokens; its int32 cu_seqlens_padded wrapped and
 * the slot costs subtracted the wrapped offsets (signed overflow) before the
 * plan was refused. It must be refused with a message and nothing else. */
static void test_uncapped_padded_overflow_bytes(void **state) {
  (void)state;
  static const uint8_t crash[] = {0x12, 0x08, 0x00, 0x00, 0xf7, 0xff, 0xff, 0xff,
                                  0x82, 0x00, 0x2a, 0x02, 0x08, 0x01, 0x32, 0x07,
                                  0x28, 0x01, 0xd8, 0x52, 0x46, 0x58, 0x04};
  uint8_t *resp = NULL;
  size_t resp_len = 0;
  char err[512];
  assert_int_equal(pk_plan_bytes(crash, sizeof crash, &resp, &resp_len, err, sizeof err),
                   PK_EPRECOND);
  assert_null(resp);
  assert_non_null(strstr(err, "int32 cu_seqlens"));
}

/* The same overflow in each mode: PADDED rows and PACKED slots whose
 * uncapped total passes INT32_MAX. */
static void test_uncapped_overflow_each_mode(void **state) {
  (void)state;
  uint32_t lengths[3] = {1000000000u, 1000000000u, 1000000000u};
  Packd__V1__Parallel par = PACKD__V1__PARALLEL__INIT;
  par.dp = 1;
  Packd__V1__Batching bat = PACKD__V1__BATCHING__INIT;
  Packd__V1__PlanRequest req = PACKD__V1__PLAN_REQUEST__INIT;
  req.n_lengths = 3;
  req.lengths = lengths;
  req.parallel = &par;
  req.batching = &bat;
  const Packd__V1__Mode modes[2] = {PACKD__V1__MODE__MODE_PADDED, PACKD__V1__MODE__MODE_PACKED};
  const Packd__V1__MicroAlgo algos[3] = {PACKD__V1__MICRO_ALGO__MICRO_ALGO_AUTO,
                                         PACKD__V1__MICRO_ALGO__MICRO_ALGO_KK_COUNT,
                                         PACKD__V1__MICRO_ALGO__MICRO_ALGO_NEXT_FIT};
  for (int m = 0; m < 2; m++)
    for (int a = 0; a < 3; a++) {
      bat.mode = modes[m];
      bat.micro_algo = algos[a];
      char err[512] = "";
      int rc = plan_request(&req, err, sizeof err);
      /* Either refused with the int32 message, or a plan whose every
       * micro-batch fits (a planner may split the sequences). */
      if (rc != 0) {
        assert_int_equal(rc, PK_EPRECOND);
        assert_non_null(strstr(err, "int32 cu_seqlens"));
      }
    }
  /* With a cap the same lengths plan: one sequence per micro-batch. */
  bat.mode = PACKD__V1__MODE__MODE_PADDED;
  bat.micro_algo = PACKD__V1__MICRO_ALGO__MICRO_ALGO_AUTO;
  bat.max_tokens = 1000000000u;
  char err[512] = "";
  assert_int_equal(plan_request(&req, err, sizeof err), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_uncapped_padded_overflow_bytes),
      cmocka_unit_test(test_uncapped_overflow_each_mode),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
