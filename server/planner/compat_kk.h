/* k-way Karmarkar-Karp largest differencing (compat_kk.c): the partitioning
 * method verl and ROLL use for DP balance and micro-batches, and MindSpeed-RL
 * for its final micro-batch split. Private to the planner; owned by the
 * compatibility algorithms (compat_dp.c, compat_micro.c). */
#ifndef PK_COMPAT_KK_H
#define PK_COMPAT_KK_H

#include <stdbool.h>
#include <stdint.h>

/* Partitions the m values val[0..m) into k parts and writes part[j] (0..k-1)
 * for every value j.
 *
 * Method (the largest differencing method of Karmarkar and Karp,
 * generalised to k sets): a state is k sets kept in
 * descending order of sum; states sit in a heap by spread (largest set sum
 * minus smallest), largest first; the two states with the largest spread are
 * merged by pairing the i-th largest set of the first with the i-th smallest
 * set of the second, until one state is left. Without `equal` every value
 * starts as its own state (verl equal_size=False). With `equal` the values
 * are sorted ascending and cut into runs of k, one state per run with one
 * value per set (verl equal_size=True): every part gets exactly m/k values
 * when k divides m; otherwise zero-valued virtual values are added at the
 * small end so that parts get floor(m/k) or ceil(m/k) values.
 *
 * Parts are numbered by the final set order: descending sum, ties by more
 * values first, then by the smallest value number. Ties between states go to
 * the state whose largest set is larger, then to the older state. The result
 * is deterministic.
 *
 * States store only their non-empty sets (empty sets are implicitly the
 * smallest), so memory is O(m + k) instead of O(m * k).
 *
 * The caller owns val and part; part has m entries. Values must be finite and
 * >= 0. Returns 0, PK_EINVAL (k == 0 or a bad value) or PK_ENOMEM. */
int pk_kk_partition(const double *val, uint32_t m, uint32_t k, bool equal, uint32_t *part);

#endif
