/* sl_dtype_parse on any text (accepted only for the exact names), and the
 * f16 / bf16 conversions on the input's bytes as f32 and double values:
 * conversion is idempotent, keeps the sign and NaN-ness, rounds to a
 * nearest neighbour, and the double path agrees with the f32 one. */
#include <math.h>

#include <sluice/tensor.h>

#include "fuzz_common.h"
#include "tensor_int.h"

static void check_f16(float f) {
  uint16_t h = sl_f32_to_f16(f);
  float back = sl_f16_to_f32(h);
  if (isnan(f)) {
    FUZZ_CHECK(isnan(back), "NaN %a became %a", (double)f, (double)back);
    return;
  }
  FUZZ_CHECK(sl_f32_to_f16(back) == h, "f16 0x%04x not stable", h);
  FUZZ_CHECK(signbit(back) == signbit(f), "sign of %a lost", (double)f);
  FUZZ_CHECK(sl__f64_to_f16(f) == h, "f16 of %a: 0x%04x vs 0x%04x", (double)f,
             h, sl__f64_to_f16(f));
  /* Nearest: no other f16 value is strictly closer. */
  if (!isinf(back) && (h & 0x7fff) != 0x7bff) {
    uint16_t up = (uint16_t)(h + 1), down = (uint16_t)(h - 1);
    double err = fabs((double)back - f);
    FUZZ_CHECK(fabs((double)sl_f16_to_f32(up) - f) >= err, "%a: 0x%04x",
               (double)f, h);
    if (h & 0x7fff)
      FUZZ_CHECK(fabs((double)sl_f16_to_f32(down) - f) >= err, "%a: 0x%04x",
                 (double)f, h);
  }
  uint16_t b = sl_f32_to_bf16(f);
  float bb = sl_bf16_to_f32(b);
  FUZZ_CHECK(sl_f32_to_bf16(bb) == b, "bf16 0x%04x not stable", b);
  FUZZ_CHECK(sl__f64_to_bf16(f) == b, "bf16 of %a", (double)f);
  if (isinf(f)) FUZZ_CHECK(isinf(bb) && isinf(back), "inf %a", (double)f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_cstring(data, size);
  if (!text) return 0;
  sl_dtype dt;
  if (sl_dtype_parse(text, &dt) == SL_OK) {
    FUZZ_CHECK(strcmp(sl_dtype_name(dt), text) == 0, "'%s' parsed as %s", text,
               sl_dtype_name(dt));
    FUZZ_CHECK(sl_dtype_size(dt) > 0, "%s has size 0", text);
  } else {
    FUZZ_CHECK(strstr(sl_last_error(), "dtype") != NULL, "message '%s'",
               sl_last_error());
  }
  free(text);
  for (size_t i = 0; i + 4 <= size; i += 4) {
    float f;
    memcpy(&f, data + i, 4);
    check_f16(f);
  }
  /* Double values exercise the single-rounding store path. */
  for (size_t i = 0; i + 8 <= size; i += 8) {
    double d;
    memcpy(&d, data + i, 8);
    uint16_t h = sl__f64_to_f16(d);
    FUZZ_CHECK(isnan(d) == isnan(sl_f16_to_f32(h)), "NaN-ness of %a", d);
    if (!isnan(d) && !isinf(sl_f16_to_f32(h)) && fabs(d) <= 65504) {
      double err = fabs((double)sl_f16_to_f32(h) - d);
      uint16_t up = (uint16_t)(h + 1);
      if ((h & 0x7fff) != 0x7bff)
        FUZZ_CHECK(fabs((double)sl_f16_to_f32(up) - d) >= err, "%a", d);
    }
  }
  return 0;
}
