/* The admission queue between the gRPC completion-queue threads and the
 * planning workers.
 *
 * Why it exists: planning a large request takes seconds of one CPU. When
 * every worker plans a large request, small plans and GetRankPlan calls from
 * other clients wait behind them and miss their deadlines. The queue keeps
 * two lanes, small and large, and lets at most `max_large` workers run large
 * items at once; with max_large below the worker count, at least one worker
 * is always free for small items, whatever the large traffic.
 *
 * Order: a worker that may take a large item (fewer than max_large running)
 * takes the oldest large item first, otherwise the oldest small item. Small
 * items therefore never wait behind large ones on a reserved worker, and
 * large items are not starved by a steady stream of small ones (the large
 * lane is served whenever it has a free slot).
 *
 * Items are embedded in the caller's own structures (no allocation here);
 * an item that is queued can be taken out again (a call whose client left
 * while it waited), which is why the lanes are doubly linked lists.
 * Thread-safe: every function takes the queue's mutex. */
#ifndef PK_WORK_QUEUE_H
#define PK_WORK_QUEUE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct pk_work_item {
  struct pk_work_item *prev, *next;
  int large;  /* The lane: 0 small, 1 large. */
  int queued; /* 1 while the item is in a lane (under the queue's mutex). */
} pk_work_item_t;

typedef struct pk_work_queue {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pk_work_item_t *head[2], *tail[2];
  size_t depth[2];   /* Items waiting per lane. */
  int running_large; /* Large items popped and not yet done. */
  int max_large;     /* At least 1. */
  int closed;        /* Workers leave pk_work_queue_pop with NULL. */
} pk_work_queue_t;

/* Initialises an empty, open queue. max_large below 1 is taken as 1. */
void pk_work_queue_init(pk_work_queue_t *q, int max_large);

/* Frees the mutex and condition; the queue must be empty and no worker may
 * be waiting in it (close it and join them first). */
void pk_work_queue_destroy(pk_work_queue_t *q);

/* Appends an item to its lane (large: 1 for the large lane) and wakes a
 * worker. */
void pk_work_queue_push(pk_work_queue_t *q, pk_work_item_t *item, int large);

/* Takes an item out of its lane if it is still queued. Returns true when it
 * was (the caller now owns it, and no worker will see it), false when a
 * worker has already taken it. */
bool pk_work_queue_remove(pk_work_queue_t *q, pk_work_item_t *item);

/* Blocks until an item may run and returns it, or returns NULL once the
 * queue is closed. A large item counts against max_large until
 * pk_work_queue_done. */
pk_work_item_t *pk_work_queue_pop(pk_work_queue_t *q);

/* Takes the oldest queued item of either lane without blocking and without
 * the large limit (for answering everything that waits at shutdown), or
 * NULL when both lanes are empty. Such an item needs no pk_work_queue_done. */
pk_work_item_t *pk_work_queue_take_any(pk_work_queue_t *q);

/* Marks a popped item finished: a large one frees its slot. */
void pk_work_queue_done(pk_work_queue_t *q, pk_work_item_t *item);

/* Wakes every worker; pk_work_queue_pop returns NULL from now on. */
void pk_work_queue_close(pk_work_queue_t *q);

/* Items waiting in a lane (0 small, 1 large), and large items running. */
size_t pk_work_queue_depth(pk_work_queue_t *q, int large);
int pk_work_queue_running_large(pk_work_queue_t *q);

#endif
