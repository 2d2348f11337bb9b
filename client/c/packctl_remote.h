/* packctl remote mode: helpers shared by packctl_remote.c (plan --server,
 * rank-plan, health) and packctl_load.c (load). packctl.h declares the entry
 * points.
 *
 * Nothing here allocates memory for the caller. */
#ifndef PACKCTL_REMOTE_H
#define PACKCTL_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The server address: `flag` when given, else $PACKD_TARGET, else
 * $PACKD_SERVER, else NULL. */
const char *packctl_server_address(const char *flag);

/* Parses a positive number of seconds (below 1e9). Returns 0 or -1. */
int packctl_parse_seconds(const char *text, double *out);

#endif
