/* sluice kernels — how op definitions name their CUDA kernels.
 *
 * Every op's CUDA kernel is an `sl__cuda_kernel sl__cuda_<op>` defined in
 * its family's .cu file (kernels/cuda/). An op definition refers to it as
 *
 *   .cuda = SL__CUDA_KERNEL(relu),
 *
 * which CMake makes mean `&sl__cuda_relu` in builds with CUDA
 * (kernels/cuda/ref/cuda_kernel_ref.h is on the include path) and NULL in
 * builds without (kernels/cuda_none/cuda_kernel_ref.h): the CPU-only build
 * compiles no CUDA and references none, with no #ifdef anywhere. In a CUDA
 * build an op naming a kernel no .cu defines fails to link, so coverage
 * cannot drop silently; an op without a CUDA kernel leaves `.cuda` out,
 * and tests/kernels/test_cuda_conformance.c fails naming it. */
#ifndef SLUICE_KERNELS_CUDA_KERNELS_H
#define SLUICE_KERNELS_CUDA_KERNELS_H

#include "op.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SL_OP(name) extern const sl__cuda_kernel sl__cuda_##name;
#include "ops_pointwise.def"
#include "ops_dense.def"
#include "ops_data.def"
#undef SL_OP

#ifdef __cplusplus
}
#endif

#include "cuda_kernel_ref.h"

#endif
