/* `packctl calibrate`: fits packd's cost model (packd.v1.Cost) to measured
 * micro-batch times and prints the coefficients as a summary, as JSON (a
 * Cost in the protobuf JSON mapping plus the fit's quality) or as an SVG
 * scatter of measured against predicted times.
 *
 * Input: JSON lines, one measured micro-batch each,
 *   {"lengths": [L1, L2, ...], "seconds": T, "cp": C}
 * ("cp", the context-parallel group size the micro-batch ran on, is
 * optional and 1 by default; other keys are ignored; blank lines are
 * skipped). The CP cost terms are fitted only when some record has C > 1. The fit itself is
 * packctl_fit.c. Every problem with the input names the file, the line and
 * the field, and exits with PACKCTL_EXIT_USAGE. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "packctl.h"
#include "packctl_args.h"
#include "packctl_fail.h"
#include "packctl_fit.h"
#include "packctl_json.h"
#include "packctl_number.h"
#include "packctl_output.h"
#include "packctl_request.h"
#include "packctl_svg.h"
#include "pk_error.h"

/* Records are read with every feature; a fit without CP timings uses the
 * first PACKCTL_FIT_TERMS of them. */
#define P PACKCTL_FIT_MAX_TERMS

enum { OPT_FORMAT = 256, OPT_OUT, OPT_ALIGN };

typedef struct calib_opts {
  packctl_format_t format;
  const char *out;
  const char *input;
  uint32_t align;
} calib_opts_t;

/* The records read: n rows of p features (P while reading), the times
 * and their line numbers; cp tells whether some record has a CP group of
 * more than one GPU. */
typedef struct records {
  size_t n, cap, p;
  bool cp;
  double *x, *t;
  size_t *line;
} records_t;

static void calibrate_usage(FILE *f) {
  fputs("usage: packctl calibrate [OPTIONS] TIMINGS\n"
        "\n"
        "Fits packd's cost model to measured micro-batch times by non-negative least\n"
        "squares: seconds = per_micro_batch + per_sequence * k + linear * sum(a)\n"
        "+ quadratic * sum(a^2), for a micro-batch of k sequences of lengths a.\n"
        "\n"
        "TIMINGS holds JSON lines, one measured micro-batch each (packd.timing writes\n"
        "them): {\"lengths\": [L1, L2, ...], \"seconds\": T}; '-' reads stdin. A record\n"
        "may add \"cp\": C, the context-parallel group size it ran on (default 1); when\n"
        "some record has C > 1 the fit is dynamic CP's per-GPU cost, seconds =\n"
        "per_micro_batch + cp_group * (C-1) + per_sequence * k + (linear * sum(a)\n"
        "+ quadratic * sum(a^2)) / C + cp_token * sum(a) * (C-1) / C, and cp_group and\n"
        "cp_token are printed too.\n"
        "\n"
        "options:\n"
        "  --format F       summary (default) | json | svg (measured against predicted)\n"
        "  --out FILE       write the output to FILE (default: stdout)\n"
        "  --align A        round every length up to a multiple of A first, as the\n"
        "                   planner does (its alignment: stats.alignment); default 1\n"
        "  -h, --help       this help\n"
        "\n"
        "The json format is {\"cost\": {...}, \"r2\": R2, \"mape\": MAPE, \"samples\": N}, the\n"
        "cost a packd.v1.Cost in the protobuf JSON mapping (usable as a plan manifest's\n"
        "\"cost\"); mape is a fraction (0.01 is 1 %).\n"
        "\n"
        "exit status: 0 ok, 1 writing the output failed, 2 bad flags or input (a\n"
        "message names the line and the field) or data that cannot be fitted.\n",
        f);
}

/* Stores one calibrate option or argument (packctl_take_fn). */
static int calibrate_take(void *opts, int c, const char *v) {
  calib_opts_t *o = opts;
  char err[256];
  switch (c) {
  case PACKCTL_ARGS_POSITIONAL:
    if (o->input != NULL)
      return packctl_usage_fail(
          "calibrate", "unexpected argument '%s' (one TIMINGS file; got '%s' first)", v, o->input);
    o->input = v;
    return 0;
  case OPT_FORMAT:
    if (packctl_format_parse(v, &o->format) != 0)
      return packctl_usage_fail("calibrate",
                                "--format: unknown format '%s' (expected summary, json or svg)", v);
    return 0;
  case OPT_OUT:
    o->out = v;
    return 0;
  case OPT_ALIGN: {
    uint64_t x = 0;
    if (packctl_parse_u64(v, 65536, "--align", &x, err, sizeof err) != 0)
      return packctl_usage_fail("calibrate", "%s", err);
    o->align = (uint32_t)x;
    return 0;
  }
  }
  return 0;
}

/* Returns PACKCTL_EXIT_OK, an exit status after a message, or -1 after
 * --help. */
static int parse_opts(int argc, char **argv, calib_opts_t *o) {
  static const struct option long_opts[] = {
      {"format", required_argument, NULL, OPT_FORMAT},
      {"out", required_argument, NULL, OPT_OUT},
      {"align", required_argument, NULL, OPT_ALIGN},
      {"help", no_argument, NULL, PACKCTL_ARGS_HELP},
      {NULL, 0, NULL, 0},
  };
  int status =
      packctl_args_scan("calibrate", argc, argv, long_opts, calibrate_usage, calibrate_take, o);
  if (status != 0)
    return status;
  if (o->input == NULL)
    return packctl_usage_fail(
        "calibrate", "missing TIMINGS (a JSON lines file of measured micro-batches, or '-')");
  return PACKCTL_EXIT_OK;
}

/* A JSON value as compact text, for messages. */
static void value_text(const json_t *v, char *buf, size_t len) {
  char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
  snprintf(buf, len, "%s", s != NULL ? s : "?");
  free(s);
}

/* JSON has no NaN or infinities, and jansson refuses numbers that overflow
 * a double; where a line does not parse, a "seconds" written so gets a
 * message of its own. Returns true and fills token when it is so. */
static bool nonfinite_seconds(const char *line, size_t len, char *token, size_t toklen) {
  const char *end = line + len;
  static const char key[] = "\"seconds\"";
  for (const char *p = line; p + sizeof key - 1 <= end; p++) {
    if (memcmp(p, key, sizeof key - 1) != 0)
      continue;
    const char *q = p + sizeof key - 1;
    while (q < end && (*q == ' ' || *q == '\t'))
      q++;
    if (q >= end || *q != ':')
      continue;
    q++;
    while (q < end && (*q == ' ' || *q == '\t'))
      q++;
    size_t n = 0;
    while (q + n < end && n + 1 < toklen && strchr(" \t,}]\r", q[n]) == NULL)
      n++;
    memcpy(token, q, n);
    token[n] = '\0';
    if (strcmp(token, "NaN") == 0 || strcmp(token, "Infinity") == 0 ||
        strcmp(token, "-Infinity") == 0 || strcasecmp(token, "nan") == 0 ||
        strcasecmp(token, "inf") == 0 || strcasecmp(token, "-inf") == 0)
      return true;
    char *stop = NULL;
    errno = 0;
    double v = strtod(token, &stop);
    return n > 0 && stop == token + n && (errno == ERANGE || !isfinite(v)) && fabs(v) > 1;
  }
  return false;
}

/* The CP group size of a record: "cp", an integer in [1, PACKCTL_FIT_MAX_CP],
 * 1 when absent. */
static int parse_cp(const char *name, size_t lineno, const json_t *v, uint32_t *cp, char *err,
                    size_t errlen) {
  char text[64];
  *cp = 1;
  if (v == NULL)
    return 0;
  if (!json_is_integer(v)) {
    value_text(v, text, sizeof text);
    return packctl_fail(err, errlen, PK_EINVAL,
                        "%s:%zu: cp: expected an integer group size >= 1, got %s", name, lineno,
                        text);
  }
  json_int_t c = json_integer_value(v);
  if (c < 1 || c > (json_int_t)PACKCTL_FIT_MAX_CP)
    return packctl_fail(err, errlen, PK_EINVAL,
                        "%s:%zu: cp: %lld is %s (a CP group holds 1 to %u GPUs)", name, lineno,
                        (long long)c, c < 1 ? "below 1" : "too large", PACKCTL_FIT_MAX_CP);
  *cp = (uint32_t)c;
  return 0;
}

/* The features and time of one line into x and *t, and its CP group size
 * into *cp. */
static int parse_record(const char *name, size_t lineno, const char *line, size_t len,
                        uint32_t align, double *x, double *t, uint32_t *cp, char *err,
                        size_t errlen) {
  json_error_t jerr;
  json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
  if (root == NULL) {
    char token[64];
    if (nonfinite_seconds(line, len, token, sizeof token))
      return packctl_fail(err, errlen, PK_EINVAL, "%s:%zu: seconds: %s is not a finite number",
                          name, lineno, token);
    return packctl_fail(err, errlen, PK_EINVAL, "%s:%zu:%d: invalid JSON: %s", name, lineno,
                        jerr.column, jerr.text);
  }
  int rc = 0;
  uint32_t *lengths = NULL;
  char text[64];
  if (!json_is_object(root)) {
    rc = packctl_fail(err, errlen, PK_EINVAL,
                      "%s:%zu: expected a JSON object {\"lengths\": [...], \"seconds\": T}, got %s",
                      name, lineno, json_is_array(root) ? "an array" : "a scalar");
    goto done;
  }
  const json_t *lv = json_object_get(root, "lengths");
  const json_t *sv = json_object_get(root, "seconds");
  if (lv == NULL) {
    rc =
        packctl_fail(err, errlen, PK_EINVAL,
                     "%s:%zu: lengths: missing (the micro-batch's sequence lengths)", name, lineno);
    goto done;
  }
  if (!json_is_array(lv)) {
    value_text(lv, text, sizeof text);
    rc = packctl_fail(err, errlen, PK_EINVAL,
                      "%s:%zu: lengths: expected an array of integers, got %s", name, lineno, text);
    goto done;
  }
  size_t k = json_array_size(lv);
  if (k == 0) {
    rc = packctl_fail(err, errlen, PK_EINVAL,
                      "%s:%zu: lengths: empty (a micro-batch holds at least one sequence)", name,
                      lineno);
    goto done;
  }
  lengths = malloc(k * sizeof *lengths);
  if (lengths == NULL) {
    rc = PK_ENOMEM;
    snprintf(err, errlen, "%s:%zu: out of memory", name, lineno);
    goto done;
  }
  for (size_t i = 0; i < k; i++) {
    const json_t *e = json_array_get(lv, i);
    if (!json_is_integer(e)) {
      value_text(e, text, sizeof text);
      rc = packctl_fail(err, errlen, PK_EINVAL,
                        "%s:%zu: lengths[%zu]: expected a non-negative integer, got %s", name,
                        lineno, i, text);
      goto done;
    }
    json_int_t v = json_integer_value(e);
    if (v < 0 || v > (json_int_t)UINT32_MAX) {
      rc = packctl_fail(err, errlen, PK_EINVAL, "%s:%zu: lengths[%zu]: %lld is %s", name, lineno, i,
                        (long long)v, v < 0 ? "negative" : "above 4294967295");
      goto done;
    }
    lengths[i] = (uint32_t)v;
  }
  if (sv == NULL) {
    rc = packctl_fail(err, errlen, PK_EINVAL,
                      "%s:%zu: seconds: missing (the micro-batch's measured time)", name, lineno);
    goto done;
  }
  if (!json_is_number(sv)) {
    value_text(sv, text, sizeof text);
    rc = packctl_fail(err, errlen, PK_EINVAL, "%s:%zu: seconds: expected a number, got %s", name,
                      lineno, text);
    goto done;
  }
  double s = json_number_value(sv);
  if (!isfinite(s) || s < 0) {
    value_text(sv, text, sizeof text);
    rc = packctl_fail(err, errlen, PK_EINVAL,
                      "%s:%zu: seconds: %s is %s (a measured time is finite and >= 0)", name,
                      lineno, text, isfinite(s) ? "negative" : "not finite");
    goto done;
  }
  rc = parse_cp(name, lineno, json_object_get(root, "cp"), cp, err, errlen);
  if (rc != 0)
    goto done;
  packctl_fit_features_cp(lengths, k, align, *cp, x);
  *t = s;
done:
  free(lengths);
  json_decref(root);
  return rc;
}

static int records_push(records_t *r, const double *x, double t, size_t line) {
  if (r->n == r->cap) {
    size_t cap = r->cap == 0 ? 256 : r->cap * 2;
    double *nx = realloc(r->x, cap * P * sizeof *nx);
    if (nx == NULL)
      return PK_ENOMEM;
    r->x = nx;
    double *nt = realloc(r->t, cap * sizeof *nt);
    if (nt == NULL)
      return PK_ENOMEM;
    r->t = nt;
    size_t *nl = realloc(r->line, cap * sizeof *nl);
    if (nl == NULL)
      return PK_ENOMEM;
    r->line = nl;
    r->cap = cap;
  }
  memcpy(&r->x[r->n * P], x, P * sizeof *x);
  r->t[r->n] = t;
  r->line[r->n] = line;
  r->n++;
  return 0;
}

/* Reads every record of path ("-": stdin). */
static int read_records(const char *path, uint32_t align, records_t *r, char *err, size_t errlen) {
  char *data = NULL;
  size_t size = 0;
  int rc = packctl_slurp(path, &data, &size, err, errlen);
  if (rc != 0)
    return rc;
  const char *name = strcmp(path, "-") == 0 ? "stdin" : path;
  size_t lineno = 0;
  for (const char *p = data; p < data + size && rc == 0;) {
    const char *nl = memchr(p, '\n', (size_t)(data + size - p));
    const char *end = nl != NULL ? nl : data + size;
    lineno++;
    const char *q = p;
    while (q < end && (*q == ' ' || *q == '\t' || *q == '\r'))
      q++;
    if (q < end) {
      double x[P], t = 0;
      uint32_t cp = 1;
      rc = parse_record(name, lineno, p, (size_t)(end - p), align, x, &t, &cp, err, errlen);
      r->cp = r->cp || cp > 1;
      if (rc == 0 && records_push(r, x, t, lineno) != 0) {
        snprintf(err, errlen, "%s:%zu: out of memory", name, lineno);
        rc = PK_ENOMEM;
      }
    }
    p = end + (nl != NULL);
  }
  if (rc == 0 && r->n == 0)
    rc = packctl_fail(err, errlen, PK_EINVAL, "%s: no records (%s)", name,
                      size == 0 ? "the file is empty" : "only blank lines");
  /* Without CP timings the CP features are all 0: keep the first
   * PACKCTL_FIT_TERMS of every row (moving rows down, never over one not
   * yet moved). */
  r->p = r->cp ? P : PACKCTL_FIT_TERMS;
  for (size_t i = 0; rc == 0 && i < r->n; i++)
    memmove(&r->x[i * r->p], &r->x[i * P], r->p * sizeof *r->x);
  free(data);
  return rc;
}

static void write_summary(FILE *f, const char *name, uint32_t align, const packctl_fit_t *fit) {
  static const char *const units[P] = {"s per micro-batch",   "s per sequence",
                                       "s per token",         "s per token^2",
                                       "s per group x (c-1)", "s per token x (c-1)/c"};
  fprintf(f, "packd cost model fitted to %zu micro-batches of %s", fit->samples, name);
  if (align > 1)
    fprintf(f, " (lengths aligned to %u)", align);
  fputs("\n\n", f);
  fprintf(f, "%-18s %-14s %s\n", "coefficient", "value", "unit");
  for (size_t j = 0; j < fit->terms; j++)
    fprintf(f, "%-18s %-14.6g %s\n", packctl_fit_names[j], fit->coef[j], units[j]);
  fprintf(f, "\n%-18s %.6f\n", "r2", fit->r2);
  fprintf(f, "%-18s %.3f %%\n", "MAPE", 100 * fit->mape);
  /* The flags of `packctl plan`, in exact digits. */
  static const char *const flags[P] = {"--per-micro-batch", "--per-sequence", "--cost-linear",
                                       "--cost-quadratic",  "--cp-group",     "--cp-token"};
  fputs("\npackctl plan flags:", f);
  for (size_t j = 0; j < fit->terms; j++) {
    char num[32];
    packctl_format_double(fit->coef[j], num, sizeof num);
    fprintf(f, " %s %s", flags[j], num);
  }
  fputc('\n', f);
}

/* {"cost": {...}, "r2": R2, "mape": MAPE, "samples": N}: the Cost fields in
 * number order by their JSON names, zeros included. Returns 0 or -1. */
static int write_json(FILE *f, const packctl_fit_t *fit) {
  json_t *root = json_pack("{s:{s:f, s:f, s:f, s:f}, s:f, s:f, s:I}", "cost", "linear",
                           fit->coef[PACKCTL_FIT_LINEAR], "quadratic", fit->coef[PACKCTL_FIT_QUAD],
                           "perSequence", fit->coef[PACKCTL_FIT_SEQ], "perMicroBatch",
                           fit->coef[PACKCTL_FIT_MICRO], "r2", fit->r2, "mape", fit->mape,
                           "samples", (json_int_t)fit->samples);
  /* The CP terms only when they were fitted (their Cost fields after the
   * others, as in the message). */
  if (root != NULL && fit->terms > PACKCTL_FIT_TERMS) {
    json_t *cost = json_object_get(root, "cost");
    if (json_object_set_new(cost, "cpToken", json_real(fit->coef[PACKCTL_FIT_CP_TOKEN])) != 0 ||
        json_object_set_new(cost, "cpGroup", json_real(fit->coef[PACKCTL_FIT_CP_GROUP])) != 0) {
      json_decref(root);
      return -1;
    }
  }
  int rc = root != NULL ? packctl_write_json_value(f, root) : -1;
  json_decref(root);
  return rc;
}

#define SVG_LEFT 96.0
#define SVG_TOP 104.0
#define SVG_PLOT 440.0
#define SVG_BOTTOM 88.0
#define SVG_WIDTH 760.0

/* Measured (x) against predicted (y) time, one point per record, and the
 * line y = x that a perfect fit puts every point on. */
static void write_svg(FILE *f, const char *name, const records_t *r, const packctl_fit_t *fit) {
  double top = 0;
  for (size_t i = 0; i < r->n; i++)
    top = fmax(top, fmax(r->t[i], packctl_fit_predict_terms(r->p, fit->coef, &r->x[i * r->p])));
  double axis = packctl_svg_axis(top);
  double height = SVG_TOP + SVG_PLOT + SVG_BOTTOM, base = SVG_TOP + SVG_PLOT;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
          SVG_WIDTH, height, SVG_WIDTH, height);
  fprintf(f, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", SVG_WIDTH, height);
  fputs("<text x=\"12\" y=\"22\" font-size=\"15\" font-weight=\"bold\">packd calibrate: ", f);
  packctl_svg_text(f, name);
  fputs("</text>\n", f);
  fprintf(f,
          "<text x=\"12\" y=\"42\">%zu micro-batches, measured against predicted time; r2 "
          "%.6f, MAPE %.3f %%</text>\n",
          fit->samples, fit->r2, 100 * fit->mape);
  fprintf(f,
          "<text x=\"12\" y=\"60\">seconds = %.6g + %.6g k + %.6g sum(a) + %.6g sum(a^2) "
          "for k sequences of lengths a</text>\n",
          fit->coef[PACKCTL_FIT_MICRO], fit->coef[PACKCTL_FIT_SEQ], fit->coef[PACKCTL_FIT_LINEAR],
          fit->coef[PACKCTL_FIT_QUAD]);
  if (fit->terms > PACKCTL_FIT_TERMS)
    fprintf(f,
            "<text x=\"12\" y=\"78\">on c GPUs: sums divided by c, plus %.6g (c-1) + %.6g "
            "sum(a) (c-1)/c</text>\n",
            fit->coef[PACKCTL_FIT_CP_GROUP], fit->coef[PACKCTL_FIT_CP_TOKEN]);
  /* Grid and ticks, the same on both axes, under the axes. */
  for (int k = 0; k <= 5; k++) {
    double d = SVG_PLOT * k / 5.0, v = axis * k / 5.0;
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.6g</text>\n",
            SVG_LEFT, base - d, SVG_LEFT + SVG_PLOT, base - d, SVG_LEFT - 6, base - d + 4, v);
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.6g</text>\n",
            SVG_LEFT + d, SVG_TOP, SVG_LEFT + d, base, SVG_LEFT + d, base + 16, v);
  }
  fprintf(f,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n"
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
          SVG_LEFT, SVG_TOP, SVG_LEFT, base, SVG_LEFT, base, SVG_LEFT + SVG_PLOT, base);
  fprintf(f,
          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">measured seconds</text>\n"
          "<text x=\"14\" y=\"%.1f\" transform=\"rotate(-90 14 %.1f)\" "
          "text-anchor=\"middle\">predicted seconds</text>\n",
          SVG_LEFT + SVG_PLOT / 2, base + 36, SVG_TOP + SVG_PLOT / 2, SVG_TOP + SVG_PLOT / 2);
  fprintf(f,
          "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#d62728\" "
          "stroke-width=\"1.5\"/>\n",
          SVG_LEFT, base, SVG_LEFT + SVG_PLOT, SVG_TOP);
  double radius = r->n > 2000 ? 1.5 : 3;
  for (size_t i = 0; i < r->n; i++) {
    const double *x = &r->x[i * r->p];
    double pred = packctl_fit_predict_terms(r->p, fit->coef, x);
    fprintf(f,
            "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"%.1f\" fill=\"#4c78a8\" fill-opacity=\"0.6\">"
            "<title>line %zu: %.0f seqs, %.0f tokens, measured %.6g s, predicted %.6g s</title>"
            "</circle>\n",
            SVG_LEFT + SVG_PLOT * r->t[i] / axis, base - SVG_PLOT * pred / axis, radius, r->line[i],
            x[PACKCTL_FIT_SEQ],
            x[PACKCTL_FIT_LINEAR] + (r->p > PACKCTL_FIT_CP_TOKEN ? x[PACKCTL_FIT_CP_TOKEN] : 0),
            r->t[i], pred);
  }
  /* Legend. */
  double lx = SVG_LEFT + SVG_PLOT + 24, ly = SVG_TOP + 12;
  fprintf(f,
          "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#4c78a8\" fill-opacity=\"0.6\"/>"
          "<text x=\"%.1f\" y=\"%.1f\">a micro-batch</text>\n",
          lx + 7, ly - 4, lx + 20, ly);
  fprintf(f,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
          "stroke-width=\"1.5\"/><text x=\"%.1f\" y=\"%.1f\">predicted = measured</text>\n",
          lx, ly + 16, lx + 14, ly + 16, lx + 20, ly + 20);
  fputs("</svg>\n", f);
}

int packctl_cmd_calibrate(int argc, char **argv) {
  calib_opts_t o = {.format = PACKCTL_FORMAT_SUMMARY, .align = 1};
  int status = parse_opts(argc, argv, &o);
  if (status == -1)
    return PACKCTL_EXIT_OK;
  if (status != PACKCTL_EXIT_OK)
    return status;
  records_t r = {0};
  char err[1024] = "";
  packctl_fit_t fit;
  int rc = read_records(o.input, o.align, &r, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "packctl calibrate: %s\n", err);
    status = rc == PK_ENOMEM ? PACKCTL_EXIT_FAIL : PACKCTL_EXIT_USAGE;
    goto done;
  }
  const char *name = strcmp(o.input, "-") == 0 ? "stdin" : o.input;
  if (packctl_fit_terms(r.x, r.t, r.n, r.p, &fit, err, sizeof err) != PACKCTL_FIT_OK) {
    fprintf(stderr, "packctl calibrate: %s: %s\n", name, err);
    status = PACKCTL_EXIT_USAGE;
    goto done;
  }
  FILE *f = stdout;
  if (o.out != NULL && (f = fopen(o.out, "w")) == NULL) {
    fprintf(stderr, "packctl calibrate: --out %s: cannot open for writing\n", o.out);
    status = PACKCTL_EXIT_USAGE;
    goto done;
  }
  bool bad = false;
  if (o.format == PACKCTL_FORMAT_JSON)
    bad = write_json(f, &fit) != 0;
  else if (o.format == PACKCTL_FORMAT_SVG)
    write_svg(f, name, &r, &fit);
  else
    write_summary(f, name, o.align, &fit);
  bad = ferror(f) != 0 || bad;
  bad = (o.out != NULL ? fclose(f) != 0 : fflush(f) != 0) || bad;
  if (bad) {
    fprintf(stderr, "packctl calibrate: writing the output failed\n");
    status = PACKCTL_EXIT_FAIL;
  }
done:
  free(r.x);
  free(r.t);
  free(r.line);
  return status;
}
