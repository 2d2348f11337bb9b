/* packctl's command-line scanner: getopt_long for every subcommand, with
 * messages that name the argument actually at fault.
 *
 * Each subcommand describes its options with one getopt_long table and
 * loops over packctl_args_next, which returns the options and the
 * positional arguments in command-line order (getopt_long's in-order mode:
 * nothing is permuted, so positionals may come before, between or after
 * options, and everything after `--` is positional). On a bad argument it
 * prints one message and the pointer to the subcommand's --help:
 *
 *   - an unknown option names the argument as typed and suggests the nearest
 *     valid flag (packctl_suggest.h): `--dpp` -> did you mean '--dp'?;
 *   - a single-dash word (`-dp 8`) is named whole, with the two-dash flag it
 *     was meant to be when that flag exists;
 *   - a missing value names the flag and its placeholder.
 *
 * `-h` and `--help` come back as PACKCTL_ARGS_HELP whatever the table
 * holds. Nothing here allocates; the state refers to argv and the table. */
#ifndef PACKCTL_ARGS_H
#define PACKCTL_ARGS_H

#include <getopt.h>
#include <stdio.h>

/* What packctl_args_next returns besides an option's `val`. Options'
 * vals must be above 2 and differ from 'h'. */
#define PACKCTL_ARGS_END (-1)
#define PACKCTL_ARGS_ERROR (-2)
#define PACKCTL_ARGS_POSITIONAL 1
#define PACKCTL_ARGS_HELP 'h'

typedef struct packctl_args {
  const char *cmd; /* The subcommand, for messages ("plan"). */
  int argc;
  char **argv;
  const struct option *opts; /* getopt_long table, ended by a zero entry. */
  int rest;                  /* After `--`: the next positional's index. */
} packctl_args_t;

/* Starts scanning argv[1..argc-1] (argv[0] is the subcommand). */
void packctl_args_init(packctl_args_t *a, const char *cmd, int argc, char **argv,
                       const struct option *opts);

/* The next option (its val; *value its argument or NULL), a positional
 * argument (PACKCTL_ARGS_POSITIONAL; *value the argument), -h/--help
 * (PACKCTL_ARGS_HELP), PACKCTL_ARGS_END, or PACKCTL_ARGS_ERROR after a
 * message on stderr. */
int packctl_args_next(packctl_args_t *a, const char **value);

/* The long name of the option whose val is `val` ("dp"), or "?". */
const char *packctl_args_name(const packctl_args_t *a, int val);

/* What packctl_args_scan returns after printing a subcommand's --help:
 * the subcommand exits 0 without doing anything else. */
#define PACKCTL_ARGS_HELPED (-1)

/* Stores one option (its val, its value or NULL) or positional argument
 * (PACKCTL_ARGS_POSITIONAL) into a subcommand's options: 0, or an exit
 * status after a message (packctl_usage_fail). */
typedef int (*packctl_take_fn)(void *opts, int val, const char *value);

/* The one option loop of every subcommand: scans argv[1..argc-1] with
 * packctl_args_next and hands every option and positional argument to
 * take. Returns 0 once every argument was taken; PACKCTL_ARGS_HELPED after
 * printing usage to stdout for -h or --help; PACKCTL_EXIT_USAGE (2) after a
 * bad argument's message; or take's nonzero status. */
int packctl_args_scan(const char *cmd, int argc, char **argv, const struct option *opts,
                      void (*usage)(FILE *), packctl_take_fn take, void *take_opts);

#endif
