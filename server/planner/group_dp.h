/* batching.groups_on_rank: the per-rank micro-batching (group_micro.c) that
 * group_dp.c drives once whole groups have their ranks. Private to the
 * planner. */
#ifndef PK_GROUP_DP_H
#define PK_GROUP_DP_H

#include "pk_internal.h"

/* Scratch for packing one rank at a time, sized for the whole mini-batch
 * (pk_group_packer_init). A max tree over the micro-batches' rooms finds
 * the first one an item fits in O(log count), and a heap by cost (ties by
 * number, positions tracked) the cheapest. */
typedef struct pk_group_packer {
  const pk_ctx_t *ctx;
  pk_bin_t *bins;        /* n */
  uint64_t *tree;        /* 2 x leaves <= 4 n */
  uint32_t *heap, *hpos; /* n */
  uint32_t *starts;      /* n + 1: PADDED run starts */
  uint32_t leaves, count;
} pk_group_packer_t;

int pk_group_packer_init(pk_group_packer_t *pk, const pk_ctx_t *ctx);
void pk_group_packer_free(pk_group_packer_t *pk);

/* Packs one rank's items into the least count >= `count` that fits and
 * writes that count to *got: micro[j] for items[j] (the rank's items in item
 * order); ord holds the same items by size descending and pos maps an item
 * to its place j. Every micro-batch fits the cap and max_seqs and none is
 * empty. micro_algo AUTO: cost LPT under the cap (first fit decreasing where
 * LPT does not fit or the tokens fill 99 % of the cap) in PACKED mode,
 * contiguous runs of rows widest first in PADDED mode; other values: the
 * compatibility algorithm (pk_compat_micro). Returns 0, PK_EPRECOND or
 * PK_ENOMEM. */
int pk_group_pack_rank(pk_group_packer_t *pk, const uint32_t *items, const uint32_t *ord,
                       const uint32_t *pos, uint32_t nitems, uint32_t count, uint32_t *micro,
                       uint32_t *got);

/* micro_algo AUTO, every rank packed into m micro-batches: renumbers each
 * rank's micro-batches by cost, costliest first, so that slot j is a
 * lock-step column, and in PACKED mode lowers the column levels by moving
 * items between micro-batches of one rank. items: the ranks' items, rank r
 * at rstart[r] .. rstart[r + 1]; micro[q] is items[q]'s micro-batch,
 * rewritten in place. Returns 0 or PK_ENOMEM. */
int pk_group_columns(const pk_ctx_t *ctx, const uint32_t *items, const uint32_t *rstart,
                     uint32_t *micro, uint32_t m);

#endif
