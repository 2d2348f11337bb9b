/* The error plumbing the codec's files share (codec.c, plan_bytes.c):
 * NCCL-style checks that jump to the one exit label of a function, and a
 * message writer that respects the caller's buffer. Internal; not
 * installed. */
#ifndef PK_CODEC_CHECK_H
#define PK_CODEC_CHECK_H

#include <stddef.h>
#include <stdio.h>

/* Jumps to the one exit label (`done`) with rc set when cond is false. */
#define PK_CODEC_CHECK(cond, code)                                                                 \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      rc = (code);                                                                                 \
      goto done;                                                                                   \
    }                                                                                              \
  } while (0)

/* Writes msg into err when there is room (err may be NULL). */
static inline void pk_codec_msg(char *err, size_t errlen, const char *msg) {
  if (err != NULL && errlen > 0)
    snprintf(err, errlen, "%s", msg);
}

#endif
