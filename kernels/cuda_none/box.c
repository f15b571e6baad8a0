/* sl__cuda_box in a build without CUDA (kernels/box.h). */
#include "box.h"

sl_status sl__cuda_box(const sl__box_op *b, sl__stream *s) {
  (void)b;
  (void)s;
  return sl__fail(SL_EUNSUPPORTED, "box on a CUDA device: built without CUDA");
}
