/* packctl's output of dynamic context-parallel plans (PlanResponse.
 * dynamic_cp): the summary (the plan's figures and, per slot, its group
 * sizes left to right and its cost) and the SVG (GPUs down, slots across,
 * every group a span over its GPUs whose shade grows with its cost per GPU
 * relative to the slot's costliest). */
#include <stdio.h>

#include "packctl_dcp.h"
#include "packctl_svg.h"

int packctl_write_dcp_summary(FILE *f, const Packd__V1__PlanResponse *resp) {
  const Packd__V1__DynamicCpPlan *p = resp->dynamic_cp;
  size_t nseq = 0;
  for (size_t j = 0; j < p->n_slots; j++)
    for (size_t g = 0; g < p->slots[j]->n_groups; g++)
      nseq += p->slots[j]->groups[g]->n_seqs;
  fprintf(f, "plan %s (dynamic CP)\n",
          resp->plan_id != NULL && resp->plan_id[0] ? resp->plan_id : "(no id)");
  fprintf(f, "  %zu sequences, a pool of %u GPUs, %zu slots (lower bound %u)\n\n", nseq, p->pool,
          p->n_slots, p->slots_lower_bound);
  fprintf(f, "%6s %12s  %s\n", "slot", "cost", "group sizes (GPU 0 first)");
  for (size_t j = 0; j < p->n_slots; j++) {
    const Packd__V1__DcpSlot *s = p->slots[j];
    fprintf(f, "%6zu %12.1f ", j, s->cost);
    for (size_t g = 0; g < s->n_groups; g++)
      fprintf(f, " %u", s->groups[g]->size);
    fputc('\n', f);
  }
  fputc('\n', f);
  fprintf(f, "step cost               %.1f (lower bound %.1f)\n", p->step_cost,
          p->step_cost_lower_bound);
  fprintf(f, "efficiency              %.5f (pool work / pool / step)\n", p->efficiency);
  fprintf(f, "largest GPU share       %llu tokens\n", (unsigned long long)p->max_gpu_tokens);
  fprintf(f, "cap violations          %u\n", p->cap_violations);
  fprintf(f, "idle GPU-slots          %u\n", p->idle_gpu_slots);
  fprintf(f, "plan time               %llu us\n", (unsigned long long)p->plan_time_us);
  return ferror(f) ? -1 : 0;
}

/* The sequence indices a summary line lists before it only counts the rest. */
#define DCP_SUMMARY_SEQS 8

int packctl_write_dcp_rank_summary(FILE *f, const Packd__V1__RankPlan *rk) {
  const Packd__V1__DcpRankPlan *v = rk->dynamic_cp;
  fprintf(f, "plan_id %s  GPU %u of a pool of %u  slots %zu (dynamic CP)\n",
          rk->plan_id != NULL ? rk->plan_id : "", rk->dp_rank, v->pool, v->n_slots);
  fprintf(f, "%6s %6s %5s %6s %9s %10s %10s %12s  %s\n", "slot", "group", "size", "rank", "GPUs",
          "tokens", "shard", "cost", "sequences");
  for (size_t j = 0; j < v->n_slots; j++) {
    const Packd__V1__DcpRankSlot *s = v->slots[j];
    const Packd__V1__DcpGpu *u = s->gpu;
    const Packd__V1__DcpGroup *g = s->group;
    if (u == NULL || g == NULL) {
      fprintf(f, "%6zu   idle\n", j);
      continue;
    }
    char gpus[32];
    snprintf(gpus, sizeof gpus, "%u-%u", g->first_gpu, g->first_gpu + g->size - 1);
    fprintf(f, "%6zu %6u %5u %6u %9s %10llu %10llu %12.1f ", j, u->group, u->size, u->rank_in_group,
            gpus, (unsigned long long)g->tokens, (unsigned long long)u->shard_tokens, g->cost);
    for (size_t k = 0; k < g->n_seqs && k < DCP_SUMMARY_SEQS; k++)
      fprintf(f, " %u", g->seqs[k]);
    if (g->n_seqs > DCP_SUMMARY_SEQS)
      fprintf(f, " ... (%zu more)", g->n_seqs - DCP_SUMMARY_SEQS);
    fputc('\n', f);
  }
  return ferror(f) ? -1 : 0;
}

#define DCP_LEFT 72.0
#define DCP_TOP 56.0
#define DCP_CELL_W 36.0
#define DCP_CELL_H 18.0

int packctl_write_dcp_svg(FILE *f, const Packd__V1__PlanResponse *resp) {
  const Packd__V1__DynamicCpPlan *p = resp->dynamic_cp;
  /* At least wide enough for the title and the legend. */
  double w = DCP_LEFT + DCP_CELL_W * (double)p->n_slots + 24;
  if (w < 640)
    w = 640;
  double h = DCP_TOP + DCP_CELL_H * (double)p->pool + 48;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "font-family=\"sans-serif\" font-size=\"11\">\n",
          w, h);
  fputs("<text x=\"8\" y=\"20\" font-size=\"14\">dynamic CP plan ", f);
  packctl_svg_text(f, resp->plan_id);
  fprintf(f, ": %zu slots on %u GPUs, step %.1f (bound %.1f)</text>\n", p->n_slots, p->pool,
          p->step_cost, p->step_cost_lower_bound);
  fputs("<text x=\"8\" y=\"38\">a span per group over its GPUs (down), one column per slot "
        "(across); darker: closer to the slot's cost; the number is the group size</text>\n",
        f);
  for (uint32_t g = 0; g < p->pool; g++)
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">GPU %u</text>\n", DCP_LEFT - 6,
            DCP_TOP + DCP_CELL_H * (g + 0.7), g);
  for (size_t j = 0; j < p->n_slots; j++) {
    const Packd__V1__DcpSlot *s = p->slots[j];
    double x = DCP_LEFT + DCP_CELL_W * (double)j;
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%zu</text>\n",
            x + DCP_CELL_W / 2, DCP_TOP + DCP_CELL_H * p->pool + 16, j);
    for (size_t k = 0; k < s->n_groups; k++) {
      const Packd__V1__DcpGroup *grp = s->groups[k];
      double share = s->cost > 0 ? grp->cost / s->cost : 1;
      int shade = (int)(230 - 150 * share);
      fprintf(f,
              "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
              "fill=\"rgb(%d,%d,255)\" stroke=\"black\"><title>slot %zu, GPUs %u-%u, %zu "
              "sequences, cost %.1f</title></rect>\n",
              x + 1, DCP_TOP + DCP_CELL_H * grp->first_gpu + 1, DCP_CELL_W - 2,
              DCP_CELL_H * grp->size - 2, shade, shade, j, grp->first_gpu,
              grp->first_gpu + grp->size - 1, grp->n_seqs, grp->cost);
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%u</text>\n",
              x + DCP_CELL_W / 2, DCP_TOP + DCP_CELL_H * (grp->first_gpu + grp->size / 2.0) + 4,
              grp->size);
    }
  }
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">slot</text>\n", w / 2, h - 8);
  fputs("</svg>\n", f);
  return ferror(f) ? -1 : 0;
}
