/* The two-lane admission queue (see work_queue.h). Every operation is a few
 * pointer updates under one mutex; workers sleep on one condition variable
 * and are woken for each push, each freed large slot and the close. */
#include "work_queue.h"

void pk_work_queue_init(pk_work_queue_t *q, int max_large) {
  q->head[0] = q->head[1] = NULL;
  q->tail[0] = q->tail[1] = NULL;
  q->depth[0] = q->depth[1] = 0;
  q->running_large = 0;
  q->max_large = max_large < 1 ? 1 : max_large;
  q->closed = 0;
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
}

void pk_work_queue_destroy(pk_work_queue_t *q) {
  pthread_cond_destroy(&q->cv);
  pthread_mutex_destroy(&q->mu);
}

/* Under q->mu: unlinks a queued item. */
static void unlink_locked(pk_work_queue_t *q, pk_work_item_t *it) {
  int l = it->large;
  if (it->prev != NULL)
    it->prev->next = it->next;
  else
    q->head[l] = it->next;
  if (it->next != NULL)
    it->next->prev = it->prev;
  else
    q->tail[l] = it->prev;
  it->prev = it->next = NULL;
  it->queued = 0;
  q->depth[l]--;
}

void pk_work_queue_push(pk_work_queue_t *q, pk_work_item_t *item, int large) {
  pthread_mutex_lock(&q->mu);
  int l = large ? 1 : 0;
  item->large = l;
  item->queued = 1;
  item->next = NULL;
  item->prev = q->tail[l];
  if (q->tail[l] != NULL)
    q->tail[l]->next = item;
  else
    q->head[l] = item;
  q->tail[l] = item;
  q->depth[l]++;
  /* Broadcast: the woken worker may be one that cannot take a large item
   * while another could. */
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

bool pk_work_queue_remove(pk_work_queue_t *q, pk_work_item_t *item) {
  pthread_mutex_lock(&q->mu);
  bool was = item->queued != 0;
  if (was)
    unlink_locked(q, item);
  pthread_mutex_unlock(&q->mu);
  return was;
}

pk_work_item_t *pk_work_queue_pop(pk_work_queue_t *q) {
  pthread_mutex_lock(&q->mu);
  pk_work_item_t *it = NULL;
  while (!q->closed) {
    if (q->head[1] != NULL && q->running_large < q->max_large) {
      it = q->head[1];
      unlink_locked(q, it);
      q->running_large++;
      break;
    }
    if (q->head[0] != NULL) {
      it = q->head[0];
      unlink_locked(q, it);
      break;
    }
    pthread_cond_wait(&q->cv, &q->mu);
  }
  pthread_mutex_unlock(&q->mu);
  return it;
}

pk_work_item_t *pk_work_queue_take_any(pk_work_queue_t *q) {
  pthread_mutex_lock(&q->mu);
  pk_work_item_t *it = q->head[0] != NULL ? q->head[0] : q->head[1];
  if (it != NULL) {
    unlink_locked(q, it);
    it->large = 0; /* Holds no large slot: pk_work_queue_done would not free one. */
  }
  pthread_mutex_unlock(&q->mu);
  return it;
}

void pk_work_queue_done(pk_work_queue_t *q, pk_work_item_t *item) {
  if (!item->large)
    return;
  pthread_mutex_lock(&q->mu);
  q->running_large--;
  item->large = 0;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

void pk_work_queue_close(pk_work_queue_t *q) {
  pthread_mutex_lock(&q->mu);
  q->closed = 1;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

size_t pk_work_queue_depth(pk_work_queue_t *q, int large) {
  pthread_mutex_lock(&q->mu);
  size_t d = q->depth[large ? 1 : 0];
  pthread_mutex_unlock(&q->mu);
  return d;
}

int pk_work_queue_running_large(pk_work_queue_t *q) {
  pthread_mutex_lock(&q->mu);
  int r = q->running_large;
  pthread_mutex_unlock(&q->mu);
  return r;
}
