/* Unit tests of packctl_suggest.h: the edit distance behind "did you
 * mean", checked against a plain Levenshtein-with-swaps reference on all
 * short strings over a small alphabet, and the suggestion threshold. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "packctl_suggest.h"

/* The reference: the optimal string alignment distance by plain recursion
 * (exponential, fine for strings of up to 4 characters). */
static size_t ref(const char *a, size_t n, const char *b, size_t m) {
  if (n == 0)
    return m;
  if (m == 0)
    return n;
  size_t best = ref(a, n - 1, b, m - 1) + (a[n - 1] == b[m - 1] ? 0 : 1);
  size_t del = ref(a, n - 1, b, m) + 1, ins = ref(a, n, b, m - 1) + 1;
  best = del < best ? del : best;
  best = ins < best ? ins : best;
  if (n > 1 && m > 1 && a[n - 1] == b[m - 2] && a[n - 2] == b[m - 1]) {
    size_t swap = ref(a, n - 2, b, m - 2) + 1;
    best = swap < best ? swap : best;
  }
  return best;
}

/* The string number k over "abc" of length len. */
static void word(unsigned k, size_t len, char *out) {
  for (size_t i = 0; i < len; i++, k /= 3)
    out[i] = (char)('a' + k % 3);
  out[len] = '\0';
}

static void test_distance_matches_reference(void **state) {
  (void)state;
  char a[8], b[8];
  for (size_t la = 0; la <= 4; la++)
    for (unsigned ka = 0; ka < 81; ka++)
      for (size_t lb = 0; lb <= 4; lb++)
        for (unsigned kb = 0; kb < 81; kb++) {
          word(ka, la, a);
          word(kb, lb, b);
          assert_int_equal(packctl_edit_distance(a, b), ref(a, la, b, lb));
        }
}

static void test_distance_folds_case_and_underscores(void **state) {
  (void)state;
  assert_int_equal(packctl_edit_distance("MAX_TOKENS", "max-tokens"), 0);
  assert_int_equal(packctl_edit_distance("dp-balnace", "dp-balance"), 1);
  char long_word[PACKCTL_SUGGEST_MAX + 2];
  memset(long_word, 'x', sizeof long_word - 1);
  long_word[sizeof long_word - 1] = '\0';
  assert_int_equal(packctl_edit_distance(long_word, "x"), PACKCTL_SUGGEST_MAX + 1);
}

static void test_nearest(void **state) {
  (void)state;
  const char *const flags[] = {"dp", "tp", "max-tokens", "max-seqs", NULL, "concurrency"};
  size_t n = sizeof flags / sizeof flags[0];
  assert_string_equal(packctl_nearest("dpp", flags, n), "dp");
  assert_string_equal(packctl_nearest("max-tokns", flags, n), "max-tokens");
  assert_string_equal(packctl_nearest("concurency", flags, n), "concurrency");
  /* Ties go to the first candidate. */
  assert_string_equal(packctl_nearest("xp", flags, n), "dp");
  /* Too far for its length: nothing rather than anything. */
  assert_null(packctl_nearest("frobnicate", flags, n));
  assert_null(packctl_nearest("zz", flags, n));
  assert_null(packctl_nearest("anything", flags, 0));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_distance_matches_reference),
      cmocka_unit_test(test_distance_folds_case_and_underscores),
      cmocka_unit_test(test_nearest),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
