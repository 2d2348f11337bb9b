/* The plan store's URL, keys and value envelope (see store_format.h). Pure
 * functions: no I/O but the password file, no globals, no allocation. */
#include "store_format.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
/* XXH3_state_t is a complete type only with XXH_STATIC_LINKING_ONLY; the
 * state lives on the stack and is used with the same library version. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "pk_error.h"

static const uint8_t k_magic[4] = {'P', 'K', 'R', 'P'};
#define FORMAT_VERSION 1

void pk_store_url_mask(const char *url, char *buf, size_t len) {
  if (len == 0)
    return;
  const char *rest = strstr(url, "://");
  const char *at = rest ? strrchr(rest + 3, '@') : NULL;
  if (at == NULL) {
    snprintf(buf, len, "%s", url);
    return;
  }
  rest += 3;
  const char *colon = memchr(rest, ':', (size_t)(at - rest));
  /* Keep the user name, hide the password (all of the user info when it
   * has no colon: it may be a password given without one). */
  size_t keep = colon ? (size_t)(colon - url) + 1 : (size_t)(rest - url);
  snprintf(buf, len, "%.*s***%s", (int)keep, url, at);
}

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* Decodes %XX escapes of s[0, n) into out. Returns 0, or -1 for a bad
 * escape, a NUL byte, or an output that does not fit. */
static int percent_decode(const char *s, size_t n, char *out, size_t outlen) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= n)
        return -1;
      int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
      if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
        return -1;
      c = (char)(hi * 16 + lo);
      i += 2;
    }
    if (o + 1 >= outlen)
      return -1;
    out[o++] = c;
  }
  out[o] = '\0';
  return 0;
}

static int parse_uint(const char *s, size_t n, long max, long *out) {
  if (n == 0 || n > 10)
    return -1;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -1;
    v = v * 10 + (s[i] - '0');
  }
  if (v > max)
    return -1;
  *out = v;
  return 0;
}

static int host_char_ok(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

int pk_store_url_parse(const char *url, pk_store_url_t *out, char *err, size_t errlen) {
  char shown[PK_STORE_URL_MAX + 8];
  memset(out, 0, sizeof *out);
  if (url == NULL || url[0] == '\0') {
    snprintf(err, errlen, "is empty; expected redis://[:PASSWORD@]HOST:PORT[/DB]");
    return PK_EINVAL;
  }
  pk_store_url_mask(url, shown, sizeof shown);
  if (strlen(url) >= PK_STORE_URL_MAX) {
    snprintf(err, errlen, "is longer than %d characters", PK_STORE_URL_MAX - 1);
    return PK_EINVAL;
  }
  if (strncmp(url, "rediss://", 9) == 0) {
    snprintf(err, errlen,
             "\"%.200s\": rediss:// (TLS) is not supported: this packd links Debian 12's hiredis "
             "0.14, which has no TLS (hiredis_ssl came with hiredis 1.0); use redis:// on a "
             "network you trust, or a TLS tunnel (a service-mesh sidecar or stunnel) that "
             "packd reaches as redis://127.0.0.1:PORT",
             shown);
    return PK_EINVAL;
  }
  if (strncmp(url, "redis://", 8) != 0) {
    snprintf(err, errlen,
             "\"%.200s\" is not a redis:// URL; expected redis://[:PASSWORD@]HOST:PORT[/DB]",
             shown);
    return PK_EINVAL;
  }
  const char *rest = url + 8;
  const char *at = strrchr(rest, '@');
  const char *hp = rest;
  if (at != NULL) {
    /* The last '@' ends the user info, so a password may hold '@' and '/'. */
    const char *colon = memchr(rest, ':', (size_t)(at - rest));
    if (colon == NULL) {
      snprintf(err, errlen, "\"%.200s\": the user info must be :PASSWORD@ or USER:PASSWORD@",
               shown);
      return PK_EINVAL;
    }
    if (percent_decode(rest, (size_t)(colon - rest), out->user, sizeof out->user) != 0 ||
        percent_decode(colon + 1, (size_t)(at - colon - 1), out->password, sizeof out->password) !=
            0) {
      snprintf(err, errlen,
               "\"%.200s\": the user or password has a bad %%XX escape or is longer than %d "
               "bytes",
               shown, PK_STORE_SECRET_MAX - 1);
      return PK_EINVAL;
    }
    if (out->password[0] == '\0') {
      snprintf(err, errlen, "\"%.200s\": the password after ':' is empty", shown);
      return PK_EINVAL;
    }
    out->has_password = 1;
    hp = at + 1;
  }
  const char *h = hp, *hend;
  const char *p;
  if (*hp == '[') {
    h = hp + 1;
    hend = strchr(h, ']');
    if (hend == NULL) {
      snprintf(err, errlen, "\"%.200s\": the IPv6 address has no closing ']'", shown);
      return PK_EINVAL;
    }
    for (const char *c = h; c < hend; c++)
      if (hexval(*c) < 0 && *c != ':' && *c != '.') {
        snprintf(err, errlen, "\"%.200s\": \"%.*s\" is not an IPv6 address", shown, (int)(hend - h),
                 h);
        return PK_EINVAL;
      }
    p = hend + 1;
  } else {
    hend = h;
    while (*hend != '\0' && *hend != ':' && *hend != '/') {
      if (!host_char_ok(*hend)) {
        snprintf(err, errlen, "\"%.200s\": the host has a '%c'; expected a name or an address",
                 shown, *hend);
        return PK_EINVAL;
      }
      hend++;
    }
    p = hend;
  }
  size_t hl = (size_t)(hend - h);
  if (hl == 0 || hl >= sizeof out->host) {
    snprintf(err, errlen, "\"%.200s\": the host is %s", shown, hl == 0 ? "empty" : "too long");
    return PK_EINVAL;
  }
  memcpy(out->host, h, hl);
  out->host[hl] = '\0';
  out->port = PK_STORE_DEFAULT_PORT;
  if (*p == ':') {
    const char *pe = p + 1;
    while (*pe != '\0' && *pe != '/')
      pe++;
    long port;
    if (parse_uint(p + 1, (size_t)(pe - p - 1), 65535, &port) != 0 || port == 0) {
      snprintf(err, errlen, "\"%.200s\": the port \"%.*s\" is not a number from 1 to 65535", shown,
               (int)(pe - p - 1), p + 1);
      return PK_EINVAL;
    }
    out->port = (int)port;
    p = pe;
  } else if (*p != '\0' && *p != '/') {
    snprintf(err, errlen, "\"%.200s\": expected ':PORT' or '/DB' after the host", shown);
    return PK_EINVAL;
  }
  if (*p == '/') {
    p++;
    size_t n = strlen(p);
    long db = 0;
    if (n > 0 && parse_uint(p, n, 2147483647L, &db) != 0) {
      snprintf(err, errlen,
               "\"%.200s\": the database \"%.40s\" is not a number >= 0 (query parameters are "
               "not supported)",
               shown, p);
      return PK_EINVAL;
    }
    out->db = (int)db;
  }
  return PK_OK;
}

void pk_store_url_describe(const pk_store_url_t *u, char *buf, size_t len) {
  int v6 = strchr(u->host, ':') != NULL;
  snprintf(buf, len, "redis://%s%s%s:%d/%d", v6 ? "[" : "", u->host, v6 ? "]" : "", u->port, u->db);
}

int pk_store_prefix_check(const char *prefix) {
  size_t n = strlen(prefix);
  if (n == 0 || n >= PK_STORE_PREFIX_MAX)
    return PK_EINVAL;
  for (size_t i = 0; i < n; i++)
    if (prefix[i] <= ' ' || prefix[i] > '~')
      return PK_EINVAL;
  return PK_OK;
}

int pk_store_read_password_file(const char *path, char *out, size_t outlen, char *err,
                                size_t errlen) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    snprintf(err, errlen, "cannot read the password file \"%.200s\": %s", path, strerror(errno));
    return PK_EINVAL;
  }
  char buf[PK_STORE_SECRET_MAX + 2];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  int failed = ferror(f);
  fclose(f);
  if (failed) {
    snprintf(err, errlen, "cannot read the password file \"%.200s\"", path);
    return PK_EINVAL;
  }
  buf[n] = '\0';
  /* The first line is the password; Secrets mounted as files often have no
   * line end, files written by editors have one. */
  size_t line = strcspn(buf, "\r\n");
  if (line == n && n == sizeof buf - 1) {
    snprintf(err, errlen, "the password in \"%.200s\" is longer than %d bytes", path,
             PK_STORE_SECRET_MAX - 1);
    return PK_EINVAL;
  }
  if (line == 0) {
    snprintf(err, errlen, "the password file \"%.200s\" is empty", path);
    return PK_EINVAL;
  }
  if (memchr(buf, '\0', line) != NULL || line >= outlen) {
    snprintf(err, errlen, "the password in \"%.200s\" has a NUL byte or is too long", path);
    return PK_EINVAL;
  }
  memcpy(out, buf, line);
  out[line] = '\0';
  return PK_OK;
}

size_t pk_store_key(char *buf, size_t len, const char *prefix, const char *plan_id) {
  int n = snprintf(buf, len, "%s%s", prefix, plan_id);
  return n < 0 || (size_t)n >= len ? 0 : (size_t)n;
}

size_t pk_store_envelope_size(const char *plan_id, const char *version, size_t payload_len) {
  return PK_STORE_HEADER_BYTES + strlen(plan_id) + strlen(version) + payload_len;
}

static void put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get_u16(const uint8_t *p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

/* The checksum covers the header without its own field and everything
 * after it, so a change of any byte but the checksum's changes it. */
static uint64_t checksum(const uint8_t *value, size_t len) {
  XXH3_state_t st;
  (void)XXH3_64bits_reset(&st);
  (void)XXH3_64bits_update(&st, value, 24);
  (void)XXH3_64bits_update(&st, value + PK_STORE_HEADER_BYTES, len - PK_STORE_HEADER_BYTES);
  return XXH3_64bits_digest(&st);
}

size_t pk_store_envelope_write(uint8_t *out, const char *plan_id, const char *version,
                               uint32_t rank, uint32_t nranks, const uint8_t *payload,
                               size_t payload_len) {
  size_t idl = strlen(plan_id), vl = strlen(version);
  if (idl == 0 || idl > PK_STORE_ID_MAX || vl > PK_STORE_VERSION_MAX || rank >= nranks)
    return 0;
  memcpy(out, k_magic, 4);
  out[4] = FORMAT_VERSION;
  out[5] = (uint8_t)vl;
  put_u16(out + 6, (uint16_t)idl);
  put_u32(out + 8, rank);
  put_u32(out + 12, nranks);
  put_u64(out + 16, (uint64_t)payload_len);
  memcpy(out + PK_STORE_HEADER_BYTES, plan_id, idl);
  memcpy(out + PK_STORE_HEADER_BYTES + idl, version, vl);
  if (payload_len > 0)
    memcpy(out + PK_STORE_HEADER_BYTES + idl + vl, payload, payload_len);
  size_t len = PK_STORE_HEADER_BYTES + idl + vl + payload_len;
  put_u64(out + 24, checksum(out, len));
  return len;
}

int pk_store_envelope_open(const uint8_t *value, size_t len, const char *plan_id,
                           pk_store_envelope_t *env, char *why, size_t whylen) {
  if (len < PK_STORE_HEADER_BYTES) {
    snprintf(why, whylen, "%zu bytes, shorter than the %d-byte header", len, PK_STORE_HEADER_BYTES);
    return -1;
  }
  if (memcmp(value, k_magic, 4) != 0) {
    snprintf(why, whylen, "not a packd rank plan (bad magic)");
    return -1;
  }
  if (value[4] != FORMAT_VERSION) {
    snprintf(why, whylen, "envelope format %u, this server reads format %d", value[4],
             FORMAT_VERSION);
    return -1;
  }
  size_t vl = value[5], idl = get_u16(value + 6);
  uint64_t pl = get_u64(value + 16);
  if (vl > PK_STORE_VERSION_MAX || idl == 0 || idl > PK_STORE_ID_MAX ||
      len < PK_STORE_HEADER_BYTES + idl + vl ||
      pl != (uint64_t)(len - PK_STORE_HEADER_BYTES - idl - vl)) {
    snprintf(why, whylen, "%zu bytes do not match the lengths in the header", len);
    return -1;
  }
  if (get_u64(value + 24) != checksum(value, len)) {
    snprintf(why, whylen, "checksum mismatch");
    return -1;
  }
  const char *id = (const char *)value + PK_STORE_HEADER_BYTES;
  if (strlen(plan_id) != idl || memcmp(id, plan_id, idl) != 0) {
    snprintf(why, whylen, "names plan \"%.*s\"", (int)idl, id);
    return -1;
  }
  env->rank = get_u32(value + 8);
  env->nranks = get_u32(value + 12);
  if (env->rank >= env->nranks) {
    snprintf(why, whylen, "rank %u of %u ranks", env->rank, env->nranks);
    return -1;
  }
  memcpy(env->version, id + idl, vl);
  env->version[vl] = '\0';
  env->payload = value + PK_STORE_HEADER_BYTES + idl + vl;
  env->payload_len = (size_t)pl;
  return 0;
}
