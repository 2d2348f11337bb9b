/* packctl calibrate's fit: scaled normal equations, a collinearity check by
 * their eigenvalues, and Lawson-Hanson non-negative least squares. See
 * packctl_fit.h. */
#include "packctl_fit.h"
#include "packctl_fail.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Array sizes: the most terms a fit has. */
#define P PACKCTL_FIT_MAX_TERMS

const char *const packctl_fit_names[P] = {"per_micro_batch", "per_sequence", "linear",
                                          "quadratic",       "cp_group",     "cp_token"};

/* The records cannot tell coefficients apart when the least eigenvalue of
 * the scaled normal matrix (unit diagonal, eigenvalues summing to 4) is
 * below this fraction of the largest: its condition number is the square
 * of the features', so this is features dependent to about 1e-6 relative,
 * far below any real variation of counts and lengths, and far above the
 * rounding of sums over millions of records (about 1e-16 per record). */
#define PACKCTL_FIT_MIN_EIGEN 1e-12

void packctl_fit_features(const uint32_t *lengths, size_t k, uint32_t align,
                          double x[PACKCTL_FIT_TERMS]) {
  double sum = 0, sq = 0;
  for (size_t i = 0; i < k; i++) {
    uint64_t a = lengths[i];
    if (align > 1)
      a = (a + align - 1) / align * align;
    sum += (double)a;
    sq += (double)a * (double)a;
  }
  x[PACKCTL_FIT_MICRO] = 1;
  x[PACKCTL_FIT_SEQ] = (double)k;
  x[PACKCTL_FIT_LINEAR] = sum;
  x[PACKCTL_FIT_QUAD] = sq;
}

void packctl_fit_features_cp(const uint32_t *lengths, size_t k, uint32_t align, uint32_t cp,
                             double x[P]) {
  packctl_fit_features(lengths, k, align, x);
  double c = cp > 1 ? (double)cp : 1;
  double sum = x[PACKCTL_FIT_LINEAR];
  x[PACKCTL_FIT_LINEAR] = sum / c;
  x[PACKCTL_FIT_QUAD] /= c;
  x[PACKCTL_FIT_CP_GROUP] = c - 1;
  x[PACKCTL_FIT_CP_TOKEN] = sum * (c - 1) / c;
}

double packctl_fit_predict_terms(size_t p, const double *coef, const double *x) {
  double t = 0;
  for (size_t j = 0; j < p; j++)
    t += coef[j] * x[j];
  return t;
}

double packctl_fit_predict(const double coef[PACKCTL_FIT_TERMS],
                           const double x[PACKCTL_FIT_TERMS]) {
  return packctl_fit_predict_terms(PACKCTL_FIT_TERMS, coef, x);
}

/* Solves a z = b for the symmetric m x m matrix a (row stride P) by
 * Cholesky; z may alias b. Returns -1 when a is not positive definite. */
static int cholesky_solve(size_t m, const double a[P][P], const double *b, double *z) {
  double l[P][P] = {{0}};
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j <= i; j++) {
      double s = a[i][j];
      for (size_t k = 0; k < j; k++)
        s -= l[i][k] * l[j][k];
      if (i == j) {
        if (!(s > 0))
          return -1;
        l[i][i] = sqrt(s);
      } else {
        l[i][j] = s / l[j][j];
      }
    }
  double y[P];
  for (size_t i = 0; i < m; i++) {
    double s = b[i];
    for (size_t k = 0; k < i; k++)
      s -= l[i][k] * y[k];
    y[i] = s / l[i][i];
  }
  for (size_t i = m; i-- > 0;) {
    double s = y[i];
    for (size_t k = i + 1; k < m; k++)
      s -= l[k][i] * z[k];
    z[i] = s / l[i][i];
  }
  return 0;
}

/* The unconstrained least point on the passive set: z[j] for passive j,
 * 0 elsewhere. */
static int solve_passive(size_t p, const double *g, const double *h, const bool *passive,
                         double *z) {
  size_t idx[P], m = 0;
  for (size_t j = 0; j < p; j++)
    if (passive[j])
      idx[m++] = j;
  double a[P][P], b[P], sol[P];
  for (size_t r = 0; r < m; r++) {
    b[r] = h[idx[r]];
    for (size_t c = 0; c < m; c++)
      a[r][c] = g[idx[r] * p + idx[c]];
  }
  if (cholesky_solve(m, (const double(*)[P])a, b, sol) != 0)
    return -1;
  for (size_t j = 0; j < p; j++)
    z[j] = 0;
  for (size_t r = 0; r < m; r++)
    z[idx[r]] = sol[r];
  return 0;
}

int packctl_nnls(size_t p, const double *g, const double *h, double *x) {
  if (p > P)
    return -1;
  bool passive[P] = {false}, barred[P] = {false};
  double hmax = 0;
  for (size_t j = 0; j < p; j++) {
    x[j] = 0;
    hmax = fmax(hmax, fabs(h[j]));
  }
  /* A gradient entry below tol is taken as 0 (rounding of g x). */
  double tol = 1e-12 * (hmax > 0 ? hmax : 1);
  /* Each outer pass frees one variable and every inner pass fixes at least
   * one at 0, so p^2 of each ends any run; the caps only guard against
   * rounding cycles. */
  for (int outer = 0; outer < 8 * P; outer++) {
    double w[P];
    size_t best = p;
    for (size_t j = 0; j < p; j++) {
      w[j] = h[j];
      for (size_t k = 0; k < p; k++)
        w[j] -= g[j * p + k] * x[k];
      if (!passive[j] && !barred[j] && w[j] > tol && (best == p || w[j] > w[best]))
        best = j;
    }
    if (best == p)
      return 0;
    passive[best] = true;
    for (int inner = 0; inner < 8 * P; inner++) {
      double z[P];
      if (solve_passive(p, g, h, passive, z) != 0)
        return -1;
      bool positive = true;
      for (size_t j = 0; j < p; j++)
        positive = positive && (!passive[j] || z[j] > 0);
      if (positive) {
        memcpy(x, z, p * sizeof *x);
        memset(barred, 0, sizeof barred);
        break;
      }
      if (inner == 0 && !(z[best] > 0)) {
        /* The variable just freed does not move off 0 (its gradient was
         * rounding): keep it at 0 until x changes. */
        passive[best] = false;
        barred[best] = true;
        break;
      }
      /* Step from x towards z until the first passive variable reaches 0,
       * and fix the ones that did. */
      double alpha = 1;
      for (size_t j = 0; j < p; j++)
        if (passive[j] && !(z[j] > 0))
          alpha = fmin(alpha, x[j] / (x[j] - z[j]));
      double xmax = 0;
      for (size_t j = 0; j < p; j++) {
        x[j] += alpha * (z[j] - x[j]);
        xmax = fmax(xmax, fabs(x[j]));
      }
      for (size_t j = 0; j < p; j++)
        if (passive[j] && x[j] <= 1e-14 * xmax) {
          x[j] = 0;
          passive[j] = false;
        }
    }
  }
  return 0;
}

/* Eigenvalues (val) and eigenvectors (columns of v) of the symmetric p x p
 * matrix a by cyclic Jacobi rotations; a is destroyed. */
static void jacobi_eigen(size_t p, double a[P][P], double *val, double v[P][P]) {
  for (size_t i = 0; i < p; i++)
    for (size_t j = 0; j < p; j++)
      v[i][j] = i == j;
  for (int sweep = 0; sweep < 64; sweep++) {
    double off = 0, diag = 0;
    for (size_t i = 0; i < p; i++) {
      diag += a[i][i] * a[i][i];
      for (size_t j = i + 1; j < p; j++)
        off += a[i][j] * a[i][j];
    }
    if (off <= 1e-32 * diag)
      break;
    for (size_t i = 0; i < p; i++)
      for (size_t j = i + 1; j < p; j++) {
        double aij = a[i][j];
        if (aij == 0)
          continue;
        /* The rotation that zeroes a[i][j]: t = tan of its angle. */
        double theta = (a[j][j] - a[i][i]) / (2 * aij);
        double t = (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
        double c = 1 / sqrt(t * t + 1), s = t * c;
        for (size_t k = 0; k < p; k++) {
          if (k == i || k == j)
            continue;
          double aki = a[k][i], akj = a[k][j];
          a[k][i] = a[i][k] = c * aki - s * akj;
          a[k][j] = a[j][k] = s * aki + c * akj;
        }
        a[i][i] -= t * aij;
        a[j][j] += t * aij;
        a[i][j] = a[j][i] = 0;
        for (size_t k = 0; k < p; k++) {
          double vki = v[k][i], vkj = v[k][j];
          v[k][i] = c * vki - s * vkj;
          v[k][j] = s * vki + c * vkj;
        }
      }
  }
  for (size_t i = 0; i < p; i++)
    val[i] = a[i][i];
}

/* "a", "a and b", "a, b and c" of the terms with mark set. */
static void name_list(const bool *mark, char *buf, size_t len) {
  size_t count = 0, at = 0, used = 0;
  for (int j = 0; j < P; j++)
    count += mark[j];
  buf[0] = '\0';
  for (int j = 0; j < P && used < len; j++) {
    if (!mark[j])
      continue;
    const char *sep = at == 0 ? "" : at + 1 == count ? " and " : ", ";
    int w = snprintf(buf + used, len - used, "%s%s", sep, packctl_fit_names[j]);
    if (w < 0)
      break;
    used += (size_t)w;
    at++;
  }
}

int packctl_fit(const double *x, const double *t, size_t n, packctl_fit_t *out, char *err,
                size_t errlen) {
  return packctl_fit_terms(x, t, n, PACKCTL_FIT_TERMS, out, err, errlen);
}

int packctl_fit_terms(const double *x, const double *t, size_t n, size_t p, packctl_fit_t *out,
                      char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  out->samples = n;
  out->terms = p;
  if (p != PACKCTL_FIT_TERMS && p != PACKCTL_FIT_MAX_TERMS)
    return packctl_fail(err, errlen, PACKCTL_FIT_TOO_FEW, "%zu terms: a fit has %d or %d", p,
                        PACKCTL_FIT_TERMS, PACKCTL_FIT_MAX_TERMS);
  if (n < p)
    return packctl_fail(
        err, errlen, PACKCTL_FIT_TOO_FEW,
        "%zu record%s: fitting the %zu coefficients (per_micro_batch, per_sequence, "
        "linear, quadratic%s) needs at least %zu",
        n, n == 1 ? "" : "s", p, p > PACKCTL_FIT_TERMS ? ", cp_group, cp_token" : "", p);
  /* Column norms: the features scaled by them have unit norm. */
  double scale[P] = {0};
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < p; j++)
      scale[j] += x[i * p + j] * x[i * p + j];
  bool zero[P] = {false}, any_zero = false;
  for (size_t j = 0; j < p; j++) {
    scale[j] = sqrt(scale[j]);
    zero[j] = !(scale[j] > 0) || !isfinite(scale[j]);
    any_zero = any_zero || zero[j];
  }
  if (any_zero) {
    char names[96];
    name_list(zero, names, sizeof names);
    return packctl_fail(
        err, errlen, PACKCTL_FIT_COLLINEAR,
        "%s cannot be fitted: %s (time micro-batches of sequences of non-zero length)", names,
        zero[PACKCTL_FIT_SEQ] ? "no record has a sequence" : "every length is 0");
  }
  double g[P][P] = {{0}}, h[P] = {0};
  for (size_t i = 0; i < n; i++) {
    double s[P];
    for (size_t j = 0; j < p; j++)
      s[j] = x[i * p + j] / scale[j];
    for (size_t j = 0; j < p; j++) {
      h[j] += s[j] * t[i];
      for (size_t k = 0; k < p; k++)
        g[j][k] += s[j] * s[k];
    }
  }
  /* Collinear features: a direction v with X v = 0 lets any multiple of v
   * be added to the coefficients without changing a prediction. */
  double a[P][P], val[P], vec[P][P];
  memcpy(a, g, sizeof a);
  jacobi_eigen(p, a, val, vec);
  size_t lo = 0, hi = 0;
  for (size_t j = 1; j < p; j++) {
    lo = val[j] < val[lo] ? j : lo;
    hi = val[j] > val[hi] ? j : hi;
  }
  if (!(val[lo] > PACKCTL_FIT_MIN_EIGEN * val[hi])) {
    /* The coefficients the null directions move (there may be several:
     * one length for every sequence makes three features proportional). */
    bool mixed[P] = {false};
    for (size_t e = 0; e < p; e++)
      for (size_t j = 0; j < p; j++)
        mixed[j] =
            mixed[j] || (!(val[e] > PACKCTL_FIT_MIN_EIGEN * val[hi]) && fabs(vec[j][e]) > 0.05);
    char names[96];
    name_list(mixed, names, sizeof names);
    return packctl_fail(err, errlen, PACKCTL_FIT_COLLINEAR,
                        "collinear records: they do not tell %s apart (the features 1, sequences, "
                        "tokens and squared tokens of the records are linearly dependent); time "
                        "micro-batches with different numbers of sequences and different lengths",
                        names);
  }
  /* packctl_nnls takes g row-major with stride p. */
  double gp[P * P], c[P];
  for (size_t j = 0; j < p; j++)
    for (size_t k = 0; k < p; k++)
      gp[j * p + k] = g[j][k];
  if (packctl_nnls(p, gp, h, c) != 0)
    return packctl_fail(
        err, errlen, PACKCTL_FIT_COLLINEAR,
        "collinear records: the least squares system is singular; time micro-batches "
        "with different numbers of sequences and different lengths");
  for (size_t j = 0; j < p; j++)
    out->coef[j] = c[j] / scale[j];
  if (out->coef[PACKCTL_FIT_LINEAR] == 0 && out->coef[PACKCTL_FIT_QUAD] == 0)
    return packctl_fail(
        err, errlen, PACKCTL_FIT_NO_TOKENS,
        "the fit gives linear = quadratic = 0 (the times do not grow with tokens), "
        "and a Cost with both 0 means the default model; time micro-batches with more "
        "different token counts");
  double mean = 0;
  for (size_t i = 0; i < n; i++)
    mean += t[i];
  mean /= (double)n;
  double ss_res = 0, ss_tot = 0, ape = 0;
  size_t positive = 0;
  for (size_t i = 0; i < n; i++) {
    double pred = packctl_fit_predict_terms(p, out->coef, &x[i * p]);
    ss_res += (t[i] - pred) * (t[i] - pred);
    ss_tot += (t[i] - mean) * (t[i] - mean);
    if (t[i] > 0) {
      ape += fabs(pred - t[i]) / t[i];
      positive++;
    }
  }
  out->r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : (ss_res > 0 ? 0 : 1);
  out->mape = positive > 0 ? ape / (double)positive : 0;
  return PACKCTL_FIT_OK;
}
