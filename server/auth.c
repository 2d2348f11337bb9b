/* Bearer-token authentication (see auth.h).
 *
 * The token set is a small array of SHA-256 digests. Keeping digests, not
 * the tokens, gives every comparison the same length (so a wrong token of
 * another length takes as long as one of the right length) and keeps the
 * tokens themselves out of the process memory after loading.
 *
 * Changes of the file are noticed by the calls themselves: at most once per
 * check interval one call (the one that gets the check mutex; the others do
 * not wait) compares the file's stat stamp (device, inode, size, mtime) with
 * the one of the last load and reloads on a difference. A Kubernetes Secret
 * volume replaces its files by swapping a symlink, which changes the inode,
 * so a rotated Secret reaches packd without a restart or a signal. */
#include "auth.h"

#include <ctype.h>
#include <errno.h>
#include <grpc/slice.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "clock.h"
#include "log.h"
#include "pk_error.h"

typedef struct token_set {
  int n;
  unsigned char digest[PK_AUTH_MAX_TOKENS][SHA256_DIGEST_LENGTH];
} token_set_t;

/* What identifies one version of the file. */
typedef struct stamp {
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
  int valid; /* 0: stat failed. */
} stamp_t;

struct pk_auth {
  char path[1024];
  pthread_rwlock_t lock;
  token_set_t set; /* Guarded by lock. */
  /* Change detection; guarded by check_mu (taken with trylock). */
  pthread_mutex_t check_mu;
  stamp_t loaded;    /* The file as of the last load attempt. */
  double next_check; /* Monotonic seconds. */
  double interval;   /* Seconds between checks; <= 0: on every call. */
};

static stamp_t stamp_of(const char *path) {
  stamp_t st;
  memset(&st, 0, sizeof st);
  struct stat sb;
  if (stat(path, &sb) == 0) {
    st.dev = sb.st_dev;
    st.ino = sb.st_ino;
    st.size = sb.st_size;
    st.mtime = sb.st_mtim;
    st.valid = 1;
  }
  return st;
}

static int stamp_equal(const stamp_t *a, const stamp_t *b) {
  return a->valid == b->valid && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
         a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* Trims the ends of line (in place) and returns its start. */
static char *trim(char *line) {
  size_t n = strlen(line);
  while (n > 0 && isspace((unsigned char)line[n - 1]))
    line[--n] = '\0';
  while (*line != '\0' && isspace((unsigned char)*line))
    line++;
  return line;
}

/* Reads the file into *set (set may be NULL to only check it). */
static int read_tokens(const char *path, token_set_t *set, int *ntokens, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    snprintf(err, errlen, "cannot read \"%s\": %s", path, strerror(errno));
    return PK_EINVAL;
  }
  /* One byte more than the longest token, its newline and the NUL, so that
   * a longer line is seen as one. */
  static const size_t cap = PK_AUTH_MAX_TOKEN_LEN + 3;
  char *buf = malloc(cap);
  if (buf == NULL) {
    fclose(f);
    snprintf(err, errlen, "out of memory reading \"%s\"", path);
    return PK_ENOMEM;
  }
  int n = 0, lineno = 0, rc = PK_OK;
  while (fgets(buf, (int)cap, f) != NULL) {
    lineno++;
    size_t raw = strlen(buf);
    if (raw == cap - 1 && buf[raw - 1] != '\n') {
      snprintf(err, errlen, "\"%s\" line %d: a token is longer than %d characters", path, lineno,
               PK_AUTH_MAX_TOKEN_LEN);
      rc = PK_EINVAL;
      break;
    }
    char *tok = trim(buf);
    if (*tok == '\0' || *tok == '#')
      continue;
    size_t len = strlen(tok);
    if (len > PK_AUTH_MAX_TOKEN_LEN) {
      snprintf(err, errlen, "\"%s\" line %d: a token is longer than %d characters", path, lineno,
               PK_AUTH_MAX_TOKEN_LEN);
      rc = PK_EINVAL;
      break;
    }
    for (size_t i = 0; i < len; i++) {
      unsigned char ch = (unsigned char)tok[i];
      if (ch <= 0x20 || ch >= 0x7f) {
        snprintf(err, errlen,
                 "\"%s\" line %d: a token may hold only printable ASCII without spaces (one "
                 "token a line)",
                 path, lineno);
        rc = PK_EINVAL;
        break;
      }
    }
    if (rc != PK_OK)
      break;
    if (n == PK_AUTH_MAX_TOKENS) {
      snprintf(err, errlen, "\"%s\": more than %d tokens", path, PK_AUTH_MAX_TOKENS);
      rc = PK_EINVAL;
      break;
    }
    if (set != NULL)
      SHA256((const unsigned char *)tok, len, set->digest[n]);
    n++;
  }
  if (rc == PK_OK && ferror(f)) {
    snprintf(err, errlen, "cannot read \"%s\": %s", path, strerror(errno));
    rc = PK_EINVAL;
  }
  if (rc == PK_OK && n == 0) {
    snprintf(err, errlen, "\"%s\" holds no token (one token a line; '#' starts a comment)", path);
    rc = PK_EINVAL;
  }
  /* The buffer held a token: clear it before it goes back to the heap. */
  OPENSSL_cleanse(buf, cap);
  free(buf);
  fclose(f);
  if (rc == PK_OK) {
    if (set != NULL)
      set->n = n;
    *ntokens = n;
  }
  return rc;
}

int pk_auth_check_file(const char *path, int *ntokens, char *err, size_t errlen) {
  return read_tokens(path, NULL, ntokens, err, errlen);
}

int pk_auth_create(const char *path, pk_auth_t **out, char *err, size_t errlen) {
  *out = NULL;
  if (strlen(path) >= sizeof((pk_auth_t *)0)->path) {
    snprintf(err, errlen, "the token file name is too long");
    return PK_EINVAL;
  }
  pk_auth_t *a = calloc(1, sizeof *a);
  if (a == NULL) {
    snprintf(err, errlen, "out of memory");
    return PK_ENOMEM;
  }
  snprintf(a->path, sizeof a->path, "%s", path);
  /* The stamp is taken before the read: a change in between is seen by the
   * next check and read again, never missed. */
  a->loaded = stamp_of(path);
  int n;
  int rc = read_tokens(path, &a->set, &n, err, errlen);
  if (rc != PK_OK) {
    free(a);
    return rc;
  }
  pthread_rwlock_init(&a->lock, NULL);
  pthread_mutex_init(&a->check_mu, NULL);
  a->interval = PK_AUTH_CHECK_INTERVAL;
  a->next_check = pk_monotonic_seconds() + a->interval;
  *out = a;
  return PK_OK;
}

void pk_auth_set_check_interval(pk_auth_t *a, double seconds) {
  pthread_mutex_lock(&a->check_mu);
  a->interval = seconds;
  a->next_check = pk_monotonic_seconds() + (seconds > 0 ? seconds : 0);
  pthread_mutex_unlock(&a->check_mu);
}

/* Reads the file into the set; the caller holds check_mu. */
static int reload_locked(pk_auth_t *a, int *ntokens, char *err, size_t errlen) {
  a->loaded = stamp_of(a->path);
  token_set_t *fresh = calloc(1, sizeof *fresh);
  if (fresh == NULL) {
    snprintf(err, errlen, "out of memory");
    return PK_ENOMEM;
  }
  int rc = read_tokens(a->path, fresh, ntokens, err, errlen);
  if (rc == PK_OK) {
    pthread_rwlock_wrlock(&a->lock);
    a->set = *fresh;
    pthread_rwlock_unlock(&a->lock);
  }
  OPENSSL_cleanse(fresh, sizeof *fresh);
  free(fresh);
  return rc;
}

int pk_auth_reload(pk_auth_t *a, int *ntokens, char *err, size_t errlen) {
  pthread_mutex_lock(&a->check_mu);
  int rc = reload_locked(a, ntokens, err, errlen);
  pthread_mutex_unlock(&a->check_mu);
  return rc;
}

/* Reloads when the file changed since the last load; at most once per
 * interval, by one caller at a time, without making the others wait. */
static void reload_if_changed(pk_auth_t *a) {
  if (pthread_mutex_trylock(&a->check_mu) != 0)
    return;
  double now = pk_monotonic_seconds();
  if (now >= a->next_check) {
    a->next_check = now + (a->interval > 0 ? a->interval : 0);
    stamp_t cur = stamp_of(a->path);
    if (!stamp_equal(&cur, &a->loaded)) {
      int n = 0;
      char err[512];
      /* A failed reload keeps the old tokens; its stamp is recorded, so the
       * same broken file is reported once, not at every check. */
      if (reload_locked(a, &n, err, sizeof err) == PK_OK)
        PK_LOG_INFO("--auth-token-file changed: %d token%s loaded from \"%s\"", n,
                    n == 1 ? "" : "s", a->path);
      else
        PK_LOG_ERROR("--auth-token-file changed: %s; the tokens loaded before stay accepted", err);
    }
  }
  pthread_mutex_unlock(&a->check_mu);
}

/* Finds the value of the "authorization" key (gRPC lowercases keys). */
static const grpc_slice *find_authorization(const grpc_metadata_array *md) {
  static const char key[] = "authorization";
  for (size_t i = 0; i < md->count; i++) {
    const grpc_slice *k = &md->metadata[i].key;
    if (GRPC_SLICE_LENGTH(*k) == sizeof key - 1 &&
        memcmp(GRPC_SLICE_START_PTR(*k), key, sizeof key - 1) == 0)
      return &md->metadata[i].value;
  }
  return NULL;
}

int pk_auth_check(pk_auth_t *a, const grpc_metadata_array *md, char *why, size_t whylen) {
  reload_if_changed(a);
  const grpc_slice *v = find_authorization(md);
  if (v == NULL) {
    snprintf(why, whylen,
             "this server requires a bearer token: send metadata \"authorization: Bearer "
             "<token>\" (packctl --token-file, packd.Client(token=...))");
    return PK_EINVAL;
  }
  const char *p = (const char *)GRPC_SLICE_START_PTR(*v);
  size_t len = GRPC_SLICE_LENGTH(*v);
  static const char scheme[] = "Bearer ";
  if (len < sizeof scheme - 1 || strncasecmp(p, scheme, sizeof scheme - 1) != 0) {
    snprintf(why, whylen,
             "the authorization metadata is not \"Bearer <token>\" (another scheme or no "
             "token)");
    return PK_EINVAL;
  }
  p += sizeof scheme - 1;
  len -= sizeof scheme - 1;
  unsigned char got[SHA256_DIGEST_LENGTH];
  SHA256((const unsigned char *)p, len, got);
  int match = 0;
  pthread_rwlock_rdlock(&a->lock);
  /* No early exit: every token is compared, so the time does not tell which
   * one matched. */
  for (int i = 0; i < a->set.n; i++)
    match |= CRYPTO_memcmp(got, a->set.digest[i], sizeof got) == 0;
  pthread_rwlock_unlock(&a->lock);
  if (!match) {
    snprintf(why, whylen, "the bearer token is not accepted by this server (wrong or rotated)");
    return PK_EINVAL;
  }
  return PK_OK;
}

void pk_auth_destroy(pk_auth_t *a) {
  if (a == NULL)
    return;
  pthread_rwlock_destroy(&a->lock);
  pthread_mutex_destroy(&a->check_mu);
  OPENSSL_cleanse(&a->set, sizeof a->set);
  free(a);
}
