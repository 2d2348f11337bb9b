/* Placeholder for packctl's remote mode. The client engineer replaces this
 * file with the gRPC implementation of the functions below (packctl.h); until
 * then every remote operation fails with a clear message and exit status 1.
 * It is the only file that defines these symbols, so replacing it is enough. */
#include "packctl.h"

#include <stdio.h>

#include "pk_error.h"

static const char not_built[] = "remote mode not built (this packctl has no gRPC client)";

int packctl_plan_remote(const char *server, double timeout_s, const Packd__V1__PlanRequest *req,
                        Packd__V1__PlanResponse **resp, char *err, size_t errlen) {
  *resp = NULL;
  if (err != NULL && errlen > 0)
    snprintf(err, errlen, "--server %s: %s", server, not_built);
  return PK_EPRECOND;
}

static int remote_stub(const char *cmd) {
  fprintf(stderr, "packctl %s: %s\n", cmd, not_built);
  return PACKCTL_EXIT_FAIL;
}

int packctl_cmd_rank_plan(int argc, char **argv) {
  return remote_stub(argc > 0 ? argv[0] : "rank-plan");
}

int packctl_cmd_health(int argc, char **argv) {
  return remote_stub(argc > 0 ? argv[0] : "health");
}

int packctl_cmd_load(int argc, char **argv) {
  return remote_stub(argc > 0 ? argv[0] : "load");
}
