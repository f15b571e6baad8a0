/* sluice tensor — module interface for the folders above tensor/. */
#ifndef SLUICE_TENSOR_INT_H
#define SLUICE_TENSOR_INT_H

#include <sluice/tensor.h>

/* GPUs visible to the CUDA runtime; 0 in a build without CUDA. */
int sl__cuda_device_count(void);

#endif
