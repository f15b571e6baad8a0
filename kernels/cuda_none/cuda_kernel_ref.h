/* SL__CUDA_KERNEL in a build without CUDA: no kernel (see
 * kernels/cuda_kernels.h). */
#ifndef SLUICE_KERNELS_CUDA_KERNEL_REF_H
#define SLUICE_KERNELS_CUDA_KERNEL_REF_H
#define SL__CUDA_KERNEL(name) NULL
#endif
