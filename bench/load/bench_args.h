/* The command line the load benches share: `PROGRAM REQUEST.bin [N]`, a
 * packed PlanRequest read whole and a repetition count (default 200). */
#ifndef PK_BENCH_ARGS_H
#define PK_BENCH_ARGS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Returns the request bytes (malloc'd; *len of them) and *n, or NULL after
 * printing why (the caller exits 2). */
static inline uint8_t *bench_read_args(int argc, char **argv, size_t *len, int *n) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s REQUEST.bin [N]\n", argv[0]);
    return NULL;
  }
  *n = argc > 2 ? atoi(argv[2]) : 200;
  if (*n < 1)
    *n = 1;
  FILE *f = fopen(argv[1], "rb");
  if (f == NULL) {
    fprintf(stderr, "cannot open %s\n", argv[1]);
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(size > 0 ? (size_t)size : 1);
  *len = buf != NULL ? fread(buf, 1, (size_t)(size > 0 ? size : 0), f) : 0;
  fclose(f);
  if (buf == NULL)
    fprintf(stderr, "cannot allocate %ld bytes\n", size);
  return buf;
}

#endif
