/* The job blob: a fixed header (magic, version, node count, address
 * length, flags, starts text length), the program's address, the starts
 * text, the hang timeout, the base step, the CPU devices' threads and
 * pinning and the threads' spin, the plan's length, then the plan. Host byte
 * order: the daemons and the program are the same build on the same kind of
 * machine (docs/cluster.md, "Limits"). */
#include <string.h>

#include "core_int.h"
#include "job_blob.h"

#define BLOB_MAGIC 0x424a4c53u /* "SLJB" */
#define BLOB_VERSION 7u

static void wr(uint8_t **p, const void *src, size_t n) {
  memcpy(*p, src, n);
  *p += n;
}

sl_status sl__job_blob_pack(const sl__job_blob *b, uint8_t **buf, size_t *len) {
  *buf = NULL;
  *len = 0;
  uint32_t alen = (uint32_t)strlen(b->driver_addr);
  size_t slen = b->starts ? strlen(b->starts) : 0;
  if (slen >= SL__JOB_BLOB_STARTS)
    return sl__fail(SL_EINVAL,
                    "the variables' starts take %zu bytes, more than %d", slen,
                    SL__JOB_BLOB_STARTS - 1);
  uint32_t rlen = (uint32_t)slen;
  uint64_t pl = b->plan_len;
  size_t n = 6 * 4 + alen + rlen + 8 + 8 + 12 + 8 + pl;
  uint8_t *out = sl__malloc(n), *p = out;
  if (!out) return SL_ENOMEM;
  uint32_t hdr[6] = {BLOB_MAGIC, BLOB_VERSION, b->nnodes, alen, b->trace, rlen};
  wr(&p, hdr, sizeof hdr);
  wr(&p, b->driver_addr, alen);
  if (rlen) wr(&p, b->starts, rlen);
  wr(&p, &b->hang_timeout_ms, 8);
  wr(&p, &b->base_step, 8);
  int32_t cpu[3] = {b->cpu_threads, b->cpu_pin, b->spin_us};
  wr(&p, cpu, sizeof cpu);
  wr(&p, &pl, 8);
  wr(&p, b->plan, pl);
  *buf = out;
  *len = n;
  return SL_OK;
}

sl_status sl__job_blob_unpack(const uint8_t *buf, size_t len, char *out_addr,
                              char *out_starts, sl__job_blob *out) {
  memset(out, 0, sizeof *out);
  uint32_t hdr[6];
  uint64_t pl;
  if (len < sizeof hdr) goto bad;
  memcpy(hdr, buf, sizeof hdr);
  if (hdr[0] != BLOB_MAGIC || hdr[1] != BLOB_VERSION || hdr[3] >= 256 ||
      hdr[4] > 1 || hdr[5] >= SL__JOB_BLOB_STARTS)
    goto bad;
  size_t off = sizeof hdr;
  if (len - off < (size_t)hdr[3] + hdr[5] + 36u) goto bad;
  /* the address and path are text: a NUL inside would cut them short */
  if (memchr(buf + off, '\0', hdr[3]) ||
      memchr(buf + off + hdr[3], '\0', hdr[5]))
    goto bad;
  memcpy(out_addr, buf + off, hdr[3]);
  out_addr[hdr[3]] = '\0';
  off += hdr[3];
  memcpy(out_starts, buf + off, hdr[5]);
  out_starts[hdr[5]] = '\0';
  off += hdr[5];
  memcpy(&out->hang_timeout_ms, buf + off, 8);
  memcpy(&out->base_step, buf + off + 8, 8);
  int32_t cpu[3];
  memcpy(cpu, buf + off + 16, sizeof cpu);
  memcpy(&pl, buf + off + 28, 8);
  off += 36;
  if (out->base_step < 0) goto bad;
  out->cpu_threads = cpu[0]; /* the session checks the values */
  out->cpu_pin = cpu[1];
  out->spin_us = cpu[2];
  if (pl != len - off) goto bad;
  out->driver_addr = out_addr;
  out->starts = out_starts;
  out->nnodes = hdr[2];
  out->trace = hdr[4] != 0;
  out->plan = buf + off;
  out->plan_len = (size_t)pl;
  return SL_OK;
bad:
  return sl__fail(SL_EINVAL, "daemon: a malformed job blob (%zu bytes)", len);
}
