/* The packd C client (see pk_client.h). Each call is one batch of six ops on
 * a new call (send metadata, message and close; receive metadata, message
 * and status) plucked from the client's own completion queue. The bearer
 * token, when there is one, is the one entry of the initial metadata. */
#include "pk_client.h"

#include <ctype.h>
#include <errno.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_int_arg.h"
#include "grpc_status_names.h"
#include "pk_error.h"

enum { M_PLAN = 0, M_GET_RANK = 1, M_HEALTH = 2, M_COUNT = 3 };

static const char *const k_paths[M_COUNT] = {PK_METHOD_PLAN_PATH, PK_METHOD_GET_RANK_PLAN_PATH,
                                             PK_METHOD_HEALTH_CHECK_PATH};

struct pk_client {
  grpc_channel *channel;
  grpc_completion_queue *cq;
  void *registered[M_COUNT]; /* grpc_channel_register_call handles. */
  pk_client_options_t opts;  /* Its file names are not kept: they may not outlive open. */
  char *authorization;       /* "Bearer <token>", or NULL: no token is sent. */
};

const char *pk_client_status_name(int code) {
  return pk_grpc_status_name(code);
}

/* The table of grpc_status_names.h must be gRPC's own numbering. */
_Static_assert(PK_GRPC_CANCELLED == (int)GRPC_STATUS_CANCELLED, "gRPC status numbering");
_Static_assert(PK_GRPC_INVALID_ARGUMENT == (int)GRPC_STATUS_INVALID_ARGUMENT,
               "gRPC status numbering");
_Static_assert(PK_GRPC_NOT_FOUND == (int)GRPC_STATUS_NOT_FOUND, "gRPC status numbering");
_Static_assert(PK_GRPC_RESOURCE_EXHAUSTED == (int)GRPC_STATUS_RESOURCE_EXHAUSTED,
               "gRPC status numbering");
_Static_assert(PK_GRPC_FAILED_PRECONDITION == (int)GRPC_STATUS_FAILED_PRECONDITION,
               "gRPC status numbering");
_Static_assert(PK_GRPC_UNAVAILABLE == (int)GRPC_STATUS_UNAVAILABLE, "gRPC status numbering");
_Static_assert(PK_GRPC_UNAUTHENTICATED == (int)GRPC_STATUS_UNAUTHENTICATED,
               "gRPC status numbering");

int pk_client_error_from_status(int code) {
  switch (code) {
  case PK_GRPC_OK:
    return PK_OK;
  case PK_GRPC_INVALID_ARGUMENT:
    return PK_EINVAL;
  case PK_GRPC_FAILED_PRECONDITION:
    return PK_EPRECOND;
  case PK_GRPC_RESOURCE_EXHAUSTED:
    return PK_ENOMEM;
  case PK_GRPC_NOT_FOUND:
    return PK_ENOTFOUND;
  case PK_GRPC_CANCELLED:
    return PK_ECANCELED;
  default:
    return PK_EINTERNAL;
  }
}

void pk_client_options_default(pk_client_options_t *opts) {
  memset(opts, 0, sizeof *opts);
  opts->timeout_s = 30.0;
  opts->max_message_bytes = 64LL << 20;
}

int pk_client_options_set(pk_client_options_t *opts, const char *name, const char *value, char *err,
                          size_t errlen) {
  const char **slot = NULL;
  if (strcmp(name, "tls-ca") == 0)
    slot = &opts->tls_ca;
  else if (strcmp(name, "tls-cert") == 0)
    slot = &opts->tls_cert;
  else if (strcmp(name, "tls-key") == 0)
    slot = &opts->tls_key;
  else if (strcmp(name, "token-file") == 0)
    slot = &opts->token_file;
  else
    return 0;
  if (value == NULL || value[0] == '\0') {
    snprintf(err, errlen, "--%s: expected a file name, got an empty value", name);
    return PK_EINVAL;
  }
  *slot = value;
  return 1;
}

void pk_client_options_from_env(pk_client_options_t *opts) {
  const char **slots[] = {&opts->tls_ca, &opts->tls_cert, &opts->tls_key, &opts->token_file};
  static const char *const names[] = {"PACKD_TLS_CA", "PACKD_TLS_CLIENT_CERT",
                                      "PACKD_TLS_CLIENT_KEY", "PACKD_TOKEN_FILE"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const char *env = getenv(names[i]);
    if ((*slots[i] == NULL || (*slots[i])[0] == '\0') && env != NULL && env[0] != '\0')
      *slots[i] = env;
  }
}

static int is_set(const char *s) {
  return s != NULL && s[0] != '\0';
}

/* PEM files and token files larger than this are not certificates, keys or
 * tokens. */
#define PK_CLIENT_FILE_MAX (1 << 20)

/* Reads a whole file into a new NUL-terminated buffer. */
static int read_file(const char *option, const char *path, char **out, char *err, size_t errlen) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    snprintf(err, errlen, "%s: cannot read \"%s\": %s", option, path, strerror(errno));
    return PK_EINVAL;
  }
  char *buf = malloc(PK_CLIENT_FILE_MAX + 1);
  if (buf == NULL) {
    fclose(f);
    snprintf(err, errlen, "%s: out of memory", option);
    return PK_ENOMEM;
  }
  size_t n = fread(buf, 1, PK_CLIENT_FILE_MAX + 1, f);
  int bad = ferror(f);
  fclose(f);
  if (bad || n == 0 || n > PK_CLIENT_FILE_MAX) {
    snprintf(err, errlen, "%s: \"%s\" %s", option, path,
             bad ? "cannot be read" : (n == 0 ? "is empty" : "is larger than 1 MiB"));
    free(buf);
    return PK_EINVAL;
  }
  buf[n] = '\0';
  *out = buf;
  return PK_OK;
}

/* "Bearer " and the first token line of the file (blank lines and '#'
 * comments skipped, the ends trimmed), the way the server reads it. */
static int read_token(const char *path, char **out, char *err, size_t errlen) {
  *out = NULL;
  char *text;
  int rc = read_file("--token-file", path, &text, err, errlen);
  if (rc != PK_OK)
    return rc;
  rc = PK_EINVAL;
  snprintf(err, errlen, "--token-file: \"%s\" holds no token", path);
  for (char *line = text; line != NULL && *line != '\0';) {
    char *next = strchr(line, '\n');
    if (next != NULL)
      *next++ = '\0';
    while (isspace((unsigned char)*line))
      line++;
    size_t n = strlen(line);
    while (n > 0 && isspace((unsigned char)line[n - 1]))
      line[--n] = '\0';
    if (n > 0 && line[0] != '#') {
      *out = malloc(n + 8);
      if (*out == NULL) {
        snprintf(err, errlen, "--token-file: out of memory");
        rc = PK_ENOMEM;
      } else {
        snprintf(*out, n + 8, "Bearer %s", line);
        rc = PK_OK;
        err[0] = '\0';
      }
      break;
    }
    line = next;
  }
  memset(text, 0, strlen(text));
  free(text);
  return rc;
}

/* The channel credentials the options ask for (insecure when none). */
static int channel_credentials(const pk_client_options_t *o, grpc_channel_credentials **out,
                               char *err, size_t errlen) {
  *out = NULL;
  if (!is_set(o->tls_ca) && !is_set(o->tls_cert) && !is_set(o->tls_key)) {
    *out = grpc_insecure_credentials_create();
    return PK_OK;
  }
  if (is_set(o->tls_cert) != is_set(o->tls_key)) {
    snprintf(err, errlen, "%s is set but %s is not: a client certificate needs its key",
             is_set(o->tls_cert) ? "--tls-cert" : "--tls-key",
             is_set(o->tls_cert) ? "--tls-key" : "--tls-cert");
    return PK_EINVAL;
  }
  char *ca = NULL, *cert = NULL, *key = NULL;
  int rc = PK_OK;
  if (is_set(o->tls_ca))
    rc = read_file("--tls-ca", o->tls_ca, &ca, err, errlen);
  if (rc == PK_OK && is_set(o->tls_cert))
    rc = read_file("--tls-cert", o->tls_cert, &cert, err, errlen);
  if (rc == PK_OK && is_set(o->tls_key))
    rc = read_file("--tls-key", o->tls_key, &key, err, errlen);
  if (rc == PK_OK) {
    grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
    /* gRPC copies the PEM texts. */
    *out = grpc_ssl_credentials_create(ca, cert != NULL ? &pair : NULL, NULL, NULL);
    if (*out == NULL) {
      snprintf(err, errlen, "cannot create TLS credentials from the given files");
      rc = PK_EINVAL;
    }
  }
  free(ca);
  free(cert);
  if (key != NULL)
    memset(key, 0, strlen(key));
  free(key);
  return rc;
}

int pk_client_open(const char *target, const pk_client_options_t *opts, pk_client_t **out,
                   char *err, size_t errlen) {
  *out = NULL;
  if (target == NULL || target[0] == '\0') {
    snprintf(err, errlen, "server address is empty (expected HOST:PORT)");
    return PK_EINVAL;
  }
  pk_client_t *c = calloc(1, sizeof *c);
  if (c == NULL) {
    snprintf(err, errlen, "out of memory");
    return PK_ENOMEM;
  }
  if (opts != NULL)
    c->opts = *opts;
  else
    pk_client_options_default(&c->opts);
  if (c->opts.max_message_bytes <= 0)
    c->opts.max_message_bytes = 64LL << 20;
  int maxmsg = c->opts.max_message_bytes > INT32_MAX ? INT32_MAX : (int)c->opts.max_message_bytes;

  if (is_set(c->opts.token_file)) {
    int rc = read_token(c->opts.token_file, &c->authorization, err, errlen);
    if (rc != PK_OK) {
      free(c);
      return rc;
    }
  }
  grpc_init();
  grpc_channel_credentials *creds = NULL;
  int crc = channel_credentials(&c->opts, &creds, err, errlen);
  if (crc != PK_OK) {
    grpc_shutdown();
    free(c->authorization);
    free(c);
    return crc;
  }
  c->opts.tls_ca = c->opts.tls_cert = c->opts.tls_key = c->opts.token_file = NULL;
  grpc_arg args[] = {
      pk_grpc_int_arg(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, maxmsg),
      pk_grpc_int_arg(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, maxmsg),
      /* Every client gets its own connection, also to the same server; a
       * load test with N clients then really uses N connections. */
      pk_grpc_int_arg(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1),
  };
  grpc_channel_args cargs = {sizeof args / sizeof args[0], args};
  c->channel = grpc_channel_create(target, creds, &cargs);
  grpc_channel_credentials_release(creds);
  if (c->channel == NULL) {
    grpc_shutdown();
    free(c->authorization);
    free(c);
    snprintf(err, errlen, "cannot create a channel to \"%s\"", target);
    return PK_EINVAL;
  }
  c->cq = grpc_completion_queue_create_for_pluck(NULL);
  for (int m = 0; m < M_COUNT; m++)
    c->registered[m] = grpc_channel_register_call(c->channel, k_paths[m], NULL, NULL);
  *out = c;
  return PK_OK;
}

void pk_client_close(pk_client_t *c) {
  if (c == NULL)
    return;
  grpc_completion_queue_shutdown(c->cq);
  while (grpc_completion_queue_pluck(c->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(c->cq);
  grpc_channel_destroy(c->channel);
  if (c->authorization != NULL)
    memset(c->authorization, 0, strlen(c->authorization));
  free(c->authorization);
  free(c);
  grpc_shutdown();
}

void pk_client_set_timeout(pk_client_t *c, double timeout_s) {
  c->opts.timeout_s = timeout_s;
}

static void set_status(pk_rpc_status_t *st, int code, const char *msg, size_t len) {
  if (st == NULL)
    return;
  st->code = code;
  if (len >= sizeof st->message)
    len = sizeof st->message - 1;
  memcpy(st->message, msg, len);
  st->message[len] = '\0';
}

static void noop_free(void *p) {
  (void)p;
}

int pk_client_call(pk_client_t *c, const char *method, const uint8_t *req, size_t len,
                   uint8_t **resp, size_t *resp_len, pk_rpc_status_t *status) {
  *resp = NULL;
  *resp_len = 0;
  gpr_timespec deadline = gpr_inf_future(GPR_CLOCK_MONOTONIC);
  if (c->opts.timeout_s > 0)
    deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                            gpr_time_from_micros((int64_t)(c->opts.timeout_s * 1e6), GPR_TIMESPAN));
  grpc_call *call = NULL;
  for (int m = 0; m < M_COUNT; m++) {
    if (c->registered[m] != NULL && strcmp(method, k_paths[m]) == 0) {
      call = grpc_channel_create_registered_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq,
                                                 c->registered[m], deadline, NULL);
      break;
    }
  }
  if (call == NULL) {
    grpc_slice path = grpc_slice_from_copied_string(method);
    call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq, path, NULL,
                                    deadline, NULL);
    grpc_slice_unref(path);
  }
  if (call == NULL) {
    const char *m = "cannot create the call";
    set_status(status, GRPC_STATUS_INTERNAL, m, strlen(m));
    return PK_EINTERNAL;
  }

  /* The request bytes outlive the call, so gRPC may use them without a copy. */
  grpc_slice req_slice = len > 0 ? grpc_slice_new((void *)req, len, noop_free) : grpc_empty_slice();
  grpc_byte_buffer *req_bb = grpc_raw_byte_buffer_create(&req_slice, 1);
  grpc_slice_unref(req_slice);
  grpc_byte_buffer *resp_bb = NULL;
  grpc_metadata_array initial_md, trailing_md;
  grpc_metadata_array_init(&initial_md);
  grpc_metadata_array_init(&trailing_md);
  grpc_status_code code = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();

  grpc_metadata auth_md;
  memset(&auth_md, 0, sizeof auth_md);
  if (c->authorization != NULL) {
    auth_md.key = grpc_slice_from_static_string("authorization");
    auth_md.value = grpc_slice_from_static_string(c->authorization);
  }

  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[0].data.send_initial_metadata.count = c->authorization != NULL ? 1 : 0;
  ops[0].data.send_initial_metadata.metadata = c->authorization != NULL ? &auth_md : NULL;
  ops[0].flags = c->opts.wait_for_ready ? GRPC_INITIAL_METADATA_WAIT_FOR_READY : 0;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = req_bb;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial_md;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &resp_bb;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &trailing_md;
  ops[5].data.recv_status_on_client.status = &code;
  ops[5].data.recv_status_on_client.status_details = &details;

  int rc = PK_OK;
  char tag;
  grpc_call_error cerr = grpc_call_start_batch(call, ops, 6, &tag, NULL);
  if (cerr != GRPC_CALL_OK) {
    char m[64];
    int n = snprintf(m, sizeof m, "grpc_call_start_batch failed (%d)", (int)cerr);
    set_status(status, GRPC_STATUS_INTERNAL, m, (size_t)n);
    rc = PK_EINTERNAL;
  } else {
    grpc_completion_queue_pluck(c->cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    set_status(status, (int)code, (const char *)GRPC_SLICE_START_PTR(details),
               GRPC_SLICE_LENGTH(details));
    rc = pk_client_error_from_status((int)code);
    if (rc == PK_OK) {
      if (resp_bb == NULL) {
        const char *m = "the server answered OK without a message";
        set_status(status, GRPC_STATUS_INTERNAL, m, strlen(m));
        rc = PK_EDECODE;
      } else {
        grpc_byte_buffer_reader rd;
        if (!grpc_byte_buffer_reader_init(&rd, resp_bb)) {
          const char *m = "cannot read the answer";
          set_status(status, GRPC_STATUS_INTERNAL, m, strlen(m));
          rc = PK_EDECODE;
        } else {
          grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
          grpc_byte_buffer_reader_destroy(&rd);
          size_t n = GRPC_SLICE_LENGTH(all);
          *resp = malloc(n > 0 ? n : 1);
          if (*resp == NULL) {
            const char *m = "out of memory for the answer";
            set_status(status, GRPC_STATUS_RESOURCE_EXHAUSTED, m, strlen(m));
            rc = PK_ENOMEM;
          } else {
            memcpy(*resp, GRPC_SLICE_START_PTR(all), n);
            *resp_len = n;
          }
          grpc_slice_unref(all);
        }
      }
    }
  }
  grpc_slice_unref(details);
  grpc_metadata_array_destroy(&initial_md);
  grpc_metadata_array_destroy(&trailing_md);
  grpc_byte_buffer_destroy(req_bb);
  if (resp_bb != NULL)
    grpc_byte_buffer_destroy(resp_bb);
  grpc_call_unref(call);
  return rc;
}

/* Packs a message into a new buffer; NULL when out of memory. */
static uint8_t *pack(const ProtobufCMessage *m, size_t *len) {
  *len = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(*len > 0 ? *len : 1);
  if (buf != NULL)
    protobuf_c_message_pack(m, buf);
  return buf;
}

/* Sends msg to method and unpacks the answer with desc. */
static int call_message(pk_client_t *c, const char *method, const ProtobufCMessage *msg,
                        const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
                        pk_rpc_status_t *status) {
  *out = NULL;
  size_t len = 0;
  uint8_t *req = pack(msg, &len);
  if (req == NULL) {
    const char *m = "out of memory packing the request";
    set_status(status, GRPC_STATUS_RESOURCE_EXHAUSTED, m, strlen(m));
    return PK_ENOMEM;
  }
  uint8_t *resp = NULL;
  size_t resp_len = 0;
  int rc = pk_client_call(c, method, req, len, &resp, &resp_len, status);
  free(req);
  if (rc != PK_OK)
    return rc;
  *out = protobuf_c_message_unpack(desc, NULL, resp_len, resp);
  free(resp);
  if (*out == NULL) {
    char m[128];
    int n = snprintf(m, sizeof m, "the answer (%zu bytes) is not a valid %s", resp_len, desc->name);
    set_status(status, GRPC_STATUS_INTERNAL, m, (size_t)n);
    return PK_EDECODE;
  }
  return PK_OK;
}

int pk_client_plan(pk_client_t *c, const Packd__V1__PlanRequest *req,
                   Packd__V1__PlanResponse **resp, pk_rpc_status_t *status) {
  return call_message(c, PK_METHOD_PLAN_PATH, &req->base, &packd__v1__plan_response__descriptor,
                      (ProtobufCMessage **)resp, status);
}

int pk_client_get_rank_plan(pk_client_t *c, const char *plan_id, uint32_t dp_rank,
                            Packd__V1__RankPlan **out, pk_rpc_status_t *status) {
  Packd__V1__GetRankPlanRequest req = PACKD__V1__GET_RANK_PLAN_REQUEST__INIT;
  req.plan_id = (char *)plan_id;
  req.dp_rank = dp_rank;
  return call_message(c, PK_METHOD_GET_RANK_PLAN_PATH, &req.base, &packd__v1__rank_plan__descriptor,
                      (ProtobufCMessage **)out, status);
}

int pk_client_health(pk_client_t *c, const char *service, int *serving, pk_rpc_status_t *status) {
  Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  req.service = (char *)(service != NULL ? service : "");
  Grpc__Health__V1__HealthCheckResponse *resp = NULL;
  int rc = call_message(c, PK_METHOD_HEALTH_CHECK_PATH, &req.base,
                        &grpc__health__v1__health_check_response__descriptor,
                        (ProtobufCMessage **)&resp, status);
  if (rc == PK_OK) {
    *serving = (int)resp->status;
    grpc__health__v1__health_check_response__free_unpacked(resp, NULL);
  }
  return rc;
}
