/* packctl: protobuf-c messages and jansson values as JSON, the protobuf JSON
 * mapping as Python's google.protobuf.json_format.MessageToJson prints it
 * (packctl_json.c). They only read their arguments; they write to f and
 * return 0, or -1 when writing failed. */
#ifndef PACKCTL_JSON_H
#define PACKCTL_JSON_H

#include <stdio.h>

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

/* Any protobuf-c message in the protobuf JSON mapping: lowerCamelCase names,
 * fields in number order, default values left out, 64-bit integers as
 * strings, enums by name, doubles as Python's repr, 2-space indentation and
 * ASCII-only strings — the text MessageToJson(msg) returns, plus a final
 * newline. */
int packctl_write_json(FILE *f, const ProtobufCMessage *msg);

/* A jansson value, dumped the way packctl_write_json dumps a message
 * (two-space indentation, ASCII only, doubles as Python's repr), plus a
 * final newline. */
int packctl_write_json_value(FILE *f, const json_t *root);

#endif
