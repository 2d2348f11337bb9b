/* packctl calibrate's fit (packctl_fit.c): packd's cost model fitted to
 * measured micro-batch times by non-negative least squares.
 *
 * One record is one measured micro-batch: k sequences of aligned lengths
 * a_1 .. a_k that took t seconds. The model is the micro-batch cost of
 * packd.v1.Cost,
 *
 *   t = per_micro_batch + per_sequence k + linear sum a + quadratic sum a^2,
 *
 * linear in its four coefficients, which are kept >= 0 (the planner refuses
 * negative ones, and a negative cost of a token or a sequence would make
 * the planner prefer more of them).
 *
 * Pure computation: no I/O and no allocation; safe to call from any
 * thread. */
#ifndef PACKCTL_FIT_H
#define PACKCTL_FIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The terms, in the order of features and coefficients. */
enum {
  PACKCTL_FIT_MICRO = 0,  /* per_micro_batch: feature 1. */
  PACKCTL_FIT_SEQ = 1,    /* per_sequence: feature k. */
  PACKCTL_FIT_LINEAR = 2, /* linear: feature sum a. */
  PACKCTL_FIT_QUAD = 3,   /* quadratic: feature sum a^2. */
  PACKCTL_FIT_TERMS = 4,  /* The terms of a fit without context parallelism. */
  /* With timings of context-parallel groups of c GPUs, every length
   * feature above is divided by c (each GPU holds 1/c of a sequence) and
   * the two CP terms of dynamic CP's cost are fitted as well. */
  PACKCTL_FIT_CP_GROUP = 4,  /* cp_group: feature c - 1. */
  PACKCTL_FIT_CP_TOKEN = 5,  /* cp_token: feature sum a (c - 1) / c. */
  PACKCTL_FIT_MAX_TERMS = 6, /* The terms of a fit with CP timings. */
};

/* The largest CP group size a timing record may carry: the planner's
 * largest pool. */
#define PACKCTL_FIT_MAX_CP 65536u

/* The proto field names of the terms ("per_micro_batch", ...). */
extern const char *const packctl_fit_names[PACKCTL_FIT_MAX_TERMS];

/* Errors of packctl_fit; every one comes with a message. */
enum {
  PACKCTL_FIT_OK = 0,
  PACKCTL_FIT_TOO_FEW = -1,   /* Fewer records than coefficients. */
  PACKCTL_FIT_COLLINEAR = -2, /* Some coefficient is not identifiable. */
  PACKCTL_FIT_NO_TOKENS = -3, /* linear and quadratic both 0: the Cost
                               * message reads that as its default. */
};

typedef struct packctl_fit {
  double coef[PACKCTL_FIT_MAX_TERMS]; /* >= 0, in term order; unfitted terms 0. */
  size_t terms;                       /* The terms fitted: TERMS or MAX_TERMS. */
  /* 1 - (residual sum of squares) / (sum of squares around the mean time);
   * 1 when both are 0. */
  double r2;
  /* Mean of |predicted - measured| / measured over the records measured
   * above 0 (a fraction: 0.01 is 1 %); 0 when there are none. */
  double mape;
  size_t samples;
} packctl_fit_t;

/* The features of a micro-batch of k sequences: 1, k, sum a, sum a^2, with
 * every length first rounded up to a multiple of align (the planner's
 * alignment A; 0 and 1 leave lengths as they are). */
void packctl_fit_features(const uint32_t *lengths, size_t k, uint32_t align,
                          double x[PACKCTL_FIT_TERMS]);

/* The features of the same micro-batch run by a context-parallel group of
 * cp GPUs (cp >= 1), as one GPU sees it: 1, k, sum a / cp, sum a^2 / cp,
 * cp - 1, sum a (cp - 1) / cp. With cp = 1 the first four are those of
 * packctl_fit_features and the last two are 0. */
void packctl_fit_features_cp(const uint32_t *lengths, size_t k, uint32_t align, uint32_t cp,
                             double x[PACKCTL_FIT_MAX_TERMS]);

/* The time the coefficients give for features x. */
double packctl_fit_predict(const double coef[PACKCTL_FIT_TERMS], const double x[PACKCTL_FIT_TERMS]);

/* The same for p terms (PACKCTL_FIT_TERMS or PACKCTL_FIT_MAX_TERMS). */
double packctl_fit_predict_terms(size_t p, const double *coef, const double *x);

/* Non-negative least squares on normal equations: the x >= 0 (p entries,
 * p <= PACKCTL_FIT_MAX_TERMS) least x' g x - 2 h' x for a symmetric positive
 * definite g (p x p, row-major), by Lawson and Hanson's active set method.
 * Returns 0, or -1 when g is not positive definite on some active set. */
int packctl_nnls(size_t p, const double *g, const double *h, double *x);

/* Fits the model to n records: x holds n rows of PACKCTL_FIT_TERMS
 * features (packctl_fit_features), t the n measured times (finite, >= 0).
 * Columns are scaled to unit norm before the normal equations are formed,
 * so that sums of squares of long sequences and counts of a few sequences
 * weigh alike. Returns PACKCTL_FIT_OK and fills *out, or an error code
 * above with a message in err naming the problem (and *out unspecified). */
int packctl_fit(const double *x, const double *t, size_t n, packctl_fit_t *out, char *err,
                size_t errlen);

/* The same fit of p terms (PACKCTL_FIT_TERMS, or PACKCTL_FIT_MAX_TERMS for
 * the CP terms too), x holding n rows of p features. */
int packctl_fit_terms(const double *x, const double *t, size_t n, size_t p, packctl_fit_t *out,
                      char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
