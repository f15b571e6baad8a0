/* The CUDA module (tensor/cuda_module.h): a CPU program maps no CUDA
 * library; the module loads where it was built (in a CUDA build) and every
 * way it can fail to load is reported, naming the file and the reason, by
 * every entry that needs it. The loader runs once per process, so each case
 * runs in a child process. No GPU needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <sluice/sluice.h>

#include "caching_alloc.h"
#include "cuda_module.h"
#include "dev_coll.h"
#include "op.h"

/* Fails the child with a message. */
#define CHILD_CHECK(cond)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: %s failed (last error: %s)\n", __FILE__,         \
              __LINE__, #cond, sl_last_error());                               \
      _exit(1);                                                                \
    }                                                                          \
  } while (0)

/* Runs fn in a child with SLUICE_CUDA_MODULE set to module (unset when
 * NULL) and asserts it exited 0. */
static void in_child(void (*fn)(void), const char *module) {
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (module)
      setenv("SLUICE_CUDA_MODULE", module, 1);
    else
      unsetenv("SLUICE_CUDA_MODULE");
    fn();
    fflush(NULL);
    _exit(0);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* The first CUDA library or module this process maps, or NULL. */
static char *cuda_mapped(void) {
  static char line[4096];
  FILE *f = fopen("/proc/self/maps", "r");
  CHILD_CHECK(f);
  char *found = NULL;
  while (!found && fgets(line, sizeof line, f))
    if (strstr(line, "libcuda") || strstr(line, "libcublas") ||
        strstr(line, "libnccl") || strstr(line, "libsluice-cuda"))
      found = line;
  fclose(f);
  return found;
}

/* ---- a CPU program ------------------------------------------------------ */

static void train_on_cpu(void) {
  sl_graph *g;
  CHILD_CHECK(sl_graph_create(&g) == SL_OK);
  CHILD_CHECK(sl_graph_set_default_placement(g, "cpu:0-1") == SL_OK);
  sl_shape xs = SL_SHAPE(8, 4), ts = SL_SHAPE(8, 2), ws = SL_SHAPE(4, 2);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "S(0)");
  sl_tensor t = sl_input(g, "t", &ts, SL_DTYPE_F32, NULL, "S(0)");
  sl_tensor w =
      sl_variable(g, "w", &ws, SL_DTYPE_F32, sl_init_zeros(), NULL, NULL);
  sl_tensor loss = sl_mse_loss(sl_matmul(x, w, false, false), t);
  sl_optimizer opt = sl_optimizer_sgd(0.01, 0);
  CHILD_CHECK(sl_minimize(loss, &opt) == SL_OK);
  CHILD_CHECK(sl_fetch(loss, "loss") == SL_OK);
  sl_session *s;
  CHILD_CHECK(sl_session_create(g, NULL, &s) == SL_OK);
  float xv[32], tv[16], l;
  for (int i = 0; i < 32; i++)
    xv[i] = (float)(i % 5) - 2.0f;
  for (int i = 0; i < 16; i++)
    tv[i] = (float)(i % 3);
  for (int step = 0; step < 3; step++) {
    CHILD_CHECK(sl_session_feed(s, "x", xv, sizeof xv) == SL_OK);
    CHILD_CHECK(sl_session_feed(s, "t", tv, sizeof tv) == SL_OK);
    CHILD_CHECK(sl_session_run(s, 1) == SL_OK);
    CHILD_CHECK(sl_session_fetch(s, "loss", &l, sizeof l) == SL_OK);
  }
  CHILD_CHECK(sl_session_finish(s) == SL_OK);
  sl_session_destroy(s);
  sl_graph_destroy(g);
  char *m = cuda_mapped();
  if (m) fprintf(stderr, "a CPU program mapped: %s", m);
  CHILD_CHECK(!m);
}

static void test_cpu_program_maps_no_cuda(void **state) {
  (void)state;
  in_child(train_on_cpu, NULL);
}

/* ---- the module loads --------------------------------------------------- */

static void loads(void) {
  const char *path = NULL;
  sl_status st = sl_build_cuda_module(&path);
  if (!sl_build_has_cuda()) {
    CHILD_CHECK(st == SL_EUNSUPPORTED);
    CHILD_CHECK(strstr(sl_last_error(), "this build of sluice has no CUDA"));
    CHILD_CHECK(!cuda_mapped());
    printf("no CUDA in this build: %s\n", sl_last_error());
    return;
  }
  CHILD_CHECK(st == SL_OK);
  const char *base = strrchr(path, '/');
  CHILD_CHECK(base && strcmp(base + 1, SL__CUDA_MODULE_FILE) == 0);
  CHILD_CHECK(cuda_mapped());
  CHILD_CHECK(sl_device_count(SL_DEVICE_CUDA) >= 0);
  CHILD_CHECK(sl_build_cuda_runtime_version() != NULL);
  printf("loaded %s\n", path);
}

static void test_module_loads(void **state) {
  (void)state;
  in_child(loads, NULL);
}

/* ---- every way it fails ------------------------------------------------- */

static const char *want_reason;

/* Every entry that needs the module fails saying why. */
static void refused(void) {
  const char *path = (const char *)1;
  CHILD_CHECK(sl_build_cuda_module(&path) == SL_EUNSUPPORTED);
  CHILD_CHECK(path == NULL);
  CHILD_CHECK(strstr(sl_last_error(), want_reason));
  printf("refused: %s\n", sl_last_error());
  CHILD_CHECK(sl_device_count(SL_DEVICE_CUDA) == 0);
  CHILD_CHECK(sl_build_cuda_runtime_version() == NULL);
  sl_cuda_device_info info;
  CHILD_CHECK(sl_build_cuda_device_info(0, &info) == SL_EUNSUPPORTED);
  sl__device *d;
  CHILD_CHECK(sl__device_cuda_open(0, &d) == SL_EUNSUPPORTED);
  CHILD_CHECK(strstr(sl_last_error(), want_reason));
  sl__dev_coll *e;
  CHILD_CHECK(sl__dev_coll_nccl_open(&e) == SL_EUNSUPPORTED);
  CHILD_CHECK(strstr(sl_last_error(), "nccl: "));
  CHILD_CHECK(sl__op_cuda(sl__op_find("relu")) == NULL);
  char fake;
  sl__kernel_ctx k;
  memset(&k, 0, sizeof k);
  CHILD_CHECK(sl__op_run_cuda(sl__op_find("relu"), &k, NULL,
                              (sl__stream *)&fake) == SL_EUNSUPPORTED);
  CHILD_CHECK(strstr(sl_last_error(), "op relu: "));
  CHILD_CHECK(strstr(sl_last_error(), want_reason));
  CHILD_CHECK(!cuda_mapped());
}

static void refuse(const char *module, const char *reason) {
  want_reason = sl_build_has_cuda() ? reason
                                    : "this build of sluice has no "
                                      "CUDA";
  in_child(refused, module);
}

static void test_missing_file(void **state) {
  (void)state;
  refuse("/nonexistent/libsluice-cuda.so",
         "SLUICE_CUDA_MODULE names /nonexistent/libsluice-cuda.so, which "
         "does not exist");
}

static void test_not_a_library(void **state) {
  (void)state;
  char path[] = "/tmp/sluice-not-a-module-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "not ELF\n", 8), 8);
  close(fd);
  refuse(path, path); /* the loader's message names the file */
  unlink(path);
}

static void test_library_without_entry(void **state) {
  (void)state;
  refuse(FAKE_MODULE_NO_ENTRY, "no " SL__CUDA_MODULE_ENTRY);
}

static void test_library_it_needs_missing(void **state) {
  (void)state;
  refuse(FAKE_MODULE_MISSING_DEP,
         "libsluice-no-such-dep.so: cannot open shared object file");
}

static void test_module_of_another_version(void **state) {
  (void)state;
  refuse(FAKE_MODULE_OTHER_VERSION,
         "is sluice 0.0.0-other's CUDA module, this is sluice");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cpu_program_maps_no_cuda),
      cmocka_unit_test(test_module_loads),
      cmocka_unit_test(test_missing_file),
      cmocka_unit_test(test_not_a_library),
      cmocka_unit_test(test_library_without_entry),
      cmocka_unit_test(test_library_it_needs_missing),
      cmocka_unit_test(test_module_of_another_version),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
