/* packctl: doubles spelled as Python's repr() spells them, for the JSON
 * output (packctl_json.c), the summaries and the calibration report. */
#include "packctl_number.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void packctl_format_double(double v, char *buf, size_t len) {
  if (isnan(v)) {
    snprintf(buf, len, "nan");
    return;
  }
  if (isinf(v)) {
    snprintf(buf, len, v < 0 ? "-inf" : "inf");
    return;
  }
  if (v == 0) {
    snprintf(buf, len, signbit(v) ? "-0.0" : "0.0");
    return;
  }
  /* The shortest digit string that reads back as v (Python's repr). */
  char e[48];
  for (int p = 1; p <= 17; p++) {
    snprintf(e, sizeof e, "%.*e", p - 1, v);
    if (strtod(e, NULL) == v)
      break;
  }
  const char *s = e;
  bool neg = *s == '-';
  if (neg)
    s++;
  char digits[24];
  int nd = 0;
  for (; *s != '\0' && *s != 'e'; s++)
    if (*s >= '0' && *s <= '9' && nd < (int)sizeof digits - 1)
      digits[nd++] = *s;
  int exp10 = *s == 'e' ? atoi(s + 1) : 0;
  while (nd > 1 && digits[nd - 1] == '0')
    nd--;
  digits[nd] = '\0';
  /* Python writes value = 0.DIGITS * 10^decpt in exponent form when
   * decpt <= -4 or decpt > 16, else in positional form with at least one
   * digit after the point. */
  int decpt = exp10 + 1;
  char out[64];
  size_t o = 0;
  if (neg)
    out[o++] = '-';
  if (decpt <= -4 || decpt > 16) {
    out[o++] = digits[0];
    if (nd > 1) {
      out[o++] = '.';
      memcpy(out + o, digits + 1, (size_t)nd - 1);
      o += (size_t)nd - 1;
    }
    int x = decpt - 1;
    snprintf(out + o, sizeof out - o, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
  } else if (decpt <= 0) {
    out[o++] = '0';
    out[o++] = '.';
    for (int i = 0; i < -decpt; i++)
      out[o++] = '0';
    memcpy(out + o, digits, (size_t)nd);
    o += (size_t)nd;
    out[o] = '\0';
  } else if (decpt >= nd) {
    memcpy(out + o, digits, (size_t)nd);
    o += (size_t)nd;
    for (int i = 0; i < decpt - nd; i++)
      out[o++] = '0';
    memcpy(out + o, ".0", 3);
  } else {
    memcpy(out + o, digits, (size_t)decpt);
    o += (size_t)decpt;
    out[o++] = '.';
    memcpy(out + o, digits + decpt, (size_t)(nd - decpt));
    o += (size_t)(nd - decpt);
    out[o] = '\0';
  }
  snprintf(buf, len, "%s", out);
}
