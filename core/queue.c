/* Bounded multi-producer single-consumer queues: a mutex+condvar ring and a
 * lock-free ring with per-cell sequence numbers. See core_thread.h. */
#include <stdalign.h>
#include <stdatomic.h>
#include <string.h>

#include "core_thread.h"

/* A lock-free cell: the sequence number tells whose turn the cell is.
 * seq == pos: free for the producer that claims position pos;
 * seq == pos + 1: holds the element of position pos, ready for the consumer;
 * the consumer then sets seq = pos + capacity for the next lap. */
typedef struct cell {
  atomic_size_t seq;
  /* element bytes follow */
} cell;

struct sl__mpsc {
  sl__queue_kind kind;
  size_t elem;   /* element size */
  size_t stride; /* bytes per slot */
  size_t cap, mask;
  unsigned char *buf;

  /* Lock-free ring: producers share tail, the consumer owns head. */
  alignas(SL__CACHE_LINE) atomic_size_t tail;
  alignas(SL__CACHE_LINE) size_t head;

  /* Mutex ring: head and count under m; acount mirrors count so that an
   * empty pop needs no lock. */
  size_t mhead, mcount;
  atomic_size_t acount;

  /* Sleeping: the consumer announces it sleeps in `sleeping`, then re-checks
   * the queue; a producer publishes its element, then reads `sleeping`. With
   * both sides sequentially consistent one of them sees the other, so a
   * wake-up cannot be lost. */
  alignas(SL__CACHE_LINE) atomic_int sleeping;
  atomic_int poked;
  pthread_mutex_t m;
  pthread_cond_t c;
};

const char *sl__queue_kind_name(sl__queue_kind kind) {
  switch (kind) {
  case SL__QUEUE_MUTEX: return "mutex";
  case SL__QUEUE_LOCKFREE: return "lock-free";
  }
  return "?";
}

static inline cell *cell_at(const sl__mpsc *q, size_t pos) {
  return (cell *)(q->buf + (pos & q->mask) * q->stride);
}

static inline void *cell_data(cell *c) {
  return (unsigned char *)c + sizeof *c;
}

sl_status sl__mpsc_create(sl__queue_kind kind, size_t elem_size,
                          size_t capacity, sl__mpsc **out) {
  *out = NULL;
  if (elem_size == 0)
    return sl__fail(SL_EINVAL, "queue: element size must be positive");
  if (kind != SL__QUEUE_MUTEX && kind != SL__QUEUE_LOCKFREE)
    return sl__fail(SL_EINVAL, "queue: unknown kind %d", (int)kind);
  size_t cap = 2;
  while (cap < capacity) {
    if (cap > SIZE_MAX / 4)
      return sl__fail(SL_EINVAL, "queue: capacity %zu too large", capacity);
    cap *= 2;
  }
  sl__mpsc *q = sl__calloc_aligned(1, sizeof *q, alignof(sl__mpsc));
  if (!q) return SL_ENOMEM;
  q->kind = kind;
  q->elem = elem_size;
  q->cap = cap;
  q->mask = cap - 1;
  if (kind == SL__QUEUE_LOCKFREE) {
    size_t a = alignof(max_align_t);
    q->stride = (sizeof(cell) + elem_size + a - 1) / a * a;
  } else {
    q->stride = elem_size;
  }
  q->buf = sl__reallocarray(NULL, cap, q->stride);
  if (!q->buf) {
    sl__free(q);
    return SL_ENOMEM;
  }
  if (kind == SL__QUEUE_LOCKFREE)
    for (size_t i = 0; i < cap; i++)
      atomic_init(&cell_at(q, i)->seq, i);
  atomic_init(&q->tail, 0);
  atomic_init(&q->acount, 0);
  atomic_init(&q->sleeping, 0);
  atomic_init(&q->poked, 0);
  pthread_mutex_init(&q->m, NULL);
  sl_status st = sl__cond_init(&q->c);
  if (st != SL_OK) {
    pthread_mutex_destroy(&q->m);
    sl__free(q->buf);
    sl__free(q);
    return st;
  }
  *out = q;
  return SL_OK;
}

void sl__mpsc_destroy(sl__mpsc *q) {
  if (!q) return;
  pthread_cond_destroy(&q->c);
  pthread_mutex_destroy(&q->m);
  sl__free(q->buf);
  sl__free(q);
}

size_t sl__mpsc_capacity(const sl__mpsc *q) { return q->cap; }

static void wake_sleeper(sl__mpsc *q) {
  pthread_mutex_lock(&q->m);
  atomic_store(&q->sleeping, 0);
  pthread_cond_signal(&q->c);
  pthread_mutex_unlock(&q->m);
}

/* ---- lock-free ring ----------------------------------------------------- */

static bool lf_push(sl__mpsc *q, const void *elem) {
  size_t pos = atomic_load_explicit(&q->tail, memory_order_relaxed);
  cell *c;
  for (;;) {
    c = cell_at(q, pos);
    size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
    intptr_t dif = (intptr_t)seq - (intptr_t)pos;
    if (dif == 0) {
      if (atomic_compare_exchange_weak_explicit(&q->tail, &pos, pos + 1,
                                                memory_order_relaxed,
                                                memory_order_relaxed))
        break;
    } else if (dif < 0) {
      return false; /* the cell of the previous lap is still unread: full */
    } else {
      pos = atomic_load_explicit(&q->tail, memory_order_relaxed);
    }
  }
  memcpy(cell_data(c), elem, q->elem);
  atomic_store_explicit(&c->seq, pos + 1, memory_order_seq_cst);
  if (atomic_load_explicit(&q->sleeping, memory_order_seq_cst)) wake_sleeper(q);
  return true;
}

static size_t lf_pop(sl__mpsc *q, void *out, size_t max) {
  size_t n = 0;
  unsigned char *dst = out;
  while (n < max) {
    cell *c = cell_at(q, q->head);
    size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
    if (seq != q->head + 1) break;
    memcpy(dst + n * q->elem, cell_data(c), q->elem);
    atomic_store_explicit(&c->seq, q->head + q->cap, memory_order_release);
    q->head++;
    n++;
  }
  return n;
}

static bool lf_ready(sl__mpsc *q) {
  cell *c = cell_at(q, q->head);
  return atomic_load_explicit(&c->seq, memory_order_seq_cst) == q->head + 1;
}

static void lf_wait(sl__mpsc *q, uint64_t timeout_ns) {
  atomic_store_explicit(&q->sleeping, 1, memory_order_seq_cst);
  if (lf_ready(q) || atomic_load(&q->poked)) {
    atomic_store(&q->sleeping, 0);
    return;
  }
  pthread_mutex_lock(&q->m);
  while (atomic_load(&q->sleeping)) {
    if (timeout_ns == 0) {
      pthread_cond_wait(&q->c, &q->m);
    } else if (!sl__cond_wait_ns(&q->c, &q->m, timeout_ns)) {
      break;
    }
  }
  atomic_store(&q->sleeping, 0);
  pthread_mutex_unlock(&q->m);
}

/* ---- mutex ring --------------------------------------------------------- */

static bool mx_push(sl__mpsc *q, const void *elem) {
  pthread_mutex_lock(&q->m);
  if (q->mcount == q->cap) {
    pthread_mutex_unlock(&q->m);
    return false;
  }
  memcpy(q->buf + ((q->mhead + q->mcount) & q->mask) * q->stride, elem,
         q->elem);
  q->mcount++;
  atomic_store_explicit(&q->acount, q->mcount, memory_order_release);
  if (atomic_load_explicit(&q->sleeping, memory_order_relaxed)) {
    atomic_store_explicit(&q->sleeping, 0, memory_order_relaxed);
    pthread_cond_signal(&q->c);
  }
  pthread_mutex_unlock(&q->m);
  return true;
}

static size_t mx_pop(sl__mpsc *q, void *out, size_t max) {
  if (atomic_load_explicit(&q->acount, memory_order_acquire) == 0) return 0;
  unsigned char *dst = out;
  pthread_mutex_lock(&q->m);
  size_t n = SL_MIN(q->mcount, max);
  for (size_t i = 0; i < n; i++)
    memcpy(dst + i * q->elem, q->buf + ((q->mhead + i) & q->mask) * q->stride,
           q->elem);
  q->mhead += n;
  q->mcount -= n;
  atomic_store_explicit(&q->acount, q->mcount, memory_order_release);
  pthread_mutex_unlock(&q->m);
  return n;
}

static void mx_wait(sl__mpsc *q, uint64_t timeout_ns) {
  pthread_mutex_lock(&q->m);
  while (q->mcount == 0 && !atomic_load(&q->poked)) {
    atomic_store_explicit(&q->sleeping, 1, memory_order_relaxed);
    bool woke = true;
    if (timeout_ns == 0)
      pthread_cond_wait(&q->c, &q->m);
    else
      woke = sl__cond_wait_ns(&q->c, &q->m, timeout_ns);
    atomic_store_explicit(&q->sleeping, 0, memory_order_relaxed);
    if (!woke) break;
  }
  pthread_mutex_unlock(&q->m);
}

/* ---- common ------------------------------------------------------------- */

bool sl__mpsc_push(sl__mpsc *q, const void *elem) {
  return q->kind == SL__QUEUE_LOCKFREE ? lf_push(q, elem) : mx_push(q, elem);
}

size_t sl__mpsc_pop(sl__mpsc *q, void *out, size_t max) {
  return q->kind == SL__QUEUE_LOCKFREE ? lf_pop(q, out, max)
                                       : mx_pop(q, out, max);
}

void sl__mpsc_wait(sl__mpsc *q, uint64_t timeout_ns) {
  /* A wake since the last wait makes this one return at once; the caller
   * re-reads whatever flag the waker set. */
  if (atomic_exchange(&q->poked, 0)) return;
  if (q->kind == SL__QUEUE_LOCKFREE)
    lf_wait(q, timeout_ns);
  else
    mx_wait(q, timeout_ns);
}

void sl__mpsc_wake(sl__mpsc *q) {
  atomic_store(&q->poked, 1);
  if (q->kind == SL__QUEUE_LOCKFREE) {
    if (atomic_load(&q->sleeping)) wake_sleeper(q);
  } else {
    pthread_mutex_lock(&q->m);
    pthread_cond_signal(&q->c);
    pthread_mutex_unlock(&q->m);
  }
}

bool sl__mpsc_sleeping(const sl__mpsc *q) {
  return atomic_load(&((sl__mpsc *)q)->sleeping) != 0;
}

size_t sl__mpsc_count(sl__mpsc *q) {
  if (q->kind == SL__QUEUE_MUTEX) return atomic_load(&q->acount);
  size_t n = 0;
  for (size_t pos = q->head;; pos++, n++) {
    if (atomic_load_explicit(&cell_at(q, pos)->seq, memory_order_acquire) !=
        pos + 1)
      break;
    if (n == q->cap) break;
  }
  return n;
}
