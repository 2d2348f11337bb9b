/* packctl: the packd command-line tool. Shared declarations of its
 * subcommands.
 *
 * Subcommands receive argv shifted so that argv[0] is the subcommand name
 * ("plan", "health", ...); they return the process exit status:
 * PACKCTL_EXIT_OK, PACKCTL_EXIT_FAIL (the planner or the server refused or
 * failed; its message went to stderr) or PACKCTL_EXIT_USAGE (a bad flag, value
 * or input file; a message naming it went to stderr).
 *
 * Ownership: see each function. Messages returned through pointers are
 * protobuf-c messages freed with their free_unpacked function and a NULL
 * allocator. */
#ifndef PACKCTL_H
#define PACKCTL_H

#include <stddef.h>

#include "packd/v1/packd.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PACKCTL_EXIT_OK 0
#define PACKCTL_EXIT_FAIL 1
#define PACKCTL_EXIT_USAGE 2

/* `packctl plan` (packctl_plan.c): plans locally (--local) or through a
 * server (--server HOST:PORT). */
int packctl_cmd_plan(int argc, char **argv);

/* `packctl calibrate` (packctl_calibrate.c): fits the cost model to
 * measured micro-batch times. */
int packctl_cmd_calibrate(int argc, char **argv);

/* Remote mode (packctl_remote.c). Sends req to
 * the Planner service at `server` ("HOST:PORT") with a deadline of timeout_s
 * seconds. On success returns 0 and stores a new response in *resp (free it
 * with packd__v1__plan_response__free_unpacked(*resp, NULL)). On failure
 * returns a negative pk_error code (pk_error.h), leaves *resp NULL and writes
 * the server's message (or the transport error) into err, NUL-terminated. */
int packctl_plan_remote(const char *server, double timeout_s, const Packd__V1__PlanRequest *req,
                        Packd__V1__PlanResponse **resp, char *err, size_t errlen);

/* The remote-only subcommands (packctl_remote.c): `rank-plan`, `health` and
 * `load`. Same conventions as packctl_cmd_plan. */
int packctl_cmd_rank_plan(int argc, char **argv);
int packctl_cmd_health(int argc, char **argv);
int packctl_cmd_load(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
