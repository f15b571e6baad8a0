/* Stand-ins for libsluice-cuda.so that libsluice must refuse
 * (test_cuda_module.c): built without the entry (a library that is not the
 * module; also the one that needs a library no machine has) and as the
 * module of another sluice version. */
#include "cuda_module.h"

#ifdef FAKE_OTHER_VERSION
static const sl__cuda_module other = {.size = sizeof(sl__cuda_module),
                                      .version = "0.0.0-other"};

__attribute__((visibility("default"))) const sl__cuda_module *
sluice_cuda_module_open(const sl__cuda_host *host) {
  (void)host;
  return &other;
}
#else
__attribute__((visibility("default"))) int not_a_sluice_module(void) {
  return 0;
}
#endif
