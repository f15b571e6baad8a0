/* Device types and the devices this process can see. */
#include <unistd.h>

#include "core_int.h"
#include "tensor_int.h"

const char *sl_device_type_name(sl_device_type t) {
  switch (t) {
  case SL_DEVICE_CPU: return "cpu";
  case SL_DEVICE_CUDA: return "cuda";
  }
  return "?";
}

int sl_device_count(sl_device_type t) {
  switch (t) {
  case SL_DEVICE_CPU: {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
  }
  case SL_DEVICE_CUDA: return sl__cuda_device_count();
  }
  return 0;
}
