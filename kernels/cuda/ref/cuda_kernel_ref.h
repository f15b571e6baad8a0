/* SL__CUDA_KERNEL in a build with CUDA: the kernel defined in
 * kernels/cuda/ (see kernels/cuda_kernels.h). */
#ifndef SLUICE_KERNELS_CUDA_KERNEL_REF_H
#define SLUICE_KERNELS_CUDA_KERNEL_REF_H
#define SL__CUDA_KERNEL(name) (&sl__cuda_##name)
#endif
