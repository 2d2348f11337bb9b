/* packctl: the input of `packctl plan`. Either a lengths file (one sequence
 * per line: `TOTAL` or `PROMPT RESPONSE`, `#` starts a comment) or a JSON
 * manifest (a PlanRequest in the protobuf JSON mapping, proto or
 * lowerCamelCase names, parsed with libjansson). */
#include "packctl_input.h"
#include "packctl_fail.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "packctl_request.h"
#include "packctl_suggest.h"
#include "pk_error.h"

/* Room for the input's name in messages that carry it in a fixed buffer. */
#define PACKCTL_NAME_MAX 256

/* A growable array of uint32 pairs (length, loss tokens). */
typedef struct seq_buf {
  uint32_t *len;
  uint32_t *loss;
  size_t n, cap;
} seq_buf_t;

static int seq_push(seq_buf_t *b, uint32_t len, uint32_t loss) {
  if (b->n == b->cap) {
    size_t ncap = b->cap == 0 ? 1024 : b->cap * 2;
    if (ncap < b->cap || ncap > SIZE_MAX / sizeof(uint32_t))
      return PK_ENOMEM;
    uint32_t *nl = realloc(b->len, ncap * sizeof *nl);
    if (nl == NULL)
      return PK_ENOMEM;
    b->len = nl;
    uint32_t *nloss = realloc(b->loss, ncap * sizeof *nloss);
    if (nloss == NULL)
      return PK_ENOMEM;
    b->loss = nloss;
    b->cap = ncap;
  }
  b->len[b->n] = len;
  b->loss[b->n] = loss;
  b->n++;
  return 0;
}

static bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Parses the numbers of one line [p, end) (comment already cut off). Returns
 * how many numbers it found (0..2), or -1 when the line is malformed. */
static int parse_line(const char *p, const char *end, uint64_t v[2]) {
  int count = 0;
  for (;;) {
    while (p < end && is_blank(*p))
      p++;
    if (p == end)
      return count;
    if (count == 2 || *p < '0' || *p > '9')
      return -1;
    uint64_t x = 0;
    while (p < end && *p >= '0' && *p <= '9') {
      x = x * 10 + (uint64_t)(*p - '0');
      if (x > UINT32_MAX)
        return -1;
      p++;
    }
    if (p < end && !is_blank(*p))
      return -1;
    v[count++] = x;
  }
}

static int read_lengths(const char *name, const char *data, size_t size,
                        Packd__V1__PlanRequest *req, char *err, size_t errlen) {
  int rc = 0;
  seq_buf_t b = {0};
  bool any_pair = false;
  size_t line = 0;
  const char *p = data, *stop = data + size;
  while (p < stop) {
    line++;
    const char *eol = memchr(p, '\n', (size_t)(stop - p));
    if (eol == NULL)
      eol = stop;
    const char *hash = memchr(p, '#', (size_t)(eol - p));
    const char *end = hash != NULL ? hash : eol;
    uint64_t v[2] = {0, 0};
    int k = parse_line(p, end, v);
    if (k < 0) {
      int shown = (int)(end - p > 60 ? 60 : end - p);
      rc = packctl_fail(
          err, errlen, PK_EINVAL,
          "%s:%zu: expected TOTAL or PROMPT RESPONSE (unsigned 32-bit integers), got '%.*s'", name,
          line, shown, p);
      goto done;
    }
    if (k == 1) {
      rc = seq_push(&b, (uint32_t)v[0], (uint32_t)v[0]);
    } else if (k == 2) {
      if (v[0] + v[1] > UINT32_MAX) {
        rc = packctl_fail(err, errlen, PK_EINVAL, "%s:%zu: PROMPT + RESPONSE = %llu exceeds 2^32-1",
                          name, line, (unsigned long long)(v[0] + v[1]));
        goto done;
      }
      any_pair = true;
      rc = seq_push(&b, (uint32_t)(v[0] + v[1]), (uint32_t)v[1]);
    }
    if (rc != 0) {
      rc = packctl_fail(err, errlen, PK_ENOMEM, "%s: out of memory at line %zu", name, line);
      goto done;
    }
    p = eol + 1;
  }
  if (b.n == 0) {
    rc = packctl_fail(err, errlen, PK_EINVAL, "%s: no sequence lengths found", name);
    goto done;
  }
  /* The lengths move into the request; loss tokens only when some line gave
   * PROMPT RESPONSE (a TOTAL line then counts all its tokens). */
  free(req->lengths);
  req->lengths = b.len;
  req->n_lengths = b.n;
  b.len = NULL;
  free(req->loss_tokens);
  req->loss_tokens = NULL;
  req->n_loss_tokens = 0;
  if (any_pair) {
    req->loss_tokens = b.loss;
    req->n_loss_tokens = b.n;
    b.loss = NULL;
  }
done:
  free(b.len);
  free(b.loss);
  return rc;
}

/* The text form of a JSON scalar for packctl_request_set. Returns false for
 * arrays, objects and null. */
static bool scalar_text(const json_t *v, char *buf, size_t len) {
  switch (json_typeof(v)) {
  case JSON_INTEGER:
    snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    return true;
  case JSON_REAL:
    snprintf(buf, len, "%.17g", json_real_value(v));
    return true;
  case JSON_TRUE:
    snprintf(buf, len, "true");
    return true;
  case JSON_FALSE:
    snprintf(buf, len, "false");
    return true;
  case JSON_STRING:
    snprintf(buf, len, "%s", json_string_value(v));
    return true;
  default:
    return false;
  }
}

/* lowerCamelCase -> snake_case; snake_case stays. */
static void snake_name(const char *key, char *out, size_t len) {
  size_t o = 0;
  for (const char *k = key; *k != '\0' && o + 2 < len; k++) {
    if (*k >= 'A' && *k <= 'Z') {
      out[o++] = '_';
      out[o++] = (char)(*k - 'A' + 'a');
    } else {
      out[o++] = *k;
    }
  }
  out[o] = '\0';
}

/* Reads a JSON array of unsigned integers (numbers or decimal strings) no
 * larger than max into a new array of `width` bytes per element. */
static int read_uint_array(const char *name, const json_t *arr, const char *field, uint64_t max,
                           size_t width, void **out, size_t *n, char *err, size_t errlen) {
  if (!json_is_array(arr))
    return packctl_fail(err, errlen, PK_EINVAL, "%s: %s: expected an array", name, field);
  size_t count = json_array_size(arr);
  void *data = NULL;
  if (count > 0) {
    data = calloc(count, width);
    if (data == NULL)
      return packctl_fail(err, errlen, PK_ENOMEM, "%s: %s: out of memory for %zu entries", name,
                          field, count);
  }
  for (size_t i = 0; i < count; i++) {
    char text[64], what[PACKCTL_NAME_MAX + 96];
    snprintf(what, sizeof what, "%s: %s[%zu]", name, field, i);
    const json_t *v = json_array_get(arr, i);
    uint64_t x = 0;
    int rc = PK_EINVAL;
    if ((json_is_integer(v) || json_is_string(v)) && scalar_text(v, text, sizeof text))
      rc = packctl_parse_u64(text, max, what, &x, err, errlen);
    else
      packctl_fail(err, errlen, PK_EINVAL, "%s: expected an unsigned integer", what);
    if (rc != 0) {
      free(data);
      return rc;
    }
    if (width == sizeof(uint32_t))
      ((uint32_t *)data)[i] = (uint32_t)x;
    else
      ((uint64_t *)data)[i] = x;
  }
  *out = data;
  *n = count;
  return 0;
}

/* The fields a manifest's top level takes (proto names). */
static const char *const top_fields[] = {"lengths", "loss_tokens", "groups", "parallel", "batching",
                                         "cost",    "layout",      "job",    "seed"};

/* The message for a key that names no field: the file, the field path as
 * written and, when one is close, the valid name meant, spelt the way the
 * key was (lowerCamelCase when the key has a capital, else snake_case). */
static int unknown_field(const char *name, const char *parent, const char *key,
                         const char *const *fields, size_t n, char *err, size_t errlen) {
  char snake[PACKCTL_SUGGEST_MAX + 1];
  snake_name(key, snake, sizeof snake);
  const char *near = packctl_nearest(snake, fields, n);
  char hint[PACKCTL_SUGGEST_MAX + 48] = "";
  if (near != NULL) {
    char spelt[PACKCTL_SUGGEST_MAX + 1];
    bool camel = strpbrk(key, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != NULL;
    size_t o = 0;
    bool up = false;
    for (const char *p = near; *p != '\0' && o + 1 < sizeof spelt; p++) {
      if (camel && *p == '_') {
        up = true;
        continue;
      }
      spelt[o++] = up && *p >= 'a' && *p <= 'z' ? (char)(*p - 'a' + 'A') : *p;
      up = false;
    }
    spelt[o] = '\0';
    snprintf(hint, sizeof hint, "; did you mean '%s%s%s'?", parent != NULL ? parent : "",
             parent != NULL ? "." : "", spelt);
  }
  return packctl_fail(err, errlen, PK_EINVAL, "%s: unknown field '%s%s%s'%s", name,
                      parent != NULL ? parent : "", parent != NULL ? "." : "", key, hint);
}

static int read_manifest(const char *name, const char *data, size_t size,
                         Packd__V1__PlanRequest *req, char *err, size_t errlen) {
  int rc = 0;
  json_error_t jerr;
  json_t *root = json_loadb(data, size, JSON_REJECT_DUPLICATES, &jerr);
  if (root == NULL)
    return packctl_fail(err, errlen, PK_EINVAL, "%s:%d:%d: invalid JSON manifest: %s", name,
                        jerr.line, jerr.column, jerr.text);
  if (!json_is_object(root)) {
    rc = packctl_fail(err, errlen, PK_EINVAL, "%s: the manifest must be a JSON object", name);
    goto done;
  }
  const char *key;
  json_t *val;
  json_object_foreach(root, key, val) {
    char field[64];
    snake_name(key, field, sizeof field);
    if (json_is_null(val))
      continue;
    if (strcmp(field, "lengths") == 0 || strcmp(field, "loss_tokens") == 0) {
      void *arr = NULL;
      size_t n = 0;
      rc = read_uint_array(name, val, field, UINT32_MAX, sizeof(uint32_t), &arr, &n, err, errlen);
      if (rc != 0)
        goto done;
      uint32_t **slot = field[0] == 'l' && field[1] == 'e' ? &req->lengths : &req->loss_tokens;
      size_t *nslot = slot == &req->lengths ? &req->n_lengths : &req->n_loss_tokens;
      free(*slot);
      *slot = arr;
      *nslot = n;
    } else if (strcmp(field, "groups") == 0) {
      void *arr = NULL;
      size_t n = 0;
      rc = read_uint_array(name, val, field, UINT64_MAX, sizeof(uint64_t), &arr, &n, err, errlen);
      if (rc != 0)
        goto done;
      free(req->groups);
      req->groups = arr;
      req->n_groups = n;
    } else if (strcmp(field, "parallel") == 0 || strcmp(field, "batching") == 0 ||
               strcmp(field, "cost") == 0 || strcmp(field, "layout") == 0) {
      if (!json_is_object(val)) {
        rc = packctl_fail(err, errlen, PK_EINVAL, "%s: %s: expected an object", name, field);
        goto done;
      }
      const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field_by_name(
          &packd__v1__plan_request__descriptor, field);
      const ProtobufCMessageDescriptor *sd = fd->descriptor;
      const char *skey;
      json_t *sval;
      json_object_foreach(val, skey, sval) {
        char sfield[64], text[128], what[PACKCTL_NAME_MAX + 160];
        snake_name(skey, sfield, sizeof sfield);
        snprintf(what, sizeof what, "%s: %s.%s", name, field, skey);
        if (json_is_null(sval))
          continue;
        if (protobuf_c_message_descriptor_get_field_by_name(sd, sfield) == NULL) {
          const char *names[32];
          size_t n = 0;
          for (unsigned k = 0; k < sd->n_fields && n < 32; k++)
            names[n++] = sd->fields[k].name;
          rc = unknown_field(name, field, skey, names, n, err, errlen);
          goto done;
        }
        if (!scalar_text(sval, text, sizeof text)) {
          rc = packctl_fail(err, errlen, PK_EINVAL, "%s: expected a number, string or bool", what);
          goto done;
        }
        rc = packctl_request_set(req, field, sfield, text, what, err, errlen);
        if (rc != 0)
          goto done;
      }
    } else if (strcmp(field, "job") == 0 || strcmp(field, "seed") == 0) {
      char text[1024], what[PACKCTL_NAME_MAX + 96];
      snprintf(what, sizeof what, "%s: %s", name, key);
      if (!scalar_text(val, text, sizeof text) ||
          (strcmp(field, "job") == 0 && !json_is_string(val))) {
        rc = packctl_fail(err, errlen, PK_EINVAL, "%s: expected a %s", what,
                          field[0] == 'j' ? "string" : "number");
        goto done;
      }
      rc = packctl_request_set(req, NULL, field, text, what, err, errlen);
      if (rc != 0)
        goto done;
    } else {
      rc = unknown_field(name, NULL, key, top_fields, sizeof top_fields / sizeof top_fields[0], err,
                         errlen);
      goto done;
    }
  }
  if (req->n_lengths == 0)
    rc = packctl_fail(err, errlen, PK_EINVAL, "%s: the manifest has no \"lengths\"", name);
done:
  json_decref(root);
  return rc;
}

int packctl_parse_input(const char *name, const char *data, size_t size,
                        Packd__V1__PlanRequest *req, char *err, size_t errlen) {
  /* Bounded by size: the buffer need not be NUL-terminated. */
  size_t i = 0;
  while (i < size && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' || data[i] == '\n'))
    i++;
  if (i < size && data[i] == '{')
    return read_manifest(name, data, size, req, err, errlen);
  return read_lengths(name, data, size, req, err, errlen);
}

int packctl_read_input(const char *path, Packd__V1__PlanRequest *req, char *err, size_t errlen) {
  char *data = NULL;
  size_t size = 0;
  int rc = packctl_slurp(path, &data, &size, err, errlen);
  if (rc != 0)
    return rc;
  const char *name = strcmp(path, "-") == 0 ? "stdin" : path;
  rc = packctl_parse_input(name, data, size, req, err, errlen);
  free(data);
  return rc;
}
