/* Unit tests of the decoded-bytes budget (server/decode_budget.c), the
 * request body reader that inflates under it (server/request_body.c, on
 * real gRPC byte buffers and real zlib streams), and the per-code log rate
 * limit (server/log_limit.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>
#include <zlib.h>

#include "decode_budget.h"
#include "log_limit.h"
#include "request_body.h"

/* Takes are granted while the sum stays within the limit; a refused take
 * changes nothing and is counted; the peak is the highest sum. */
static void test_budget_take_and_give(void **state) {
  (void)state;
  pk_decode_budget_t b;
  pk_decode_budget_init(&b, 100);
  assert_true(pk_decode_budget_take(&b, 60));
  assert_true(pk_decode_budget_take(&b, 40));
  assert_false(pk_decode_budget_take(&b, 1));
  assert_int_equal(atomic_load(&b.used), 100);
  assert_int_equal(atomic_load(&b.refused), 1);
  pk_decode_budget_give(&b, 60);
  assert_true(pk_decode_budget_take(&b, 50));
  assert_int_equal(atomic_load(&b.peak), 100);
  pk_decode_budget_give(&b, 90);
  assert_int_equal(atomic_load(&b.used), 0);
  assert_true(pk_decode_budget_take(&b, 0));
  /* A burst of at least PK_DECODE_TRIM_BYTES ending trims once. */
  pk_decode_budget_t big;
  pk_decode_budget_init(&big, 1LL << 30);
  assert_true(pk_decode_budget_take(&big, PK_DECODE_TRIM_BYTES));
  assert_true(pk_decode_budget_take(&big, 1));
  pk_decode_budget_give(&big, PK_DECODE_TRIM_BYTES);
  assert_int_equal(atomic_load(&big.trims), 0); /* Not back to zero yet. */
  pk_decode_budget_give(&big, 1);
  assert_int_equal(atomic_load(&big.trims), 1);
  assert_true(pk_decode_budget_take(&big, 10));
  pk_decode_budget_give(&big, 10);
  assert_int_equal(atomic_load(&big.trims), 1); /* A small burst does not. */
}

static void write_file(const char *dir, const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* The cgroup's limit when set and below the machine's memory (v2, then
 * v1); the machine's memory for "max", v1's "no limit" and no files. */
static void test_memory_available_reads_the_cgroup(void **state) {
  (void)state;
  char dir[] = "/tmp/pk-cgroup-XXXXXX";
  assert_non_null(mkdtemp(dir));
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  int64_t phys = (int64_t)pages * page;
  assert_int_equal(pk_memory_available(dir), phys);
  char sub[600];
  snprintf(sub, sizeof sub, "%s/memory", dir);
  assert_int_equal(mkdir(sub, 0700), 0);
  write_file(dir, "memory/memory.limit_in_bytes", "9223372036854771712\n");
  assert_int_equal(pk_memory_available(dir), phys);
  write_file(dir, "memory/memory.limit_in_bytes", "1073741824\n");
  assert_int_equal(pk_memory_available(dir), 1073741824);
  write_file(dir, "memory.max", "max\n");
  assert_int_equal(pk_memory_available(dir), 1073741824);
  write_file(dir, "memory.max", "536870912\n");
  assert_int_equal(pk_memory_available(dir), 536870912);
  char path[700];
  snprintf(path, sizeof path, "%s/memory.max", dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/memory/memory.limit_in_bytes", dir);
  unlink(path);
  rmdir(sub);
  rmdir(dir);
  /* The default: a quarter, never below one message. */
  int64_t q = pk_decode_budget_default(1);
  assert_true(q >= 1 && q <= phys / 4);
  assert_int_equal(pk_decode_budget_default(INT64_MAX / 2), INT64_MAX / 2);
}

/* in[0 .. n) compressed at `level` as `alg` sends it (gzip: windowBits
 * 15 + 16; deflate: zlib's 15) into a new buffer of *len bytes. */
static uint8_t *compress_bytes(const uint8_t *in, size_t n, grpc_compression_algorithm alg,
                               int level, size_t *len) {
  uLong cap = compressBound((uLong)n) + 64;
  uint8_t *out = malloc(cap);
  z_stream z;
  memset(&z, 0, sizeof z);
  assert_int_equal(deflateInit2(&z, level, Z_DEFLATED, alg == GRPC_COMPRESS_GZIP ? 31 : 15, 8,
                                Z_DEFAULT_STRATEGY),
                   Z_OK);
  z.next_in = (Bytef *)in;
  z.avail_in = (uInt)n;
  z.next_out = out;
  z.avail_out = (uInt)cap;
  assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
  *len = cap - z.avail_out;
  deflateEnd(&z);
  return out;
}

/* n bytes of `fill`, compressed as `alg`, in two slices. */
static grpc_byte_buffer *gzip_buffer(size_t n, int fill, grpc_compression_algorithm alg) {
  uint8_t *in = malloc(n ? n : 1);
  memset(in, fill, n);
  size_t len = 0;
  uint8_t *out = compress_bytes(in, n, alg, 6, &len);
  /* Two slices, so that inflating crosses a slice boundary. */
  grpc_slice s[2] = {grpc_slice_from_copied_buffer((const char *)out, len / 2),
                     grpc_slice_from_copied_buffer((const char *)out + len / 2, len - len / 2)};
  grpc_byte_buffer *bb = grpc_raw_compressed_byte_buffer_create(s, 2, alg);
  grpc_slice_unref(s[0]);
  grpc_slice_unref(s[1]);
  free(in);
  free(out);
  return bb;
}

/* A compressed body inflates to its bytes (gzip and deflate), its charge
 * is held until freed; past the limit it is TOO_LARGE, past the budget
 * OVER_BUDGET, damaged BAD; a failure leaves nothing charged. */
static void test_body_inflates_under_limit_and_budget(void **state) {
  (void)state;
  pk_decode_budget_t b;
  pk_decode_budget_init(&b, 16 << 20);
  char msg[512];
  pk_request_body_t body;
  for (int a = 0; a < 2; a++) {
    grpc_compression_algorithm alg = a == 0 ? GRPC_COMPRESS_GZIP : GRPC_COMPRESS_DEFLATE;
    grpc_byte_buffer *bb = gzip_buffer(300000, 'x', alg);
    assert_int_equal(pk_request_body_read(bb, 1 << 20, &b, &body, msg, sizeof msg), PK_BODY_OK);
    assert_int_equal(body.len, 300000);
    assert_true(body.bytes[0] == 'x' && body.bytes[299999] == 'x');
    assert_true(atomic_load(&b.used) >= 300000);
    pk_request_body_free(&body);
    assert_int_equal(atomic_load(&b.used), 0);
    /* A limit below the inflated size. */
    assert_int_equal(pk_request_body_read(bb, 100000, &b, &body, msg, sizeof msg),
                     PK_BODY_TOO_LARGE);
    assert_non_null(strstr(msg, "100000"));
    assert_int_equal(atomic_load(&b.used), 0);
    grpc_byte_buffer_destroy(bb);
  }
  /* 6 MiB of zeros (about 6 KiB compressed) against a budget of 16 MiB
   * with 12 MiB held elsewhere; the buffer doubles, so it takes 8 MiB. */
  grpc_byte_buffer *bomb = gzip_buffer(6 << 20, 0, GRPC_COMPRESS_GZIP);
  assert_true(pk_decode_budget_take(&b, 12 << 20));
  assert_int_equal(pk_request_body_read(bomb, 64 << 20, &b, &body, msg, sizeof msg),
                   PK_BODY_OVER_BUDGET);
  assert_non_null(strstr(msg, "--max-decoded-bytes 16777216"));
  assert_int_equal(atomic_load(&b.used), 12 << 20);
  pk_decode_budget_give(&b, 12 << 20);
  assert_int_equal(pk_request_body_read(bomb, 64 << 20, &b, &body, msg, sizeof msg), PK_BODY_OK);
  assert_int_equal(body.len, 6 << 20);
  pk_request_body_free(&body);
  grpc_byte_buffer_destroy(bomb);
  /* Damaged compressed bytes. */
  grpc_slice junk = grpc_slice_from_static_string("not a gzip stream at all");
  grpc_byte_buffer *bad = grpc_raw_compressed_byte_buffer_create(&junk, 1, GRPC_COMPRESS_GZIP);
  assert_int_equal(pk_request_body_read(bad, 1 << 20, &b, &body, msg, sizeof msg), PK_BODY_BAD);
  assert_int_equal(atomic_load(&b.used), 0);
  grpc_byte_buffer_destroy(bad);
  /* Uncompressed: the bytes as they are, charged; over the limit refused. */
  grpc_slice plain = grpc_slice_from_static_string("hello");
  grpc_byte_buffer *pb = grpc_raw_byte_buffer_create(&plain, 1);
  assert_int_equal(pk_request_body_read(pb, 5, &b, &body, msg, sizeof msg), PK_BODY_OK);
  assert_int_equal(body.len, 5);
  assert_memory_equal(body.bytes, "hello", 5);
  assert_int_equal(atomic_load(&b.used), 5);
  pk_request_body_free(&body);
  assert_int_equal(pk_request_body_read(pb, 4, &b, &body, msg, sizeof msg), PK_BODY_TOO_LARGE);
  assert_int_equal(atomic_load(&b.used), 0);
  grpc_byte_buffer_destroy(pb);
}

/* Sizes around the buffer's growth steps, random and repetitive bytes,
 * both algorithms: the inflated body is the original, byte for byte, and
 * the budget is back to zero after each. */
static void test_body_round_trips(void **state) {
  (void)state;
  static const size_t sizes[] = {0, 1, 65535, 65536, 65537, 131079, 1 << 20, (3 << 20) + 5};
  pk_decode_budget_t b;
  pk_decode_budget_init(&b, 64 << 20);
  uint64_t x = 0x5eed;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    for (int kind = 0; kind < 4; kind++) {
      size_t n = sizes[i];
      uint8_t *in = malloc(n ? n : 1);
      for (size_t k = 0; k < n; k++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        in[k] = kind & 1 ? (uint8_t)(x >> 56) : (uint8_t)(k % 7);
      }
      grpc_compression_algorithm alg = kind & 2 ? GRPC_COMPRESS_DEFLATE : GRPC_COMPRESS_GZIP;
      size_t len = 0;
      uint8_t *out = compress_bytes(in, n, alg, 1, &len);
      grpc_slice sl = grpc_slice_from_copied_buffer((const char *)out, len);
      grpc_byte_buffer *bb = grpc_raw_compressed_byte_buffer_create(&sl, 1, alg);
      grpc_slice_unref(sl);
      pk_request_body_t body;
      char msg[256];
      assert_int_equal(pk_request_body_read(bb, 4 << 20, &b, &body, msg, sizeof msg), PK_BODY_OK);
      assert_int_equal(body.len, n);
      if (n > 0)
        assert_memory_equal(body.bytes, in, n);
      pk_request_body_free(&body);
      assert_int_equal(atomic_load(&b.used), 0);
      grpc_byte_buffer_destroy(bb);
      free(in);
      free(out);
    }
  }
}

/* One line per cause and interval; the next carries the count left out;
 * causes are independent; interval 0 admits every line. */
static void test_log_limit(void **state) {
  (void)state;
  pk_log_limit_t l;
  pk_log_limit_init(&l, 10.0);
  uint64_t held;
  assert_true(pk_log_limit_admit(&l, 16, 100.0, &held));
  assert_int_equal(held, 0);
  for (int i = 0; i < 500; i++)
    assert_false(pk_log_limit_admit(&l, 16, 100.0 + i * 0.01, &held));
  assert_true(pk_log_limit_admit(&l, 8, 101.0, &held)); /* Another cause. */
  assert_false(pk_log_limit_admit(&l, 16, 109.9, &held));
  assert_true(pk_log_limit_admit(&l, 16, 110.0, &held));
  assert_int_equal(held, 501);
  assert_true(pk_log_limit_admit(&l, 99, 110.0, &held)); /* Out of range: always. */
  pk_log_limit_t every;
  pk_log_limit_init(&every, 0);
  for (int i = 0; i < 3; i++)
    assert_true(pk_log_limit_admit(&every, 16, 1.0, &held));
}

int main(void) {
  grpc_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_budget_take_and_give),
      cmocka_unit_test(test_memory_available_reads_the_cgroup),
      cmocka_unit_test(test_body_inflates_under_limit_and_budget),
      cmocka_unit_test(test_body_round_trips),
      cmocka_unit_test(test_log_limit),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  grpc_shutdown();
  return rc;
}
