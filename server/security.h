/* The security settings of the server as a whole: --tls-cert, --tls-key,
 * --tls-client-ca (tls.h), --auth-token-file (auth.h) and
 * --plan-id-secret-file (plan_id.h).
 *
 * pk_security_check runs when the configuration is loaded, so that a wrong
 * combination or a file that cannot be used is a configuration error (exit
 * status 2) naming the flag, before any port is opened. The files are read
 * again when the server starts (and the token file on SIGHUP). */
#ifndef PK_SECURITY_H
#define PK_SECURITY_H

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <stddef.h>

#include "config.h"
#include "plan_id.h"

/* Returns 0, or PK_EINVAL with a message in err that starts with the flag. */
int pk_security_check(const pk_server_config_t *cfg, char *err, size_t errlen);

/* What the gRPC server needs at run time: the listener's credentials, the
 * token set (NULL without --auth-token-file) and the plan id key. */
typedef struct pk_security pk_security_t;

/* Reads every file of cfg. Returns 0 and a new object in *out (free with
 * pk_security_close), or a negative pk_error code with a message in err. */
int pk_security_open(const pk_server_config_t *cfg, pk_security_t **out, char *err, size_t errlen);

/* New credentials for grpc_server_add_http2_port (the caller releases them);
 * NULL when out of memory. */
grpc_server_credentials *pk_security_credentials(pk_security_t *sec);

/* Returns 0 when a call with metadata md may go on, else PK_EINVAL and the
 * message for its UNAUTHENTICATED status in why. Every call needs a token
 * when there is a token file, except grpc.health.v1.Health/Check (pass
 * is_health), which probes and load balancers call without one. */
int pk_security_authorize(pk_security_t *sec, int is_health, const grpc_metadata_array *md,
                          char *why, size_t whylen);

/* Re-reads the token file (SIGHUP). Returns 0 with a line for the log in
 * msg, or a negative pk_error code and why in msg (the old tokens stay). */
int pk_security_reload(pk_security_t *sec, char *msg, size_t msglen);

/* The plan id key; never NULL. */
const pk_plan_id_key_t *pk_security_plan_id_key(const pk_security_t *sec);

/* NULL is allowed. */
void pk_security_close(pk_security_t *sec);

#endif
