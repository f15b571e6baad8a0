/* Non-x86 targets: no cpuid, so no features; OpenBLAS detects the CPU
 * itself and the C sgemm runs its generic kernel. */
#include <string.h>

#include "cpu/blas.h"

void sl__cpuid_read(sl__cpuid_regs *out) { memset(out, 0, sizeof *out); }
