/* packctl: setting PlanRequest fields from text through the protobuf-c
 * descriptors (one parser for flags and manifests), reading binary requests
 * and sampling. */
#include "packctl_request.h"
#include "packctl_fail.h"
#include "packctl_suggest.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pk_dcp.h"
#include "pk_planner.h"

Packd__V1__PlanRequest *packctl_request_new(void) {
  Packd__V1__PlanRequest *req = malloc(sizeof *req);
  if (req != NULL)
    packd__v1__plan_request__init(req);
  return req;
}

int packctl_parse_u64(const char *text, uint64_t max, const char *what, uint64_t *out, char *err,
                      size_t errlen) {
  uint64_t v = 0;
  const char *p = text;
  if (p == NULL || *p == '\0')
    return packctl_fail(err, errlen, PK_EINVAL,
                        "%s: expected an unsigned integer, got an empty value", what);
  for (; *p != '\0'; p++) {
    if (*p < '0' || *p > '9')
      return packctl_fail(err, errlen, PK_EINVAL, "%s: expected an unsigned integer, got '%s'",
                          what, text);
    uint64_t d = (uint64_t)(*p - '0');
    if (v > (UINT64_MAX - d) / 10)
      return packctl_fail(err, errlen, PK_EINVAL, "%s: '%s' is too large (at most %llu)", what,
                          text, (unsigned long long)max);
    v = v * 10 + d;
  }
  if (v > max)
    return packctl_fail(err, errlen, PK_EINVAL, "%s: '%s' is too large (at most %llu)", what, text,
                        (unsigned long long)max);
  *out = v;
  return 0;
}

static int parse_bool(const char *text, const char *what, protobuf_c_boolean *out, char *err,
                      size_t errlen) {
  static const char *const yes[] = {"true", "1", "yes", "on"};
  static const char *const no[] = {"false", "0", "no", "off"};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    if (strcasecmp(text, yes[i]) == 0) {
      *out = 1;
      return 0;
    }
    if (strcasecmp(text, no[i]) == 0) {
      *out = 0;
      return 0;
    }
  }
  return packctl_fail(err, errlen, PK_EINVAL, "%s: expected true or false, got '%s'", what, text);
}

static int parse_double(const char *text, const char *what, double *out, char *err, size_t errlen) {
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (*text == '\0' || end == NULL || *end != '\0' || errno == ERANGE || !isfinite(v))
    return packctl_fail(err, errlen, PK_EINVAL, "%s: expected a finite number, got '%s'", what,
                        text);
  *out = v;
  return 0;
}

typedef const char *(*enum_name_fn)(uint32_t);
typedef int (*enum_parse_fn)(const char *, uint32_t *);

/* The planner's short names for the enum of descriptor d. */
static void enum_short_names(const ProtobufCEnumDescriptor *d, enum_name_fn *name,
                             enum_parse_fn *parse) {
  *name = NULL;
  *parse = NULL;
  if (d == &packd__v1__cp_algo__descriptor) {
    *name = pk_cp_algo_name;
    *parse = pk_cp_algo_parse;
  } else if (d == &packd__v1__dp_balance__descriptor) {
    *name = pk_dp_balance_name;
    *parse = pk_dp_balance_parse;
  } else if (d == &packd__v1__mode__descriptor) {
    *name = pk_mode_name;
    *parse = pk_mode_parse;
  } else if (d == &packd__v1__micro_algo__descriptor) {
    *name = pk_micro_algo_name;
    *parse = pk_micro_algo_parse;
  } else if (d == &packd__v1__order__descriptor) {
    *name = pk_order_name;
    *parse = pk_order_parse;
  } else if (d == &packd__v1__dcp_sizes__descriptor) {
    *name = pk_dcp_sizes_name;
    *parse = pk_dcp_sizes_parse;
  } else if (d == &packd__v1__dcp_algo__descriptor) {
    *name = pk_dcp_algo_name;
    *parse = pk_dcp_algo_parse;
  }
}

static int parse_enum(const ProtobufCEnumDescriptor *d, const char *text, const char *what,
                      int *out, char *err, size_t errlen) {
  enum_name_fn name;
  enum_parse_fn parse;
  enum_short_names(d, &name, &parse);
  uint32_t v = 0;
  if (parse != NULL && parse(text, &v) == 0) {
    *out = (int)v;
    return 0;
  }
  const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value_by_name(d, text);
  if (ev != NULL) {
    *out = ev->value;
    return 0;
  }
  uint64_t num = 0;
  char scratch[8];
  if (packctl_parse_u64(text, INT32_MAX, what, &num, scratch, sizeof scratch) == 0 &&
      protobuf_c_enum_descriptor_get_value(d, (int)num) != NULL) {
    *out = (int)num;
    return 0;
  }
  /* List the accepted short names in the message, and the nearest of them
   * to a misspelt one. */
  char list[256] = "";
  size_t used = 0;
  const char *names[64];
  size_t n = 0;
  for (unsigned i = 0; i < d->n_values && used < sizeof list; i++) {
    const char *s = name != NULL ? name((uint32_t)d->values[i].value) : NULL;
    if (s == NULL)
      s = d->values[i].name;
    if (n < sizeof names / sizeof names[0])
      names[n++] = s;
    int w = snprintf(list + used, sizeof list - used, "%s%s", i == 0 ? "" : ", ", s);
    if (w < 0)
      break;
    used += (size_t)w;
  }
  const char *near = packctl_nearest(text, names, n);
  if (near != NULL)
    return packctl_fail(err, errlen, PK_EINVAL,
                        "%s: unknown value '%s'; did you mean '%s'? (expected one of: %s)", what,
                        text, near, list);
  return packctl_fail(err, errlen, PK_EINVAL, "%s: unknown value '%s' (expected one of: %s)", what,
                      text, list);
}

/* The message that holds `sub` fields (a field of PlanRequest, or a dotted
 * path of message fields such as "parallel.dynamic_cp"), created on first
 * use along the path. */
static int sub_message(Packd__V1__PlanRequest *req, const char *sub, ProtobufCMessage **out,
                       char *err, size_t errlen) {
  ProtobufCMessage *m = &req->base;
  while (sub != NULL && *sub != '\0') {
    const char *dot = strchr(sub, '.');
    size_t len = dot != NULL ? (size_t)(dot - sub) : strlen(sub);
    char name[64];
    if (len >= sizeof name)
      return packctl_fail(err, errlen, PK_EINVAL, "unknown request field '%s'", sub);
    memcpy(name, sub, len);
    name[len] = '\0';
    const ProtobufCFieldDescriptor *fd =
        protobuf_c_message_descriptor_get_field_by_name(m->descriptor, name);
    if (fd == NULL || fd->type != PROTOBUF_C_TYPE_MESSAGE)
      return packctl_fail(err, errlen, PK_EINVAL, "unknown request field '%s'", name);
    ProtobufCMessage **slot = (ProtobufCMessage **)((char *)m + fd->offset);
    if (*slot == NULL) {
      const ProtobufCMessageDescriptor *d = fd->descriptor;
      ProtobufCMessage *child = malloc(d->sizeof_message);
      if (child == NULL)
        return packctl_fail(err, errlen, PK_ENOMEM, "out of memory");
      protobuf_c_message_init(d, child);
      *slot = child;
    }
    m = *slot;
    sub = dot != NULL ? dot + 1 : NULL;
  }
  *out = m;
  return 0;
}

int packctl_request_touch(Packd__V1__PlanRequest *req, const char *sub, char *err, size_t errlen) {
  ProtobufCMessage *m = NULL;
  return sub_message(req, sub, &m, err, errlen);
}

int packctl_request_set(Packd__V1__PlanRequest *req, const char *sub, const char *field,
                        const char *text, const char *what, char *err, size_t errlen) {
  ProtobufCMessage *m = NULL;
  int rc = sub_message(req, sub, &m, err, errlen);
  if (rc != 0)
    return rc;
  const ProtobufCFieldDescriptor *fd =
      protobuf_c_message_descriptor_get_field_by_name(m->descriptor, field);
  if (fd == NULL || fd->label == PROTOBUF_C_LABEL_REPEATED)
    return packctl_fail(err, errlen, PK_EINVAL, "%s: not a scalar field of %s", what,
                        sub != NULL ? sub : "PlanRequest");
  void *member = (char *)m + fd->offset;
  uint64_t u = 0;
  switch (fd->type) {
  case PROTOBUF_C_TYPE_UINT32:
    rc = packctl_parse_u64(text, UINT32_MAX, what, &u, err, errlen);
    if (rc == 0)
      *(uint32_t *)member = (uint32_t)u;
    return rc;
  case PROTOBUF_C_TYPE_UINT64:
    rc = packctl_parse_u64(text, UINT64_MAX, what, &u, err, errlen);
    if (rc == 0)
      *(uint64_t *)member = u;
    return rc;
  case PROTOBUF_C_TYPE_BOOL:
    return parse_bool(text, what, (protobuf_c_boolean *)member, err, errlen);
  case PROTOBUF_C_TYPE_DOUBLE:
    return parse_double(text, what, (double *)member, err, errlen);
  case PROTOBUF_C_TYPE_ENUM:
    return parse_enum(fd->descriptor, text, what, (int *)member, err, errlen);
  case PROTOBUF_C_TYPE_STRING: {
    size_t len = strlen(text);
    char *copy = malloc(len + 1);
    if (copy == NULL)
      return packctl_fail(err, errlen, PK_ENOMEM, "out of memory");
    memcpy(copy, text, len + 1);
    char **slot = (char **)member;
    if (*slot != NULL && *slot != protobuf_c_empty_string)
      free(*slot);
    *slot = copy;
    return 0;
  }
  default:
    return packctl_fail(err, errlen, PK_EINVAL, "%s: unsupported field type", what);
  }
}

int packctl_slurp(const char *path, char **data, size_t *len, char *err, size_t errlen) {
  int rc = 0;
  bool is_stdin = strcmp(path, "-") == 0;
  FILE *f = is_stdin ? stdin : fopen(path, "rb");
  char *buf = NULL;
  size_t cap = 0, used = 0;
  *data = NULL;
  *len = 0;
  if (f == NULL)
    return packctl_fail(err, errlen, PK_EINVAL, "%s: cannot open: %s", path, strerror(errno));
  for (;;) {
    if (cap - used < 2) {
      size_t ncap = cap == 0 ? 65536 : cap * 2;
      char *nbuf = ncap > cap ? realloc(buf, ncap) : NULL;
      if (nbuf == NULL) {
        rc = packctl_fail(err, errlen, PK_ENOMEM, "%s: out of memory reading the input", path);
        goto done;
      }
      buf = nbuf;
      cap = ncap;
    }
    size_t got = fread(buf + used, 1, cap - used - 1, f);
    used += got;
    if (got == 0) {
      if (ferror(f)) {
        rc = packctl_fail(err, errlen, PK_EINVAL, "%s: read error", is_stdin ? "stdin" : path);
        goto done;
      }
      break;
    }
  }
  buf[used] = '\0';
  *data = buf;
  *len = used;
  buf = NULL;
done:
  free(buf);
  if (!is_stdin)
    fclose(f);
  return rc;
}

int packctl_read_request_file(const char *path, Packd__V1__PlanRequest **req, char *err,
                              size_t errlen) {
  char *data = NULL;
  size_t len = 0;
  *req = NULL;
  int rc = packctl_slurp(path, &data, &len, err, errlen);
  if (rc != 0)
    return rc;
  static const uint8_t empty[1] = {0};
  Packd__V1__PlanRequest *m =
      packd__v1__plan_request__unpack(NULL, len, len == 0 ? empty : (const uint8_t *)data);
  free(data);
  if (m == NULL)
    return packctl_fail(err, errlen, PK_EINVAL, "%s: not a valid packd.v1.PlanRequest (%zu bytes)",
                        path, len);
  *req = m;
  return 0;
}

/* splitmix64: a small, well-mixed, deterministic generator. */
static uint64_t rng_next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Uniform in [0, bound) without modulo bias (bound > 0). */
static uint64_t rng_below(uint64_t *state, uint64_t bound) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do {
    x = rng_next(state);
  } while (x >= limit);
  return x % bound;
}

static int cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return (x > y) - (x < y);
}

int packctl_sample(Packd__V1__PlanRequest *req, size_t count, uint64_t seed, char *err,
                   size_t errlen) {
  size_t n = req->n_lengths;
  if (count > n)
    return packctl_fail(err, errlen, PK_EINVAL,
                        "--sample: %zu is more than the %zu sequences of the input", count, n);
  if (count == 0)
    return packctl_fail(err, errlen, PK_EINVAL, "--sample: must be at least 1, got 0");
  size_t *idx = calloc(n, sizeof *idx);
  if (idx == NULL)
    return packctl_fail(err, errlen, PK_ENOMEM, "--sample: out of memory");
  /* A partial Fisher-Yates shuffle picks `count` distinct indices; sorting
   * them keeps the input order of the sample. */
  for (size_t i = 0; i < n; i++)
    idx[i] = i;
  uint64_t state = seed;
  for (size_t i = 0; i < count; i++) {
    size_t j = i + (size_t)rng_below(&state, (uint64_t)(n - i));
    size_t t = idx[i];
    idx[i] = idx[j];
    idx[j] = t;
  }
  qsort(idx, count, sizeof *idx, cmp_size);
  /* Compact in place: idx is increasing, so idx[k] >= k. */
  for (size_t k = 0; k < count; k++) {
    req->lengths[k] = req->lengths[idx[k]];
    if (req->n_loss_tokens == n)
      req->loss_tokens[k] = req->loss_tokens[idx[k]];
    if (req->n_groups == n)
      req->groups[k] = req->groups[idx[k]];
  }
  req->n_lengths = count;
  if (req->n_loss_tokens == n)
    req->n_loss_tokens = count;
  if (req->n_groups == n)
    req->n_groups = count;
  free(idx);
  return 0;
}

int packctl_group_runs(Packd__V1__PlanRequest *req, uint64_t size, char *err, size_t errlen) {
  if (size == 0)
    return packctl_fail(err, errlen, PK_EINVAL, "--group-size: must be at least 1, got 0");
  size_t n = req->n_lengths;
  uint64_t *groups = n > 0 ? malloc(n * sizeof *groups) : NULL;
  if (n > 0 && groups == NULL)
    return packctl_fail(err, errlen, PK_ENOMEM, "--group-size: out of memory");
  for (size_t i = 0; i < n; i++)
    groups[i] = (uint64_t)i / size;
  free(req->groups);
  req->groups = groups;
  req->n_groups = n;
  return 0;
}
