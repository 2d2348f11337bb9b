/* The security settings as one object for the gRPC server (see
 * security.h). Each concern lives in its own file (tls.c, auth.c,
 * plan_id.c); this file puts the flag in front of their messages and holds
 * what they made, so that the gRPC server keeps one pointer. */
#include "security.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "log.h"
#include "pk_error.h"
#include "plan_id.h"
#include "tls.h"

int pk_security_check(const pk_server_config_t *cfg, char *err, size_t errlen) {
  int rc = pk_tls_check(cfg, err, errlen);
  if (rc != PK_OK)
    return rc;
  char why[512];
  if (cfg->auth_token_file[0] != '\0') {
    int n;
    rc = pk_auth_check_file(cfg->auth_token_file, &n, why, sizeof why);
    if (rc != PK_OK) {
      snprintf(err, errlen, "--auth-token-file: %s", why);
      return PK_EINVAL;
    }
  }
  if (cfg->plan_id_secret_file[0] != '\0') {
    rc = pk_plan_id_check_file(cfg->plan_id_secret_file, why, sizeof why);
    if (rc != PK_OK) {
      snprintf(err, errlen, "--plan-id-secret-file: %s", why);
      return PK_EINVAL;
    }
  }
  return PK_OK;
}

struct pk_security {
  pk_server_config_t cfg;
  pk_auth_t *auth; /* NULL: no token needed. */
  pk_plan_id_key_t *key;
};

int pk_security_open(const pk_server_config_t *cfg, pk_security_t **out, char *err, size_t errlen) {
  *out = NULL;
  int rc = pk_security_check(cfg, err, errlen);
  if (rc != PK_OK)
    return rc;
  pk_security_t *sec = calloc(1, sizeof *sec);
  if (sec == NULL) {
    snprintf(err, errlen, "out of memory");
    return PK_ENOMEM;
  }
  sec->cfg = *cfg;
  char why[512];
  if (cfg->auth_token_file[0] != '\0') {
    rc = pk_auth_create(cfg->auth_token_file, &sec->auth, why, sizeof why);
    if (rc != PK_OK) {
      snprintf(err, errlen, "--auth-token-file: %s", why);
      free(sec);
      return rc;
    }
  }
  if (cfg->plan_store[0] != '\0' && cfg->plan_id_secret_file[0] == '\0')
    PK_LOG_WARN("--plan-store is set without --plan-id-secret-file: this replica keys plan ids "
                "with a random secret of its own, so other replicas cannot answer GetRankPlan "
                "for its plans; give every replica the same secret file");
  rc = pk_plan_id_key_create(cfg->plan_id_secret_file, &sec->key, why, sizeof why);
  if (rc != PK_OK) {
    snprintf(err, errlen, "--plan-id-secret-file: %s", why);
    pk_auth_destroy(sec->auth);
    free(sec);
    return rc;
  }
  *out = sec;
  return PK_OK;
}

grpc_server_credentials *pk_security_credentials(pk_security_t *sec) {
  grpc_server_credentials *creds = NULL;
  char why[512];
  /* The files were checked moments ago; reading them again can only fail
   * when they changed or vanished since, which the caller reports as a
   * failure to listen. */
  if (pk_tls_server_credentials(&sec->cfg, &creds, why, sizeof why) != PK_OK) {
    PK_LOG_ERROR("%s", why);
    return NULL;
  }
  return creds;
}

int pk_security_authorize(pk_security_t *sec, int is_health, const grpc_metadata_array *md,
                          char *why, size_t whylen) {
  if (sec->auth == NULL || is_health)
    return PK_OK;
  return pk_auth_check(sec->auth, md, why, whylen);
}

int pk_security_reload(pk_security_t *sec, char *msg, size_t msglen) {
  if (sec->auth == NULL) {
    snprintf(msg, msglen, "no --auth-token-file: nothing to reload");
    return PK_OK;
  }
  int n = 0;
  char why[512];
  int rc = pk_auth_reload(sec->auth, &n, why, sizeof why);
  if (rc != PK_OK)
    snprintf(msg, msglen, "--auth-token-file: %s; the tokens loaded before stay accepted", why);
  else
    snprintf(msg, msglen, "--auth-token-file: %d token%s loaded from \"%s\"", n, n == 1 ? "" : "s",
             sec->cfg.auth_token_file);
  return rc;
}

const pk_plan_id_key_t *pk_security_plan_id_key(const pk_security_t *sec) {
  return sec->key;
}

void pk_security_close(pk_security_t *sec) {
  if (sec == NULL)
    return;
  pk_auth_destroy(sec->auth);
  pk_plan_id_key_destroy(sec->key);
  free(sec);
}
