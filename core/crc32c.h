/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78): the data plane's
 * frame checks and the checkpoints' file checks (core/crc32c.c). */
#ifndef SLUICE_CRC32C_H
#define SLUICE_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The CRC32C of n bytes continuing from crc (0 to start): crc32c("123456789")
 * = 0xE3069283, and sl__crc32c(sl__crc32c(0, a, n), b, m) is the CRC of a
 * followed by b. Uses the CPU's instructions when it has them. */
uint32_t sl__crc32c(uint32_t crc, const void *p, size_t n);
/* The same with tables only (tests compare the two). */
uint32_t sl__crc32c_sw(uint32_t crc, const void *p, size_t n);
/* True when sl__crc32c uses the CPU instruction. */
bool sl__crc32c_hw(void);

#endif
