/* Per-cause log rate limits (see log_limit.h). */
#include "log_limit.h"

void pk_log_limit_init(pk_log_limit_t *l, double interval) {
  l->interval = interval > 0 ? interval : 0;
  for (int i = 0; i < PK_LOG_LIMIT_CAUSES; i++) {
    atomic_init(&l->cause[i].next_ns, 0);
    atomic_init(&l->cause[i].held, 0);
  }
}

bool pk_log_limit_admit(pk_log_limit_t *l, int cause, double now, uint64_t *held) {
  *held = 0;
  if (cause < 0 || cause >= PK_LOG_LIMIT_CAUSES || l->interval <= 0)
    return true;
  uint64_t t = now > 0 ? (uint64_t)(now * 1e9) : 0;
  uint_fast64_t next = atomic_load(&l->cause[cause].next_ns);
  /* One thread wins the slot of each interval; the others count. */
  if (t < next || !atomic_compare_exchange_strong(&l->cause[cause].next_ns, &next,
                                                  t + (uint64_t)(l->interval * 1e9))) {
    atomic_fetch_add(&l->cause[cause].held, 1);
    return false;
  }
  *held = atomic_exchange(&l->cause[cause].held, 0);
  return true;
}
