/* The assignment an algorithm produces: every sequence's group and every
 * group's size, slot and first GPU. A growable table the candidates fill
 * and pk_dcp_plan turns into a plan; the algorithms and the state call into
 * it, and it calls into nothing of theirs. */
#include <stdlib.h>
#include <string.h>

#include "dcp.h"

int dcp_assign_init(dcp_assign_t *a, uint32_t n, uint32_t cap_groups) {
  *a = (dcp_assign_t){0};
  a->cap_groups = PK_MAX(cap_groups, 16);
  a->seq_group = pk_malloc_array(n, sizeof *a->seq_group);
  a->gk = pk_malloc_array(a->cap_groups, sizeof *a->gk);
  a->slot = pk_malloc_array(a->cap_groups, sizeof *a->slot);
  a->first = pk_malloc_array(a->cap_groups, sizeof *a->first);
  if (a->seq_group == NULL || a->gk == NULL || a->slot == NULL || a->first == NULL) {
    dcp_assign_free(a);
    return PK_ENOMEM;
  }
  return 0;
}

static bool grow(uint32_t **p, uint32_t cap) {
  uint32_t *q = realloc(*p, (size_t)cap * sizeof *q);
  if (q == NULL)
    return false;
  *p = q;
  return true;
}

uint32_t dcp_assign_add(dcp_assign_t *a, uint32_t k, uint32_t slot, uint32_t first) {
  if (a->ngroups == a->cap_groups) {
    if (a->cap_groups > UINT32_MAX / 4)
      return UINT32_MAX;
    uint32_t cap = 2 * a->cap_groups;
    if (!grow(&a->gk, cap) || !grow(&a->slot, cap) || !grow(&a->first, cap))
      return UINT32_MAX;
    a->cap_groups = cap;
  }
  a->gk[a->ngroups] = k;
  a->slot[a->ngroups] = slot;
  a->first[a->ngroups] = first;
  return a->ngroups++;
}

void dcp_assign_free(dcp_assign_t *a) {
  free(a->seq_group);
  free(a->gk);
  free(a->slot);
  free(a->first);
  memset(a, 0, sizeof *a);
}
