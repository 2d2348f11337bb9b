/* packctl's command-line scanner (packctl_args.h): getopt_long in in-order
 * mode ("-" at the front of the short option string) with opterr off, so
 * that every message is packctl's own and names the argument at fault.
 *
 * Why in-order mode: in getopt's default (permuting) mode the element being
 * scanned is not argv[optind - 1] after an error inside a cluster of short
 * options: `-dp 8` fails on the `d` of `-dp` while optind still points at
 * it, and the previous argument would be blamed. In in-order mode nothing
 * is permuted, so the argument a call scans is argv[optind] as it was when
 * the call started. */
#include "packctl_args.h"

#include "packctl.h"

#include <stdio.h>
#include <string.h>

#include "packctl_fail.h"
#include "packctl_suggest.h"

void packctl_args_init(packctl_args_t *a, const char *cmd, int argc, char **argv,
                       const struct option *opts) {
  a->cmd = cmd;
  a->argc = argc;
  a->argv = argv;
  a->opts = opts;
  a->rest = 0;
  optind = 0; /* 0 makes glibc reinitialise its scanner for a new argv. */
  opterr = 0;
}

const char *packctl_args_name(const packctl_args_t *a, int val) {
  for (const struct option *o = a->opts; o->name != NULL; o++)
    if (o->val == val)
      return o->name;
  return "?";
}

/* The option of the table named `name` (no dashes), or NULL. */
static const struct option *find_option(const packctl_args_t *a, const char *name, size_t len) {
  for (const struct option *o = a->opts; o->name != NULL; o++)
    if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
      return o;
  return NULL;
}

/* Prints the message for an argument getopt_long did not know. */
static void unknown_option(const packctl_args_t *a, const char *arg) {
  const char *name = arg;
  while (*name == '-')
    name++;
  size_t len = strcspn(name, "=");
  char word[PACKCTL_SUGGEST_MAX + 1];
  snprintf(word, sizeof word, "%.*s", (int)(len < PACKCTL_SUGGEST_MAX ? len : PACKCTL_SUGGEST_MAX),
           name);
  if (arg[1] != '-' && find_option(a, name, len) != NULL) {
    packctl_usage_fail(a->cmd,
                       "unknown option '%s': long options take two dashes; did you mean '--%s'?",
                       arg, word);
    return;
  }
  /* getopt_long takes unique prefixes of long names; a prefix of several
   * is refused as ambiguous, which the message says, with the choices. */
  if (arg[1] == '-' && len > 0) {
    char list[256] = "";
    size_t used = 0, count = 0;
    for (const struct option *o = a->opts; o->name != NULL; o++) {
      if (strncmp(o->name, name, len) != 0 || used >= sizeof list)
        continue;
      int w = snprintf(list + used, sizeof list - used, "%s--%s", count > 0 ? ", " : "", o->name);
      if (w > 0)
        used += (size_t)w;
      count++;
    }
    if (count > 1) {
      packctl_usage_fail(a->cmd, "ambiguous option '%s' (could be %s)", arg, list);
      return;
    }
  }
  const char *names[256];
  size_t n = 0;
  for (const struct option *o = a->opts; o->name != NULL && n < 256; o++)
    names[n++] = o->name;
  const char *near = packctl_nearest(word, names, n);
  if (near != NULL)
    packctl_usage_fail(a->cmd, "unknown option '%s'; did you mean '--%s'?", arg, near);
  else
    packctl_usage_fail(a->cmd, "unknown option '%s'", arg);
}

int packctl_args_next(packctl_args_t *a, const char **value) {
  *value = NULL;
  if (a->rest > 0) {
    if (a->rest >= a->argc)
      return PACKCTL_ARGS_END;
    *value = a->argv[a->rest++];
    return PACKCTL_ARGS_POSITIONAL;
  }
  /* getopt_long starts at argv[1]; optind 0 asks it to start over. */
  int at = optind > 0 ? optind : 1;
  int c = getopt_long(a->argc, a->argv, "-:h", a->opts, NULL);
  if (c == -1) {
    /* `--` ends the options: what follows is positional. */
    a->rest = optind;
    return packctl_args_next(a, value);
  }
  if (at >= a->argc)
    at = a->argc - 1;
  const char *arg = a->argv[at];
  if (c == 1) {
    *value = optarg;
    return PACKCTL_ARGS_POSITIONAL;
  }
  if (c == '?') {
    unknown_option(a, arg);
    return PACKCTL_ARGS_ERROR;
  }
  if (c == ':') {
    const char *name = optopt != 0 ? packctl_args_name(a, optopt) : "?";
    if (strcmp(name, "?") == 0)
      packctl_usage_fail(a->cmd, "%s needs a value", arg);
    else
      packctl_usage_fail(a->cmd, "--%s needs a value", name);
    return PACKCTL_ARGS_ERROR;
  }
  if (c == 'h')
    return PACKCTL_ARGS_HELP;
  *value = optarg;
  return c;
}

int packctl_args_scan(const char *cmd, int argc, char **argv, const struct option *opts,
                      void (*usage)(FILE *), packctl_take_fn take, void *take_opts) {
  packctl_args_t a;
  packctl_args_init(&a, cmd, argc, argv, opts);
  for (;;) {
    const char *v = NULL;
    int c = packctl_args_next(&a, &v);
    if (c == PACKCTL_ARGS_END)
      return 0;
    if (c == PACKCTL_ARGS_ERROR)
      return PACKCTL_EXIT_USAGE;
    if (c == PACKCTL_ARGS_HELP) {
      usage(stdout);
      return PACKCTL_ARGS_HELPED;
    }
    int status = take(take_opts, c, v);
    if (status != 0)
      return status;
  }
}
