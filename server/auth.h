/* Bearer-token authentication of gRPC calls (--auth-token-file).
 *
 * The token file holds the accepted tokens, one a line; blank lines and
 * lines starting with '#' are skipped and the ends of each line are trimmed.
 * Several lines are several accepted tokens, which is how tokens rotate
 * without a gap: add the new token, send SIGHUP, move the clients over,
 * remove the old token, send SIGHUP again.
 *
 * A call is accepted when its metadata carries "authorization: Bearer
 * <token>" for one of the tokens. The comparison takes the same time
 * whichever token matches and however much of a wrong token is right: each
 * token is kept as its SHA-256 digest, the presented token is digested too,
 * and every digest is compared in full with a constant-time comparison.
 *
 * The file is read again on pk_auth_reload (SIGHUP) and when it changes:
 * calls notice a new device, inode, size or modification time of the file
 * at most once every PK_AUTH_CHECK_INTERVAL seconds. Replace the file by
 * renaming a complete new one over it (as a Kubernetes Secret volume does),
 * so that no check reads it half written.
 *
 * Threads: pk_auth_check runs on any worker thread while pk_auth_reload runs
 * on the controlling thread; a read-write lock guards the token set, and a
 * reload that fails keeps the tokens already loaded. */
#ifndef PK_AUTH_H
#define PK_AUTH_H

#include <grpc/grpc.h>
#include <stddef.h>

#define PK_AUTH_MAX_TOKENS 64
#define PK_AUTH_MAX_TOKEN_LEN 4096
/* Seconds between two looks at the file's stat stamp. */
#define PK_AUTH_CHECK_INTERVAL 1.0

typedef struct pk_auth pk_auth_t;

/* Reads the token file and counts its tokens without keeping them. Returns
 * 0 and the count in *ntokens, or PK_EINVAL with a message in err (the file
 * cannot be read, holds no token, a token has spaces or control characters,
 * is longer than PK_AUTH_MAX_TOKEN_LEN, or there are more than
 * PK_AUTH_MAX_TOKENS). */
int pk_auth_check_file(const char *path, int *ntokens, char *err, size_t errlen);

/* Loads the tokens of `path` into a new authenticator (free it with
 * pk_auth_destroy). Returns 0, PK_EINVAL (as pk_auth_check_file) or
 * PK_ENOMEM, with a message in err. */
int pk_auth_create(const char *path, pk_auth_t **out, char *err, size_t errlen);

/* Reads the file again and replaces the tokens; on failure the old tokens
 * stay and err says why. *ntokens gets the new count on success. */
int pk_auth_reload(pk_auth_t *a, int *ntokens, char *err, size_t errlen);

/* Returns 0 when md carries an accepted bearer token, else PK_EINVAL with a
 * message for the client in why (which never repeats the token). */
int pk_auth_check(pk_auth_t *a, const grpc_metadata_array *md, char *why, size_t whylen);

/* Changes the interval between looks at the file (tests use 0: every call
 * looks). */
void pk_auth_set_check_interval(pk_auth_t *a, double seconds);

/* NULL is allowed. */
void pk_auth_destroy(pk_auth_t *a);

#endif
