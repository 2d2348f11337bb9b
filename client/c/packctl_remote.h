/* packctl remote mode: helpers shared by packctl_remote.c (plan --server,
 * rank-plan, health) and packctl_load.c (load). Owned by the client library
 * engineer; packctl.h declares the entry points.
 *
 * Nothing here allocates memory for the caller. */
#ifndef PACKCTL_REMOTE_H
#define PACKCTL_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Connection security, shared by every subcommand that talks to a server:
 * --tls-ca, --tls-cert, --tls-key and --token-file (pk_client.h), with
 * $PACKD_TLS_CA, $PACKD_TLS_CLIENT_CERT, $PACKD_TLS_CLIENT_KEY and $PACKD_TOKEN_FILE as
 * fallbacks. A parser calls packctl_conn_option for each flag it does not
 * know itself; packctl_conn_apply copies what was given into the options
 * before pk_client_open. The values are kept by pointer (argv outlives the
 * command). */
#define PACKCTL_CONN_USAGE                                                                         \
  "  --tls-ca FILE         PEM CAs that verify the server's certificate: use TLS\n"                \
  "                        (default: $PACKD_TLS_CA)\n"                                             \
  "  --tls-cert FILE       PEM client certificate for mTLS (default: $PACKD_TLS_CLIENT_CERT)\n"    \
  "  --tls-key FILE        PEM key of --tls-cert (default: $PACKD_TLS_CLIENT_KEY)\n"               \
  "  --token-file FILE     send the file's first token as a bearer token\n"                        \
  "                        (default: $PACKD_TOKEN_FILE)\n"

/* Returns 1 when name (without dashes) is a connection flag and was taken,
 * 0 when it is not one, -1 with a message in err for a bad value. */
int packctl_conn_option(const char *name, const char *value, char *err, size_t errlen);

/* True when name is a connection flag (for parsers that skip known flags). */
bool packctl_conn_is_option(const char *name);

/* Copies the connection flags given so far, then the environment's, into
 * opts (which holds pk_client_options_default). */
struct pk_client_options;
void packctl_conn_apply(struct pk_client_options *opts);

/* The server address: `flag` when given, else $PACKD_TARGET, else
 * $PACKD_SERVER, else NULL. */
const char *packctl_server_address(const char *flag);

/* Parses a positive number of seconds (below 1e9). Returns 0 or -1. */
int packctl_parse_seconds(const char *text, double *out);

/* Splits "--name=value" / "--name value" at argv[*i]: *name gets the name
 * without dashes (copied into name_buf), *value the value or NULL when the
 * flag has no "=" and `takes_value` is false. Advances *i past a consumed
 * value. Returns 0, or -1 when a value is needed and missing. */
int packctl_next_flag(int argc, char **argv, int *i, bool takes_value, char *name_buf,
                      size_t name_len, const char **value);

#endif
