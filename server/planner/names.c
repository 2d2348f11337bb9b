/* Names of the request enums, as packctl flags and JSON summaries spell
 * them, and their reverse lookup. */
#include <string.h>

#include "pk_internal.h"

static const char *const dp_balance_names[] = {"auto", "none",      "kk",           "kk_equal",
                                               "lpt",  "lpt_equal", "sorted_stride"};
static const char *const micro_algo_names[] = {"auto",     "next_fit", "ffd",        "mffd",
                                               "kk_count", "lpt_cap",  "shared_cuts"};
static const char *const mode_names[] = {"packed", "padded", "fixed"};
static const char *const order_names[] = {"cost_desc", "heavy_middle", "original"};
static const char *const cp_algo_names[] = {"zigzag", "ulysses"};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const char *name_of(const char *const *names, size_t count, uint32_t v) {
  return v < count ? names[v] : NULL;
}

/* Accepts the lowercase name, with '-' or '_' as separator, in any case. */
static int parse_name(const char *const *names, size_t count, const char *s, uint32_t *value) {
  if (s == NULL)
    return PK_EINVAL;
  for (size_t i = 0; i < count; i++) {
    const char *a = names[i];
    const char *b = s;
    while (*a != '\0' && *b != '\0') {
      char cb = *b;
      if (cb >= 'A' && cb <= 'Z')
        cb = (char)(cb - 'A' + 'a');
      if (cb == '-')
        cb = '_';
      if (cb != *a)
        break;
      a++;
      b++;
    }
    if (*a == '\0' && *b == '\0') {
      *value = (uint32_t)i;
      return 0;
    }
  }
  return PK_EINVAL;
}

const char *pk_dp_balance_name(uint32_t v) {
  return name_of(dp_balance_names, COUNT(dp_balance_names), v);
}
const char *pk_micro_algo_name(uint32_t v) {
  return name_of(micro_algo_names, COUNT(micro_algo_names), v);
}
const char *pk_mode_name(uint32_t v) {
  return name_of(mode_names, COUNT(mode_names), v);
}
const char *pk_order_name(uint32_t v) {
  return name_of(order_names, COUNT(order_names), v);
}
const char *pk_cp_algo_name(uint32_t v) {
  return name_of(cp_algo_names, COUNT(cp_algo_names), v);
}
int pk_dp_balance_parse(const char *s, uint32_t *value) {
  return parse_name(dp_balance_names, COUNT(dp_balance_names), s, value);
}
int pk_micro_algo_parse(const char *s, uint32_t *value) {
  return parse_name(micro_algo_names, COUNT(micro_algo_names), s, value);
}
int pk_mode_parse(const char *s, uint32_t *value) {
  return parse_name(mode_names, COUNT(mode_names), s, value);
}
int pk_order_parse(const char *s, uint32_t *value) {
  return parse_name(order_names, COUNT(order_names), s, value);
}
int pk_cp_algo_parse(const char *s, uint32_t *value) {
  return parse_name(cp_algo_names, COUNT(cp_algo_names), s, value);
}
