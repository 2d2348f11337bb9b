/* Unit tests of the dynamic-CP codec's GPU parts (server/codec/codec_dcp.c)
 * with the real planner and real protobuf-c bytes: on random dynamic-CP
 * requests, every GPU's packed RankPlan is its slice of the packed
 * PlanResponse (per slot, the whole plan's DcpGpu of that GPU and the
 * DcpGroup it is in, byte for byte), the response and the parts are the
 * bytes protobuf-c packs for the same messages, the parts together cover
 * every group once per GPU of the group and every sequence once, and the
 * message limit refuses the response or the parts by name, with nothing
 * left allocated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_dcp.h"
#include "codec_fixture.h"

#define IDLE UINT32_MAX

/* A random dynamic-CP request whose every sequence fits in the pool. */
static Packd__V1__PlanRequest *random_dcp(uint64_t *s) {
  static const uint32_t layouts[][2] = {{1, 1}, {1, 4}, {2, 2}, {3, 1}, {4, 2},
                                        {6, 1}, {8, 1}, {2, 8}, {5, 1}, {7, 1}};
  Packd__V1__PlanRequest *m = fx_request_new();
  const uint32_t *dc = layouts[fx_below(s, sizeof layouts / sizeof layouts[0])];
  uint32_t pool = dc[0] * dc[1], tp = 1 + fx_below(s, 2);
  uint64_t cap = fx_below(s, 2) ? 4096 : 8192;
  Packd__V1__Parallel *p = fx_parallel(m);
  p->dp = dc[0];
  p->cp = dc[1];
  p->tp = tp;
  p->cp_algo = (Packd__V1__CpAlgo)fx_below(s, 2);
  p->dynamic_cp = fx_alloc(1, sizeof *p->dynamic_cp);
  packd__v1__dynamic_cp__init(p->dynamic_cp);
  p->dynamic_cp->sizes = (Packd__V1__DcpSizes)fx_below(s, 2);
  p->dynamic_cp->algo = (Packd__V1__DcpAlgo)fx_below(s, 2);
  uint32_t min = 1u << fx_below(s, 4);
  p->dynamic_cp->min_size = fx_below(s, 2) && min <= pool ? min : 0;
  fx_batching(m)->max_tokens = cap;
  fx_batching(m)->max_seqs = fx_below(s, 3) == 0 ? 3 : 0;
  if (fx_below(s, 2)) {
    fx_cost(m)->cp_token = 0.25;
    fx_cost(m)->cp_group = 100;
  }
  uint64_t longest = pool * cap - 2ull * pool * tp;
  if (longest > 60000)
    longest = 60000;
  size_t n = 1 + fx_below(s, 150);
  uint32_t *lens = fx_alloc(n, sizeof *lens);
  for (size_t i = 0; i < n; i++)
    lens[i] = 1 + fx_below(s, fx_below(s, 4) == 0 ? (uint32_t)longest : 4000);
  fx_set_lengths(m, lens, n);
  free(lens);
  return m;
}

static void fixed_id(const void *arg, const Packd__V1__PlanRequest *msg, char *id, size_t idlen) {
  (void)msg;
  snprintf(id, idlen, "%s", (const char *)arg);
}

/* Packs a message into a new buffer (free with free()). */
static uint8_t *pack_msg(const ProtobufCMessage *msg, size_t *len) {
  *len = protobuf_c_message_get_packed_size(msg);
  uint8_t *b = fx_alloc(*len, 1);
  assert_int_equal(protobuf_c_message_pack(msg, b), *len);
  return b;
}

static void assert_same_msg(const ProtobufCMessage *a, const ProtobufCMessage *b) {
  size_t la = 0, lb = 0;
  uint8_t *pa = pack_msg(a, &la), *pb = pack_msg(b, &lb);
  assert_int_equal(la, lb);
  assert_memory_equal(pa, pb, la);
  free(pa);
  free(pb);
}

/* protobuf-c packs msg to exactly the len bytes at bytes. */
static void assert_repacks(const ProtobufCMessage *msg, const uint8_t *bytes, size_t len) {
  size_t n = 0;
  uint8_t *again = pack_msg(msg, &n);
  assert_int_equal(n, len);
  assert_memory_equal(again, bytes, len);
  free(again);
}

/* Checks every GPU's part of a packed plan against the whole response;
 * returns the idle (slot, GPU) pairs. */
static uint32_t check_parts(const pk_packed_plan_t *pp, const char *id, size_t nseqs) {
  Packd__V1__PlanResponse *resp = packd__v1__plan_response__unpack(NULL, pp->resp_len, pp->resp);
  assert_non_null(resp);
  /* The codec assembles the bytes from parts packed once: they are what
   * protobuf-c packs for the same message. */
  assert_repacks(&resp->base, pp->resp, pp->resp_len);
  assert_int_equal(resp->n_ranks, 0);
  const Packd__V1__DynamicCpPlan *whole = resp->dynamic_cp;
  assert_non_null(whole);
  uint32_t pool = whole->pool;
  size_t ns = whole->n_slots;
  assert_int_equal(pp->n_ranks, pool);
  assert_int_equal(pp->ranks_len, pp->off[pool]);
  /* seen[i]: how often sequence i was counted (once per group, at its
   * CP rank 0); members[j][k]: GPUs whose part names group k of slot j. */
  uint32_t *seen = fx_alloc(nseqs, sizeof *seen);
  uint32_t *members = fx_alloc(ns * pool, sizeof *members);
  uint32_t idle = 0;
  for (uint32_t g = 0; g < pool; g++) {
    Packd__V1__RankPlan *rk =
        packd__v1__rank_plan__unpack(NULL, pp->off[g + 1] - pp->off[g], pp->ranks + pp->off[g]);
    assert_non_null(rk);
    assert_repacks(&rk->base, pp->ranks + pp->off[g], pp->off[g + 1] - pp->off[g]);
    assert_int_equal(rk->dp_rank, g);
    assert_string_equal(rk->plan_id, id);
    assert_int_equal(rk->n_mini_batches, 0);
    assert_non_null(rk->dynamic_cp);
    assert_int_equal(rk->dynamic_cp->pool, pool);
    assert_int_equal(rk->dynamic_cp->n_slots, ns);
    for (size_t j = 0; j < ns; j++) {
      const Packd__V1__DcpRankSlot *part = rk->dynamic_cp->slots[j];
      const Packd__V1__DcpSlot *slot = whole->slots[j];
      assert_non_null(part->gpu);
      assert_same_msg(&part->gpu->base, &slot->gpus[g]->base);
      if (part->gpu->group == IDLE) {
        assert_null(part->group);
        idle++;
        continue;
      }
      assert_true(part->gpu->group < slot->n_groups);
      const Packd__V1__DcpGroup *grp = slot->groups[part->gpu->group];
      assert_non_null(part->group);
      assert_same_msg(&part->group->base, &grp->base);
      assert_true(grp->first_gpu <= g && g < grp->first_gpu + grp->size);
      assert_int_equal(part->gpu->rank_in_group, g - grp->first_gpu);
      members[j * pool + part->gpu->group]++;
      if (part->gpu->rank_in_group == 0)
        for (size_t k = 0; k < part->group->n_seqs; k++) {
          assert_true(part->group->seqs[k] < nseqs);
          seen[part->group->seqs[k]]++;
        }
    }
    packd__v1__rank_plan__free_unpacked(rk, NULL);
  }
  for (size_t j = 0; j < ns; j++)
    for (size_t k = 0; k < whole->slots[j]->n_groups; k++)
      assert_int_equal(members[j * pool + k], whole->slots[j]->groups[k]->size);
  for (size_t i = 0; i < nseqs; i++)
    assert_int_equal(seen[i], 1);
  free(seen);
  free(members);
  assert_int_equal(idle, whole->idle_gpu_slots);
  packd__v1__plan_response__free_unpacked(resp, NULL);
  return idle;
}

/* Random requests through pk_plan_request (the server's path): every
 * GPU's part is its slice of the whole plan. */
static void test_parts_are_slices(void **state) {
  (void)state;
  uint64_t s = 42;
  for (int t = 0; t < 60; t++) {
    Packd__V1__PlanRequest *m = random_dcp(&s);
    size_t len = 0, n = m->n_lengths;
    uint8_t *bytes = fx_pack(m, &len);
    packd__v1__plan_request__free_unpacked(m, NULL);
    pk_plan_call_t call = {.max_bytes = INT64_MAX, .plan_id = fixed_id, .plan_id_arg = "dcp-id"};
    char err[512];
    int rc = pk_plan_request(bytes, len, &call, err, sizeof err);
    assert_int_equal(rc, PK_OK);
    check_parts(&call.packed, "dcp-id", n);
    pk_packed_plan_free(&call.packed);
    free(bytes);
  }
  /* Idle GPUs: Megatron-Core's scheduler (reproduced) on pools that are not
   * a power of two can leave some in no group; their parts have no group. */
  static const uint32_t idle_cases[][3] = {{7, 3, 5000}, {5, 2, 5000}, {7, 2, 100}};
  uint32_t idle = 0;
  for (size_t c = 0; c < sizeof idle_cases / sizeof idle_cases[0]; c++) {
    uint32_t lens[3] = {idle_cases[c][2], idle_cases[c][2], idle_cases[c][2]};
    Packd__V1__PlanRequest *m = fx_request_new();
    fx_set_lengths(m, lens, idle_cases[c][1]);
    fx_parallel(m)->dp = idle_cases[c][0];
    m->parallel->dynamic_cp = fx_alloc(1, sizeof *m->parallel->dynamic_cp);
    packd__v1__dynamic_cp__init(m->parallel->dynamic_cp);
    m->parallel->dynamic_cp->algo = PACKD__V1__DCP_ALGO__DCP_ALGO_MEGATRON;
    fx_batching(m)->max_tokens = 8192;
    size_t len = 0;
    uint8_t *bytes = fx_pack(m, &len);
    packd__v1__plan_request__free_unpacked(m, NULL);
    pk_plan_call_t call = {.max_bytes = INT64_MAX, .plan_id = fixed_id, .plan_id_arg = "idle"};
    char err[512];
    assert_int_equal(pk_plan_request(bytes, len, &call, err, sizeof err), PK_OK);
    idle += check_parts(&call.packed, "idle", idle_cases[c][1]);
    pk_packed_plan_free(&call.packed);
    free(bytes);
  }
  assert_true(idle > 0);
}

/* Plans the request of n sequences on dp GPUs in groups of at least
 * min_size (every group the whole pool when min_size = dp). */
static pk_dcp_plan_t *plan_of(uint32_t n, uint32_t dp, uint32_t min_size, uint32_t *lens) {
  for (uint32_t i = 0; i < n; i++)
    lens[i] = 1000 + 37 * i;
  pk_dcp_request_t r = {.lengths = lens,
                        .n = n,
                        .dp = dp,
                        .cp = 1,
                        .min_size = min_size,
                        .max_tokens = 8192,
                        .algo = PK_DCP_AUTO};
  pk_dcp_plan_t *plan = NULL;
  char err[256];
  assert_int_equal(pk_dcp_plan(&r, NULL, &plan, err, sizeof err), PK_OK);
  return plan;
}

/* max_bytes bounds the response and the parts together: whole-pool groups
 * put every group into all 16 parts, so the parts pass a limit the
 * response meets. Each refusal says which (resp_len, ranks_len) and
 * leaves nothing allocated; at the larger figure both pass. */
static void test_limit_on_response_and_parts(void **state) {
  (void)state;
  uint32_t lens[60];
  pk_dcp_plan_t *plan = plan_of(60, 16, 16, lens);
  pk_packed_plan_t pp;
  assert_int_equal(pk_codec_pack_dcp_plan(plan, "id", INT64_MAX, false, &pp), PK_OK);
  size_t resp = pp.resp_len, ranks = pp.ranks_len;
  check_parts(&pp, "id", 60);
  assert_true(ranks > resp);

  /* response_only (pk_plan_bytes): the same response, no parts, and so
   * only the response's own size limited. */
  pk_packed_plan_t alone;
  assert_int_equal(pk_codec_pack_dcp_plan(plan, "id", (int64_t)resp, true, &alone), PK_OK);
  assert_int_equal(alone.resp_len, resp);
  assert_memory_equal(alone.resp, pp.resp, resp);
  assert_int_equal(alone.n_ranks, 0);
  assert_int_equal(alone.ranks_len, 0);
  assert_null(alone.ranks);
  pk_packed_plan_free(&alone);
  pk_packed_plan_free(&pp);

  assert_int_equal(pk_codec_pack_dcp_plan(plan, "id", (int64_t)resp - 1, false, &pp), PK_ELIMIT);
  assert_int_equal(pp.resp_len, resp);
  assert_int_equal(pp.ranks_len, 0);
  assert_null(pp.resp);
  assert_null(pp.ranks);
  assert_null(pp.off);

  assert_int_equal(pk_codec_pack_dcp_plan(plan, "id", (int64_t)ranks - 1, false, &pp), PK_ELIMIT);
  assert_int_equal(pp.resp_len, resp);
  assert_int_equal(pp.ranks_len, ranks);
  assert_null(pp.resp);
  assert_null(pp.ranks);
  assert_null(pp.off);

  assert_int_equal(pk_codec_pack_dcp_plan(plan, "id", (int64_t)ranks, false, &pp), PK_OK);
  assert_int_equal(pp.n_ranks, 16);
  pk_packed_plan_free(&pp);
  pk_dcp_plan_free(plan);
}

/* err names `figure` bytes right after `prefix`. A second planning of the
 * same request may measure its plan time in a varint one byte longer or
 * shorter, so the figure is allowed that much drift. */
static void assert_figure_near(const char *err, const char *prefix, size_t figure) {
  const char *at = strstr(err, prefix);
  assert_non_null(at);
  char *end = NULL;
  unsigned long long got = strtoull(at + strlen(prefix), &end, 10);
  assert_true(end != at + strlen(prefix) && strncmp(end, " bytes", 6) == 0);
  assert_true(got + 4 >= figure && got <= figure + 4);
}

/* Through pk_plan_request the two refusals have their own messages, each
 * naming the limit and the figure. */
static void test_limit_messages(void **state) {
  (void)state;
  uint32_t lens[60];
  pk_dcp_plan_t *plan = plan_of(60, 16, 16, lens);
  pk_packed_plan_t pp;
  assert_int_equal(pk_codec_pack_dcp_plan(plan, "id", INT64_MAX, false, &pp), PK_OK);
  size_t resp = pp.resp_len, ranks = pp.ranks_len;
  pk_packed_plan_free(&pp);
  pk_dcp_plan_free(plan);

  Packd__V1__PlanRequest *m = fx_request_new();
  fx_set_lengths(m, lens, 60);
  fx_parallel(m)->dp = 16;
  fx_parallel(m)->dynamic_cp = fx_alloc(1, sizeof *m->parallel->dynamic_cp);
  packd__v1__dynamic_cp__init(m->parallel->dynamic_cp);
  m->parallel->dynamic_cp->min_size = 16;
  fx_batching(m)->max_tokens = 8192;
  size_t len = 0;
  uint8_t *bytes = fx_pack(m, &len);
  packd__v1__plan_request__free_unpacked(m, NULL);
  char err[512], want[256];

  pk_plan_call_t call = {.max_bytes = (int64_t)ranks - 1, .plan_id = fixed_id, .plan_id_arg = "id"};
  assert_int_equal(pk_plan_request(bytes, len, &call, err, sizeof err), PK_ELIMIT);
  assert_figure_near(err, "the 16 GPUs' rank plans for 60 sequences are ", ranks);
  snprintf(want, sizeof want, "max_message_bytes = %zu", ranks - 1);
  assert_non_null(strstr(err, want));
  assert_null(call.packed.resp);

  call = (pk_plan_call_t){.max_bytes = (int64_t)resp - 1, .plan_id = fixed_id, .plan_id_arg = "id"};
  assert_int_equal(pk_plan_request(bytes, len, &call, err, sizeof err), PK_ELIMIT);
  assert_figure_near(err, "the plan for 60 sequences is ", resp);
  snprintf(want, sizeof want, "max_message_bytes = %zu", resp - 1);
  assert_non_null(strstr(err, want));
  assert_null(call.packed.resp);
  free(bytes);
}

/* The fixed-CP encoder reports the same figure: its ranks' bytes. */
static void test_fixed_cp_ranks_len(void **state) {
  (void)state;
  uint32_t lens[40];
  for (uint32_t i = 0; i < 40; i++)
    lens[i] = 100 + 13 * i;
  Packd__V1__PlanRequest *m = fx_request_new();
  fx_set_lengths(m, lens, 40);
  fx_parallel(m)->dp = 4;
  fx_batching(m)->max_tokens = 2048;
  size_t len = 0;
  uint8_t *bytes = fx_pack(m, &len);
  packd__v1__plan_request__free_unpacked(m, NULL);
  pk_plan_call_t call = {.max_bytes = INT64_MAX, .plan_id = fixed_id, .plan_id_arg = "id"};
  char err[256];
  assert_int_equal(pk_plan_request(bytes, len, &call, err, sizeof err), PK_OK);
  assert_int_equal(call.packed.n_ranks, 4);
  assert_int_equal(call.packed.ranks_len, call.packed.off[4]);
  for (size_t r = 0; r < 4; r++) {
    Packd__V1__RankPlan *rk = packd__v1__rank_plan__unpack(
        NULL, call.packed.off[r + 1] - call.packed.off[r], call.packed.ranks + call.packed.off[r]);
    assert_non_null(rk);
    assert_null(rk->dynamic_cp);
    packd__v1__rank_plan__free_unpacked(rk, NULL);
  }
  pk_packed_plan_free(&call.packed);
  free(bytes);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parts_are_slices),
      cmocka_unit_test(test_limit_on_response_and_parts),
      cmocka_unit_test(test_limit_messages),
      cmocka_unit_test(test_fixed_cp_ranks_len),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
