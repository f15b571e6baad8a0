/* Control-plane authentication, all of its cryptography from OpenSSL's
 * libcrypto (EVP_MAC HMAC-SHA256, EVP_KDF HKDF, RAND_bytes, CRYPTO_memcmp):
 *
 *   Hello  the master hands out a fresh 32-byte nonce, good for one Join.
 *   Join   the joiner sends its own nonce and HMAC(token, join label ||
 *          "Join" || body), the body holding both nonces, its rank and its
 *          protocol version; the master checks it, burns the nonce and
 *          derives the member's session key:
 *            HKDF-SHA256(ikm = token, salt = server nonce || client nonce,
 *                        info = "sluice-cp-v1 session" || member || rank)
 *          Its reply is MAC'd with that key, which proves to the joiner that
 *          the master knows the token too.
 *   calls  every later request carries HMAC(key, call label || method ||
 *          member || counter || body) and every reply HMAC(key, reply
 *          label || ...) with the request's counter; a counter is accepted
 *          once (a sliding window tolerates calls overtaking each other).
 *
 * So the token never crosses the wire, a recorded Join cannot be replayed
 * (its nonce is spent) and a recorded call cannot be replayed (its counter
 * is spent), and a reply cannot be moved to another call. The bodies are
 * not encrypted: plans and keys travel in clear on the control network. */
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "cp_int.h"

static const char *const labels[] = {
    [SL__CP_MAC_JOIN] = "sluice-cp-v1 join",
    [SL__CP_MAC_CALL] = "sluice-cp-v1 call",
    [SL__CP_MAC_REPLY] = "sluice-cp-v1 reply",
};

static sl_status ossl_fail(const char *what) {
  unsigned long e = ERR_get_error();
  char buf[256] = "no detail";
  if (e) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return sl__fail(SL_EINTERNAL, "OpenSSL %s failed: %s", what, buf);
}

/* The HMAC and HKDF implementations are fetched once: fetching is the
 * expensive part, and the fetched objects may be shared by threads. */
static pthread_once_t fetch_once = PTHREAD_ONCE_INIT;
static EVP_MAC *hmac_impl;
static EVP_KDF *hkdf_impl;

static void fetch(void) {
  hmac_impl = EVP_MAC_fetch(NULL, "HMAC", NULL);
  hkdf_impl = EVP_KDF_fetch(NULL, "HKDF", NULL);
}

sl_status sl__cp_random(uint8_t *buf, size_t n) {
  if (RAND_bytes(buf, (int)n) != 1) return ossl_fail("RAND_bytes");
  return SL_OK;
}

static void be32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (24 - 8 * i));
}
static void be64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (56 - 8 * i));
}

/* A length-prefixed piece, so that ("ab", "c") and ("a", "bc") differ. */
static int update_piece(EVP_MAC_CTX *ctx, const void *p, size_t n) {
  uint8_t len[8];
  be64(len, n);
  return EVP_MAC_update(ctx, len, sizeof len) &&
         (n == 0 || EVP_MAC_update(ctx, p, n));
}

sl_status sl__cp_mac(const uint8_t *key, size_t key_len, sl__cp_mac_label label,
                     sl__cp_method method, uint32_t member, uint64_t counter,
                     const uint8_t *body, size_t len,
                     uint8_t mac[SL__CP_MAC_BYTES]) {
  pthread_once(&fetch_once, fetch);
  if (!hmac_impl) return ossl_fail("EVP_MAC_fetch(HMAC)");
  if (key_len == 0) return sl__fail(SL_EINVAL, "an HMAC needs a non-empty key");
  EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(hmac_impl);
  if (!ctx) return ossl_fail("EVP_MAC_CTX_new");
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
                                                          (char *)"SHA256", 0),
                         OSSL_PARAM_construct_end()};
  const char *lab = labels[label];
  const char *name = sl__cp_methods[method].name;
  uint8_t ids[12];
  be32(ids, member);
  be64(ids + 4, counter);
  size_t out_len = 0;
  sl_status st = SL_OK;
  if (!EVP_MAC_init(ctx, key, key_len, params) ||
      !update_piece(ctx, lab, strlen(lab)) ||
      !update_piece(ctx, name, strlen(name)) ||
      !update_piece(ctx, ids, sizeof ids) || !update_piece(ctx, body, len) ||
      !EVP_MAC_final(ctx, mac, &out_len, SL__CP_MAC_BYTES) ||
      out_len != SL__CP_MAC_BYTES)
    st = ossl_fail("HMAC-SHA256");
  EVP_MAC_CTX_free(ctx);
  return st;
}

bool sl__cp_mac_ok(const uint8_t *key, size_t key_len, sl__cp_mac_label label,
                   sl__cp_method method, uint32_t member, uint64_t counter,
                   const uint8_t *body, size_t len, const uint8_t *mac,
                   size_t mac_len) {
  uint8_t want[SL__CP_MAC_BYTES];
  if (mac_len != SL__CP_MAC_BYTES) return false;
  if (sl__cp_mac(key, key_len, label, method, member, counter, body, len,
                 want) != SL_OK)
    return false;
  return CRYPTO_memcmp(want, mac, SL__CP_MAC_BYTES) == 0;
}

sl_status sl__cp_session_key(const char *token, const uint8_t *server_nonce,
                             const uint8_t *client_nonce, uint32_t member,
                             int32_t rank, uint8_t key[SL__CP_KEY_BYTES]) {
  pthread_once(&fetch_once, fetch);
  if (!hkdf_impl) return ossl_fail("EVP_KDF_fetch(HKDF)");
  if (!token || !token[0])
    return sl__fail(SL_EINVAL, "a session key needs a token");
  uint8_t salt[2 * SL__CP_NONCE_BYTES];
  memcpy(salt, server_nonce, SL__CP_NONCE_BYTES);
  memcpy(salt + SL__CP_NONCE_BYTES, client_nonce, SL__CP_NONCE_BYTES);
  static const char prefix[] = "sluice-cp-v1 session";
  uint8_t info[sizeof prefix - 1 + 8];
  memcpy(info, prefix, sizeof prefix - 1);
  be32(info + sizeof prefix - 1, member);
  be32(info + sizeof prefix - 1 + 4, (uint32_t)rank);
  EVP_KDF_CTX *ctx = EVP_KDF_CTX_new(hkdf_impl);
  if (!ctx) return ossl_fail("EVP_KDF_CTX_new");
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256",
                                       0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (char *)token,
                                        strlen(token)),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, salt, sizeof salt),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, sizeof info),
      OSSL_PARAM_construct_end()};
  sl_status st = SL_OK;
  if (EVP_KDF_derive(ctx, key, SL__CP_KEY_BYTES, params) != 1)
    st = ossl_fail("HKDF-SHA256");
  EVP_KDF_CTX_free(ctx);
  OPENSSL_cleanse(salt, sizeof salt);
  return st;
}

/* Bit i of seen[] records counter top - i. */
static bool seen_get(const sl__cp_replay *w, uint64_t i) {
  return (w->seen[i / 64] >> (i % 64)) & 1u;
}
static void seen_set(sl__cp_replay *w, uint64_t i, bool v) {
  uint64_t bit = (uint64_t)1 << (i % 64);
  if (v)
    w->seen[i / 64] |= bit;
  else
    w->seen[i / 64] &= ~bit;
}

bool sl__cp_replay_accept(sl__cp_replay *w, uint64_t counter) {
  if (counter == 0) return false;
  if (counter > w->top) {
    uint64_t shift = counter - w->top;
    for (uint64_t i = SL__CP_REPLAY_WINDOW; i-- > 0;)
      seen_set(w, i, i >= shift && seen_get(w, i - shift));
    w->top = counter;
    seen_set(w, 0, true);
    return true;
  }
  uint64_t off = w->top - counter;
  if (off >= SL__CP_REPLAY_WINDOW || seen_get(w, off)) return false;
  seen_set(w, off, true);
  return true;
}
