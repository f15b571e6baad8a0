/* The shared-memory payload path of a data-plane connection whose two
 * ends run on one host (docs/cluster.md, "Shared memory").
 *
 * The dialer creates an unnamed file in /dev/shm (O_TMPFILE, mode 0600,
 * its memory reserved) holding a header page and two rings, one per
 * direction, and offers it on the connection as where to find it: its
 * process id, the descriptor holding the file, and a random cookie the
 * header repeats. The acceptor opens /proc/<pid>/fd/<fd>, checks the
 * header's cookie and MAC (the token's HMAC over this connection's
 * handshake nonces, so a segment planted by anyone without the token is
 * refused) and accepts; the dialer then closes that descriptor, and only
 * the two mappings hold the memory. No name ever exists, so nothing can
 * outlive the two processes: a dialer killed mid-offer takes its segment
 * with it. From then on a frame's payload may travel in the sender's ring
 * instead of the socket:
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
 * atomics are address-free, so they work across processes). */
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
#define SHM_VERSION 2u
#define SHM_DIR "/dev/shm"
#define COOKIE_BYTES 8u
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
  uint8_t cookie[COOKIE_BYTES]; /* the offer's, so that a process and
                                   descriptor of that number on another
                                   host is not taken for it */
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
  int fd;                  /* dialer: the offered descriptor until
                              withdrawn; -1 otherwise */
  char name[64];           /* for messages */
};

/* The offer's id: this process, the descriptor, the cookie. */
static void id_pack(uint8_t id[SL__DP_SHM_ID_BYTES], uint32_t pid, uint32_t fd,
                    const uint8_t cookie[COOKIE_BYTES]) {
  memcpy(id, &pid, 4);
  memcpy(id + 4, &fd, 4);
  memcpy(id + 8, cookie, COOKIE_BYTES);
}

static void id_path(const uint8_t id[SL__DP_SHM_ID_BYTES], char *out,
                    size_t n) {
  uint32_t pid, fd;
  memcpy(&pid, id, 4);
  memcpy(&fd, id + 4, 4);
  snprintf(out, n, "/proc/%u/fd/%u", pid, fd);
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
  s->fd = -1;
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
  uint8_t cookie[COOKIE_BYTES];
  SL_CHECK(sl__dp_random(cookie, sizeof cookie));
  int fd = open(SHM_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    return sl__fail(SL_EIO, "shared memory: an unnamed file in %s: %s", SHM_DIR,
                    strerror(errno));
  char name[64];
  id_pack(id, (uint32_t)getpid(), (uint32_t)fd, cookie);
  id_path(id, name, sizeof name);
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
    close(fd);
    return sl__fail(SL_EIO, "shared memory in %s: %lld bytes: %s", SHM_DIR,
                    (long long)size, strerror(rc));
  }
  sl__dp_shm *s;
  sl_status st = map(fd, ring_bytes, name, true, &s);
  if (st != SL_OK) {
    close(fd);
    return st;
  }
  s->fd = fd;
  s->hdr->magic = SHM_MAGIC;
  s->hdr->version = SHM_VERSION;
  s->hdr->ring_bytes = ring_bytes;
  memcpy(s->hdr->cookie, cookie, sizeof cookie);
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
  id_path(id, name, sizeof name);
  if (!sl__dp_shm_ring_ok(ring_bytes))
    return sl__fail(SL_EINVAL, "shared memory %s: a ring of %llu bytes", name,
                    (unsigned long long)ring_bytes);
  /* What the link leads to is checked before opening it: a peer names
   * the descriptor, and opening a device or a FIFO can do things. A
   * process or descriptor this process may not see is another host's. */
  struct stat before, stt;
  if (stat(name, &before) != 0) {
    int e = errno;
    bool elsewhere = e == ENOENT || e == EACCES || e == EPERM;
    return sl__fail(elsewhere ? SL_ENOTFOUND : SL_EIO, "shared memory %s: %s",
                    name, elsewhere ? "not on this host" : strerror(e));
  }
  if (!S_ISREG(before.st_mode) || before.st_uid != geteuid())
    return sl__fail(SL_EINVAL,
                    "shared memory %s: not a regular file of this user", name);
  if ((uint64_t)before.st_size != SHM_HDR_BYTES + 2 * ring_bytes)
    return sl__fail(SL_EINVAL,
                    "shared memory %s: %lld bytes, but the offer says %llu",
                    name, (long long)before.st_size,
                    (unsigned long long)(SHM_HDR_BYTES + 2 * ring_bytes));
  int fd = open(name, O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return sl__fail(errno == ENOENT ? SL_ENOTFOUND : SL_EIO,
                    "shared memory %s: %s", name,
                    errno == ENOENT ? "withdrawn" : strerror(errno));
  sl_status st = SL_OK;
  if (fstat(fd, &stt) != 0)
    st = sl__fail(SL_EIO, "shared memory %s: %s", name, strerror(errno));
  else if (stt.st_dev != before.st_dev || stt.st_ino != before.st_ino)
    st = sl__fail(SL_EINVAL, "shared memory %s: replaced while opened", name);
  sl__dp_shm *s = NULL;
  if (st == SL_OK) st = map(fd, ring_bytes, name, false, &s);
  close(fd);
  if (st != SL_OK) return st;
  /* The creator wrote the header before offering it. */
  if (s->hdr->magic != SHM_MAGIC || s->hdr->version != SHM_VERSION ||
      s->hdr->ring_bytes != ring_bytes ||
      memcmp(s->hdr->cookie, id + 8, COOKIE_BYTES) != 0) {
    sl__dp_shm_destroy(s);
    return sl__fail(SL_EINVAL,
                    "shared memory %s: not the sluice segment offered (of "
                    "this version and size)",
                    name);
  }
  *out = s;
  return SL_OK;
}

const uint8_t *sl__dp_shm_mac(const sl__dp_shm *s) { return s->hdr->mac; }

void sl__dp_shm_withdraw(sl__dp_shm *s) {
  if (!s || s->fd < 0) return;
  close(s->fd);
  s->fd = -1;
}

void sl__dp_shm_destroy(sl__dp_shm *s) {
  if (!s) return;
  sl__dp_shm_withdraw(s);
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
