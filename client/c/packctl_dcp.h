/* packctl's output of dynamic context-parallel answers (PlanResponse.
 * dynamic_cp set; packctl_dcp.c). */
#ifndef PACKCTL_DCP_H
#define PACKCTL_DCP_H

#include <stdio.h>

#include "packd/v1/packd.pb-c.h"

/* The summary: the plan's figures, and per slot its cost and its groups'
 * sizes from GPU 0. */
int packctl_write_dcp_summary(FILE *f, const Packd__V1__PlanResponse *resp);
/* The summary of one GPU's part (GetRankPlan's RankPlan with dynamic_cp
 * set): per slot its group, the group's size and GPUs, the GPU's CP rank,
 * the group's sequences, its tokens and the GPU's shard. */
int packctl_write_dcp_rank_summary(FILE *f, const Packd__V1__RankPlan *rk);
/* The SVG: GPUs down, slots across, a span per group shaded by its cost
 * relative to its slot's costliest. */
int packctl_write_dcp_svg(FILE *f, const Packd__V1__PlanResponse *resp);

#endif
