/* packctl calibrate's fit (client/c/packctl_fit.c): the non-negative least
 * squares against an exhaustive search over active sets, the recovery of
 * known coefficients from exact and noisy synthetic timings, and every
 * error with its message. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "packctl_fit.h"

#define P PACKCTL_FIT_TERMS

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double uniform(uint64_t *s) {
  return (double)(rng_next(s) >> 11) / 9007199254740992.0;
}

static double normal(uint64_t *s) {
  double u1 = uniform(s) + 1e-300, u2 = uniform(s);
  return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Solves the m x m system a z = b by Gaussian elimination with partial
 * pivoting (a and b are destroyed); false when singular. */
static bool gauss(size_t m, double a[P][P], double *b, double *z) {
  for (size_t c = 0; c < m; c++) {
    size_t piv = c;
    for (size_t r = c + 1; r < m; r++)
      if (fabs(a[r][c]) > fabs(a[piv][c]))
        piv = r;
    if (fabs(a[piv][c]) < 1e-300)
      return false;
    for (size_t k = 0; k < m; k++) {
      double t = a[c][k];
      a[c][k] = a[piv][k];
      a[piv][k] = t;
    }
    double t = b[c];
    b[c] = b[piv];
    b[piv] = t;
    for (size_t r = c + 1; r < m; r++) {
      double f = a[r][c] / a[c][c];
      for (size_t k = c; k < m; k++)
        a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  for (size_t r = m; r-- > 0;) {
    double s = b[r];
    for (size_t k = r + 1; k < m; k++)
      s -= a[r][k] * z[k];
    z[r] = s / a[r][r];
  }
  return true;
}

static double objective(size_t p, const double *g, const double *h, const double *x) {
  double f = 0;
  for (size_t i = 0; i < p; i++) {
    f -= 2 * h[i] * x[i];
    for (size_t j = 0; j < p; j++)
      f += x[i] * g[i * p + j] * x[j];
  }
  return f;
}

/* The exact non-negative least point: the best of the unconstrained least
 * points of every support whose entries are all >= 0. */
static void exhaustive_nnls(size_t p, const double *g, const double *h, double *best) {
  double best_f = INFINITY;
  for (unsigned mask = 0; mask < (1u << p); mask++) {
    size_t idx[P], m = 0;
    for (size_t j = 0; j < p; j++)
      if (mask & (1u << j))
        idx[m++] = j;
    double a[P][P], b[P], z[P], x[P] = {0};
    for (size_t r = 0; r < m; r++) {
      b[r] = h[idx[r]];
      for (size_t c = 0; c < m; c++)
        a[r][c] = g[idx[r] * p + idx[c]];
    }
    if (m > 0 && !gauss(m, a, b, z))
      continue;
    bool ok = true;
    for (size_t r = 0; r < m; r++) {
      ok = ok && z[r] >= 0;
      x[idx[r]] = z[r];
    }
    double f = objective(p, g, h, x);
    if (ok && f < best_f) {
      best_f = f;
      memcpy(best, x, p * sizeof *x);
    }
  }
}

/* Random well-conditioned problems of 1 to 4 variables, with right-hand
 * sides of every sign pattern: the active set method finds the exhaustive
 * optimum, and its point meets the optimality conditions. */
static void test_nnls_matches_exhaustive(void **state) {
  (void)state;
  uint64_t s = 11;
  for (int iter = 0; iter < 4000; iter++) {
    size_t p = 1 + (size_t)(rng_next(&s) % P);
    double m[8][P], g[P * P] = {0}, h[P];
    for (size_t r = 0; r < 8; r++)
      for (size_t j = 0; j < p; j++)
        m[r][j] = normal(&s);
    for (size_t i = 0; i < p; i++) {
      h[i] = normal(&s) * (iter % 3 == 0 ? 10 : 1);
      for (size_t j = 0; j < p; j++)
        for (size_t r = 0; r < 8; r++)
          g[i * p + j] += m[r][i] * m[r][j];
    }
    double x[P], want[P];
    assert_int_equal(packctl_nnls(p, g, h, x), 0);
    exhaustive_nnls(p, g, h, want);
    double fx = objective(p, g, h, x), fw = objective(p, g, h, want);
    if (fx > fw + 1e-9 * (1 + fabs(fw)))
      fail_msg("iter %d (p %zu): objective %.12g, the optimum %.12g", iter, p, fx, fw);
    for (size_t i = 0; i < p; i++) {
      assert_true(x[i] >= 0);
      double w = h[i];
      for (size_t j = 0; j < p; j++)
        w -= g[i * p + j] * x[j];
      /* Zero gradient on the support, none pointing into x > 0 off it. */
      assert_true(x[i] > 0 ? fabs(w) < 1e-8 * (1 + fabs(h[i])) : w < 1e-8 * (1 + fabs(h[i])));
    }
  }
}

typedef struct synth {
  size_t n;
  double *x, *t;
} synth_t;

/* n micro-batches of 1 to 32 sequences (lengths log-uniform in 16 ..
 * 16384, so that short ones are many and long ones weigh), timed by coef
 * with multiplicative Gaussian noise of relative size `noise`. */
static synth_t synthesize(size_t n, const double coef[P], double noise, uint64_t seed) {
  synth_t sy = {n, calloc(n * P, sizeof(double)), calloc(n, sizeof(double))};
  assert_non_null(sy.x);
  assert_non_null(sy.t);
  uint32_t lengths[48];
  for (size_t i = 0; i < n; i++) {
    size_t k = 1 + (size_t)(rng_next(&seed) % 32);
    for (size_t q = 0; q < k; q++)
      lengths[q] = (uint32_t)(16 * exp(uniform(&seed) * log(1024.0)));
    packctl_fit_features(lengths, k, 1, &sy.x[i * P]);
    sy.t[i] = packctl_fit_predict(coef, &sy.x[i * P]) * (1 + noise * normal(&seed));
  }
  return sy;
}

static void synth_free(synth_t *sy) {
  free(sy->x);
  free(sy->t);
}

/* A realistic model: 2 ms per micro-batch, 20 us per sequence, 40 ns per
 * token, and attention's quadratic part. */
static const double truth[P] = {2e-3, 2e-5, 4e-8, 1.5e-12};

static void test_fit_recovers_exact_coefficients(void **state) {
  (void)state;
  synth_t sy = synthesize(400, truth, 0, 1);
  packctl_fit_t fit;
  char err[256];
  assert_int_equal(packctl_fit(sy.x, sy.t, sy.n, &fit, err, sizeof err), PACKCTL_FIT_OK);
  for (int j = 0; j < P; j++)
    if (fabs(fit.coef[j] - truth[j]) > 1e-7 * truth[j])
      fail_msg("%s: %.12g, the truth %.12g", packctl_fit_names[j], fit.coef[j], truth[j]);
  assert_true(fit.r2 > 1 - 1e-12);
  assert_true(fit.mape < 1e-9);
  assert_int_equal(fit.samples, 400);
  synth_free(&sy);
}

/* 1 % noise on 2000 micro-batches: every coefficient within 6 % (on 50
 * seeds the worst was 3.2 %, for quadratic, the smallest share of most
 * times), r2 near 1 and the mean error near the noise's mean absolute
 * value (0.8 %). */
static void test_fit_recovers_noisy_coefficients(void **state) {
  (void)state;
  synth_t sy = synthesize(2000, truth, 0.01, 2);
  packctl_fit_t fit;
  char err[256];
  assert_int_equal(packctl_fit(sy.x, sy.t, sy.n, &fit, err, sizeof err), PACKCTL_FIT_OK);
  for (int j = 0; j < P; j++) {
    print_message("%-16s %.6g (truth %.6g)\n", packctl_fit_names[j], fit.coef[j], truth[j]);
    assert_true(fabs(fit.coef[j] - truth[j]) < 0.06 * truth[j]);
  }
  print_message("r2 %.6f mape %.4f\n", fit.r2, fit.mape);
  assert_true(fit.r2 > 0.99);
  assert_true(fit.mape > 0.005 && fit.mape < 0.012);
  synth_free(&sy);
}

/* Times that a negative per_micro_batch would fit best: the fit keeps it at
 * 0 and the others >= 0. */
static void test_fit_keeps_coefficients_non_negative(void **state) {
  (void)state;
  const double coef[P] = {-4e-4, 2e-5, 4e-8, 1.5e-12};
  synth_t sy = synthesize(300, coef, 0, 3);
  for (size_t i = 0; i < sy.n; i++)
    sy.t[i] = fmax(sy.t[i], 0);
  packctl_fit_t fit;
  char err[256];
  assert_int_equal(packctl_fit(sy.x, sy.t, sy.n, &fit, err, sizeof err), PACKCTL_FIT_OK);
  assert_true(fit.coef[PACKCTL_FIT_MICRO] == 0);
  for (int j = 0; j < P; j++)
    assert_true(fit.coef[j] >= 0);
  assert_true(fit.r2 < 1);
  synth_free(&sy);
}

static void expect_error(const double *x, const double *t, size_t n, int code,
                         const char *fragment) {
  packctl_fit_t fit;
  char err[512] = "";
  int rc = packctl_fit(x, t, n, &fit, err, sizeof err);
  if (rc != code || strstr(err, fragment) == NULL)
    fail_msg("code %d, message \"%s\"; expected code %d and \"%s\"", rc, err, code, fragment);
}

static void test_fit_errors(void **state) {
  (void)state;
  double x[64 * P], t[64];
  uint32_t lengths[8];
  /* Fewer records than coefficients. */
  for (size_t i = 0; i < 3; i++) {
    lengths[0] = 100 * (uint32_t)(i + 1);
    lengths[1] = 7;
    packctl_fit_features(lengths, 1 + i % 2, 1, &x[i * P]);
    t[i] = 0.1 * (double)(i + 1);
  }
  expect_error(x, t, 3, PACKCTL_FIT_TOO_FEW, "3 records");
  /* One sequence per micro-batch: per_micro_batch and per_sequence are one
   * constant. */
  for (size_t i = 0; i < 64; i++) {
    lengths[0] = 1 + (uint32_t)(i * 37 % 500);
    packctl_fit_features(lengths, 1, 1, &x[i * P]);
    t[i] = 0.01 + 1e-5 * lengths[0];
  }
  expect_error(x, t, 64, PACKCTL_FIT_COLLINEAR, "per_micro_batch and per_sequence apart");
  /* Every sequence of one length: sequences, tokens and squared tokens
   * are proportional. */
  for (size_t i = 0; i < 64; i++) {
    size_t k = 1 + i % 8;
    for (size_t q = 0; q < k; q++)
      lengths[q] = 512;
    packctl_fit_features(lengths, k, 1, &x[i * P]);
    t[i] = 0.01 + 1e-3 * (double)k;
  }
  expect_error(x, t, 64, PACKCTL_FIT_COLLINEAR, "per_sequence, linear and quadratic apart");
  /* No tokens at all. */
  for (size_t i = 0; i < 64; i++) {
    size_t k = 1 + i % 8;
    memset(lengths, 0, sizeof lengths);
    packctl_fit_features(lengths, k, 1, &x[i * P]);
    t[i] = 0.01 * (double)k;
  }
  expect_error(x, t, 64, PACKCTL_FIT_COLLINEAR, "linear and quadratic cannot be fitted");
  /* Times that do not grow with tokens: linear and quadratic come out 0,
   * which a Cost message reads as its default. */
  for (size_t i = 0; i < 64; i++) {
    size_t k = 1 + i % 8;
    for (size_t q = 0; q < k; q++)
      lengths[q] = 1 + (uint32_t)((i * 131 + q * 17) % 4000);
    packctl_fit_features(lengths, k, 1, &x[i * P]);
    t[i] = 0.01 + 0.002 * (double)k;
  }
  expect_error(x, t, 64, PACKCTL_FIT_NO_TOKENS, "linear = quadratic = 0");
}

/* Lengths are rounded up to the alignment before they are summed. */
static void test_features_align(void **state) {
  (void)state;
  const uint32_t lengths[] = {0, 1, 8, 9};
  double x[P];
  packctl_fit_features(lengths, 4, 8, x);
  assert_true(x[PACKCTL_FIT_MICRO] == 1 && x[PACKCTL_FIT_SEQ] == 4);
  assert_true(x[PACKCTL_FIT_LINEAR] == 0 + 8 + 8 + 16);
  assert_true(x[PACKCTL_FIT_QUAD] == 64 + 64 + 256);
  packctl_fit_features(lengths, 4, 1, x);
  assert_true(x[PACKCTL_FIT_LINEAR] == 18 && x[PACKCTL_FIT_QUAD] == 1 + 64 + 81);
}

/* Dynamic CP: micro-batches on groups of 1, 2, 4 or 8 GPUs, timed per GPU
 * with 0.3 ms per extra GPU of a group and 10 ns per token that leaves a
 * GPU, give back all six coefficients exactly; the features at c = 1 are
 * packctl_fit_features' with the CP ones 0. */
static void test_fit_cp_terms(void **state) {
  (void)state;
  enum { Q = PACKCTL_FIT_MAX_TERMS, N = 300 };
  static const double coef[Q] = {2e-3, 2e-5, 4e-8, 1.5e-12, 3e-4, 1e-8};
  static const uint32_t sizes[] = {1, 2, 4, 8};
  double *x = calloc(N * Q, sizeof *x), t[N];
  assert_non_null(x);
  uint64_t seed = 4;
  uint32_t lengths[48];
  for (size_t i = 0; i < N; i++) {
    size_t k = 1 + (size_t)(rng_next(&seed) % 32);
    uint32_t c = sizes[rng_next(&seed) % 4];
    double sum = 0, sq = 0;
    for (size_t q = 0; q < k; q++) {
      lengths[q] = (uint32_t)(16 * exp(uniform(&seed) * log(1024.0)));
      sum += lengths[q];
      sq += (double)lengths[q] * lengths[q];
    }
    packctl_fit_features_cp(lengths, k, 1, c, &x[i * Q]);
    if (c == 1) {
      double base[P];
      packctl_fit_features(lengths, k, 1, base);
      assert_memory_equal(base, &x[i * Q], sizeof base);
      assert_true(x[i * Q + PACKCTL_FIT_CP_GROUP] == 0 && x[i * Q + PACKCTL_FIT_CP_TOKEN] == 0);
    }
    t[i] = coef[0] + coef[4] * (c - 1) + coef[1] * (double)k + (coef[2] * sum + coef[3] * sq) / c +
           coef[5] * sum * (c - 1) / c;
  }
  packctl_fit_t fit;
  char err[256];
  assert_int_equal(packctl_fit_terms(x, t, N, Q, &fit, err, sizeof err), PACKCTL_FIT_OK);
  assert_int_equal(fit.terms, Q);
  for (int j = 0; j < Q; j++)
    if (fabs(fit.coef[j] - coef[j]) > 1e-6 * coef[j])
      fail_msg("%s: %.12g, the truth %.12g", packctl_fit_names[j], fit.coef[j], coef[j]);
  assert_true(fit.r2 > 1 - 1e-9);
  /* Fewer records than the six coefficients. */
  assert_int_equal(packctl_fit_terms(x, t, 5, Q, &fit, err, sizeof err), PACKCTL_FIT_TOO_FEW);
  assert_non_null(strstr(err, "fitting the 6 coefficients"));
  free(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nnls_matches_exhaustive),
      cmocka_unit_test(test_fit_recovers_exact_coefficients),
      cmocka_unit_test(test_fit_recovers_noisy_coefficients),
      cmocka_unit_test(test_fit_keeps_coefficients_non_negative),
      cmocka_unit_test(test_fit_errors),
      cmocka_unit_test(test_features_align),
      cmocka_unit_test(test_fit_cp_terms),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
