/* packctl: an SVG picture of a plan. Micro-batch slots run left to right
 * (grouped by mini-batch); in every slot each DP rank has one bar whose
 * height is the micro-batch cost. The hatched top of a bar is its padding
 * share, and a red line marks the slot's maximum: the time every rank spends
 * on that slot in lock step. A balanced plan has bars that reach the red
 * line. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "packctl_svg.h"

#define SVG_LEFT 96.0
#define SVG_RIGHT 24.0
#define SVG_TOP 72.0
#define SVG_PLOT_H 300.0
#define SVG_BOTTOM 84.0

static const Packd__V1__MicroBatch *micro_at(const Packd__V1__PlanResponse *resp, size_t r,
                                             size_t m, size_t j) {
  const Packd__V1__RankPlan *rp = resp->ranks[r];
  if (m >= rp->n_mini_batches)
    return NULL;
  const Packd__V1__MiniBatch *mb = rp->mini_batches[m];
  return j < mb->n_micro_batches ? mb->micro_batches[j] : NULL;
}

void packctl_svg_text(FILE *f, const char *s) {
  for (; s != NULL && *s != '\0'; s++) {
    switch (*s) {
    case '<':
      fputs("&lt;", f);
      break;
    case '>':
      fputs("&gt;", f);
      break;
    case '&':
      fputs("&amp;", f);
      break;
    case '"':
      fputs("&quot;", f);
      break;
    case '\'':
      fputs("&apos;", f);
      break;
    default:
      fputc(*s, f);
    }
  }
}

double packctl_svg_axis(double max) {
  double axis = 1;
  if (max > 0) {
    static const double steps[] = {1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10};
    double p10 = pow(10.0, floor(log10(max)));
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
      axis = steps[k] * p10;
      if (max <= axis)
        break;
    }
  }
  return axis;
}

int packctl_write_svg(FILE *f, const Packd__V1__PlanResponse *resp) {
  const Packd__V1__PlanStats zero = PACKD__V1__PLAN_STATS__INIT;
  const Packd__V1__PlanStats *st = resp->stats != NULL ? resp->stats : &zero;
  size_t dp = resp->n_ranks;
  size_t minis = 0;
  for (size_t r = 0; r < dp; r++)
    if (resp->ranks[r]->n_mini_batches > minis)
      minis = resp->ranks[r]->n_mini_batches;
  size_t *slots = calloc(minis == 0 ? 1 : minis, sizeof *slots);
  if (slots == NULL)
    return -1;
  size_t total_slots = 0;
  double max_cost = 0;
  for (size_t m = 0; m < minis; m++) {
    for (size_t r = 0; r < dp; r++) {
      const Packd__V1__RankPlan *rp = resp->ranks[r];
      if (m < rp->n_mini_batches && rp->mini_batches[m]->n_micro_batches > slots[m])
        slots[m] = rp->mini_batches[m]->n_micro_batches;
      for (size_t j = 0; m < rp->n_mini_batches && j < rp->mini_batches[m]->n_micro_batches; j++)
        if (rp->mini_batches[m]->micro_batches[j]->cost > max_cost)
          max_cost = rp->mini_batches[m]->micro_batches[j]->cost;
    }
    total_slots += slots[m];
  }
  /* The axis runs to a round number, split into five ticks. */
  max_cost = packctl_svg_axis(max_cost);

  /* Bar widths shrink with the number of bars, down to one pixel. */
  double bars = (double)(total_slots * (dp == 0 ? 1 : dp));
  double bw = bars > 0 ? 1200.0 / bars : 14.0;
  bw = bw > 14.0 ? 14.0 : bw < 1.0 ? 1.0 : bw;
  double bar_gap = bw >= 4.0 ? 1.0 : 0.0;
  double slot_gap = bw >= 4.0 ? bw : 4.0;
  double slot_w = (double)dp * (bw + bar_gap);
  double plot_w = (double)total_slots * (slot_w + slot_gap) + slot_gap;
  double width = SVG_LEFT + plot_w + SVG_RIGHT;
  if (width < 760)
    width = 760;
  double height = SVG_TOP + SVG_PLOT_H + SVG_BOTTOM;
  double base = SVG_TOP + SVG_PLOT_H;

  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
          width, height, width, height);
  fputs("<defs><pattern id=\"pad\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\" "
        "patternTransform=\"rotate(45)\"><rect width=\"4\" height=\"4\" fill=\"#dbe6f2\"/>"
        "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"4\" stroke=\"#4c78a8\" stroke-width=\"1.5\"/>"
        "</pattern></defs>\n",
        f);
  fprintf(f, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", width, height);
  fputs("<text x=\"12\" y=\"22\" font-size=\"15\" font-weight=\"bold\">packd plan ", f);
  packctl_svg_text(f, resp->plan_id);
  fputs("</text>\n", f);
  fprintf(f,
          "<text x=\"12\" y=\"42\">%u sequences, %zu DP ranks, %zu mini-batch%s, %u "
          "micro-batches per rank (lower bound %u); one bar per rank in each slot</text>\n",
          st->sequences, dp, minis, minis == 1 ? "" : "es", st->micro_batches_per_rank,
          st->micro_batches_lower_bound);
  fprintf(f,
          "<text x=\"12\" y=\"60\">lock-step efficiency %.4f (bound %.4f), DP imbalance %.4f, "
          "pad fraction %.4f, cap violations %u</text>\n",
          st->lockstep_efficiency, st->lockstep_efficiency_bound, st->dp_imbalance,
          st->pad_fraction, st->cap_violations);

  /* Axes and cost ticks. */
  fprintf(f,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n"
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
          SVG_LEFT, SVG_TOP, SVG_LEFT, base, SVG_LEFT, base, SVG_LEFT + plot_w, base);
  for (int k = 0; k <= 5; k++) {
    double y = base - SVG_PLOT_H * k / 5.0;
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.6g</text>\n",
            SVG_LEFT, y, SVG_LEFT + plot_w, y, SVG_LEFT - 6, y + 4, max_cost * k / 5.0);
  }
  fprintf(f,
          "<text x=\"14\" y=\"%.1f\" transform=\"rotate(-90 14 %.1f)\" "
          "text-anchor=\"middle\">cost</text>\n",
          SVG_TOP + SVG_PLOT_H / 2, SVG_TOP + SVG_PLOT_H / 2);

  double x = SVG_LEFT + slot_gap;
  size_t slot_no = 0;
  for (size_t m = 0; m < minis; m++) {
    double mini_x0 = x;
    for (size_t j = 0; j < slots[m]; j++, slot_no++) {
      double slot_max = 0;
      for (size_t r = 0; r < dp; r++) {
        const Packd__V1__MicroBatch *mi = micro_at(resp, r, m, j);
        double bx = x + (double)r * (bw + bar_gap);
        if (mi == NULL)
          continue;
        if (mi->cost > slot_max)
          slot_max = mi->cost;
        double h = SVG_PLOT_H * mi->cost / max_cost;
        double pad_share =
            mi->padded_tokens > 0 && mi->padded_tokens > mi->tokens
                ? (double)(mi->padded_tokens - mi->tokens) / (double)mi->padded_tokens
                : 0.0;
        double ph = h * pad_share;
        fprintf(f,
                "<g><title>rank %u, mini-batch %zu, micro-batch %zu: %zu seqs, %llu tokens, "
                "%llu padded, cost %.1f</title>",
                resp->ranks[r]->dp_rank, m, j, mi->n_seqs, (unsigned long long)mi->tokens,
                (unsigned long long)mi->padded_tokens, mi->cost);
        fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#4c78a8\"/>",
                bx, base - h + ph, bw, h - ph);
        if (ph > 0)
          fprintf(f,
                  "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
                  "fill=\"url(#pad)\"/>",
                  bx, base - h, bw, ph);
        fputs("</g>\n", f);
      }
      double ym = base - SVG_PLOT_H * slot_max / max_cost;
      fprintf(f,
              "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#d62728\" "
              "stroke-width=\"1.5\"/>\n",
              x - 1, ym, x + slot_w + 1, ym);
      if (slot_w >= 18)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%zu</text>\n",
                x + slot_w / 2, base + 14, j);
      x += slot_w + slot_gap;
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">mini-batch %zu</text>\n",
            (mini_x0 + x - slot_gap) / 2, base + 30, m);
    if (m + 1 < minis)
      fprintf(f,
              "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#888\" "
              "stroke-dasharray=\"4 3\"/>\n",
              x - slot_gap / 2, SVG_TOP, x - slot_gap / 2, base + 20);
  }

  /* Legend. */
  double ly = height - 22;
  fprintf(f,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"#4c78a8\"/>"
          "<text x=\"%.1f\" y=\"%.1f\">real tokens</text>\n",
          SVG_LEFT, ly - 9, SVG_LEFT + 20, ly);
  fprintf(f,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"url(#pad)\" "
          "stroke=\"#4c78a8\" stroke-width=\"0.5\"/><text x=\"%.1f\" y=\"%.1f\">padding</text>\n",
          SVG_LEFT + 120, ly - 9, SVG_LEFT + 140, ly);
  fprintf(f,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
          "stroke-width=\"1.5\"/><text x=\"%.1f\" y=\"%.1f\">slot maximum (lock-step "
          "time)</text>\n",
          SVG_LEFT + 220, ly - 4, SVG_LEFT + 240, ly - 4, SVG_LEFT + 246, ly);
  fputs("</svg>\n", f);
  free(slots);
  return ferror(f) ? -1 : 0;
}
