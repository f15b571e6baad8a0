/* The data plane's decoders on any bytes: the frame header
 * (sl__dp_frame_decode) and the three handshake messages
 * (sl__dp_hs_decode). Input: one flags byte, then the bytes to decode.
 * Flag bit 0 first writes the correct header checksum into the frame, so
 * the checks behind the checksum are reached too.
 *
 * Properties: a decoder either rejects with a message, or accepts bytes
 * that its encoder reproduces exactly (every bit of an accepted message is
 * accounted for); a rejected frame comes back zeroed; decoding never reads
 * past the input (ASan). */
#include "dp.h"

#include "fuzz_common.h"

static void fuzz_header(const uint8_t *in, size_t n, bool fix_crc,
                        uint64_t max_len) {
  uint8_t hdr[SL__DP_HDR_BYTES] = {0};
  memcpy(hdr, in, n < sizeof hdr ? n : sizeof hdr);
  if (fix_crc) {
    uint32_t c = sl__crc32c(0, hdr, 76);
    for (int i = 0; i < 4; i++)
      hdr[76 + i] = (uint8_t)(c >> (8 * i));
  }
  sl__dp_frame f;
  if (sl__dp_frame_decode(hdr, max_len, &f) == SL_OK) {
    FUZZ_CHECK(f.kind >= 1 && f.kind <= SL__DP_KIND_MAX, "kind %u", f.kind);
    FUZZ_CHECK(f.len <= max_len, "len %llu", (unsigned long long)f.len);
    /* Only register-ready messages and collective chunks carry bytes. */
    FUZZ_CHECK(!f.len || f.kind == SL__DP_COLL ||
                   (f.kind == SL__DP_MSG && f.msg_kind == SL_MSG_READY),
               "payload on kind %u/%u", f.kind, f.msg_kind);
    uint8_t again[SL__DP_HDR_BYTES];
    sl__dp_frame_encode(&f, again);
    FUZZ_CHECK(memcmp(hdr, again, sizeof hdr) == 0,
               "accepted header does not re-encode to itself");
    if (f.kind == SL__DP_MSG) {
      sl_msg m;
      sl__dp_frame_to_msg(&f, &m);
      sl__dp_frame g;
      sl__dp_frame_from_msg(&m, f.len, &g);
      FUZZ_CHECK(g.src == f.src && g.dst == f.dst && g.piece == f.piece &&
                     g.desc == f.desc && g.index == f.index &&
                     g.slot == f.slot && g.consumer == f.consumer &&
                     g.msg_kind == f.msg_kind && g.cmd == f.cmd &&
                     g.origin == f.origin,
                 "message fields lost in the round trip");
    }
  } else {
    FUZZ_CHECK(sl_last_error()[0] != '\0', "header rejected silently");
    sl__dp_frame zero = {0};
    FUZZ_CHECK(memcmp(&f, &zero, sizeof f) == 0, "rejected frame not zeroed");
  }
}

static void fuzz_hs(const uint8_t *in, size_t n, unsigned type) {
  size_t want = sl__dp_hs_size(type);
  sl__dp_hs m;
  /* The exact input length: anything else is rejected. */
  sl_status st = sl__dp_hs_decode(in, n, type, &m);
  if (n != want) FUZZ_CHECK(st != SL_OK, "accepted %zu bytes of %zu", n, want);
  if (n < want) return;
  st = sl__dp_hs_decode(in, want, type, &m);
  if (st == SL_OK) {
    FUZZ_CHECK(m.type == type && m.version == SL__DP_VERSION, "type/version");
    FUZZ_CHECK(m.code <= SL__DP_HS_CODE_MAX, "code %u", m.code);
    uint8_t again[SL__DP_PROOF_BYTES];
    FUZZ_CHECK(sl__dp_hs_encode(&m, again) == want, "size");
    FUZZ_CHECK(memcmp(in, again, want) == 0,
               "accepted handshake message does not re-encode to itself");
  } else {
    FUZZ_CHECK(sl_last_error()[0] != '\0', "handshake rejected silently");
    FUZZ_CHECK(st != SL_EUNSUPPORTED || m.version != SL__DP_VERSION,
               "version mismatch reported for the same version");
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  uint8_t flags = data[0];
  /* A heap copy of exactly the input, so a read past it is caught. */
  size_t n = size - 1;
  uint8_t *in = malloc(n ? n : 1);
  if (!in) return 0;
  memcpy(in, data + 1, n);
  uint64_t max_len = (flags & 2) ? 4096 : UINT64_MAX;
  fuzz_header(in, n, flags & 1, max_len);
  for (unsigned t = SL__DP_HS_HELLO; t <= SL__DP_HS_RESULT; t++)
    fuzz_hs(in, n, t);
  free(in);
  return 0;
}
