/* packctl's output of dynamic context-parallel answers (PlanResponse.
 * dynamic_cp set; packctl_dcp.c). */
#ifndef PACKCTL_DCP_H
#define PACKCTL_DCP_H

#include <stdio.h>

#include "packd/v1/packd.pb-c.h"

/* The summary: the plan's figures, and per slot its cost and its groups'
 * sizes from GPU 0. */
int packctl_write_dcp_summary(FILE *f, const Packd__V1__PlanResponse *resp);
/* The SVG: GPUs down, slots across, a span per group shaded by its cost
 * relative to its slot's costliest. */
int packctl_write_dcp_svg(FILE *f, const Packd__V1__PlanResponse *resp);

#endif
