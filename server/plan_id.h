/* Keyed plan ids: the id a server gives a plan is a MAC of the request under
 * a secret key, so that knowing a batch is not enough to name (and read) its
 * plan; only a client that received the id from Plan can ask GetRankPlan.
 *
 * The id is HMAC-SHA256(key, canonical request bytes) truncated to 128 bits
 * and written as 32 lowercase hex characters: the same length and alphabet
 * as the unkeyed pk_codec_plan_id, and over the same canonical bytes, so the
 * same request still gets the same id from the same key (plans stay
 * idempotent and cached), while another key gives an unrelated id.
 *
 * The key comes from --plan-id-secret-file (every replica that shares a plan
 * store must be given the same file, or GetRankPlan on one replica cannot
 * find the ids another made) or, without it, from the system's random
 * source at start-up (ids then change when the process restarts, which only
 * matters with a shared plan store). */
#ifndef PK_PLAN_ID_H
#define PK_PLAN_ID_H

#include <stddef.h>

#include "packd/v1/packd.pb-c.h"

/* Secrets shorter than this are refused: a guessable secret gives guessable
 * ids. */
#define PK_PLAN_ID_SECRET_MIN 16
#define PK_PLAN_ID_SECRET_MAX 4096
/* 32 hex characters and the NUL. */
#define PK_PLAN_ID_LEN 33

typedef struct pk_plan_id_key pk_plan_id_key_t;

/* Checks a secret file: readable, and after trimming whitespace at its end
 * PK_PLAN_ID_SECRET_MIN to PK_PLAN_ID_SECRET_MAX bytes. Returns 0 or
 * PK_EINVAL with a message in err naming the file. */
int pk_plan_id_check_file(const char *path, char *err, size_t errlen);

/* A key from the secret in `path`, or a random one when path is NULL or "".
 * Returns 0 and a new key in *out (free with pk_plan_id_key_destroy), or a
 * negative pk_error code with a message in err. */
int pk_plan_id_key_create(const char *path, pk_plan_id_key_t **out, char *err, size_t errlen);

/* Writes the keyed id of msg into id (idlen >= PK_PLAN_ID_LEN). Safe to call
 * from several threads with one key. On an internal failure of the MAC (out
 * of memory) writes "" so that the caller answers an error instead of a
 * guessable id. */
void pk_plan_id_keyed(const pk_plan_id_key_t *key, const Packd__V1__PlanRequest *msg, char *id,
                      size_t idlen);

/* pk_plan_id_keyed with key, or the unkeyed pk_codec_plan_id when key is
 * NULL (handler unit tests run without a key). */
void pk_plan_id_for(const pk_plan_id_key_t *key, const Packd__V1__PlanRequest *msg, char *id,
                    size_t idlen);

/* NULL is allowed. */
void pk_plan_id_key_destroy(pk_plan_id_key_t *key);

#endif
