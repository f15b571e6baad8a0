/* The data plane's handshake messages and their proofs: HMAC-SHA256 from
 * OpenSSL's libcrypto over both nonces, both ranks and the cluster size,
 * nonces from its CSPRNG, constant-time comparison. No cryptography is
 * implemented here; this file only frames the inputs.
 *
 * Layouts (little-endian integers):
 *   HELLO  (48): magic, version, type, 2 zero bytes, server rank, nnodes,
 *                Ns[32]
 *   PROOF  (88): magic, version, type, 2 zero bytes, client rank, dialed
 *                rank, nnodes, 4 zero bytes, Nc[32], MAC[32]
 *   RESULT (48): magic, version, type, code, 1 zero byte, server rank,
 *                4 zero bytes, MAC[32] (zero unless the code is OK) */
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "dp.h"

static const char label[] = "sluice-dp-v1";

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static bool all_zero(const uint8_t *p, size_t n) {
  uint8_t acc = 0;
  for (size_t i = 0; i < n; i++)
    acc |= p[i];
  return acc == 0;
}

const char *sl__dp_hs_code_str(unsigned code) {
  static const char *names[] = {"ok", "wrong token", "version mismatch",
                                "wrong rank or cluster size",
                                "duplicate connection"};
  return code < SL_ARRAY_LEN(names) ? names[code] : "unknown code";
}

size_t sl__dp_hs_size(unsigned type) {
  switch (type) {
  case SL__DP_HS_HELLO: return SL__DP_HELLO_BYTES;
  case SL__DP_HS_PROOF: return SL__DP_PROOF_BYTES;
  case SL__DP_HS_RESULT: return SL__DP_RESULT_BYTES;
  default: return 0;
  }
}

size_t sl__dp_hs_encode(const sl__dp_hs *m, uint8_t *out) {
  size_t n = sl__dp_hs_size(m->type);
  memset(out, 0, n);
  put32(out, SL__DP_HS_MAGIC);
  out[4] = m->version;
  out[5] = m->type;
  switch (m->type) {
  case SL__DP_HS_HELLO:
    put32(out + 8, m->rank);
    put32(out + 12, m->nnodes);
    memcpy(out + 16, m->nonce, SL__DP_NONCE_BYTES);
    break;
  case SL__DP_HS_PROOF:
    put32(out + 8, m->rank);
    put32(out + 12, m->peer_rank);
    put32(out + 16, m->nnodes);
    memcpy(out + 24, m->nonce, SL__DP_NONCE_BYTES);
    memcpy(out + 56, m->mac, SL__DP_MAC_BYTES);
    break;
  case SL__DP_HS_RESULT:
    out[6] = m->code;
    put32(out + 8, m->rank);
    memcpy(out + 16, m->mac, SL__DP_MAC_BYTES);
    break;
  default: break;
  }
  return n;
}

sl_status sl__dp_hs_decode(const uint8_t *in, size_t n, unsigned type,
                           sl__dp_hs *out) {
  memset(out, 0, sizeof *out);
  size_t want = sl__dp_hs_size(type);
  if (!want)
    return sl__fail(SL_EINVAL, "handshake: unknown message type %u", type);
  if (n != want)
    return sl__fail(SL_ECOMM, "bad handshake: %zu bytes, expected %zu", n,
                    want);
  if (get32(in) != SL__DP_HS_MAGIC)
    return sl__fail(SL_ECOMM,
                    "bad handshake: magic 0x%08x (not a sluice data-plane "
                    "peer?)",
                    get32(in));
  out->version = in[4];
  if (in[4] != SL__DP_VERSION)
    return sl__fail(SL_EUNSUPPORTED,
                    "version mismatch: the peer speaks data-plane version "
                    "%u, this build %u",
                    in[4], SL__DP_VERSION);
  if (in[5] != type)
    return sl__fail(SL_ECOMM, "bad handshake: message type %u, expected %u",
                    in[5], type);
  out->type = in[5];
  switch (type) {
  case SL__DP_HS_HELLO:
    if (!all_zero(in + 6, 2))
      return sl__fail(SL_ECOMM, "bad handshake: reserved bytes set");
    out->rank = get32(in + 8);
    out->nnodes = get32(in + 12);
    memcpy(out->nonce, in + 16, SL__DP_NONCE_BYTES);
    break;
  case SL__DP_HS_PROOF:
    if (!all_zero(in + 6, 2) || !all_zero(in + 20, 4))
      return sl__fail(SL_ECOMM, "bad handshake: reserved bytes set");
    out->rank = get32(in + 8);
    out->peer_rank = get32(in + 12);
    out->nnodes = get32(in + 16);
    memcpy(out->nonce, in + 24, SL__DP_NONCE_BYTES);
    memcpy(out->mac, in + 56, SL__DP_MAC_BYTES);
    break;
  case SL__DP_HS_RESULT:
    if (in[7] != 0 || !all_zero(in + 12, 4))
      return sl__fail(SL_ECOMM, "bad handshake: reserved bytes set");
    if (in[6] > SL__DP_HS_CODE_MAX)
      return sl__fail(SL_ECOMM, "bad handshake: unknown result code %u", in[6]);
    out->code = in[6];
    out->rank = get32(in + 8);
    memcpy(out->mac, in + 16, SL__DP_MAC_BYTES);
    if (out->code != SL__DP_HS_OK && !all_zero(out->mac, SL__DP_MAC_BYTES))
      return sl__fail(SL_ECOMM, "bad handshake: a refusal carries a MAC");
    break;
  default: break;
  }
  return SL_OK;
}

sl_status sl__dp_random(void *p, size_t n) {
  if (n > (size_t)INT32_MAX || RAND_bytes(p, (int)n) != 1)
    return sl__fail(SL_EINTERNAL, "handshake: RAND_bytes failed");
  return SL_OK;
}

sl_status sl__dp_mac(const void *token, size_t token_len, char role,
                     const uint8_t ns[SL__DP_NONCE_BYTES],
                     const uint8_t nc[SL__DP_NONCE_BYTES], uint32_t client,
                     uint32_t server, uint32_t nnodes,
                     uint8_t out[SL__DP_MAC_BYTES]) {
  uint8_t msg[sizeof label - 1 + 2 + 2 * SL__DP_NONCE_BYTES + 12];
  size_t k = 0;
  memcpy(msg, label, sizeof label - 1);
  k += sizeof label - 1;
  msg[k++] = (uint8_t)role;
  msg[k++] = SL__DP_VERSION;
  memcpy(msg + k, ns, SL__DP_NONCE_BYTES);
  k += SL__DP_NONCE_BYTES;
  memcpy(msg + k, nc, SL__DP_NONCE_BYTES);
  k += SL__DP_NONCE_BYTES;
  put32(msg + k, client);
  put32(msg + k + 4, server);
  put32(msg + k + 8, nnodes);
  k += 12;
  unsigned int len = 0;
  if (token_len > (size_t)INT32_MAX ||
      !HMAC(EVP_sha256(), token, (int)token_len, msg, k, out, &len) ||
      len != SL__DP_MAC_BYTES)
    return sl__fail(SL_EINTERNAL, "handshake: HMAC-SHA256 failed");
  return SL_OK;
}

bool sl__dp_mac_verify(const void *token, size_t token_len, char role,
                       const uint8_t ns[SL__DP_NONCE_BYTES],
                       const uint8_t nc[SL__DP_NONCE_BYTES], uint32_t client,
                       uint32_t server, uint32_t nnodes,
                       const uint8_t mac[SL__DP_MAC_BYTES]) {
  uint8_t want[SL__DP_MAC_BYTES];
  if (sl__dp_mac(token, token_len, role, ns, nc, client, server, nnodes,
                 want) != SL_OK)
    return false;
  return CRYPTO_memcmp(want, mac, SL__DP_MAC_BYTES) == 0;
}
