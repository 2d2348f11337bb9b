/* packctl: subcommand dispatch, --help and --version. */
#include <stdio.h>
#include <string.h>

#include "packctl.h"

#ifndef PK_VERSION
#define PK_VERSION "unknown"
#endif

/* The subcommands: name, entry point (argv[0] is the name) and the line
 * the top-level usage prints. */
typedef struct packctl_command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} packctl_command_t;

static const packctl_command_t commands[] = {
    {"plan", packctl_cmd_plan,
     "plan a batch from a lengths file or a JSON manifest,\n"
     "             locally (--local) or on a server (--server HOST:PORT)"},
    {"rank-plan", packctl_cmd_rank_plan, "fetch one rank's plan from a server by plan id"},
    {"health", packctl_cmd_health, "check a server's health"},
    {"load", packctl_cmd_load, "send load to a server"},
    {"calibrate", packctl_cmd_calibrate,
     "fit the cost model (packd.v1.Cost) to measured micro-batch times"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
  fputs("usage: packctl [--help] [--version] COMMAND [ARGS]\n\ncommands:\n", f);
  for (size_t i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fputs("\nRun 'packctl COMMAND --help' for the options of a command.\n", f);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return PACKCTL_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    usage(stdout);
    return PACKCTL_EXIT_OK;
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
    printf("packctl %s\n", PK_VERSION);
    return PACKCTL_EXIT_OK;
  }
  /* Subcommands see argv[0] == their own name. */
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (strcmp(cmd, commands[i].name) == 0)
      return commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "packctl: unknown command '%s'\n", cmd);
  usage(stderr);
  return PACKCTL_EXIT_USAGE;
}
