/* packctl: JSON (protobuf JSON mapping) and summary output of a plan. */
#include "packctl_output.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pk_planner.h"

int packctl_format_parse(const char *s, packctl_format_t *out) {
  if (strcasecmp(s, "summary") == 0)
    *out = PACKCTL_FORMAT_SUMMARY;
  else if (strcasecmp(s, "json") == 0)
    *out = PACKCTL_FORMAT_JSON;
  else if (strcasecmp(s, "svg") == 0)
    *out = PACKCTL_FORMAT_SVG;
  else
    return -1;
  return 0;
}

void packctl_format_double(double v, char *buf, size_t len) {
  if (isnan(v)) {
    snprintf(buf, len, "nan");
    return;
  }
  if (isinf(v)) {
    snprintf(buf, len, v < 0 ? "-inf" : "inf");
    return;
  }
  if (v == 0) {
    snprintf(buf, len, signbit(v) ? "-0.0" : "0.0");
    return;
  }
  /* The shortest digit string that reads back as v (Python's repr). */
  char e[48];
  for (int p = 1; p <= 17; p++) {
    snprintf(e, sizeof e, "%.*e", p - 1, v);
    if (strtod(e, NULL) == v)
      break;
  }
  const char *s = e;
  bool neg = *s == '-';
  if (neg)
    s++;
  char digits[24];
  int nd = 0;
  for (; *s != '\0' && *s != 'e'; s++)
    if (*s >= '0' && *s <= '9' && nd < (int)sizeof digits - 1)
      digits[nd++] = *s;
  int exp10 = *s == 'e' ? atoi(s + 1) : 0;
  while (nd > 1 && digits[nd - 1] == '0')
    nd--;
  digits[nd] = '\0';
  /* Python writes value = 0.DIGITS * 10^decpt in exponent form when
   * decpt <= -4 or decpt > 16, else in positional form with at least one
   * digit after the point. */
  int decpt = exp10 + 1;
  char out[64];
  size_t o = 0;
  if (neg)
    out[o++] = '-';
  if (decpt <= -4 || decpt > 16) {
    out[o++] = digits[0];
    if (nd > 1) {
      out[o++] = '.';
      memcpy(out + o, digits + 1, (size_t)nd - 1);
      o += (size_t)nd - 1;
    }
    int x = decpt - 1;
    snprintf(out + o, sizeof out - o, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
  } else if (decpt <= 0) {
    out[o++] = '0';
    out[o++] = '.';
    for (int i = 0; i < -decpt; i++)
      out[o++] = '0';
    memcpy(out + o, digits, (size_t)nd);
    o += (size_t)nd;
    out[o] = '\0';
  } else if (decpt >= nd) {
    memcpy(out + o, digits, (size_t)nd);
    o += (size_t)nd;
    for (int i = 0; i < decpt - nd; i++)
      out[o++] = '0';
    memcpy(out + o, ".0", 3);
  } else {
    memcpy(out + o, digits, (size_t)decpt);
    o += (size_t)decpt;
    out[o++] = '.';
    memcpy(out + o, digits + decpt, (size_t)(nd - decpt));
    o += (size_t)(nd - decpt);
    out[o] = '\0';
  }
  snprintf(buf, len, "%s", out);
}

/* ---- JSON --------------------------------------------------------------- */

static void json_indent(FILE *f, int level) {
  fputc('\n', f);
  for (int i = 0; i < level; i++)
    fputs("  ", f);
}

/* A string as json.dumps(ensure_ascii=True) writes it: UTF-8 decoded and
 * every non-ASCII code point escaped (surrogate pairs above U+FFFF); an
 * invalid byte becomes U+FFFD. */
static void json_string(FILE *f, const char *str, size_t len) {
  const unsigned char *s = (const unsigned char *)str;
  fputc('"', f);
  for (size_t i = 0; i < len;) {
    unsigned c = s[i];
    uint32_t cp = c;
    size_t n = 1;
    if (c >= 0x80) {
      size_t need = c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
      cp = 0xFFFD;
      if (need > 0 && i + need <= len) {
        uint32_t v = c & (0x7Fu >> need);
        bool ok = true;
        for (size_t k = 1; k < need; k++) {
          if ((s[i + k] & 0xC0) != 0x80)
            ok = false;
          v = (v << 6) | (s[i + k] & 0x3F);
        }
        static const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
        if (ok && v >= min_cp[need] && v <= 0x10FFFF && !(v >= 0xD800 && v <= 0xDFFF)) {
          cp = v;
          n = need;
        }
      }
    }
    i += n;
    switch (cp) {
    case '"':
      fputs("\\\"", f);
      continue;
    case '\\':
      fputs("\\\\", f);
      continue;
    case '\n':
      fputs("\\n", f);
      continue;
    case '\r':
      fputs("\\r", f);
      continue;
    case '\t':
      fputs("\\t", f);
      continue;
    case '\b':
      fputs("\\b", f);
      continue;
    case '\f':
      fputs("\\f", f);
      continue;
    default:
      break;
    }
    if (cp < 0x20 || (cp >= 0x7F && cp < 0x10000)) {
      fprintf(f, "\\u%04x", (unsigned)cp);
    } else if (cp >= 0x10000) {
      uint32_t v = cp - 0x10000;
      fprintf(f, "\\u%04x\\u%04x", (unsigned)(0xD800 + (v >> 10)),
              (unsigned)(0xDC00 + (v & 0x3FF)));
    } else {
      fputc((int)cp, f);
    }
  }
  fputc('"', f);
}

static void json_base64(FILE *f, const uint8_t *d, size_t n) {
  static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  fputc('"', f);
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)d[i] << 16;
    if (i + 1 < n)
      v |= (uint32_t)d[i + 1] << 8;
    if (i + 2 < n)
      v |= d[i + 2];
    fputc(tbl[(v >> 18) & 63], f);
    fputc(tbl[(v >> 12) & 63], f);
    fputc(i + 1 < n ? tbl[(v >> 6) & 63] : '=', f);
    fputc(i + 2 < n ? tbl[v & 63] : '=', f);
  }
  fputc('"', f);
}

/* The JSON name of a proto field: lowerCamelCase of the proto name. */
static void json_name(FILE *f, const char *name) {
  fputc('"', f);
  bool up = false;
  for (const char *p = name; *p != '\0'; p++) {
    if (*p == '_') {
      up = true;
      continue;
    }
    fputc(up && *p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p, f);
    up = false;
  }
  fputs("\": ", f);
}

static void json_message(FILE *f, const ProtobufCMessage *m, int level);

/* One value of field fd stored at p. */
static void json_value(FILE *f, const ProtobufCFieldDescriptor *fd, const void *p, int level) {
  char buf[64];
  switch (fd->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
    fprintf(f, "%d", (int)*(const int32_t *)p);
    break;
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    fprintf(f, "%u", (unsigned)*(const uint32_t *)p);
    break;
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    fprintf(f, "\"%lld\"", (long long)*(const int64_t *)p);
    break;
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    fprintf(f, "\"%llu\"", (unsigned long long)*(const uint64_t *)p);
    break;
  case PROTOBUF_C_TYPE_BOOL:
    fputs(*(const protobuf_c_boolean *)p ? "true" : "false", f);
    break;
  case PROTOBUF_C_TYPE_FLOAT:
  case PROTOBUF_C_TYPE_DOUBLE: {
    double v = fd->type == PROTOBUF_C_TYPE_FLOAT ? (double)*(const float *)p : *(const double *)p;
    if (isnan(v)) {
      fputs("\"NaN\"", f);
    } else if (isinf(v)) {
      fputs(v < 0 ? "\"-Infinity\"" : "\"Infinity\"", f);
    } else {
      packctl_format_double(v, buf, sizeof buf);
      fputs(buf, f);
    }
    break;
  }
  case PROTOBUF_C_TYPE_ENUM: {
    int v = *(const int *)p;
    const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(fd->descriptor, v);
    if (ev != NULL)
      json_string(f, ev->name, strlen(ev->name));
    else
      fprintf(f, "%d", v);
    break;
  }
  case PROTOBUF_C_TYPE_STRING: {
    const char *s = *(char *const *)p;
    json_string(f, s != NULL ? s : "", s != NULL ? strlen(s) : 0);
    break;
  }
  case PROTOBUF_C_TYPE_BYTES: {
    const ProtobufCBinaryData *b = p;
    json_base64(f, b->data, b->len);
    break;
  }
  case PROTOBUF_C_TYPE_MESSAGE:
    json_message(f, *(ProtobufCMessage *const *)p, level);
    break;
  }
}

static size_t field_size(const ProtobufCFieldDescriptor *fd) {
  switch (fd->type) {
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
  case PROTOBUF_C_TYPE_DOUBLE:
    return 8;
  case PROTOBUF_C_TYPE_BOOL:
    return sizeof(protobuf_c_boolean);
  case PROTOBUF_C_TYPE_ENUM:
    return sizeof(int);
  case PROTOBUF_C_TYPE_STRING:
  case PROTOBUF_C_TYPE_MESSAGE:
    return sizeof(void *);
  case PROTOBUF_C_TYPE_BYTES:
    return sizeof(ProtobufCBinaryData);
  default:
    return 4;
  }
}

/* Whether a singular proto3 field holds its default (and is left out). */
static bool is_default(const ProtobufCFieldDescriptor *fd, const void *p) {
  switch (fd->type) {
  case PROTOBUF_C_TYPE_STRING: {
    const char *s = *(char *const *)p;
    return s == NULL || s[0] == '\0';
  }
  case PROTOBUF_C_TYPE_MESSAGE:
    return *(void *const *)p == NULL;
  case PROTOBUF_C_TYPE_BYTES:
    return ((const ProtobufCBinaryData *)p)->len == 0;
  case PROTOBUF_C_TYPE_DOUBLE:
    return *(const double *)p == 0;
  case PROTOBUF_C_TYPE_FLOAT:
    return *(const float *)p == 0;
  default: {
    /* Integers, bools and enums: all bytes zero. */
    const unsigned char *b = p;
    for (size_t i = 0; i < field_size(fd); i++)
      if (b[i] != 0)
        return false;
    return true;
  }
  }
}

static void json_message(FILE *f, const ProtobufCMessage *m, int level) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  bool any = false;
  fputc('{', f);
  /* protobuf-c keeps fields sorted by number, the order MessageToJson
   * uses. */
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *fd = &d->fields[i];
    const char *member = (const char *)m + fd->offset;
    if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = *(const size_t *)((const char *)m + fd->quantifier_offset);
      if (n == 0)
        continue;
      const char *arr = *(char *const *)member;
      fputs(any ? "," : "", f);
      json_indent(f, level + 1);
      json_name(f, fd->name);
      fputc('[', f);
      for (size_t k = 0; k < n; k++) {
        fputs(k > 0 ? "," : "", f);
        json_indent(f, level + 2);
        json_value(f, fd, arr + k * field_size(fd), level + 2);
      }
      json_indent(f, level + 1);
      fputc(']', f);
      any = true;
      continue;
    }
    if (fd->label == PROTOBUF_C_LABEL_OPTIONAL && fd->quantifier_offset != 0 &&
        fd->type != PROTOBUF_C_TYPE_MESSAGE && fd->type != PROTOBUF_C_TYPE_STRING) {
      /* proto3 `optional` scalars carry a has_ flag. */
      if (!*(const protobuf_c_boolean *)((const char *)m + fd->quantifier_offset))
        continue;
    } else if (is_default(fd, member)) {
      continue;
    }
    fputs(any ? "," : "", f);
    json_indent(f, level + 1);
    json_name(f, fd->name);
    json_value(f, fd, member, level + 1);
    any = true;
  }
  if (any)
    json_indent(f, level);
  fputc('}', f);
}

int packctl_write_json(FILE *f, const ProtobufCMessage *msg) {
  json_message(f, msg, 0);
  fputc('\n', f);
  return ferror(f) ? -1 : 0;
}

/* ---- summary ------------------------------------------------------------ */

typedef struct rank_totals {
  uint64_t micros, seqs, tokens, padded;
  double cost;
} rank_totals_t;

int packctl_write_summary(FILE *f, const Packd__V1__PlanResponse *resp,
                          const Packd__V1__PlanRequest *req) {
  const Packd__V1__PlanStats zero = PACKD__V1__PLAN_STATS__INIT;
  const Packd__V1__PlanStats *st = resp->stats != NULL ? resp->stats : &zero;
  size_t dp = resp->n_ranks;
  rank_totals_t *t = calloc(dp == 0 ? 1 : dp, sizeof *t);
  if (t == NULL)
    return -1;
  double total_cost = 0;
  for (size_t r = 0; r < dp; r++) {
    const Packd__V1__RankPlan *rp = resp->ranks[r];
    for (size_t m = 0; m < rp->n_mini_batches; m++) {
      const Packd__V1__MiniBatch *mb = rp->mini_batches[m];
      for (size_t j = 0; j < mb->n_micro_batches; j++) {
        const Packd__V1__MicroBatch *mi = mb->micro_batches[j];
        t[r].micros++;
        t[r].seqs += mi->n_seqs;
        t[r].tokens += mi->tokens;
        t[r].padded += mi->padded_tokens;
        t[r].cost += mi->cost;
      }
    }
    total_cost += t[r].cost;
  }
  double mean = dp > 0 ? total_cost / (double)dp : 0;

  fprintf(f, "plan %s\n", resp->plan_id != NULL && resp->plan_id[0] ? resp->plan_id : "(no id)");
  fprintf(f, "  %u sequences, %zu DP ranks, %u mini-batch%s, alignment %u", st->sequences, dp,
          st->mini_batches, st->mini_batches == 1 ? "" : "es", st->alignment);
  if (req != NULL && req->batching != NULL) {
    const char *mode = pk_mode_name((uint32_t)req->batching->mode);
    fprintf(f, ", mode %s", mode != NULL ? mode : "?");
    if (req->batching->max_tokens > 0)
      fprintf(f, ", max_tokens %llu", (unsigned long long)req->batching->max_tokens);
  }
  fputs("\n\n", f);
  fprintf(f, "%6s %7s %7s %12s %12s %16s %9s\n", "rank", "micro", "seqs", "tokens", "padded",
          "cost", "cost/mean");
  rank_totals_t sum = {0, 0, 0, 0, 0};
  for (size_t r = 0; r < dp; r++) {
    fprintf(f, "%6u %7llu %7llu %12llu %12llu %16.1f %9.4f\n", resp->ranks[r]->dp_rank,
            (unsigned long long)t[r].micros, (unsigned long long)t[r].seqs,
            (unsigned long long)t[r].tokens, (unsigned long long)t[r].padded, t[r].cost,
            mean > 0 ? t[r].cost / mean : 0.0);
    sum.micros += t[r].micros;
    sum.seqs += t[r].seqs;
    sum.tokens += t[r].tokens;
    sum.padded += t[r].padded;
    sum.cost += t[r].cost;
  }
  fprintf(f, "%6s %7llu %7llu %12llu %12llu %16.1f\n\n", "all", (unsigned long long)sum.micros,
          (unsigned long long)sum.seqs, (unsigned long long)sum.tokens,
          (unsigned long long)sum.padded, sum.cost);

  fprintf(f, "lock-step efficiency    %.5f (bound %.5f)\n", st->lockstep_efficiency,
          st->lockstep_efficiency_bound);
  fprintf(f, "step cost               %.1f (lower bound %.1f)\n", st->step_cost,
          st->step_cost_lower_bound);
  fprintf(f, "DP imbalance            %.5f\n", st->dp_imbalance);
  fprintf(f, "micro-batches per rank  %u (lower bound %u)\n", st->micro_batches_per_rank,
          st->micro_batches_lower_bound);
  fprintf(f, "micro-batches in plan   %u\n", st->plan_micros);
  fprintf(f, "tokens                  %llu real, %llu padded, pad fraction %.5f\n",
          (unsigned long long)st->tokens, (unsigned long long)st->padded_tokens, st->pad_fraction);
  fprintf(f, "largest micro-batch     %llu tokens per CP rank\n",
          (unsigned long long)st->max_micro_tokens);
  fprintf(f, "cap violations          %u\n", st->cap_violations);
  fprintf(f, "zero-length sequences   %u\n", st->zero_length);
  fprintf(f, "plan time               %llu us\n", (unsigned long long)st->plan_time_us);
  free(t);
  return ferror(f) ? -1 : 0;
}

int packctl_write(FILE *f, packctl_format_t fmt, const Packd__V1__PlanResponse *resp,
                  const Packd__V1__PlanRequest *req) {
  switch (fmt) {
  case PACKCTL_FORMAT_JSON:
    return packctl_write_json(f, &resp->base);
  case PACKCTL_FORMAT_SVG:
    return packctl_write_svg(f, resp);
  case PACKCTL_FORMAT_SUMMARY:
  default:
    return packctl_write_summary(f, resp, req);
  }
}
