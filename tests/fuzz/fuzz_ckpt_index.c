/* index.json from any bytes (sl__ckpt_index_parse): what it accepts has
 * tensors sorted by name, a known element size, pieces naming a listed file
 * and lying inside their tensor, together covering it exactly. */
#include "ckpt_int.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *copy = malloc(size ? size : 1);
  if (!copy) return 0;
  memcpy(copy, data, size);
  sl__ckpt_index *x;
  sl_clear_error();
  if (sl__ckpt_index_parse(copy, size, "fuzz", &x) != SL_OK) {
    FUZZ_CHECK(x == NULL, "rejected but *out set");
    FUZZ_CHECK(sl_last_error()[0] != '\0', "rejected without a message");
    free(copy);
    return 0;
  }
  for (int32_t f = 0; f < x->n_files; f++)
    FUZZ_CHECK(x->files[f].name[0] && !strchr(x->files[f].name, '/') &&
                   x->files[f].bytes >= 0,
               "file %d", f);
  for (int32_t t = 0; t < x->n_tensors; t++) {
    const sl__ckpt_tensor *tn = &x->tensors[t];
    if (t) FUZZ_CHECK(strcmp(x->tensors[t - 1].name, tn->name) < 0, "order");
    FUZZ_CHECK(tn->esize > 0, "'%s': no element size", tn->name);
    int64_t sum = 0;
    for (int32_t k = 0; k < tn->n_pieces; k++) {
      const sl__ckpt_ref *r = &tn->pieces[k];
      FUZZ_CHECK(r->file >= 0 && r->file < x->n_files, "'%s': file", tn->name);
      FUZZ_CHECK(r->box.ndim == tn->shape.ndim, "'%s': rank", tn->name);
      for (int d = 0; d < r->box.ndim; d++)
        FUZZ_CHECK(r->box.start[d] >= 0 && r->box.extent[d] >= 0 &&
                       r->box.start[d] + r->box.extent[d] <= tn->shape.dims[d],
                   "'%s': piece %d outside", tn->name, k);
      sum += sl_slice_numel(&r->box);
    }
    FUZZ_CHECK(sum == sl_shape_numel(&tn->shape), "'%s': coverage", tn->name);
  }
  sl__ckpt_index_free(x);
  free(copy);
  return 0;
}
