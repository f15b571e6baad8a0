/* Invariance cases for the data-source ops (kernels/ops_data.def): one
 * op_case per op (see op_harness.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cpu/npy.h"
#include "op_harness.h"

/* npy_read: a fresh .npy file of random rows (f32, i32 or i64; 1 to 7 rows,
 * so a step's batch wraps around the file) read in batches of 1 to 9. The
 * file is unlinked at once; the open descriptor keeps it readable. */
static sl_status c_npy_read(sl_rng *r, sl__attrs *at, int *n_in,
                            sl_host_tensor **in) {
  (void)in;
  static const sl_dtype dts[] = {SL_DTYPE_F32, SL_DTYPE_I32, SL_DTYPE_I64};
  sl_dtype dt = dts[sl__rng_below(r, 3)];
  sl_shape s = oph_random_shape(r, 1 + (int)sl__rng_below(r, 3), 5, 0);
  s.dims[0] = 1 + (int64_t)sl__rng_below(r, 7);
  sl_host_tensor *data = oph_random(r, dt, &s, -8, 8);
  char path[] = "/tmp/sluice_op_case_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) fail_msg("mkstemp failed");
  close(fd);
  int32_t id = -1;
  sl_status st = sl__npy_write(path, dt, &s, sl_host_tensor_cdata(data));
  if (st == SL_OK) st = sl__npy_open(path, &id);
  unlink(path);
  sl_host_tensor_destroy(data);
  SL_CHECK(st);
  SL_CHECK(sl__attrs_set_int(at, "file", id));
  SL_CHECK(sl__attrs_set_int(at, "batch", 1 + (int64_t)sl__rng_below(r, 9)));
  *n_in = 0;
  return SL_OK;
}

static const op_case cases[] = {
    {"npy_read", c_npy_read, {0, 0}, 0},
};

const op_case *op_cases_data(int *n) {
  *n = (int)SL_ARRAY_LEN(cases);
  return cases;
}
