/* The server-wide budget of request bytes held in memory while calls are
 * decoded: the received message (compressed or not) and, for a compressed
 * message, the buffer it is inflated into. Each call is bounded by
 * --max-message-bytes on its own; this bounds the calls together, so that a
 * burst of large or highly compressed requests cannot take the process past
 * what its container gives it.
 *
 * A charge that would take the bytes in flight over the limit is refused at
 * once (the caller answers RESOURCE_EXHAUSTED naming the budget): a call
 * never waits while holding part of the budget, so two calls cannot each hold
 * half and wait for the other. When the bytes in flight fall back to zero
 * after a burst of at least PK_DECODE_TRIM_BYTES, the allocator is asked to
 * return its free memory to the system (malloc_trim), so that a burst does
 * not leave the process's resident size at its peak.
 *
 * A plain struct of atomics: initialize with pk_decode_budget_init; it owns
 * no memory. Thread-safe. */
#ifndef PK_DECODE_BUDGET_H
#define PK_DECODE_BUDGET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Bytes in flight that count as a burst worth trimming after. */
#define PK_DECODE_TRIM_BYTES (16LL << 20)

typedef struct pk_decode_budget {
  int64_t limit;                /* --max-decoded-bytes. */
  atomic_int_fast64_t used;     /* Bytes charged now. */
  atomic_int_fast64_t peak;     /* Highest `used` since start. */
  atomic_int_fast64_t burst;    /* Highest `used` since the last trim. */
  atomic_uint_fast64_t refused; /* Charges refused (calls answered RESOURCE_EXHAUSTED). */
  atomic_uint_fast64_t trims;   /* malloc_trim calls after bursts. */
  atomic_bool trimming;         /* One trim at a time. */
} pk_decode_budget_t;

void pk_decode_budget_init(pk_decode_budget_t *b, int64_t limit);

/* Adds n bytes to the bytes in flight when they stay within the limit and
 * returns true; otherwise changes nothing, counts a refusal and returns
 * false. n <= 0 is always granted. */
bool pk_decode_budget_take(pk_decode_budget_t *b, int64_t n);

/* Returns n bytes taken before. The caller that brings the bytes in flight
 * to zero after a burst trims the allocator. */
void pk_decode_budget_give(pk_decode_budget_t *b, int64_t n);

/* The memory this process may use: the cgroup's limit (v2 memory.max, or
 * v1 memory.limit_in_bytes) when it is set and below the machine's
 * physical memory, else the physical memory; -1 when neither is known.
 * root: the cgroup file system's mount point ("/sys/fs/cgroup"; tests pass
 * another folder). */
int64_t pk_memory_available(const char *root);

/* The default budget: a quarter of pk_memory_available("/sys/fs/cgroup"),
 * and never below min_bytes (one largest message must fit); min_bytes when
 * the memory is unknown. */
int64_t pk_decode_budget_default(int64_t min_bytes);

#endif
