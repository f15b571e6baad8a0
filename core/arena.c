/* Bump allocator: a list of blocks; big requests get a block of their own. */
#include <string.h>

#include "core_int.h"

#define SL__ARENA_ALIGN 16

typedef struct arena_block {
  struct arena_block *next;
  size_t size, used;
  _Alignas(SL__ARENA_ALIGN) unsigned char data[];
} arena_block;

struct sl_arena {
  arena_block *head;
  size_t block_size;
  size_t bytes_used;
};

sl_status sl__arena_create(size_t block_size, sl_arena **out) {
  *out = NULL;
  sl_arena *a;
  if (SL_NEW(a) != SL_OK) return SL_ENOMEM;
  a->block_size = block_size ? block_size : 64 * 1024;
  *out = a;
  return SL_OK;
}

void sl__arena_destroy(sl_arena *a) {
  if (!a) return;
  for (arena_block *b = a->head, *next; b; b = next) {
    next = b->next;
    sl__free(b);
  }
  sl__free(a);
}

void *sl__arena_alloc(sl_arena *a, size_t size) {
  size_t need = (size + SL__ARENA_ALIGN - 1) & ~(size_t)(SL__ARENA_ALIGN - 1);
  if (need < size) {
    sl__fail(SL_ENOMEM, "arena allocation of %zu bytes overflows", size);
    return NULL;
  }
  arena_block *b = a->head;
  if (!b || b->size - b->used < need) {
    size_t cap = need > a->block_size ? need : a->block_size;
    b = sl__malloc(sizeof *b + cap);
    if (!b) return NULL;
    b->size = cap;
    b->used = 0;
    /* A block made for one oversized request goes behind the current head,
     * so the head's free space is still used by later small requests. */
    if (a->head && need > a->block_size) {
      b->next = a->head->next;
      a->head->next = b;
    } else {
      b->next = a->head;
      a->head = b;
    }
  }
  void *p = b->data + b->used;
  b->used += need;
  a->bytes_used += need;
  memset(p, 0, need);
  return p;
}

void *sl__arena_calloc(sl_arena *a, size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) {
    sl__fail(SL_ENOMEM, "arena allocation of %zu x %zu bytes overflows", n, size);
    return NULL;
  }
  return sl__arena_alloc(a, n * size);
}

char *sl__arena_strdup(sl_arena *a, const char *s) {
  size_t n = strlen(s) + 1;
  char *d = sl__arena_alloc(a, n);
  if (d) memcpy(d, s, n);
  return d;
}

size_t sl__arena_bytes_used(const sl_arena *a) { return a->bytes_used; }
