/* libFuzzer target: packctl's input parsing (lengths files and JSON
 * manifests) through packctl_parse_input, the buffer entry point that
 * packctl_read_input uses after reading the file. Each input starts from a
 * fresh default request, as `packctl plan` does; on success the request must
 * pack (every field it set is consistent for protobuf-c). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "packctl_input.h"
#include "packctl_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Packd__V1__PlanRequest *req = packctl_request_new();
  if (req == NULL)
    return 0;
  char err[512];
  /* A copy of exactly size bytes, without a NUL: reading past the end is a
   * heap overflow that ASan reports. */
  char *copy = malloc(size == 0 ? 1 : size);
  if (copy == NULL) {
    packd__v1__plan_request__free_unpacked(req, NULL);
    return 0;
  }
  for (size_t i = 0; i < size; i++)
    copy[i] = (char)data[i];
  int rc = packctl_parse_input("fuzz", copy, size, req, err, sizeof err);
  if (rc == 0) {
    size_t len = packd__v1__plan_request__get_packed_size(req);
    uint8_t *out = malloc(len == 0 ? 1 : len);
    if (out != NULL && packd__v1__plan_request__pack(req, out) != len)
      abort();
    free(out);
  }
  free(copy);
  packd__v1__plan_request__free_unpacked(req, NULL);
  return 0;
}
