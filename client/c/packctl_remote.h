/* packctl remote mode: helpers shared by packctl_remote.c (plan --server,
 * rank-plan, health) and packctl_load.c (load). packctl.h declares the entry
 * points.
 *
 * Nothing here allocates memory for the caller. */
#ifndef PACKCTL_REMOTE_H
#define PACKCTL_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Connection security, shared by every subcommand that talks to a server:
 * --tls-ca, --tls-cert, --tls-key and --token-file (pk_client.h), with
 * $PACKD_TLS_CA, $PACKD_TLS_CLIENT_CERT, $PACKD_TLS_CLIENT_KEY and
 * $PACKD_TOKEN_FILE as fallbacks. A parser puts PACKCTL_CONN_OPTIONS in its
 * getopt_long table and hands every val from PACKCTL_OPT_CONN on to
 * packctl_conn_take; packctl_conn_apply copies what was given into the
 * options before pk_client_open. The values are kept by pointer (argv
 * outlives the command). */
#define PACKCTL_CONN_USAGE                                                                         \
  "  --tls-ca FILE                PEM CAs that verify the server's certificate: use TLS\n"         \
  "                               (default: $PACKD_TLS_CA)\n"                                      \
  "  --tls-cert FILE              PEM client certificate for mTLS\n"                               \
  "                               (default: $PACKD_TLS_CLIENT_CERT)\n"                             \
  "  --tls-key FILE               PEM key of --tls-cert (default: $PACKD_TLS_CLIENT_KEY)\n"        \
  "  --token-file FILE            send the file's first token as a bearer token\n"                 \
  "                               (default: $PACKD_TOKEN_FILE)\n"

/* The getopt_long vals of the four flags: PACKCTL_OPT_CONN + 0..3. */
#define PACKCTL_OPT_CONN 900
#define PACKCTL_N_CONN_OPTIONS 4
#define PACKCTL_CONN_OPTIONS                                                                       \
  {"tls-ca", required_argument, NULL, PACKCTL_OPT_CONN},                                           \
      {"tls-cert", required_argument, NULL, PACKCTL_OPT_CONN + 1},                                 \
      {"tls-key", required_argument, NULL, PACKCTL_OPT_CONN + 2}, {                                \
    "token-file", required_argument, NULL, PACKCTL_OPT_CONN + 3                                    \
  }

/* True when val is one of the four. */
static inline bool packctl_is_conn_option(int val) {
  return val >= PACKCTL_OPT_CONN && val < PACKCTL_OPT_CONN + PACKCTL_N_CONN_OPTIONS;
}

/* Stores the value of connection flag `val`. Returns 0, or -1 with a
 * message in err for a bad value. */
int packctl_conn_take(int val, const char *value, char *err, size_t errlen);

/* Copies the connection flags given so far, then the environment's, into
 * opts (which holds pk_client_options_default). */
struct pk_client_options;
void packctl_conn_apply(struct pk_client_options *opts);

/* The server address: `flag` when given, else $PACKD_TARGET, else
 * $PACKD_SERVER, else NULL. */
const char *packctl_server_address(const char *flag);

/* Parses a positive number of seconds (below 1e9). Returns 0 or -1. */
int packctl_parse_seconds(const char *text, double *out);

#endif
