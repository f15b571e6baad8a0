/* The data plane's frame header: encoding, and decoding with every check a
 * receiver makes before it trusts a byte of the frame. The layout is in
 * dp.h; docs/cluster.md explains the fields. */
#include <string.h>

#include "dp.h"

static void put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p) {
  return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}
static uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

const char *sl__dp_kind_name(unsigned kind) {
  static const char *names[] = {"?",           "msg",       "credit",
                                "credit-req",  "ping",      "probe",
                                "probe-reply", "done",      "done-ack",
                                "coll",        "shm-offer", "shm-reply"};
  return kind < SL_ARRAY_LEN(names) ? names[kind] : "?";
}

void sl__dp_frame_encode(const sl__dp_frame *f, uint8_t out[SL__DP_HDR_BYTES]) {
  put32(out + 0, SL__DP_MAGIC);
  out[4] = f->version;
  out[5] = f->kind;
  put16(out + 6, f->flags);
  put64(out + 8, f->src);
  put64(out + 16, f->dst);
  put64(out + 24, (uint64_t)f->piece);
  put32(out + 32, (uint32_t)f->desc);
  put32(out + 36, (uint32_t)f->index);
  put16(out + 40, f->slot);
  put16(out + 42, f->consumer);
  out[44] = f->msg_kind;
  out[45] = f->cmd;
  put16(out + 46, f->origin);
  put64(out + 48, f->len);
  put64(out + 56, f->credit_frames);
  put64(out + 64, f->credit_bytes);
  put32(out + 72, f->payload_crc);
  put32(out + 76, sl__crc32c(0, out, 76));
}

sl_status sl__dp_frame_decode(const uint8_t hdr[SL__DP_HDR_BYTES],
                              uint64_t max_len, sl__dp_frame *out) {
  memset(out, 0, sizeof *out);
  uint32_t magic = get32(hdr);
  if (magic != SL__DP_MAGIC)
    return sl__fail(SL_ECOMM, "bad frame: magic 0x%08x (expected 0x%08x)",
                    magic, SL__DP_MAGIC);
  if (hdr[4] != SL__DP_VERSION)
    return sl__fail(SL_ECOMM,
                    "bad frame: version %u (this build speaks version %u)",
                    hdr[4], SL__DP_VERSION);
  uint32_t want = get32(hdr + 76), got = sl__crc32c(0, hdr, 76);
  if (want != got)
    return sl__fail(SL_ECOMM,
                    "bad frame: header checksum mismatch (0x%08x in the "
                    "frame, 0x%08x computed)",
                    want, got);
  sl__dp_frame f = {0};
  f.version = hdr[4];
  f.kind = hdr[5];
  f.flags = get16(hdr + 6);
  f.src = get64(hdr + 8);
  f.dst = get64(hdr + 16);
  f.piece = (int64_t)get64(hdr + 24);
  f.desc = (int32_t)get32(hdr + 32);
  f.index = (int32_t)get32(hdr + 36);
  f.slot = get16(hdr + 40);
  f.consumer = get16(hdr + 42);
  f.msg_kind = hdr[44];
  f.cmd = hdr[45];
  f.origin = get16(hdr + 46);
  f.len = get64(hdr + 48);
  f.credit_frames = get64(hdr + 56);
  f.credit_bytes = get64(hdr + 64);
  f.payload_crc = get32(hdr + 72);
  if (f.kind < 1 || f.kind > SL__DP_KIND_MAX)
    return sl__fail(SL_ECOMM, "bad frame: unknown kind %u", f.kind);
  if (f.flags & ~SL__DP_FLAGS_KNOWN)
    return sl__fail(SL_ECOMM, "bad frame: unknown flags 0x%04x on a %s frame",
                    f.flags, sl__dp_kind_name(f.kind));
  if (f.kind == SL__DP_MSG) {
    if (f.msg_kind < SL_MSG_READY || f.msg_kind > SL_MSG_CMD)
      return sl__fail(SL_ECOMM, "bad frame: unknown message kind %u",
                      f.msg_kind);
    if (f.msg_kind == SL_MSG_CMD &&
        (f.cmd < SL_CMD_START || f.cmd > SL_CMD_ABORT))
      return sl__fail(SL_ECOMM, "bad frame: unknown command %u", f.cmd);
  }
  bool may_carry = (f.kind == SL__DP_MSG && f.msg_kind == SL_MSG_READY) ||
                   f.kind == SL__DP_COLL;
  if (f.len && !may_carry)
    return sl__fail(SL_ECOMM,
                    "bad frame: a payload of %llu bytes on a %s frame (only "
                    "register-ready messages and collective chunks carry "
                    "one)",
                    (unsigned long long)f.len, sl__dp_kind_name(f.kind));
  if ((f.flags & SL__DP_FLAG_SHM) && (!f.len || f.payload_crc != 0))
    return sl__fail(
        SL_ECOMM, "bad frame: the shared-memory flag on a %s frame with %s",
        sl__dp_kind_name(f.kind), f.len ? "a payload checksum" : "no payload");
  if (f.len > max_len)
    return sl__fail(SL_ECOMM,
                    "bad frame: a payload of %llu bytes exceeds the limit of "
                    "%llu",
                    (unsigned long long)f.len, (unsigned long long)max_len);
  if (!f.len && f.payload_crc != 0)
    return sl__fail(SL_ECOMM,
                    "bad frame: a payload checksum without a payload");
  *out = f;
  return SL_OK;
}

void sl__dp_frame_to_msg(const sl__dp_frame *f, sl_msg *m) {
  memset(m, 0, sizeof *m);
  m->dst = f->dst;
  m->src = f->src;
  m->piece = f->piece;
  m->desc = f->desc;
  m->index = f->index;
  m->slot = f->slot;
  m->consumer = f->consumer;
  m->kind = f->msg_kind;
  m->cmd = f->cmd;
  m->origin_node = f->origin;
}

void sl__dp_frame_from_msg(const sl_msg *m, uint64_t len, sl__dp_frame *f) {
  memset(f, 0, sizeof *f);
  f->version = SL__DP_VERSION;
  f->kind = SL__DP_MSG;
  f->dst = m->dst;
  f->src = m->src;
  f->piece = m->piece;
  f->desc = m->desc;
  f->index = m->index;
  f->slot = m->slot;
  f->consumer = m->consumer;
  f->msg_kind = m->kind;
  f->cmd = m->cmd;
  f->origin = m->origin_node;
  f->len = len;
}
