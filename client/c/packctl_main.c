/* packctl: subcommand dispatch, --help and --version. */
#include <stdio.h>
#include <string.h>

#include "packctl.h"

#ifndef PK_VERSION
#define PK_VERSION "unknown"
#endif

static void usage(FILE *f) {
  fputs("usage: packctl [--help] [--version] COMMAND [ARGS]\n"
        "\n"
        "commands:\n"
        "  plan       plan a batch from a lengths file or a JSON manifest,\n"
        "             locally (--local) or on a server (--server HOST:PORT)\n"
        "  rank-plan  fetch one rank's plan from a server by plan id\n"
        "  health     check a server's health\n"
        "  load       send load to a server\n"
        "  calibrate  fit the cost model (packd.v1.Cost) to measured micro-batch times\n"
        "\n"
        "Run 'packctl COMMAND --help' for the options of a command.\n",
        f);
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
  if (strcmp(cmd, "plan") == 0)
    return packctl_cmd_plan(argc - 1, argv + 1);
  if (strcmp(cmd, "rank-plan") == 0)
    return packctl_cmd_rank_plan(argc - 1, argv + 1);
  if (strcmp(cmd, "health") == 0)
    return packctl_cmd_health(argc - 1, argv + 1);
  if (strcmp(cmd, "load") == 0)
    return packctl_cmd_load(argc - 1, argv + 1);
  if (strcmp(cmd, "calibrate") == 0)
    return packctl_cmd_calibrate(argc - 1, argv + 1);
  fprintf(stderr, "packctl: unknown command '%s'\n", cmd);
  usage(stderr);
  return PACKCTL_EXIT_USAGE;
}
