/* Protobuf wire-format pieces for the encoders that assemble a message
 * from parts packed once (codec_pack.c, codec_dcp.c): varints, tags and
 * length-delimited fields, written in field-number order as protobuf-c
 * packs them (the tests re-pack the results with protobuf-c and compare
 * bytes). Internal; not installed. */
#ifndef PK_CODEC_WIRE_H
#define PK_CODEC_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The one-byte tags of fields 1 to 15. */
#define PK_WIRE_VARINT(field) ((uint8_t)((field) << 3))
#define PK_WIRE_I64(field) ((uint8_t)(((field) << 3) | 1))
#define PK_WIRE_LEN(field) ((uint8_t)(((field) << 3) | 2))

/* Bytes of v as a varint. */
static inline size_t pk_wire_varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

static inline uint8_t *pk_wire_put_varint(uint8_t *p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
}

/* Bytes of a length-delimited field of n bytes (one-byte tag). */
static inline size_t pk_wire_len_size(size_t n) {
  return 1 + pk_wire_varint_size(n) + n;
}

/* Writes a length-delimited field: tag, length, the n bytes at b. */
static inline uint8_t *pk_wire_put_len(uint8_t *p, uint8_t tag, const uint8_t *b, size_t n) {
  *p++ = tag;
  p = pk_wire_put_varint(p, n);
  if (n > 0)
    memcpy(p, b, n);
  return p + n;
}

/* Writes a double's 8 bytes, little-endian (the wire's order on any host). */
static inline uint8_t *pk_wire_put_double(uint8_t *p, double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  for (int k = 0; k < 8; k++)
    *p++ = (uint8_t)(bits >> (8 * k));
  return p;
}

/* proto3 leaves a double field out when its bits are all zero (protobuf-c
 * compares the bits, so -0.0 is written). */
static inline int pk_wire_double_present(double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  return bits != 0;
}

#endif
