/* A pool of host memory other processes of this host can map (shm_pool.h).
 *
 * Layout: a header page (magic, the cookie), then the allocations, bumped
 * up in 64-byte steps. The file has the pool's whole size from the start
 * but holds pages only where fallocate reserved them, so mapping all of it
 * costs address space, not memory. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core_int.h"
#include "dp.h"
#include "shm_pool.h"

#define POOL_DIR "/dev/shm"
#define POOL_MAGIC 0x4c4f4f5052534c53ull /* "SLSRPOOL" */
#define POOL_HDR_BYTES 4096u
#define POOL_ALIGN 64u
#define COOKIE_BYTES 16

typedef struct pool_hdr {
  uint64_t magic;
  uint64_t bytes;
  uint8_t cookie[COOKIE_BYTES];
} pool_hdr;

struct sl__shm_pool {
  int fd;
  uint8_t *base;
  uint64_t bytes, used;
  uint8_t cookie[COOKIE_BYTES];
};

sl_status sl__shm_pool_create(uint64_t max_bytes, sl__shm_pool **out) {
  *out = NULL;
  int fd = open(POOL_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    return sl__fail(SL_EIO, "shared registers: an unnamed file in %s: %s",
                    POOL_DIR, strerror(errno));
  struct statvfs fs;
  if (fstatvfs(fd, &fs) != 0) {
    sl_status st = sl__fail(SL_EIO, "shared registers: statvfs of %s: %s",
                            POOL_DIR, strerror(errno));
    close(fd);
    return st;
  }
  uint64_t room = (uint64_t)fs.f_bavail * fs.f_frsize;
  uint64_t bytes = max_bytes && max_bytes < room ? max_bytes : room;
  bytes &= ~(uint64_t)(POOL_HDR_BYTES - 1);
  if (bytes <= POOL_HDR_BYTES) {
    close(fd);
    return sl__fail(SL_EIO, "shared registers: %s has %" PRIu64 " bytes free",
                    POOL_DIR, room);
  }
  sl__shm_pool *p = sl__calloc(1, sizeof *p);
  if (!p) {
    close(fd);
    return SL_ENOMEM;
  }
  p->fd = fd;
  p->bytes = bytes;
  p->used = POOL_HDR_BYTES;
  sl_status st = sl__dp_random(p->cookie, sizeof p->cookie);
  int rc = st != SL_OK                                   ? EIO
           : ftruncate(fd, (off_t)bytes) != 0            ? errno
           : posix_fallocate(fd, 0, POOL_HDR_BYTES) != 0 ? ENOSPC
                                                         : 0;
  void *m = MAP_FAILED;
  if (rc == 0) {
    m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
             fd, 0);
    if (m == MAP_FAILED) rc = errno;
  }
  if (rc != 0) {
    st = sl__fail(SL_EIO, "shared registers: a pool of %" PRIu64 " bytes: %s",
                  bytes, strerror(rc));
    close(fd);
    sl__free(p);
    return st;
  }
  p->base = m;
  pool_hdr *h = m;
  h->magic = POOL_MAGIC;
  h->bytes = bytes;
  memcpy(h->cookie, p->cookie, sizeof h->cookie);
  *out = p;
  return SL_OK;
}

void sl__shm_pool_destroy(sl__shm_pool *p) {
  if (!p) return;
  munmap(p->base, p->bytes);
  close(p->fd);
  sl__free(p);
}

void *sl__shm_pool_alloc(sl__shm_pool *p, size_t bytes) {
  uint64_t need =
      ((uint64_t)bytes + POOL_ALIGN - 1) & ~(uint64_t)(POOL_ALIGN - 1);
  if (need == 0) need = POOL_ALIGN;
  if (need < bytes || need > p->bytes - p->used) return NULL;
  /* Whole pages are reserved: the first and last may be shared with the
   * neighbours, which reserving again leaves as they are. */
  uint64_t from = p->used & ~(uint64_t)(POOL_HDR_BYTES - 1);
  uint64_t to = p->used + need;
  /* The room is checked first: on a tmpfs as large as the memory,
   * reserving past it would take every process's memory before failing. */
  struct statvfs fs;
  if (fstatvfs(p->fd, &fs) != 0 ||
      to - from > (uint64_t)fs.f_bavail * fs.f_frsize ||
      posix_fallocate(p->fd, (off_t)from, (off_t)(to - from)) != 0)
    return NULL;
  void *at = p->base + p->used;
  p->used = to;
  return at; /* fallocated pages of a tmpfs read as zeros */
}

bool sl__shm_pool_offset(const sl__shm_pool *p, const void *ptr, size_t bytes,
                         uint64_t *off) {
  if (!p || !ptr) return false;
  uintptr_t a = (uintptr_t)ptr, b = (uintptr_t)p->base;
  if (a < b + POOL_HDR_BYTES || a - b > p->used || bytes > p->used - (a - b))
    return false;
  *off = a - b;
  return true;
}

void sl__shm_pool_describe(const sl__shm_pool *p, char *buf, size_t n) {
  char hex[2 * COOKIE_BYTES + 1];
  for (int i = 0; i < COOKIE_BYTES; i++)
    snprintf(hex + 2 * i, 3, "%02x", p->cookie[i]);
  snprintf(buf, n, "%ld %d %" PRIu64 " %s", (long)getpid(), p->fd, p->bytes,
           hex);
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

sl_status sl__shm_view_map(const char *desc, sl__shm_view *out) {
  memset(out, 0, sizeof *out);
  long pid = 0;
  int fdn = -1, used = 0;
  uint64_t bytes = 0;
  char hex[2 * COOKIE_BYTES + 1];
  uint8_t cookie[COOKIE_BYTES];
  if (!desc ||
      sscanf(desc, "%ld %d %" SCNu64 " %32s%n", &pid, &fdn, &bytes, hex,
             &used) != 4 ||
      desc[used] || pid <= 0 || fdn < 0 || bytes <= POOL_HDR_BYTES ||
      strlen(hex) != 2 * COOKIE_BYTES)
    return sl__fail(SL_EINVAL, "shared registers: a malformed pool '%.80s'",
                    desc ? desc : "(null)");
  for (int i = 0; i < COOKIE_BYTES; i++) {
    int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return sl__fail(SL_EINVAL, "shared registers: a malformed pool '%.80s'",
                      desc);
    cookie[i] = (uint8_t)(hi << 4 | lo);
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/fd/%d", pid, fdn);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return sl__fail(SL_EIO, "shared registers: %s: %s", path, strerror(errno));
  /* Only a regular file of this user, of the size described: mapping
   * anything else could fault past its end. */
  struct stat sb;
  const char *why = NULL;
  if (fstat(fd, &sb) != 0)
    why = strerror(errno);
  else if (!S_ISREG(sb.st_mode) || sb.st_uid != geteuid())
    why = "not a regular file of this user";
  else if ((uint64_t)sb.st_size != bytes)
    why = "not of the size described";
  void *m = MAP_FAILED;
  if (!why) {
    m = mmap(NULL, bytes, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (m == MAP_FAILED) why = strerror(errno);
  }
  close(fd);
  const pool_hdr *h = m != MAP_FAILED ? m : NULL;
  if (h && (h->magic != POOL_MAGIC || h->bytes != bytes ||
            memcmp(h->cookie, cookie, COOKIE_BYTES) != 0))
    why = "not the pool described (its cookie differs)";
  if (why) {
    if (m != MAP_FAILED) munmap(m, bytes);
    return sl__fail(SL_EIO, "shared registers: %s: %s", path, why);
  }
  out->base = m;
  out->bytes = bytes;
  return SL_OK;
}

void sl__shm_view_unmap(sl__shm_view *v) {
  if (v->base) munmap((void *)v->base, v->bytes);
  memset(v, 0, sizeof *v);
}
