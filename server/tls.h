/* Transport security of the gRPC listener: TLS with --tls-cert and
 * --tls-key, and mutual TLS with --tls-client-ca (clients must present a
 * certificate signed by one of those CAs, verified in full).
 *
 * The files are checked with OpenSSL before gRPC sees them, so a wrong file
 * is a start-up error that names the flag and says what is wrong with it
 * (gRPC itself would only fail to bind the port). */
#ifndef PK_TLS_H
#define PK_TLS_H

#include <grpc/grpc_security.h>
#include <stddef.h>

#include "config.h"

/* Checks the TLS settings of cfg: --tls-cert and --tls-key come together,
 * --tls-client-ca needs them, every file is readable PEM, and the key
 * belongs to the certificate. Returns 0 or PK_EINVAL with a message in err
 * that starts with the flag. */
int pk_tls_check(const pk_server_config_t *cfg, char *err, size_t errlen);

/* The server credentials cfg asks for: TLS (and client certificate
 * verification) when --tls-cert is set, insecure otherwise. Returns 0 and
 * new credentials in *out (release with grpc_server_credentials_release), or
 * PK_EINVAL / PK_ENOMEM with a message in err. */
int pk_tls_server_credentials(const pk_server_config_t *cfg, grpc_server_credentials **out,
                              char *err, size_t errlen);

#endif
