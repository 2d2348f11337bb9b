/* Unit tests of server/call_stop.c, the per-call stop flag: the first
 * reason wins, the deadline is seen by the poll, a client that leaves
 * close to its deadline counts as the deadline, the server's abort stops
 * every call, answers name the reason with its gRPC status, and the debug
 * sleep ends when the call stops. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "call_stop.h"
#include "clock.h"

static void test_first_reason_wins_and_names_the_status(void **state) {
  (void)state;
  pk_server_stop_t ss;
  pk_server_stop_init(&ss);
  pk_call_stop_t cs;
  pk_call_stop_init(&cs, &ss, INFINITY);
  assert_int_equal(pk_call_stop_poll(&cs), 0);
  assert_int_equal(pk_call_stop_reason(&cs), PK_STOP_NONE);
  double now = pk_monotonic_seconds();
  pk_call_stop_client_left(&cs, now);
  assert_int_equal(pk_call_stop_reason(&cs), PK_STOP_CANCELLED);
  pk_call_stop_set(&cs, PK_STOP_SHUTDOWN, now);
  assert_int_equal(pk_call_stop_reason(&cs), PK_STOP_CANCELLED);
  assert_int_equal(pk_call_stop_poll(&cs), 1);
  pk_metrics_t m;
  pk_metrics_init(&m, 0);
  pk_reply_t reply;
  memset(&reply, 0, sizeof reply);
  pk_call_stop_reply(&cs, &reply, "while planning", &m);
  assert_int_equal(reply.code, PK_GRPC_CANCELLED);
  assert_non_null(strstr(reply.message, "the client went away while planning"));
  assert_int_equal(atomic_load(&m.stopped[PK_STOP_CANCELLED]), 1);
  assert_int_equal(pk_call_stop_code(PK_STOP_DEADLINE), PK_GRPC_DEADLINE_EXCEEDED);
  assert_int_equal(pk_call_stop_code(PK_STOP_SHUTDOWN), PK_GRPC_UNAVAILABLE);
}

static void test_deadline_seen_by_the_poll_and_near_it(void **state) {
  (void)state;
  pk_server_stop_t ss;
  pk_server_stop_init(&ss);
  pk_call_stop_t past, soon, later;
  double now = pk_monotonic_seconds();
  pk_call_stop_init(&past, &ss, now - 0.001);
  assert_int_equal(pk_call_stop_poll(&past), 1);
  assert_int_equal(pk_call_stop_reason(&past), PK_STOP_DEADLINE);
  /* A client that leaves within the slack before the deadline left
   * because of it; one that leaves long before cancelled. */
  pk_call_stop_init(&soon, &ss, now + PK_DEADLINE_SLACK_S / 2);
  assert_int_equal(pk_call_stop_poll(&soon), 0);
  pk_call_stop_client_left(&soon, now);
  assert_int_equal(pk_call_stop_reason(&soon), PK_STOP_DEADLINE);
  pk_call_stop_init(&later, &ss, now + 10 * PK_DEADLINE_SLACK_S);
  pk_call_stop_client_left(&later, now);
  assert_int_equal(pk_call_stop_reason(&later), PK_STOP_CANCELLED);
  pk_reply_t reply;
  memset(&reply, 0, sizeof reply);
  pk_call_stop_reply(&past, &reply, "before the server started the call", NULL);
  assert_int_equal(reply.code, PK_GRPC_DEADLINE_EXCEEDED);
  assert_non_null(strstr(reply.message, "the deadline passed before the server started"));
}

static void test_abort_stops_every_call_as_shutdown(void **state) {
  (void)state;
  pk_server_stop_t ss;
  pk_server_stop_init(&ss);
  pk_call_stop_t a, b;
  pk_call_stop_init(&a, &ss, INFINITY);
  pk_call_stop_init(&b, &ss, INFINITY);
  assert_true(pk_server_stop_abort(&ss));
  assert_false(pk_server_stop_abort(&ss));
  assert_int_equal(pk_call_stop_poll(&a), 1);
  assert_int_equal(pk_call_stop_reason(&a), PK_STOP_SHUTDOWN);
  pk_call_stop_client_left(&b, pk_monotonic_seconds());
  assert_int_equal(pk_call_stop_reason(&b), PK_STOP_SHUTDOWN);
  pk_reply_t reply;
  memset(&reply, 0, sizeof reply);
  pk_call_stop_reply(&a, &reply, "while planning", NULL);
  assert_int_equal(reply.code, PK_GRPC_UNAVAILABLE);
  assert_non_null(strstr(reply.message, "shutting down"));
}

static void test_sleep_ends_when_the_call_stops(void **state) {
  (void)state;
  pk_server_stop_t ss;
  pk_server_stop_init(&ss);
  pk_call_stop_t cs;
  /* The deadline passes 50 ms into a 60 s sleep: the sleep ends then. */
  pk_call_stop_init(&cs, &ss, pk_monotonic_seconds() + 0.05);
  pk_call_stop_sleep(&cs, 60000);
  assert_int_equal(pk_call_stop_reason(&cs), PK_STOP_DEADLINE);
  /* A call that is not stopped sleeps its time out. */
  pk_call_stop_t run;
  pk_call_stop_init(&run, &ss, INFINITY);
  pk_call_stop_sleep(&run, 20);
  assert_int_equal(pk_call_stop_reason(&run), PK_STOP_NONE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_first_reason_wins_and_names_the_status),
      cmocka_unit_test(test_deadline_seen_by_the_poll_and_near_it),
      cmocka_unit_test(test_abort_stops_every_call_as_shutdown),
      cmocka_unit_test(test_sleep_ends_when_the_call_stops),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
