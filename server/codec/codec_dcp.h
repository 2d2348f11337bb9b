/* The codec of dynamic context-parallel plans: a PlanRequest whose
 * parallel.dynamic_cp is set <-> pk_dcp_request_t, and a pk_dcp_plan_t ->
 * the packed PlanResponse (its dynamic_cp field; no RankPlans). Like
 * codec.h it decides nothing about plans; it refuses the fixed-CP fields
 * that a dynamic-CP plan cannot honour, naming the field and the value. */
#ifndef PK_CODEC_DCP_H
#define PK_CODEC_DCP_H

#include <stddef.h>
#include <stdint.h>

#include "codec.h"
#include "packd/v1/packd.pb-c.h"
#include "pk_dcp.h"
#include "pk_export.h"

/* True when msg asks for a dynamic-CP plan. */
static inline int pk_codec_is_dcp(const Packd__V1__PlanRequest *msg) {
  return msg != NULL && msg->parallel != NULL && msg->parallel->dynamic_cp != NULL;
}

/* Fills req from msg (req points into msg). Returns 0, or PK_EINVAL with a
 * message naming a fixed-CP field set to something dynamic CP cannot do
 * (PADDED or FIXED mode, mini-batches, pipeline stages, group rules, layout
 * overrides). The planner validates the rest. */
PK_EXPORT int pk_codec_dcp_request(const Packd__V1__PlanRequest *msg, pk_dcp_request_t *req,
                                   char *err, size_t errlen);

/* Packs the PlanResponse of a dynamic-CP plan under plan_id into out (its
 * resp; no RankPlans: n_ranks 0, off[0] 0). Returns 0, PK_ENOMEM, or
 * PK_ELIMIT when the response would be over max_bytes (out->resp_len is
 * then its size). */
PK_EXPORT int pk_codec_pack_dcp_plan(const pk_dcp_plan_t *plan, const char *plan_id,
                                     int64_t max_bytes, pk_packed_plan_t *out);

#endif
