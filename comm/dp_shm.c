/* The shared-memory payload path of a data-plane connection whose two
 * ends run on one host (docs/dataplane.md, "Shared memory").
 *
 * The dialer creates a POSIX shared-memory object (a random name in
 * /dev/shm, mode 0600, its memory reserved) holding a header page and two
 * rings, one per direction, and offers it on the connection; the acceptor
 * opens it, checks the header's MAC (the token's HMAC over this
 * connection's handshake nonces, so a segment planted by anyone without
 * the token is refused), unlinks the name and accepts. From then on a
 * frame's payload may travel in the sender's ring instead of the socket:
 * the header still goes over TCP, flagged SL__DP_FLAG_SHM, and its order
 * on the stream is the order of the payloads in the ring. Both ends place
 * a payload of len bytes at the same position, computed from the lengths
 * alone: the next free byte rounded up to a cache line, or the start of
 * the ring when it would not fit before the end. The sender writes the
 * bytes, then publishes how far it has written; the receiver reads them
 * when the header arrives and publishes how far it has read, which frees
 * the space. A payload that finds no room goes over TCP as before, so the
 * ring never blocks anything.
 *
 * The counters are C11 atomics in the shared page (lock-free 64-bit
 * atomics are address-free, so they work across processes). The object is
 * a file in /dev/shm opened by path, which is what shm_open does on Linux
 * (glibc's shm_open opens it with a system call ThreadSanitizer does not
 * see, so it took a reused descriptor number for a race). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "dp_int.h"

#define SHM_MAGIC 0x48534c53u /* "SLSH" */
#define SHM_VERSION 1u
#define SHM_HDR_BYTES 4096u
#define SHM_RING_MAX (16ull << 30)

/* One direction's positions: bytes ever written and ever read, each on
 * its own cache line (they are written by different processes). */
typedef struct shm_dir {
  _Alignas(64) atomic_uint_least64_t written;
  _Alignas(64) atomic_uint_least64_t released;
} shm_dir;

typedef struct shm_hdr {
  uint32_t magic, version;
  uint64_t ring_bytes;
  uint8_t mac[SL__DP_MAC_BYTES];
  shm_dir dir[2]; /* 0: dialer to acceptor; 1: acceptor to dialer */
} shm_hdr;
_Static_assert(sizeof(shm_hdr) <= SHM_HDR_BYTES, "shm header page");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "address-free 64-bit atomics");

struct sl__dp_shm {
  uint8_t *base;
  size_t size;
  uint64_t ring;
  shm_hdr *hdr;
  uint8_t *tx, *rx;        /* the two rings */
  shm_dir *txd, *rxd;      /* their positions */
  uint64_t tx_pos, rx_pos; /* the next payload's start, before placing */
  bool owner;              /* created here: the name is this end's */
  bool linked;             /* the name is still there */
  char name[64];
};

void sl__dp_shm_name(const uint8_t id[SL__DP_SHM_ID_BYTES], char *out,
                     size_t n) {
  char hex[2 * SL__DP_SHM_ID_BYTES + 1];
  for (unsigned i = 0; i < SL__DP_SHM_ID_BYTES; i++)
    snprintf(hex + 2 * i, 3, "%02x", id[i]);
  snprintf(out, n, "/dev/shm/sluice-dp-%s", hex);
}

static sl_status map(int fd, uint64_t ring, const char *name, bool dialer,
                     sl__dp_shm **out) {
  sl__dp_shm *s = sl__calloc(1, sizeof *s);
  if (!s) return SL_ENOMEM;
  s->size = SHM_HDR_BYTES + 2 * (size_t)ring;
  void *p = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    sl_status st = sl__fail(SL_EIO, "shared memory %s: mmap of %zu bytes: %s",
                            name, s->size, strerror(errno));
    sl__free(s);
    return st;
  }
  s->base = p;
  s->ring = ring;
  s->hdr = p;
  uint8_t *r0 = s->base + SHM_HDR_BYTES, *r1 = r0 + ring;
  s->tx = dialer ? r0 : r1;
  s->rx = dialer ? r1 : r0;
  s->txd = &s->hdr->dir[dialer ? 0 : 1];
  s->rxd = &s->hdr->dir[dialer ? 1 : 0];
  snprintf(s->name, sizeof s->name, "%s", name);
  *out = s;
  return SL_OK;
}

sl_status sl__dp_shm_create(uint64_t ring_bytes,
                            const uint8_t mac[SL__DP_MAC_BYTES],
                            uint8_t id[SL__DP_SHM_ID_BYTES], sl__dp_shm **out) {
  *out = NULL;
  if (!sl__dp_shm_ring_ok(ring_bytes))
    return sl__fail(SL_EINVAL, "shared memory: a ring of %llu bytes",
                    (unsigned long long)ring_bytes);
  char name[64];
  int fd = -1;
  for (int tries = 0; fd < 0 && tries < 4; tries++) {
    SL_CHECK(sl__dp_random(id, SL__DP_SHM_ID_BYTES));
    sl__dp_shm_name(id, name, sizeof name);
    fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0)
    return sl__fail(SL_EIO, "shared memory %s: %s", name, strerror(errno));
  /* Reserved now, not as payloads touch the pages: a tmpfs that runs out
   * of room (a small /dev/shm, a container's 64 MiB) would otherwise kill
   * the process with SIGBUS at some later write. Too little room here
   * means no segment, and the pair stays on TCP. The free space is
   * checked first: on a tmpfs as large as the machine's memory, reserving
   * more than is free would take the memory of every process (the OOM
   * killer) before it failed. */
  off_t size = (off_t)(SHM_HDR_BYTES + 2 * ring_bytes);
  struct statvfs fs;
  int rc = fstatvfs(fd, &fs) != 0                                 ? errno
           : (uint64_t)size > (uint64_t)fs.f_bavail * fs.f_frsize ? ENOSPC
           : ftruncate(fd, size) != 0                             ? errno
                                      : posix_fallocate(fd, 0, size);
  if (rc != 0) {
    sl_status st = sl__fail(SL_EIO, "shared memory %s: %lld bytes: %s", name,
                            (long long)size, strerror(rc));
    close(fd);
    unlink(name);
    return st;
  }
  sl__dp_shm *s;
  sl_status st = map(fd, ring_bytes, name, true, &s);
  close(fd);
  if (st != SL_OK) {
    unlink(name);
    return st;
  }
  s->owner = s->linked = true;
  s->hdr->magic = SHM_MAGIC;
  s->hdr->version = SHM_VERSION;
  s->hdr->ring_bytes = ring_bytes;
  memcpy(s->hdr->mac, mac, SL__DP_MAC_BYTES);
  for (int d = 0; d < 2; d++) {
    atomic_init(&s->hdr->dir[d].written, 0);
    atomic_init(&s->hdr->dir[d].released, 0);
  }
  *out = s;
  return SL_OK;
}

sl_status sl__dp_shm_open(const uint8_t id[SL__DP_SHM_ID_BYTES],
                          uint64_t ring_bytes, sl__dp_shm **out) {
  *out = NULL;
  char name[64];
  sl__dp_shm_name(id, name, sizeof name);
  if (!sl__dp_shm_ring_ok(ring_bytes))
    return sl__fail(SL_EINVAL, "shared memory %s: a ring of %llu bytes", name,
                    (unsigned long long)ring_bytes);
  int fd = open(name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return sl__fail(errno == ENOENT ? SL_ENOTFOUND : SL_EIO,
                    "shared memory %s: %s", name,
                    errno == ENOENT ? "not on this host" : strerror(errno));
  struct stat stt;
  sl_status st = SL_OK;
  if (fstat(fd, &stt) != 0)
    st = sl__fail(SL_EIO, "shared memory %s: %s", name, strerror(errno));
  else if (!S_ISREG(stt.st_mode) || stt.st_uid != geteuid())
    st = sl__fail(SL_EINVAL,
                  "shared memory %s: not a regular file of this user", name);
  else if ((uint64_t)stt.st_size != SHM_HDR_BYTES + 2 * ring_bytes)
    st = sl__fail(SL_EINVAL,
                  "shared memory %s: %lld bytes, but the offer says %llu", name,
                  (long long)stt.st_size,
                  (unsigned long long)(SHM_HDR_BYTES + 2 * ring_bytes));
  sl__dp_shm *s = NULL;
  if (st == SL_OK) st = map(fd, ring_bytes, name, false, &s);
  close(fd);
  if (st != SL_OK) return st;
  /* The creator wrote the header before offering it. */
  if (s->hdr->magic != SHM_MAGIC || s->hdr->version != SHM_VERSION ||
      s->hdr->ring_bytes != ring_bytes) {
    sl__dp_shm_destroy(s);
    return sl__fail(SL_EINVAL,
                    "shared memory %s: not a sluice segment of "
                    "this version and size",
                    name);
  }
  s->linked = true; /* the caller unlinks it once its MAC verified */
  *out = s;
  return SL_OK;
}

const uint8_t *sl__dp_shm_mac(const sl__dp_shm *s) { return s->hdr->mac; }

void sl__dp_shm_unlink(sl__dp_shm *s) {
  if (!s || !s->linked) return;
  unlink(s->name);
  s->linked = false;
}

void sl__dp_shm_destroy(sl__dp_shm *s) {
  if (!s) return;
  if (s->owner) sl__dp_shm_unlink(s);
  munmap(s->base, s->size);
  sl__free(s);
}

bool sl__dp_shm_ring_ok(uint64_t ring_bytes) {
  return ring_bytes >= 4096 && ring_bytes <= SHM_RING_MAX &&
         ring_bytes % 4096 == 0;
}

/* Where a payload of len bytes starts when the next free byte is pos:
 * on a cache line (aligned for any element type, as a collective reduces
 * from the ring in place), at the ring's start if it would not fit
 * before the end. */
#define SHM_ALIGN 64u
static uint64_t place(uint64_t pos, uint64_t len, uint64_t ring) {
  pos = (pos + SHM_ALIGN - 1) / SHM_ALIGN * SHM_ALIGN;
  uint64_t off = pos % ring;
  return off + len > ring ? pos + (ring - off) : pos;
}

bool sl__dp_shm_put(sl__dp_shm *s, const void *p, uint64_t len) {
  if (!len || len > s->ring) return false;
  uint64_t at = place(s->tx_pos, len, s->ring);
  uint64_t released =
      atomic_load_explicit(&s->txd->released, memory_order_acquire);
  /* Bytes not yet released lie in [released, tx_pos); the new ones would
   * land on one of them exactly when the span from the oldest to the new
   * end exceeds the ring. An empty ring has none (the skipped tail before
   * `at` holds nothing). */
  if (released != s->tx_pos && at + len - released > s->ring) return false;
  memcpy(s->tx + at % s->ring, p, (size_t)len);
  s->tx_pos = at + len;
  atomic_store_explicit(&s->txd->written, s->tx_pos, memory_order_release);
  return true;
}

sl_status sl__dp_shm_take(sl__dp_shm *s, uint64_t len, const uint8_t **p) {
  *p = NULL;
  if (!len || len > s->ring)
    return sl__fail(SL_ECOMM,
                    "bad frame: a payload of %llu bytes in a shared-memory "
                    "ring of %llu",
                    (unsigned long long)len, (unsigned long long)s->ring);
  uint64_t at = place(s->rx_pos, len, s->ring);
  uint64_t written =
      atomic_load_explicit(&s->rxd->written, memory_order_acquire);
  if (written < at + len)
    return sl__fail(SL_ECOMM,
                    "bad frame: its %llu payload bytes are not in the "
                    "shared-memory ring (written up to %llu, needed %llu)",
                    (unsigned long long)len, (unsigned long long)written,
                    (unsigned long long)(at + len));
  *p = s->rx + at % s->ring;
  s->rx_pos = at + len;
  return SL_OK;
}

void sl__dp_shm_release(sl__dp_shm *s) {
  atomic_store_explicit(&s->rxd->released, s->rx_pos, memory_order_release);
}
