/* Keyed plan ids (see plan_id.h).
 *
 * The secret (from the file, or 32 random bytes) is digested with SHA-256
 * into the 32-byte HMAC key, so secrets of any length give a key of one size
 * and the file's bytes are not kept. An HMAC context initialised with the
 * key is kept in the key object; each id duplicates it, feeds the canonical
 * request bytes through a small fixed buffer (no allocation sized by the
 * request) and finalises. The prepared context is only read after start-up,
 * so many worker threads may duplicate it at once. */
#include "plan_id.h"

#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "pk_error.h"

struct pk_plan_id_key {
  EVP_MAC *mac;
  EVP_MAC_CTX *prepared; /* Initialised with the key; duplicated per id. */
};

/* Reads the secret of `path` into buf; *len gets its length after trimming
 * trailing whitespace. */
static int read_secret(const char *path, unsigned char *buf, size_t cap, size_t *len, char *err,
                       size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    snprintf(err, errlen, "cannot read \"%s\": %s", path, strerror(errno));
    return PK_EINVAL;
  }
  size_t n = fread(buf, 1, cap, f);
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    snprintf(err, errlen, "cannot read \"%s\"", path);
    return PK_EINVAL;
  }
  if (n == cap) {
    snprintf(err, errlen,
             "\"%s\" is larger than %d bytes; 32 random bytes are enough (openssl rand -hex 32)",
             path, PK_PLAN_ID_SECRET_MAX);
    return PK_EINVAL;
  }
  while (n > 0 &&
         (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
    n--;
  if (n < PK_PLAN_ID_SECRET_MIN) {
    snprintf(err, errlen,
             "\"%s\" holds %zu bytes; a plan id secret needs at least %d (e.g. openssl rand "
             "-hex 32)",
             path, n, PK_PLAN_ID_SECRET_MIN);
    return PK_EINVAL;
  }
  *len = n;
  return PK_OK;
}

int pk_plan_id_check_file(const char *path, char *err, size_t errlen) {
  unsigned char buf[PK_PLAN_ID_SECRET_MAX + 1];
  size_t len;
  int rc = read_secret(path, buf, sizeof buf, &len, err, errlen);
  OPENSSL_cleanse(buf, sizeof buf);
  return rc;
}

int pk_plan_id_key_create(const char *path, pk_plan_id_key_t **out, char *err, size_t errlen) {
  *out = NULL;
  unsigned char secret[PK_PLAN_ID_SECRET_MAX + 1];
  size_t len = 32;
  int from_file = path != NULL && path[0] != '\0';
  int rc = PK_OK;
  if (from_file) {
    rc = read_secret(path, secret, sizeof secret, &len, err, errlen);
  } else if (RAND_bytes(secret, (int)len) != 1) {
    snprintf(err, errlen, "the system's random source gave no bytes for the plan id key");
    rc = PK_EINTERNAL;
  }
  unsigned char key[SHA256_DIGEST_LENGTH];
  if (rc == PK_OK)
    SHA256(secret, len, key);
  OPENSSL_cleanse(secret, sizeof secret);
  if (rc != PK_OK)
    return rc;

  pk_plan_id_key_t *k = calloc(1, sizeof *k);
  if (k == NULL) {
    OPENSSL_cleanse(key, sizeof key);
    snprintf(err, errlen, "out of memory");
    return PK_ENOMEM;
  }
  k->mac = EVP_MAC_fetch(NULL, OSSL_MAC_NAME_HMAC, NULL);
  k->prepared = k->mac != NULL ? EVP_MAC_CTX_new(k->mac) : NULL;
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
      OSSL_PARAM_construct_end(),
  };
  if (k->prepared == NULL || EVP_MAC_init(k->prepared, key, sizeof key, params) != 1) {
    OPENSSL_cleanse(key, sizeof key);
    pk_plan_id_key_destroy(k);
    snprintf(err, errlen, "OpenSSL has no HMAC-SHA256 for the plan id key");
    return PK_EINTERNAL;
  }
  OPENSSL_cleanse(key, sizeof key);
  *out = k;
  return PK_OK;
}

/* A protobuf-c output buffer that feeds the packed bytes into the MAC. */
typedef struct mac_sink {
  ProtobufCBuffer base;
  EVP_MAC_CTX *ctx;
  int failed;
  size_t used;
  uint8_t buf[4096];
} mac_sink_t;

static void mac_flush(mac_sink_t *s) {
  if (s->used > 0 && EVP_MAC_update(s->ctx, s->buf, s->used) != 1)
    s->failed = 1;
  s->used = 0;
}

static void mac_append(ProtobufCBuffer *base, size_t len, const uint8_t *data) {
  mac_sink_t *s = (mac_sink_t *)base;
  if (len >= sizeof s->buf) {
    mac_flush(s);
    if (EVP_MAC_update(s->ctx, data, len) != 1)
      s->failed = 1;
    return;
  }
  if (s->used + len > sizeof s->buf)
    mac_flush(s);
  memcpy(s->buf + s->used, data, len);
  s->used += len;
}

void pk_plan_id_keyed(const pk_plan_id_key_t *key, const Packd__V1__PlanRequest *msg, char *id,
                      size_t idlen) {
  if (idlen == 0)
    return;
  id[0] = '\0';
  if (idlen < PK_PLAN_ID_LEN)
    return;
  mac_sink_t sink;
  sink.base.append = mac_append;
  sink.ctx = EVP_MAC_CTX_dup(key->prepared);
  sink.failed = sink.ctx == NULL;
  sink.used = 0;
  unsigned char mac[EVP_MAX_MD_SIZE];
  size_t maclen = 0;
  if (!sink.failed) {
    pk_codec_plan_id_pack(msg, &sink.base);
    mac_flush(&sink);
    if (!sink.failed && EVP_MAC_final(sink.ctx, mac, &maclen, sizeof mac) != 1)
      sink.failed = 1;
  }
  EVP_MAC_CTX_free(sink.ctx);
  if (sink.failed || maclen < 16)
    return;
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < 16; i++) {
    id[2 * i] = hex[mac[i] >> 4];
    id[2 * i + 1] = hex[mac[i] & 15];
  }
  id[32] = '\0';
}

void pk_plan_id_for(const pk_plan_id_key_t *key, const Packd__V1__PlanRequest *msg, char *id,
                    size_t idlen) {
  if (key != NULL)
    pk_plan_id_keyed(key, msg, id, idlen);
  else
    pk_codec_plan_id(msg, id, idlen);
}

void pk_plan_id_key_destroy(pk_plan_id_key_t *key) {
  if (key == NULL)
    return;
  EVP_MAC_CTX_free(key->prepared);
  EVP_MAC_free(key->mac);
  free(key);
}
