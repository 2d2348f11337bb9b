/* The working state of the dynamic-CP AUTO planner (state.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"

int dcp_state_init(dcp_state_t *s, const dcp_cfg_t *cfg, const dcp_items_t *it,
                   const pk_limits_t *limits, uint32_t m) {
  *s = (dcp_state_t){.cfg = cfg, .it = it, .limits = limits, .m = m};
  uint32_t n = it->n;
  s->group = pk_malloc_array(n, sizeof *s->group);
  s->nxt = pk_malloc_array(n, sizeof *s->nxt);
  s->prv = pk_malloc_array(n, sizeof *s->prv);
  s->used = pk_calloc(m, sizeof *s->used);
  s->shead = pk_malloc_array(m, sizeof *s->shead);
  s->smax = pk_calloc(m, sizeof *s->smax);
  s->cap_g = 64;
  s->g = pk_malloc_array(s->cap_g, sizeof *s->g);
  if (s->group == NULL || s->nxt == NULL || s->prv == NULL || s->used == NULL || s->smax == NULL ||
      s->g == NULL) {
    dcp_state_free(s);
    return PK_ENOMEM;
  }
  for (uint32_t i = 0; i < n; i++)
    s->group[i] = UINT32_MAX;
  for (uint32_t j = 0; j < m; j++)
    s->shead[j] = UINT32_MAX;
  return 0;
}

void dcp_state_free(dcp_state_t *s) {
  free(s->group);
  free(s->nxt);
  free(s->prv);
  free(s->used);
  free(s->shead);
  free(s->smax);
  free(s->g);
  memset(s, 0, sizeof *s);
}

uint32_t dcp_state_new_group(dcp_state_t *s, uint32_t k) {
  if (s->ng == s->cap_g) {
    dcp_grp_t *g =
        s->cap_g > UINT32_MAX / 2 ? NULL : realloc(s->g, 2 * (size_t)s->cap_g * sizeof *g);
    if (g == NULL)
      return UINT32_MAX;
    s->g = g;
    s->cap_g *= 2;
  }
  s->g[s->ng] = (dcp_grp_t){.k = k,
                            .load = dcp_group_base(s->cfg, s->cfg->size[k]),
                            .slot = UINT32_MAX,
                            .first = UINT32_MAX,
                            .head = UINT32_MAX,
                            .snext = UINT32_MAX};
  return s->ng++;
}

void dcp_state_add(dcp_state_t *s, uint32_t grp, uint32_t i) {
  uint32_t k = s->g[grp].k;
  dcp_state_add_known(s, grp, i, dcp_item_aligned(s->cfg, s->it, i, k),
                      dcp_item_cost(s->cfg, s->it, i, k));
}

void dcp_state_add_known(dcp_state_t *s, uint32_t grp, uint32_t i, uint64_t aligned, double cost) {
  dcp_grp_t *g = &s->g[grp];
  g->sum += aligned;
  g->load += cost;
  g->count++;
  s->group[i] = grp;
  s->prv[i] = UINT32_MAX;
  s->nxt[i] = g->head;
  if (g->head != UINT32_MAX)
    s->prv[g->head] = i;
  g->head = i;
}

void dcp_state_set_slot(dcp_state_t *s, uint32_t grp, uint32_t j) {
  dcp_grp_t *g = &s->g[grp];
  if (g->slot != UINT32_MAX) {
    uint32_t *at = &s->shead[g->slot];
    while (*at != grp)
      at = &s->g[*at].snext;
    *at = g->snext;
  }
  g->slot = j;
  g->snext = s->shead[j];
  s->shead[j] = grp;
}

void dcp_state_remove(dcp_state_t *s, uint32_t i) {
  dcp_grp_t *g = &s->g[s->group[i]];
  g->sum -= dcp_item_aligned(s->cfg, s->it, i, g->k);
  g->load -= dcp_item_cost(s->cfg, s->it, i, g->k);
  g->count--;
  if (s->prv[i] != UINT32_MAX)
    s->nxt[s->prv[i]] = s->nxt[i];
  else
    g->head = s->nxt[i];
  if (s->nxt[i] != UINT32_MAX)
    s->prv[s->nxt[i]] = s->prv[i];
  s->group[i] = UINT32_MAX;
  if (g->count == 0) /* Sums of doubles drift; an empty group is exact. */
    g->load = dcp_group_base(s->cfg, s->cfg->size[g->k]);
}

void dcp_state_resize(dcp_state_t *s, uint32_t grp, uint32_t k) {
  dcp_grp_t *g = &s->g[grp];
  g->k = k;
  g->sum = 0;
  g->load = dcp_group_base(s->cfg, s->cfg->size[k]);
  for (uint32_t i = g->head; i != UINT32_MAX; i = s->nxt[i]) {
    g->sum += dcp_item_aligned(s->cfg, s->it, i, k);
    g->load += dcp_item_cost(s->cfg, s->it, i, k);
  }
}

bool dcp_state_fits_at(const dcp_state_t *s, uint32_t grp, uint32_t k) {
  const dcp_grp_t *g = &s->g[grp];
  uint64_t sum = 0;
  for (uint32_t i = g->head; i != UINT32_MAX; i = s->nxt[i]) {
    if (k < s->it->kmin[i])
      return false;
    sum += dcp_item_aligned(s->cfg, s->it, i, k);
  }
  return sum <= (uint64_t)s->cfg->size[k] * s->cfg->cap;
}

double dcp_state_step(dcp_state_t *s) {
  for (uint32_t j = 0; j < s->m; j++)
    s->smax[j] = 0;
  for (uint32_t q = 0; q < s->ng; q++)
    if (s->g[q].slot != UINT32_MAX)
      s->smax[s->g[q].slot] = fmax(s->smax[s->g[q].slot], s->g[q].load);
  double step = 0;
  for (uint32_t j = 0; j < s->m; j++)
    step += s->smax[j];
  return step;
}

int dcp_state_export(const dcp_state_t *s, dcp_assign_t *out) {
  memcpy(out->seq_group, s->group, (size_t)s->it->n * sizeof *s->group);
  out->ngroups = 0;
  out->slots = s->m;
  for (uint32_t q = 0; q < s->ng; q++)
    if (dcp_assign_add(out, s->g[q].k, s->g[q].slot, s->g[q].first) == UINT32_MAX)
      return PK_ENOMEM;
  return 0;
}
