/* "Did you mean": the nearest valid name to a misspelt one, for packctl's
 * flag parsers and its JSON manifest reader.
 *
 * Nearness is the optimal string alignment distance (insertions,
 * deletions, substitutions and swaps of two adjacent characters, each
 * costing 1), case-insensitive, so that `--max-tokns`, `--max_tokens` and
 * `--dp-balnace` all find their flag. A name is suggested only when it is
 * close relative to its length (at most 1 edit for names of up to 4
 * characters, 2 up to 8, 3 beyond), so that nonsense gets no suggestion
 * rather than an arbitrary one.
 *
 * Header-only (static inline) because both packctl and the targets that
 * compile the input parser alone (its unit test and fuzz target) use it.
 * Nothing here allocates: names longer than PACKCTL_SUGGEST_MAX are never
 * suggested. */
#ifndef PACKCTL_SUGGEST_H
#define PACKCTL_SUGGEST_H

#include <stddef.h>
#include <string.h>

#define PACKCTL_SUGGEST_MAX 64

static inline char packctl_suggest_fold(char c) {
  if (c >= 'A' && c <= 'Z')
    return (char)(c - 'A' + 'a');
  return c == '_' ? '-' : c;
}

/* The distance between a and b, or PACKCTL_SUGGEST_MAX + 1 when either is
 * longer than PACKCTL_SUGGEST_MAX. `_` and `-` count as the same
 * character. */
static inline size_t packctl_edit_distance(const char *a, const char *b) {
  size_t n = strlen(a), m = strlen(b);
  if (n > PACKCTL_SUGGEST_MAX || m > PACKCTL_SUGGEST_MAX)
    return PACKCTL_SUGGEST_MAX + 1;
  /* Three rows of the dynamic programme: i-2, i-1 and i. */
  size_t rows[3][PACKCTL_SUGGEST_MAX + 1];
  for (size_t j = 0; j <= m; j++)
    rows[0][j] = j;
  for (size_t i = 1; i <= n; i++) {
    size_t *cur = rows[i % 3], *prev = rows[(i - 1) % 3], *prev2 = rows[(i + 1) % 3];
    cur[0] = i;
    for (size_t j = 1; j <= m; j++) {
      char ca = packctl_suggest_fold(a[i - 1]), cb = packctl_suggest_fold(b[j - 1]);
      size_t best = prev[j - 1] + (ca == cb ? 0 : 1);
      if (prev[j] + 1 < best)
        best = prev[j] + 1;
      if (cur[j - 1] + 1 < best)
        best = cur[j - 1] + 1;
      if (i > 1 && j > 1 && ca == packctl_suggest_fold(b[j - 2]) &&
          packctl_suggest_fold(a[i - 2]) == cb && prev2[j - 2] + 1 < best)
        best = prev2[j - 2] + 1;
      cur[j] = best;
    }
  }
  return rows[n % 3][m];
}

/* The candidate nearest to word (the first of equals), or NULL when none is
 * close enough. NULL entries of candidates are skipped. */
static inline const char *packctl_nearest(const char *word, const char *const *candidates,
                                          size_t n) {
  size_t len = strlen(word);
  size_t limit = len <= 4 ? 1 : len <= 8 ? 2 : 3;
  const char *best = NULL;
  size_t best_d = limit + 1;
  for (size_t i = 0; i < n; i++) {
    if (candidates[i] == NULL)
      continue;
    size_t d = packctl_edit_distance(word, candidates[i]);
    if (d < best_d) {
      best_d = d;
      best = candidates[i];
    }
  }
  return best;
}

#endif
