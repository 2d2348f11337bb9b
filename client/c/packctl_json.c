/* packctl's JSON output of protobuf messages: the protobuf JSON mapping, as
 * Python's google.protobuf.json_format.MessageToJson prints it, built and
 * serialised with libjansson.
 *
 * The message becomes a jansson tree through the protobuf-c descriptors:
 * lowerCamelCase names in field-number order (protobuf-c keeps fields
 * sorted by number, and jansson keeps insertion order), fields at their
 * proto3 default left out, 64-bit integers as decimal strings, enums by
 * name (by number when the value is not in the enum), bytes in base64,
 * non-finite doubles as "NaN", "Infinity" and "-Infinity". jansson dumps
 * the tree with two-space indentation and every non-ASCII character
 * escaped.
 *
 * One thing jansson cannot do is spell numbers as Python does: it writes a
 * double with 17 significant digits (exact, but 0.1 comes out as
 * 0.10000000000000001), and \u escapes in upper case. MessageToJson writes
 * Python's repr (the shortest digits that read back as the same double:
 * 0.1, 1e-05) and lower case, and escapes DEL (0x7f) too. So one pass over
 * jansson's text, outside string literals, respells each number that has a
 * fraction or an exponent with packctl_format_double; inside string
 * literals it lowers the hex digits of \u escapes and escapes DEL. The
 * digits jansson wrote read back as the same double, so the respelling
 * changes no value. */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "packctl_json.h"
#include "packctl_number.h"

/* The lowerCamelCase JSON name of a proto field name. */
static void camel_name(const char *name, char *out, size_t len) {
  size_t o = 0;
  bool up = false;
  for (const char *p = name; *p != '\0' && o + 1 < len; p++) {
    if (*p == '_') {
      up = true;
      continue;
    }
    out[o++] = up && *p >= 'a' && *p <= 'z' ? (char)(*p - 'a' + 'A') : *p;
    up = false;
  }
  out[o] = '\0';
}

/* A jansson string of s (len bytes) with every invalid UTF-8 sequence
 * replaced by U+FFFD, as Python decodes protobuf strings; NULL when out of
 * memory. */
static json_t *utf8_string(const char *str, size_t len) {
  const unsigned char *s = (const unsigned char *)str;
  char *buf = malloc(len * 3 + 1);
  if (buf == NULL)
    return NULL;
  size_t o = 0;
  for (size_t i = 0; i < len;) {
    unsigned c = s[i];
    size_t need = c < 0x80 ? 1 : c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    bool ok = need > 0 && i + need <= len;
    if (ok && need > 1) {
      uint32_t v = c & (0x7Fu >> need);
      for (size_t k = 1; k < need; k++) {
        ok = ok && (s[i + k] & 0xC0) == 0x80;
        v = (v << 6) | (s[i + k] & 0x3F);
      }
      static const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = ok && v >= min_cp[need] && v <= 0x10FFFF && !(v >= 0xD800 && v <= 0xDFFF);
    }
    if (ok) {
      memcpy(buf + o, s + i, need);
      o += need;
      i += need;
    } else {
      memcpy(buf + o, "\xEF\xBF\xBD", 3);
      o += 3;
      i++;
    }
  }
  json_t *j = json_stringn(buf, o);
  free(buf);
  return j;
}

static json_t *base64_string(const uint8_t *d, size_t n) {
  static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char *buf = malloc((n + 2) / 3 * 4 + 1);
  if (buf == NULL)
    return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)d[i] << 16;
    if (i + 1 < n)
      v |= (uint32_t)d[i + 1] << 8;
    if (i + 2 < n)
      v |= d[i + 2];
    buf[o++] = tbl[(v >> 18) & 63];
    buf[o++] = tbl[(v >> 12) & 63];
    buf[o++] = i + 1 < n ? tbl[(v >> 6) & 63] : '=';
    buf[o++] = i + 2 < n ? tbl[v & 63] : '=';
  }
  json_t *j = json_stringn(buf, o);
  free(buf);
  return j;
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

static json_t *json_of_message(const ProtobufCMessage *m);

/* One value of field fd stored at p; NULL when out of memory. */
static json_t *json_of_value(const ProtobufCFieldDescriptor *fd, const void *p) {
  char buf[32];
  switch (fd->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
    return json_integer(*(const int32_t *)p);
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    return json_integer(*(const uint32_t *)p);
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    snprintf(buf, sizeof buf, "%lld", (long long)*(const int64_t *)p);
    return json_string(buf);
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)*(const uint64_t *)p);
    return json_string(buf);
  case PROTOBUF_C_TYPE_BOOL:
    return json_boolean(*(const protobuf_c_boolean *)p);
  case PROTOBUF_C_TYPE_FLOAT:
  case PROTOBUF_C_TYPE_DOUBLE: {
    double v = fd->type == PROTOBUF_C_TYPE_FLOAT ? (double)*(const float *)p : *(const double *)p;
    if (isnan(v))
      return json_string("NaN");
    if (isinf(v))
      return json_string(v < 0 ? "-Infinity" : "Infinity");
    return json_real(v);
  }
  case PROTOBUF_C_TYPE_ENUM: {
    int v = *(const int *)p;
    const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(fd->descriptor, v);
    return ev != NULL ? json_string(ev->name) : json_integer(v);
  }
  case PROTOBUF_C_TYPE_STRING: {
    const char *s = *(char *const *)p;
    return utf8_string(s != NULL ? s : "", s != NULL ? strlen(s) : 0);
  }
  case PROTOBUF_C_TYPE_BYTES: {
    const ProtobufCBinaryData *b = p;
    return base64_string(b->data, b->len);
  }
  case PROTOBUF_C_TYPE_MESSAGE:
    return json_of_message(*(ProtobufCMessage *const *)p);
  }
  return NULL;
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

/* The value of field fd of m, or NULL with *absent set when the mapping
 * leaves it out (NULL with *absent clear: out of memory). */
static json_t *json_of_field(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *fd,
                             bool *absent) {
  const char *member = (const char *)m + fd->offset;
  *absent = false;
  if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
    size_t n = *(const size_t *)((const char *)m + fd->quantifier_offset);
    if (n == 0) {
      *absent = true;
      return NULL;
    }
    const char *arr = *(char *const *)member;
    json_t *list = json_array();
    for (size_t k = 0; list != NULL && k < n; k++) {
      if (json_array_append_new(list, json_of_value(fd, arr + k * field_size(fd))) != 0) {
        json_decref(list);
        list = NULL;
      }
    }
    return list;
  }
  if (fd->label == PROTOBUF_C_LABEL_OPTIONAL && fd->quantifier_offset != 0 &&
      fd->type != PROTOBUF_C_TYPE_MESSAGE && fd->type != PROTOBUF_C_TYPE_STRING) {
    /* proto3 `optional` scalars carry a has_ flag. */
    *absent = !*(const protobuf_c_boolean *)((const char *)m + fd->quantifier_offset);
  } else {
    *absent = is_default(fd, member);
  }
  return *absent ? NULL : json_of_value(fd, member);
}

static json_t *json_of_message(const ProtobufCMessage *m) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  json_t *obj = json_object();
  for (unsigned i = 0; obj != NULL && i < d->n_fields; i++) {
    bool absent = false;
    json_t *v = json_of_field(m, &d->fields[i], &absent);
    if (absent)
      continue;
    char name[128];
    camel_name(d->fields[i].name, name, sizeof name);
    if (json_object_set_new(obj, name, v) != 0) {
      json_decref(obj);
      obj = NULL;
    }
  }
  return obj;
}

/* Writes jansson's text with numbers and \u escapes as Python spells them
 * (see the top of this file). */
static void write_python_spelling(FILE *f, const char *t) {
  bool in_string = false;
  for (const char *p = t; *p != '\0';) {
    if (in_string) {
      if (*p == '\\' && p[1] == 'u') {
        fputs("\\u", f);
        p += 2;
        for (int k = 0; k < 4 && *p != '\0'; k++, p++)
          fputc(*p >= 'A' && *p <= 'F' ? *p - 'A' + 'a' : *p, f);
      } else if (*p == '\\' && p[1] != '\0') {
        fputc(p[0], f);
        fputc(p[1], f);
        p += 2;
      } else {
        if (*p == '"')
          in_string = false;
        if (*p == 0x7F)
          fputs("\\u007f", f);
        else
          fputc(*p, f);
        p++;
      }
      continue;
    }
    if (*p == '"') {
      in_string = true;
      fputc(*p++, f);
      continue;
    }
    if (*p == '-' || (*p >= '0' && *p <= '9')) {
      size_t n = strspn(p, "-+0123456789.eE");
      if (memchr(p, '.', n) != NULL || memchr(p, 'e', n) != NULL || memchr(p, 'E', n) != NULL) {
        char buf[32];
        packctl_format_double(strtod(p, NULL), buf, sizeof buf);
        fputs(buf, f);
      } else {
        fwrite(p, 1, n, f);
      }
      p += n;
      continue;
    }
    fputc(*p++, f);
  }
}

int packctl_write_json_value(FILE *f, const json_t *root) {
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER |
                                    JSON_REAL_PRECISION(17));
  if (text == NULL)
    return -1;
  write_python_spelling(f, text);
  fputc('\n', f);
  free(text);
  return ferror(f) ? -1 : 0;
}

int packctl_write_json(FILE *f, const ProtobufCMessage *msg) {
  json_t *root = json_of_message(msg);
  int rc = root != NULL ? packctl_write_json_value(f, root) : -1;
  json_decref(root);
  return rc;
}
