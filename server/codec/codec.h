/* The codec: translates between packd.v1 protobuf messages (protobuf-c) and
 * the planner's C types. It decides nothing: every default and every check
 * lives in the planner. One way for data: request bytes -> codec -> planner
 * -> codec -> response bytes.
 *
 * Ownership is stated per function. Messages returned by the codec are freed
 * with the matching pk_codec_free_* function, never with free(). */
#ifndef PK_CODEC_H
#define PK_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "packd/v1/packd.pb-c.h"
#include "pk_planner.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Maps a pk_error code to a gRPC status code number (grpc_status_code
 * values; 0 for PK_OK). The only such mapping in packd. */
PK_EXPORT int pk_status_from_error(int code);

/* Decodes request bytes. On success *msg is a new message (free with
 * pk_codec_free_request) and *req points into it: req stays valid until
 * *msg is freed. Malformed bytes return PK_EDECODE with a message in err. */
PK_EXPORT int pk_codec_decode_request(const uint8_t *buf, size_t len, Packd__V1__PlanRequest **msg,
                                      pk_request_t *req, char *err, size_t errlen);

/* Fills *req from an already unpacked message (pointers into msg). */
PK_EXPORT void pk_codec_request_from_msg(const Packd__V1__PlanRequest *msg, pk_request_t *req);

PK_EXPORT void pk_codec_free_request(Packd__V1__PlanRequest *msg);

/* The unkeyed plan id of a request: a lowercase hex digest (XXH3-128) of
 * the request's canonical bytes (the same request always has the same id;
 * plans are deterministic). Anyone who knows a request can compute it, so
 * the server does not hand it out: it keys its ids with a secret
 * (server/plan_id.h). The embedded mode, which has no server to ask for a
 * plan by id, uses this one. Writes at most idlen bytes including the NUL;
 * 33 is enough. */
PK_EXPORT void pk_codec_plan_id(const Packd__V1__PlanRequest *msg, char *id, size_t idlen);

/* Writes the canonical bytes that plan ids are computed over into out: the
 * message re-packed in field order without unknown fields, empty
 * sub-messages and `job`. The server's keyed ids (plan_id.h) MAC these same
 * bytes, so both ids change with exactly the same inputs. */
PK_EXPORT void pk_codec_plan_id_pack(const Packd__V1__PlanRequest *msg, ProtobufCBuffer *out);

/* Builds a PlanResponse for a plan. On success *out is a new message that
 * owns all its memory (free with pk_codec_free_response); the plan may be
 * freed right after. Returns PK_ENOMEM when an allocation fails. */
PK_EXPORT int pk_codec_encode_plan(const pk_plan_t *plan, const char *plan_id,
                                   Packd__V1__PlanResponse **out);

PK_EXPORT void pk_codec_free_response(Packd__V1__PlanResponse *msg);

/* A plan in its wire form (codec_pack.c), owned by the caller: free with
 * pk_packed_plan_free, which also accepts fields the caller took over and
 * set to NULL. */
typedef struct pk_packed_plan {
  uint8_t *resp;    /* The packed PlanResponse, resp_len bytes. */
  size_t resp_len;  /* Also set when the response is over max_bytes. */
  uint8_t *ranks;   /* Every packed RankPlan back to back: rank r is [off[r], off[r+1]). */
  size_t *off;      /* n_ranks + 1 offsets into ranks. */
  size_t n_ranks;   /* DP ranks; for a dynamic-CP plan, the GPUs of the pool. */
  size_t ranks_len; /* off[n_ranks]; also set when the ranks are over max_bytes. */
} pk_packed_plan_t;

/* The one encoder of a plan, for the server's handler and pk_plan_bytes:
 * the packed PlanResponse under plan_id and each rank's packed RankPlan
 * (what the cache, the store and GetRankPlan serve; each names plan_id).
 * Returns 0; PK_ENOMEM; or PK_ELIMIT when the response would be over
 * max_bytes (then only resp_len is set). */
PK_EXPORT int pk_codec_pack_plan(const pk_plan_t *plan, const char *plan_id, int64_t max_bytes,
                                 pk_packed_plan_t *out);

PK_EXPORT void pk_packed_plan_free(pk_packed_plan_t *pp);

/* Packs an already built PlanResponse the way pk_codec_pack_plan does;
 * the bytes equal packd__v1__plan_response__pack's (a test checks it).
 * Returns the length and a malloc'd buffer in *out (free with free()), or
 * 0 and NULL when out of memory. */
size_t pk_pack_plan_response(const Packd__V1__PlanResponse *resp, uint8_t **out);

/* An estimate of the bytes of the packed PlanResponse of a plan of this
 * shape (pk_plan_shape; plan_id of up to 40 characters included), from the
 * varint sizes of the sequence indices and of the largest footprint, dp,
 * and the lower bound on the micro-batch count: O(1). Each field is counted
 * at its largest encoding, which covers AUTO plans (measured 1.03x to 2.0x
 * the real size); compatibility algorithms may use more micro-batches than
 * the bound and come out larger. */
PK_EXPORT uint64_t pk_codec_plan_size_estimate(const pk_plan_shape_t *shape);

/* An admission check for pk_limits_t.admit (admit_arg: the pk_limits_t):
 * PK_ELIMIT, naming max_plan_bytes and the estimate, when the estimate is
 * over limits->max_plan_bytes (0: no limit); else 0. */
PK_EXPORT int pk_codec_admit_size(void *limits, const pk_plan_shape_t *shape, char *err,
                                  size_t errlen);

/* One Plan request from bytes to bytes (plan_bytes.c): the one path of the
 * server's handler, pk_plan_bytes (libpackd.so, packctl --local) and the
 * fuzz target. The caller fills the options; the results are the call's. */
typedef struct pk_plan_call {
  /* Options. limits: max_sequences, max_plan_bytes, the stop and the
   * trace (its admit is the call's own). max_bytes: the largest packed
   * response (INT64_MAX: none). plan_id: writes the plan id of msg into id
   * ("" when it cannot); NULL: the unkeyed pk_codec_plan_id.
   * response_only: the caller serves the PlanResponse alone (pk_plan_bytes),
   * so a dynamic-CP plan's GPU parts are not packed (packed.n_ranks 0); a
   * fixed-CP plan's ranks are packed either way, since its response is
   * assembled from them. */
  pk_limits_t limits;
  int64_t max_bytes;
  bool response_only;
  void (*plan_id)(const void *plan_id_arg, const Packd__V1__PlanRequest *msg, char *id,
                  size_t idlen);
  const void *plan_id_arg;
  /* Results: the sequences of the decoded request, the plan id (once
   * admitted), the seconds spent planning and encoding, and on success the
   * packed plan (the caller frees it with pk_packed_plan_free). */
  uint64_t sequences;
  char id[40];
  double plan_seconds, pack_seconds;
  pk_packed_plan_t packed;
} pk_plan_call_t;

/* Decodes the request, refuses it over the limits (the sequence count, then
 * the size estimate once validated: PK_ELIMIT), computes its plan id, plans
 * and packs it: 0 with call->packed set, or a negative pk_error code with a
 * message in err naming the field, the limit or the figure (PK_EDECODE,
 * PK_EINVAL, PK_EPRECOND, PK_ELIMIT, PK_ENOMEM, PK_ECANCELED,
 * PK_EINTERNAL). call->packed is empty on failure. */
PK_EXPORT int pk_plan_request(const uint8_t *req, size_t req_len, pk_plan_call_t *call, char *err,
                              size_t errlen);

/* pk_plan_request with the server's default limits (PK_DEFAULT_*), the
 * unkeyed plan id and no response limit: for the embedded Python mode,
 * packctl --local and tests. On success *resp is a malloc'd buffer of
 * *resp_len bytes holding a packed PlanResponse; free it with
 * pk_codec_free_bytes. On failure returns a negative pk_error code and a
 * message in err naming the field and the value. */
PK_EXPORT int pk_plan_bytes(const uint8_t *req, size_t req_len, uint8_t **resp, size_t *resp_len,
                            char *err, size_t errlen);

PK_EXPORT void pk_codec_free_bytes(uint8_t *buf);

#ifdef __cplusplus
}
#endif

#endif
