/* What packd writes to and reads from a shared plan store, with no I/O: the
 * store URL, the key of a plan and the envelope around each rank's bytes.
 *
 * Why an envelope. A Redis-protocol store is shared by every replica and
 * anyone with its password can write to it; a value may also be cut short,
 * copied under another key, or left behind by another packd version. A
 * GetRankPlan answer must never be another plan's rank or a damaged one, so
 * every value names the plan id, the rank, the rank count and the packd
 * version that wrote it, and carries an XXH3-64 checksum over all of that and
 * the RankPlan bytes. A reader verifies each field against what it asked for
 * and refuses the value on any difference (pk_store_envelope_open).
 *
 * Envelope layout, integers little-endian:
 *
 *   offset  size  field
 *        0     4  magic "PKRP"
 *        4     1  format, 1
 *        5     1  V: length of the packd version string, 0 to 31
 *        6     2  L: length of the plan id, 1 to PK_STORE_ID_MAX
 *        8     4  rank
 *       12     4  rank count of the plan
 *       16     8  P: length of the RankPlan bytes
 *       24     8  XXH3-64 of bytes [0, 24) followed by bytes [32, end)
 *       32     L  plan id
 *     32+L     V  packd version
 *   32+L+V     P  the packed packd.v1.RankPlan
 *
 * The URL grammar is redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]: HOST a name,
 * an IPv4 address or [IPv6], PORT 1 to 65535 (default 6379), DB 0 or more
 * (default 0); USER and PASSWORD may use %XX escapes. rediss:// (TLS) is
 * refused: Debian 12's hiredis 0.14 has no TLS support (hiredis_ssl came with
 * hiredis 1.0). */
#ifndef PK_STORE_FORMAT_H
#define PK_STORE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define PK_STORE_URL_MAX 1024
#define PK_STORE_HOST_MAX 256
#define PK_STORE_SECRET_MAX 512
#define PK_STORE_PREFIX_MAX 64
#define PK_STORE_ID_MAX 64
#define PK_STORE_VERSION_MAX 31
#define PK_STORE_HEADER_BYTES 32
#define PK_STORE_DEFAULT_PORT 6379

typedef struct pk_store_url {
  char host[PK_STORE_HOST_MAX]; /* Without the brackets of an IPv6 address. */
  int port;
  int db;
  char user[PK_STORE_SECRET_MAX];     /* Empty: the default user. */
  char password[PK_STORE_SECRET_MAX]; /* Empty: no AUTH. */
  int has_password;
} pk_store_url_t;

/* Parses a store URL. Returns 0, or PK_EINVAL with a message in err that
 * quotes the URL with any password masked and says what is wrong. */
int pk_store_url_parse(const char *url, pk_store_url_t *out, char *err, size_t errlen);

/* "redis://HOST:PORT/DB", never the user or password: for logs, metrics
 * and status messages. */
void pk_store_url_describe(const pk_store_url_t *u, char *buf, size_t len);

/* Copies url into buf with the password replaced by "***". */
void pk_store_url_mask(const char *url, char *buf, size_t len);

/* Checks a key prefix: 1 to PK_STORE_PREFIX_MAX - 1 printable ASCII
 * characters without spaces. Returns 0 or PK_EINVAL. */
int pk_store_prefix_check(const char *prefix);

/* Reads a password file: its first line without the line end. Returns 0,
 * or PK_EINVAL with a message naming the path (unreadable, empty, too
 * long). */
int pk_store_read_password_file(const char *path, char *out, size_t outlen, char *err,
                                size_t errlen);

/* The key of a plan's hash: prefix followed by the plan id. Returns the
 * length, or 0 when it does not fit in len. */
size_t pk_store_key(char *buf, size_t len, const char *prefix, const char *plan_id);

/* Bytes of the envelope around a payload of payload_len bytes. */
size_t pk_store_envelope_size(const char *plan_id, const char *version, size_t payload_len);

/* Writes the envelope of one rank into out, which holds
 * pk_store_envelope_size(...) bytes. plan_id is 1 to PK_STORE_ID_MAX
 * characters, version at most PK_STORE_VERSION_MAX. Returns the bytes
 * written, or 0 for arguments out of range. */
size_t pk_store_envelope_write(uint8_t *out, const char *plan_id, const char *version,
                               uint32_t rank, uint32_t nranks, const uint8_t *payload,
                               size_t payload_len);

/* What a verified envelope says. */
typedef struct pk_store_envelope {
  uint32_t rank;
  uint32_t nranks;
  const uint8_t *payload; /* Points into the value. */
  size_t payload_len;
  char version[PK_STORE_VERSION_MAX + 1];
} pk_store_envelope_t;

/* Verifies a value read for plan_id: size, magic, format, checksum, and
 * that it names plan_id. It does not compare the rank or the version (the
 * caller knows which it wants). Returns 0 and fills *env, or -1 with the
 * reason in why ("checksum mismatch", "names plan X", ...). */
int pk_store_envelope_open(const uint8_t *value, size_t len, const char *plan_id,
                           pk_store_envelope_t *env, char *why, size_t whylen);

#endif
