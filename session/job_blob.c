/* The job blob: a fixed header (magic, version, node count, address
 * length, flags), the program's address, the hang timeout, the graph's
 * and the plan's lengths, then the two encodings. Host byte order: the
 * daemons and the program are the same build on the same kind of machine
 * (docs/daemon.md, "Limits"). */
#include <string.h>

#include "core_int.h"
#include "job_blob.h"

#define BLOB_MAGIC 0x424a4c53u /* "SLJB" */
#define BLOB_VERSION 2u

static void wr(uint8_t **p, const void *src, size_t n) {
  memcpy(*p, src, n);
  *p += n;
}

sl_status sl__job_blob_pack(const sl__job_blob *b, uint8_t **buf, size_t *len) {
  *buf = NULL;
  *len = 0;
  uint32_t alen = (uint32_t)strlen(b->driver_addr);
  uint64_t gl = b->graph_len, pl = b->plan_len;
  size_t n = 5 * 4 + alen + 8 + 8 + 8 + gl + pl;
  uint8_t *out = sl__malloc(n), *p = out;
  if (!out) return SL_ENOMEM;
  uint32_t hdr[5] = {BLOB_MAGIC, BLOB_VERSION, b->nnodes, alen, b->trace};
  wr(&p, hdr, sizeof hdr);
  wr(&p, b->driver_addr, alen);
  wr(&p, &b->hang_timeout_ms, 8);
  wr(&p, &gl, 8);
  wr(&p, &pl, 8);
  wr(&p, b->graph, gl);
  wr(&p, b->plan, pl);
  *buf = out;
  *len = n;
  return SL_OK;
}

sl_status sl__job_blob_unpack(const uint8_t *buf, size_t len, char *out_addr,
                              sl__job_blob *out) {
  memset(out, 0, sizeof *out);
  uint32_t hdr[5];
  uint64_t gl, pl;
  if (len < sizeof hdr) goto bad;
  memcpy(hdr, buf, sizeof hdr);
  if (hdr[0] != BLOB_MAGIC || hdr[1] != BLOB_VERSION || hdr[3] >= 256 ||
      hdr[4] > 1)
    goto bad;
  size_t off = sizeof hdr;
  if (len - off < hdr[3] + 24u) goto bad;
  /* the address is text: a NUL inside would cut it short */
  if (memchr(buf + off, '\0', hdr[3])) goto bad;
  memcpy(out_addr, buf + off, hdr[3]);
  out_addr[hdr[3]] = '\0';
  off += hdr[3];
  memcpy(&out->hang_timeout_ms, buf + off, 8);
  memcpy(&gl, buf + off + 8, 8);
  memcpy(&pl, buf + off + 16, 8);
  off += 24;
  if (gl > len - off || pl != len - off - gl) goto bad;
  out->driver_addr = out_addr;
  out->nnodes = hdr[2];
  out->trace = hdr[4] != 0;
  out->graph = buf + off;
  out->graph_len = (size_t)gl;
  out->plan = buf + off + gl;
  out->plan_len = (size_t)pl;
  return SL_OK;
bad:
  return sl__fail(SL_EINVAL, "daemon: a malformed job blob (%zu bytes)", len);
}
