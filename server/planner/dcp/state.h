/* The working state of one dynamic-CP AUTO candidate: groups with their
 * running totals and member lists, and their slots. auto.c and shelf.c
 * build it, slots.c places the groups and fills idle GPUs, split.c halves
 * groups, level.c moves sequences between groups. Invariants between stages:
 * every sequence is in exactly one group; a group's count, sum (aligned
 * tokens at its size) and load (per-GPU cost, group terms included) match
 * its members; every group is within the cap and max_seqs; every member's
 * size index is at least its kmin; no group is empty. */
#ifndef PK_DCP_STATE_H
#define PK_DCP_STATE_H

#include "dcp.h"

typedef struct dcp_grp {
  uint32_t k;     /* Size index. */
  uint32_t count; /* Members. */
  uint64_t sum;   /* Aligned tokens at size[k]. */
  double load;    /* Per GPU. */
  uint32_t slot, first;
  uint32_t head;  /* First member, UINT32_MAX when empty. */
  uint32_t snext; /* Next group of the same slot, UINT32_MAX at the end. */
} dcp_grp_t;

typedef struct dcp_state {
  const dcp_cfg_t *cfg;
  const dcp_items_t *it;
  const pk_limits_t *limits;
  uint32_t m;          /* Slots. */
  uint32_t *group;     /* n: each sequence's group. */
  uint32_t *nxt, *prv; /* n: member lists (doubly linked, UINT32_MAX ends). */
  dcp_grp_t *g;
  uint32_t ng, cap_g;
  uint32_t *shead; /* m: first group of each slot (a list through snext). */
  uint32_t *used;  /* m: GPUs of each slot in groups. */
  double *smax;    /* m: each slot's costliest group. */
} dcp_state_t;

int dcp_state_init(dcp_state_t *s, const dcp_cfg_t *cfg, const dcp_items_t *it,
                   const pk_limits_t *limits, uint32_t m);
void dcp_state_free(dcp_state_t *s);
/* A new empty group of size index k; UINT32_MAX when out of memory. */
uint32_t dcp_state_new_group(dcp_state_t *s, uint32_t k);
void dcp_state_add(dcp_state_t *s, uint32_t grp, uint32_t i);
/* The same with sequence i's aligned length and cost at the group's size
 * known to the caller (they must be dcp_item_aligned's and
 * dcp_item_cost's). */
void dcp_state_add_known(dcp_state_t *s, uint32_t grp, uint32_t i, uint64_t aligned, double cost);
/* Puts group grp into slot j (taking it out of its slot, if any). */
void dcp_state_set_slot(dcp_state_t *s, uint32_t grp, uint32_t j);
void dcp_state_remove(dcp_state_t *s, uint32_t i);
/* Changes a group's size index and recomputes its totals. */
void dcp_state_resize(dcp_state_t *s, uint32_t grp, uint32_t k);
/* Whether every member of group grp fits a group of size index k. */
bool dcp_state_fits_at(const dcp_state_t *s, uint32_t grp, uint32_t k);
/* The step: the sum of smax (recomputed from the groups). */
double dcp_state_step(dcp_state_t *s);
/* Copies the state into an assignment (out initialised by the caller). */
int dcp_state_export(const dcp_state_t *s, dcp_assign_t *out);

/* shelf.c: the groups and slots of one size policy (auto.c), packed as
 * shelves: sequences costliest first; the open slot's height is its first
 * sequence's group cost; a sequence opens a group of its size while the
 * slot has free GPUs, else joins the least loaded group of its size that
 * stays under the height and the cap, else opens the next slot. Sets s->m.
 * beat: a step to beat (INFINITY: none); the packing stops once its slots'
 * floor (what they cost at least, whatever the filling and the splitting
 * do) is above it. Returns 0, 1 when it stopped so, or PK_ENOMEM. */
int dcp_shelf(dcp_state_t *s, const uint32_t *k, const uint32_t *order, double beat);
/* slots.c: gives every slot's free GPUs work (see dcp_place). Returns 0 or
 * a negative code. */
int dcp_fill(dcp_state_t *s);
/* slots.c: places the groups into s->m slots as aligned blocks (largest
 * size first, each to the slot whose costliest group it fits under best),
 * then gives every slot's free GPUs work by splitting or growing its
 * costliest groups. Returns 0, 1 when the groups do not fit the slots, or
 * PK_ENOMEM. */
int dcp_place(dcp_state_t *s);
/* split.c: splits groups into their aligned halves where neither half
 * costs more than its slot's costliest group (power-of-two sizes only).
 * Returns 0 or a negative code. */
int dcp_split(dcp_state_t *s);
/* level.c: moves and swaps of sequences between groups, each lowering the
 * step; never breaks an invariant. Returns 0 or PK_ECANCELED. */
int dcp_level(dcp_state_t *s);

#endif
