/* TLS server credentials (see tls.h).
 *
 * The PEM files are read whole into memory (gRPC takes PEM strings), parsed
 * once by OpenSSL to check them, and handed to
 * grpc_ssl_server_credentials_create_ex. With --tls-client-ca the server asks
 * for a client certificate and refuses the handshake without a valid one
 * (GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY). */
#include "tls.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pk_error.h"

/* PEM files larger than this are not certificates or keys. */
#define PK_TLS_FILE_MAX (1 << 20)

/* Reads a whole file into a new NUL-terminated buffer (free with free()). */
static int read_pem(const char *flag, const char *path, char **out, char *err, size_t errlen) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    snprintf(err, errlen, "%s: cannot read \"%s\": %s", flag, path, strerror(errno));
    return PK_EINVAL;
  }
  char *buf = malloc(PK_TLS_FILE_MAX + 1);
  if (buf == NULL) {
    fclose(f);
    snprintf(err, errlen, "%s: out of memory reading \"%s\"", flag, path);
    return PK_ENOMEM;
  }
  size_t n = fread(buf, 1, PK_TLS_FILE_MAX + 1, f);
  int bad = ferror(f);
  fclose(f);
  if (bad || n > PK_TLS_FILE_MAX || n == 0) {
    snprintf(err, errlen, "%s: \"%s\" %s", flag, path,
             bad ? "cannot be read" : (n == 0 ? "is empty" : "is larger than 1 MiB"));
    free(buf);
    return PK_EINVAL;
  }
  buf[n] = '\0';
  *out = buf;
  return PK_OK;
}

/* The first OpenSSL error as text, or `fallback`. */
static const char *ssl_reason(char *buf, size_t len, const char *fallback) {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0)
    return fallback;
  ERR_error_string_n(e, buf, len);
  return buf;
}

/* Counts the certificates of a PEM text; 0 when there is none. */
static int count_certs(const char *pem) {
  BIO *bio = BIO_new_mem_buf(pem, -1);
  if (bio == NULL)
    return 0;
  int n = 0;
  X509 *x;
  while ((x = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL) {
    X509_free(x);
    n++;
  }
  BIO_free(bio);
  ERR_clear_error(); /* The read that ended the loop failed on purpose. */
  return n;
}

/* Parses the certificate and key and checks that they belong together. */
static int check_pair(const pk_server_config_t *cfg, const char *cert_pem, const char *key_pem,
                      char *err, size_t errlen) {
  char why[256];
  int rc = PK_EINVAL;
  BIO *cb = BIO_new_mem_buf(cert_pem, -1);
  BIO *kb = BIO_new_mem_buf(key_pem, -1);
  X509 *cert = cb ? PEM_read_bio_X509(cb, NULL, NULL, NULL) : NULL;
  EVP_PKEY *key = kb ? PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL) : NULL;
  if (cert == NULL)
    snprintf(err, errlen, "--tls-cert: \"%s\" holds no PEM certificate (%s)", cfg->tls_cert,
             ssl_reason(why, sizeof why, "no BEGIN CERTIFICATE block"));
  else if (key == NULL)
    snprintf(err, errlen, "--tls-key: \"%s\" holds no unencrypted PEM private key (%s)",
             cfg->tls_key, ssl_reason(why, sizeof why, "no BEGIN PRIVATE KEY block"));
  else if (X509_check_private_key(cert, key) != 1)
    snprintf(err, errlen,
             "--tls-key: the key in \"%s\" does not belong to the certificate in \"%s\"",
             cfg->tls_key, cfg->tls_cert);
  else
    rc = PK_OK;
  ERR_clear_error();
  X509_free(cert);
  EVP_PKEY_free(key);
  BIO_free(cb);
  BIO_free(kb);
  return rc;
}

/* Reads and checks the files; on success the caller owns the three texts
 * (client_ca stays NULL without --tls-client-ca). */
static int load(const pk_server_config_t *cfg, char **cert, char **key, char **client_ca, char *err,
                size_t errlen) {
  *cert = *key = *client_ca = NULL;
  bool has_cert = cfg->tls_cert[0] != '\0', has_key = cfg->tls_key[0] != '\0';
  if (has_cert != has_key) {
    snprintf(err, errlen, "%s is set but %s is not: TLS needs both the certificate and its key",
             has_cert ? "--tls-cert" : "--tls-key", has_cert ? "--tls-key" : "--tls-cert");
    return PK_EINVAL;
  }
  if (cfg->tls_client_ca[0] != '\0' && !has_cert) {
    snprintf(err, errlen,
             "--tls-client-ca is set but --tls-cert and --tls-key are not: client certificates "
             "are only checked over TLS");
    return PK_EINVAL;
  }
  if (!has_cert)
    return PK_OK;
  int rc = read_pem("--tls-cert", cfg->tls_cert, cert, err, errlen);
  if (rc == PK_OK)
    rc = read_pem("--tls-key", cfg->tls_key, key, err, errlen);
  if (rc == PK_OK)
    rc = check_pair(cfg, *cert, *key, err, errlen);
  if (rc == PK_OK && cfg->tls_client_ca[0] != '\0') {
    rc = read_pem("--tls-client-ca", cfg->tls_client_ca, client_ca, err, errlen);
    if (rc == PK_OK && count_certs(*client_ca) == 0) {
      snprintf(err, errlen, "--tls-client-ca: \"%s\" holds no PEM certificate", cfg->tls_client_ca);
      rc = PK_EINVAL;
    }
  }
  if (rc != PK_OK) {
    free(*cert);
    if (*key != NULL)
      OPENSSL_cleanse(*key, strlen(*key));
    free(*key);
    free(*client_ca);
    *cert = *key = *client_ca = NULL;
  }
  return rc;
}

int pk_tls_check(const pk_server_config_t *cfg, char *err, size_t errlen) {
  char *cert, *key, *ca;
  int rc = load(cfg, &cert, &key, &ca, err, errlen);
  if (rc == PK_OK) {
    free(cert);
    if (key != NULL)
      OPENSSL_cleanse(key, strlen(key));
    free(key);
    free(ca);
  }
  return rc;
}

int pk_tls_server_credentials(const pk_server_config_t *cfg, grpc_server_credentials **out,
                              char *err, size_t errlen) {
  *out = NULL;
  char *cert, *key, *ca;
  int rc = load(cfg, &cert, &key, &ca, err, errlen);
  if (rc != PK_OK)
    return rc;
  if (cert == NULL) {
    *out = grpc_insecure_server_credentials_create();
  } else {
    grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
    grpc_ssl_client_certificate_request_type req =
        ca != NULL ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                   : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
    /* gRPC copies the PEM texts. */
    *out = grpc_ssl_server_credentials_create_ex(ca, &pair, 1, req, NULL);
    free(cert);
    OPENSSL_cleanse(key, strlen(key));
    free(key);
    free(ca);
  }
  if (*out == NULL) {
    snprintf(err, errlen, "cannot create the gRPC server credentials");
    return PK_ENOMEM;
  }
  return PK_OK;
}
