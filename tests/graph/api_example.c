/* The program of docs/api.md ("A complete program"), built as a test so
 * the documentation cannot drift from the API: it must build its graph and
 * train on four devices without an error. Keep the two copies identical. */
#include <stdio.h>

#include <sluice/sluice.h>

int main(void) {
  sl_graph *g;
  if (sl_graph_create(&g) != SL_OK) return 1;
  /* Four CPU devices of this machine; everything below lives there. */
  sl_graph_set_default_placement(g, "cpu:0-3");

  /* Data: 64 samples a step, new each step, split by rows (S(0)) over the
   * devices: data parallelism. */
  sl_shape xs = SL_SHAPE(64, 784), ys = SL_SHAPE(64);
  sl_tensor x = sl_data_random_normal(g, &xs, SL_DTYPE_F32, 0, 1, /*seed*/ 1,
                                      NULL, "S(0)");
  sl_tensor y =
      sl_data_random_int(g, &ys, SL_DTYPE_I32, 0, 10, /*seed*/ 2, NULL, "S(0)");

  /* Model: two layers; weights replicated (B, the default). */
  sl_shape w1s = SL_SHAPE(784, 128), b1s = SL_SHAPE(128),
           w2s = SL_SHAPE(128, 10);
  sl_tensor w1 = sl_variable(g, "w1", &w1s, SL_DTYPE_F32,
                             sl_init_kaiming_uniform(1.41, 3), NULL, NULL);
  sl_tensor b1 =
      sl_variable(g, "b1", &b1s, SL_DTYPE_F32, sl_init_zeros(), NULL, NULL);
  sl_tensor w2 = sl_variable(g, "w2", &w2s, SL_DTYPE_F32,
                             sl_init_xavier_uniform(1.0, 4), NULL, NULL);
  sl_tensor h =
      sl_name(sl_relu(sl_add(sl_matmul(x, w1, false, false), b1)), "fc1");
  sl_tensor logits = sl_name(sl_matmul(h, w2, false, false), "fc2");
  sl_tensor loss = sl_name(sl_cross_entropy(logits, y), "xent");

  /* Training: AdamW, gradients clipped to global norm 1. */
  sl_optimizer opt = sl_optimizer_adamw(1e-3, 0.01);
  opt.clip_norm = 1.0;
  sl_minimize(loss, &opt);
  sl_fetch(loss, "loss");

  /* One check for the whole construction. */
  if (sl_graph_status(g) != SL_OK) {
    fprintf(stderr, "graph: %s\n", sl_graph_error(g));
    sl_graph_destroy(g);
    return 1;
  }
  printf("graph built: %d nodes\n", sl_graph_node_count(g));

  /* Run it: the session compiles the graph (SBP inference, boxing), starts
   * one thread per device and trains, step by step. */
  sl_session *s;
  if (sl_session_create(g, NULL, &s) != SL_OK) {
    fprintf(stderr, "session: %s\n", sl_last_error());
    sl_graph_destroy(g);
    return 1;
  }
  int rc = 0;
  for (int step = 0; step < 5 && rc == 0; step++) {
    float value;
    if (sl_session_run(s, 1) != SL_OK ||
        sl_session_fetch(s, "loss", &value, sizeof value) != SL_OK) {
      fprintf(stderr, "step %d: %s\n", step, sl_last_error());
      rc = 1;
    } else {
      printf("step %d loss %.4f\n", step, value);
    }
  }
  sl_session_destroy(s);
  sl_graph_destroy(g);
  return rc;
}
