/* sluice info: version, build features and visible devices. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

bool sl_cli_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
      return true;
  return false;
}

int sl_cli_info(int argc, char **argv) {
  if (sl_cli_wants_help(argc, argv)) {
    printf("usage: sluice info\n\n"
           "Prints the sluice version, the features this build has (CUDA,\n"
           "NCCL, BLAS), where the CUDA module was loaded from (or why it\n"
           "could not be) and the devices this process can see.\n");
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "sluice info: unexpected argument '%s'\n", argv[1]);
    return 2;
  }
  printf("sluice %s\n", sl_version());
  printf("features:\n");
  const char *module = NULL;
  bool loaded = sl_build_has_cuda() && sl_build_cuda_module(&module) == SL_OK;
  if (!sl_build_has_cuda()) {
    printf("  cuda: no\n");
  } else if (!loaded) {
    printf("  cuda: built, module not loaded: %s\n", sl_last_error());
  } else {
    const char *rt = sl_build_cuda_runtime_version();
    const char *drv = sl_build_cuda_driver_version();
    const char *nccl = sl_build_nccl_version();
    printf("  cuda: yes (runtime %s, driver %s)\n", rt ? rt : "unknown",
           drv ? drv : "not found");
    printf("  cuda module: %s\n", module);
    printf("  nccl: yes (%s)\n", nccl ? nccl : "version unknown");
  }
  if (!loaded) printf("  nccl: no\n");
  printf("  blas: %s\n", sl_build_blas_detail());
  printf("devices:\n");
  printf("  cpu: %d\n", sl_device_count(SL_DEVICE_CPU));
  int ngpu = loaded ? sl_device_count(SL_DEVICE_CUDA) : 0;
  printf("  cuda: %d\n", ngpu);
  for (int i = 0; i < ngpu; i++) {
    sl_cuda_device_info g;
    if (sl_build_cuda_device_info(i, &g) != SL_OK) {
      printf("    cuda:%d: %s\n", i, sl_last_error());
      continue;
    }
    printf("    cuda:%d: %s, %.1f GiB, compute capability %d.%d, %d SMs, "
           "PCI %04x:%02x:%02x\n",
           i, g.name, (double)g.total_memory / (1024.0 * 1024.0 * 1024.0),
           g.compute_major, g.compute_minor, g.multiprocessors, g.pci_domain,
           g.pci_bus, g.pci_device);
  }
  return 0;
}
