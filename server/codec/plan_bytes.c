/* pk_plan_bytes: the whole planning pipeline on bytes, the entry point of
 * libpackd.so (the embedded Python mode), of `packctl plan --local` and of
 * the plan-bytes fuzz target.
 *
 * It joins the codec and the planner: request bytes are decoded by the
 * codec, planned by the planner under the server's default limits, and
 * packed by the one encoder the server uses too (pk_codec_pack_plan). It lives apart from codec.c
 * so that the codec only translates between messages and planner types and never plans; the
 * server's handler (handlers.c) runs the same steps with its own limits,
 * cache and store.
 *
 * Memory: the returned buffer is the only thing that outlives a call; the
 * decoded request, the plan and the packed ranks are freed on every path
 * through the one exit label. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "codec.h"
#include "codec_check.h"

int pk_plan_bytes(const uint8_t *req, size_t req_len, uint8_t **resp, size_t *resp_len, char *err,
                  size_t errlen) {
  int rc = PK_OK;
  Packd__V1__PlanRequest *msg = NULL;
  pk_packed_plan_t packed = {0};
  pk_plan_t *plan = NULL;
  pk_request_t r;
  char id[33];
  *resp = NULL;
  *resp_len = 0;
  if (err != NULL && errlen > 0)
    err[0] = '\0';

  rc = pk_codec_decode_request(req, req_len, &msg, &r, err, errlen);
  PK_CODEC_CHECK(rc == PK_OK, rc);
  pk_codec_plan_id(msg, id, sizeof id);
  /* The server's default limits: the embedded mode refuses what it would. */
  const pk_limits_t limits = {.max_sequences = PK_DEFAULT_MAX_SEQUENCES,
                              .max_plan_bytes = PK_DEFAULT_MAX_PLAN_BYTES};
  rc = pk_plan_limited(&r, &limits, &plan, err, errlen);
  PK_CODEC_CHECK(rc == PK_OK, rc);
  rc = pk_codec_pack_plan(plan, id, INT64_MAX, &packed);
  if (rc != PK_OK)
    pk_codec_msg(err, errlen,
                 rc == PK_ENOMEM ? "response: out of memory while encoding the plan"
                                 : "response: internal error while encoding the plan");
  PK_CODEC_CHECK(rc == PK_OK, rc);
  *resp = packed.resp;
  *resp_len = packed.resp_len;
  packed.resp = NULL;
done:
  pk_packed_plan_free(&packed);
  pk_plan_free(plan);
  pk_codec_free_request(msg);
  return rc;
}
