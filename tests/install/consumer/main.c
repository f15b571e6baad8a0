/* A program outside the tree: finds the installed sluice, links it, and
 * trains with it — a least-squares fit, data parallel on two CPU devices,
 * through the embedded session (so a static link pulls in the runtime, the
 * kernels and the device backends). Prints the placement's canonical form,
 * then the loss of the first and the last of 20 steps, and fails if the
 * process mapped any CUDA library (a CPU program must not).
 *
 * `consumer cuda-module` only opens the CUDA module and prints the file
 * name it was loaded from, or why it could not be. */
#include <stdio.h>
#include <string.h>

#include <sluice/sluice.h>

/* sluice.h is what a program needs; the actor runtime's embedding API is
 * its own header. */
#ifdef SLUICE_ACTOR_H
#error "sluice/sluice.h includes <sluice/actor.h>"
#endif

static int fail(void) {
  fprintf(stderr, "%s\n", sl_last_error());
  return 1;
}

/* The first CUDA library (or the CUDA module) this process maps, or NULL. */
static const char *cuda_mapped(char *line, size_t n) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return "(cannot read /proc/self/maps)";
  const char *found = NULL;
  while (!found && fgets(line, (int)n, f))
    if (strstr(line, "libcuda") || strstr(line, "libcublas") ||
        strstr(line, "libnccl") || strstr(line, "libsluice-cuda"))
      found = line;
  fclose(f);
  return found;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "cuda-module") == 0) {
    const char *path;
    if (sl_build_cuda_module(&path) != SL_OK) return fail();
    const char *base = strrchr(path, '/');
    printf("%s\n", base ? base + 1 : path);
    return 0;
  }
  sl_graph *g;
  if (sl_graph_create(&g) != SL_OK ||
      sl_graph_set_default_placement(g, "cpu:0-1") != SL_OK)
    return fail();
  sl_shape xs = SL_SHAPE(8, 4), ts = SL_SHAPE(8, 2), ws = SL_SHAPE(4, 2);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "S(0)");
  sl_tensor t = sl_input(g, "t", &ts, SL_DTYPE_F32, NULL, "S(0)");
  sl_tensor w =
      sl_variable(g, "w", &ws, SL_DTYPE_F32, sl_init_zeros(), NULL, NULL);
  sl_tensor loss = sl_mse_loss(sl_matmul(x, w, false, false), t);
  sl_optimizer opt = sl_optimizer_sgd(0.1, 0);
  sl_session *s;
  if (sl_minimize(loss, &opt) != SL_OK || sl_fetch(loss, "loss") != SL_OK ||
      sl_session_create(g, NULL, &s) != SL_OK)
    return fail();
  float xv[32], tv[16], first = 0, last = 0;
  for (int i = 0; i < 32; i++)
    xv[i] = (float)((i * 7) % 5) - 2.0f;
  for (int i = 0; i < 16; i++)
    tv[i] = (float)((i * 3) % 4) - 1.5f;
  for (int step = 0; step < 20; step++) {
    if (sl_session_feed(s, "x", xv, sizeof xv) != SL_OK ||
        sl_session_feed(s, "t", tv, sizeof tv) != SL_OK ||
        sl_session_run(s, 1) != SL_OK ||
        sl_session_fetch(s, "loss", &last, sizeof last) != SL_OK)
      return fail();
    if (step == 0) first = last;
  }
  if (sl_session_finish(s) != SL_OK) return fail();
  sl_session_destroy(s);
  sl_graph_destroy(g);

  sl_placement *p;
  if (sl_placement_parse("cpu:0-3[2,2]", &p) != SL_OK) return fail();
  char buf[64];
  sl_placement_print(p, buf, sizeof buf);
  sl_placement_destroy(p);
  printf("%s\nloss %.6f -> %.6f\n", buf, first, last);
  char line[4096];
  const char *cuda = cuda_mapped(line, sizeof line);
  if (cuda) {
    fprintf(stderr, "a CPU program mapped a CUDA library: %s", cuda);
    return 1;
  }
  return last < first ? 0 : 1;
}
