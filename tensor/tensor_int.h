/* sluice tensor — module interface for the folders above tensor/. */
#ifndef SLUICE_TENSOR_INT_H
#define SLUICE_TENSOR_INT_H

#include <sluice/tensor.h>

/* GPUs visible to the CUDA runtime; 0 in a build without CUDA. */
int sl__cuda_device_count(void);

/* Double -> f16 / bf16 bits, rounded once to nearest-even (going through
 * float would round twice). sl_store_element uses them. */
uint16_t sl__f64_to_f16(double v);
uint16_t sl__f64_to_bf16(double v);

#endif
