/* The control plane's message decoders (comm/control/wire.c) on any bytes. The
 * first byte picks the message type (sl__cp_messages: the envelope and
 * every request and reply of control.proto), the rest is the encoding.
 * A rejected input leaves no message and says why; an accepted one passes
 * the field checks, re-encodes to bytes that decode again, and those
 * re-encode identically (the decoders and encoders agree). */
#include "cp_int.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const ProtobufCMessageDescriptor *d =
      sl__cp_messages[data[0] % sl__cp_n_messages];
  ProtobufCMessage *m = (ProtobufCMessage *)1;
  sl_clear_error();
  sl_status st = sl__cp_decode(d, data + 1, size - 1, &m);
  if (st != SL_OK) {
    FUZZ_CHECK(st == SL_EINVAL, "%s: status %d", d->short_name, (int)st);
    FUZZ_CHECK(m == NULL, "%s: failure left a message", d->short_name);
    FUZZ_CHECK(strstr(sl_last_error(), d->short_name) != NULL,
               "%s: message '%s' does not name the type", d->short_name,
               sl_last_error());
    return 0;
  }
  FUZZ_CHECK(m && m->descriptor == d, "%s: wrong message", d->short_name);
  FUZZ_CHECK(sl__cp_check(m) == SL_OK, "%s: accepted but fails its checks: %s",
             d->short_name, sl_last_error());
  uint8_t *a, *b;
  size_t alen, blen;
  FUZZ_CHECK(sl__cp_pack(m, &a, &alen) == SL_OK, "pack");
  ProtobufCMessage *m2;
  FUZZ_CHECK(sl__cp_decode(d, a, alen, &m2) == SL_OK,
             "%s: its own encoding does not decode: %s", d->short_name,
             sl_last_error());
  FUZZ_CHECK(sl__cp_pack(m2, &b, &blen) == SL_OK, "pack");
  FUZZ_CHECK(alen == blen && memcmp(a, b, alen) == 0,
             "%s: re-encoding changed (%zu vs %zu bytes)", d->short_name, alen,
             blen);
  sl__free(a);
  sl__free(b);
  sl__cp_msg_free(m);
  sl__cp_msg_free(m2);
  return 0;
}
