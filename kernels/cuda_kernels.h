/* sluice kernels — the ops' CUDA kernels, as the CUDA module names them.
 *
 * Every op of the pointwise and dense families has an `sl__cuda_kernel
 * sl__cuda_<op>` defined in its family's .cu file (kernels/cuda/). The CUDA
 * module (cuda/module.c) lists them all, from the same X-macro files as the
 * registry, in the table libsluice looks kernels up in (sl__op_cuda): an op
 * whose kernel no .cu defines fails to link the module, so coverage cannot
 * drop silently. The data family's ops run from the host
 * (sl__op_def.cuda_from_host). */
#ifndef SLUICE_KERNELS_CUDA_KERNELS_H
#define SLUICE_KERNELS_CUDA_KERNELS_H

#include "op.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SL_OP(name) extern const sl__cuda_kernel sl__cuda_##name;
#include "ops_pointwise.def"
#include "ops_dense.def"
#undef SL_OP

#ifdef __cplusplus
}
#endif
#endif
