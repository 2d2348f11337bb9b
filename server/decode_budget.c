/* The decoded-bytes budget (see decode_budget.h). */
#define _GNU_SOURCE /* malloc_trim */
#include "decode_budget.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void pk_decode_budget_init(pk_decode_budget_t *b, int64_t limit) {
  b->limit = limit;
  atomic_init(&b->used, 0);
  atomic_init(&b->peak, 0);
  atomic_init(&b->burst, 0);
  atomic_init(&b->refused, 0);
  atomic_init(&b->trims, 0);
  atomic_init(&b->trimming, false);
}

static void raise_to(atomic_int_fast64_t *v, int64_t x) {
  int_fast64_t cur = atomic_load(v);
  while (cur < x && !atomic_compare_exchange_weak(v, &cur, x)) {
  }
}

bool pk_decode_budget_take(pk_decode_budget_t *b, int64_t n) {
  if (n <= 0)
    return true;
  int_fast64_t cur = atomic_load(&b->used);
  do {
    if (cur > b->limit - n) {
      atomic_fetch_add(&b->refused, 1);
      return false;
    }
  } while (!atomic_compare_exchange_weak(&b->used, &cur, cur + n));
  raise_to(&b->peak, cur + n);
  raise_to(&b->burst, cur + n);
  return true;
}

void pk_decode_budget_give(pk_decode_budget_t *b, int64_t n) {
  if (n <= 0)
    return;
  int_fast64_t left = atomic_fetch_sub(&b->used, n) - n;
  if (left != 0 || atomic_load(&b->burst) < PK_DECODE_TRIM_BYTES)
    return;
  bool expected = false;
  if (!atomic_compare_exchange_strong(&b->trimming, &expected, true))
    return;
  /* The burst is over: its buffers are freed, and glibc keeps what it can
   * reuse (arena tops, fragmented chunks) unless asked to give it back. */
  atomic_store(&b->burst, 0);
  malloc_trim(0);
  atomic_fetch_add(&b->trims, 1);
  atomic_store(&b->trimming, false);
}

/* The first number in a file; -1 when the file is missing, says "max" or
 * holds no number. */
static int64_t read_number(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  char line[64] = "";
  char *ok = fgets(line, sizeof line, f);
  fclose(f);
  if (ok == NULL || line[0] < '0' || line[0] > '9')
    return -1;
  char *end;
  unsigned long long v = strtoull(line, &end, 10);
  return v > (unsigned long long)INT64_MAX ? INT64_MAX : (int64_t)v;
}

int64_t pk_memory_available(const char *root) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  int64_t phys = pages > 0 && page > 0 ? (int64_t)pages * page : -1;
  static const char *const files[] = {"memory.max", "memory/memory.limit_in_bytes"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, files[i]);
    int64_t lim = read_number(path);
    /* cgroup v1 writes a huge number (about 2^63) when there is no limit. */
    if (lim > 0 && (phys < 0 || lim < phys))
      return lim;
  }
  return phys;
}

int64_t pk_decode_budget_default(int64_t min_bytes) {
  int64_t mem = pk_memory_available("/sys/fs/cgroup");
  int64_t quarter = mem > 0 ? mem / 4 : -1;
  return quarter > min_bytes ? quarter : min_bytes;
}
