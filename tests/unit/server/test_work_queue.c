/* Unit tests of server/work_queue.c, the two-lane admission queue: the
 * large lane never holds more than max_large workers, small items are
 * taken while large ones wait for a slot, items can be taken back out
 * while queued, and close releases waiting workers. Real threads where a
 * worker must block. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "work_queue.h"

static void test_large_lane_is_bounded_and_small_items_pass(void **state) {
  (void)state;
  pk_work_queue_t q;
  pk_work_queue_init(&q, 1);
  pk_work_item_t big1, big2, small1, small2;
  pk_work_queue_push(&q, &big1, 1);
  pk_work_queue_push(&q, &big2, 1);
  pk_work_queue_push(&q, &small1, 0);
  pk_work_queue_push(&q, &small2, 0);
  assert_int_equal(pk_work_queue_depth(&q, 1), 2);
  assert_int_equal(pk_work_queue_depth(&q, 0), 2);
  /* A free large slot: the oldest large item first. */
  assert_ptr_equal(pk_work_queue_pop(&q), &big1);
  assert_int_equal(pk_work_queue_running_large(&q), 1);
  /* The slot is taken: small items go past the waiting large one. */
  assert_ptr_equal(pk_work_queue_pop(&q), &small1);
  assert_ptr_equal(pk_work_queue_pop(&q), &small2);
  pk_work_queue_done(&q, &small1); /* A small item holds no slot. */
  assert_int_equal(pk_work_queue_running_large(&q), 1);
  pk_work_queue_done(&q, &big1);
  assert_int_equal(pk_work_queue_running_large(&q), 0);
  assert_ptr_equal(pk_work_queue_pop(&q), &big2);
  pk_work_queue_done(&q, &big2);
  assert_int_equal(pk_work_queue_depth(&q, 0) + pk_work_queue_depth(&q, 1), 0);
  pk_work_queue_destroy(&q);
}

static void test_remove_and_take_any(void **state) {
  (void)state;
  pk_work_queue_t q;
  pk_work_queue_init(&q, 0); /* Taken as 1. */
  pk_work_item_t a, b, c;
  pk_work_queue_push(&q, &a, 0);
  pk_work_queue_push(&q, &b, 0);
  pk_work_queue_push(&q, &c, 1);
  assert_true(pk_work_queue_remove(&q, &b));
  assert_false(pk_work_queue_remove(&q, &b)); /* Not queued any more. */
  assert_ptr_equal(pk_work_queue_pop(&q), &c);
  assert_false(pk_work_queue_remove(&q, &c)); /* A worker has it. */
  pk_work_queue_done(&q, &c);
  pk_work_queue_push(&q, &b, 1);
  /* take_any ignores the large limit and holds no slot. */
  pk_work_queue_t *qp = &q;
  assert_ptr_equal(pk_work_queue_take_any(qp), &a);
  assert_ptr_equal(pk_work_queue_take_any(qp), &b);
  assert_null(pk_work_queue_take_any(qp));
  pk_work_queue_done(&q, &b);
  assert_int_equal(pk_work_queue_running_large(&q), 0);
  pk_work_queue_destroy(&q);
}

typedef struct waiter {
  pk_work_queue_t *q;
  pk_work_item_t *got;
} waiter_t;

static void *wait_pop(void *arg) {
  waiter_t *w = arg;
  w->got = pk_work_queue_pop(w->q);
  return NULL;
}

static void test_a_waiting_worker_is_woken_by_a_freed_slot_and_by_close(void **state) {
  (void)state;
  pk_work_queue_t q;
  pk_work_queue_init(&q, 1);
  pk_work_item_t big1, big2;
  pk_work_queue_push(&q, &big1, 1);
  pk_work_queue_push(&q, &big2, 1);
  assert_ptr_equal(pk_work_queue_pop(&q), &big1);
  waiter_t w = {&q, NULL};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, wait_pop, &w), 0);
  /* The waiter cannot take big2 while big1 holds the only slot; done()
   * wakes it. */
  pk_work_queue_done(&q, &big1);
  pthread_join(t, NULL);
  assert_ptr_equal(w.got, &big2);
  pk_work_queue_done(&q, &big2);
  w.got = &big1;
  assert_int_equal(pthread_create(&t, NULL, wait_pop, &w), 0);
  pk_work_queue_close(&q);
  pthread_join(t, NULL);
  assert_null(w.got);
  pk_work_queue_destroy(&q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_large_lane_is_bounded_and_small_items_pass),
      cmocka_unit_test(test_remove_and_take_any),
      cmocka_unit_test(test_a_waiting_worker_is_woken_by_a_freed_slot_and_by_close),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
