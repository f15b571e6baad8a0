/* sluice ckpt: inspects and converts checkpoints (docs/checkpoint.md).
 *   sluice ckpt info PATH                 what a checkpoint holds
 *   sluice ckpt convert PATH OUT.safetensors
 * PATH is a checkpoint directory (index.json and one safetensors file per
 * node) or a plain .safetensors file. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int sl_cli_ckpt(int argc, char **argv);

static void usage(FILE *f) {
  fprintf(f,
          "usage: sluice ckpt COMMAND [ARGS]\n\n"
          "Inspects and converts checkpoints: a directory a session saved\n"
          "(index.json and one safetensors file per node), or a plain\n"
          ".safetensors file (PyTorch, JAX, the safetensors package).\n\n"
          "  info PATH                  the step, metadata and every tensor:\n"
          "                             dtype, global shape, placement, sbp,\n"
          "                             stored pieces and bytes\n"
          "  convert PATH OUT           one standard safetensors file, each\n"
          "                             tensor whole under its name\n\n"
          "Both check the checkpoint first (headers, offsets, that pieces\n"
          "cover their tensors, CRC32C of every file). Exit status: 0 ok,\n"
          "2 bad usage or an unreadable or corrupt checkpoint.\n");
}

static void usage_info(FILE *f) {
  fprintf(f, "usage: sluice ckpt info PATH\n\n"
             "Checks the checkpoint at PATH (a directory or a .safetensors\n"
             "file) and prints its kind, step and metadata, then a table of\n"
             "its tensors: name, dtype, global shape, placement, sbp (\"-\"\n"
             "in a plain file), stored pieces and bytes; then the total.\n"
             "A dtype sluice does not compute with is marked '*'.\n");
}

static void usage_convert(FILE *f) {
  fprintf(f, "usage: sluice ckpt convert PATH OUT.safetensors\n\n"
             "Writes the checkpoint at PATH as one standard safetensors file\n"
             "(each tensor whole under its name, the step and the metadata\n"
             "in __metadata__), readable by the safetensors package and by\n"
             "numpy. OUT is written as OUT.tmp and renamed into place.\n");
}

static void human(int64_t bytes, char *buf, size_t size) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  if (u == 0)
    snprintf(buf, size, "%lld B", (long long)bytes);
  else
    snprintf(buf, size, "%.1f %s", v, units[u]);
}

static int fail(const char *cmd, sl_status st) {
  fprintf(stderr, "sluice ckpt %s: %s: %s\n", cmd, sl_status_str(st),
          sl_last_error());
  return 2;
}

static int width(const char *s, int w) {
  int n = (int)strlen(s);
  return n > w ? n : w;
}

static int cmd_info(int argc, char **argv) {
  if (sl_cli_wants_help(argc, argv)) {
    usage_info(stdout);
    return 0;
  }
  if (argc != 2 || argv[1][0] == '-') {
    if (argc >= 2 && argv[1][0] == '-')
      fprintf(stderr, "sluice ckpt info: unknown flag '%s'\n", argv[1]);
    usage_info(stderr);
    return 2;
  }
  sl_checkpoint *c;
  sl_status st = sl_checkpoint_open(argv[1], &c);
  if (st != SL_OK) return fail("info", st);
  int32_t n = sl_checkpoint_tensor_count(c);
  printf("checkpoint: %s\n", argv[1]);
  printf("kind: %s\n", sl_checkpoint_is_sharded(c)
                           ? "sluice checkpoint directory"
                           : "plain safetensors file");
  if (sl_checkpoint_step(c) >= 0)
    printf("step: %lld\n", (long long)sl_checkpoint_step(c));
  else
    printf("step: none\n");
  for (int32_t k = 0; k < sl_checkpoint_metadata_count(c); k++) {
    const char *key, *value;
    if (sl_checkpoint_metadata_get(c, k, &key, &value) == SL_OK)
      printf("metadata: %s = %s\n", key, value);
  }
  int wn = 4, wd = 5, ws = 5, wp = 9, wb = 3;
  bool unknown = false;
  char shape[SL_MAX_DIMS * 21 + 3];
  for (int32_t i = 0; i < n; i++) {
    sl_checkpoint_tensor t;
    sl_checkpoint_get_tensor(c, i, &t);
    sl_shape_print(&t.shape, shape, sizeof shape);
    wn = width(t.name, wn);
    wd = width(t.dtype_name, wd - !t.dtype_known) + !t.dtype_known;
    ws = width(shape, ws);
    wp = width(t.placement, wp);
    wb = width(t.sbp, wb);
    unknown |= !t.dtype_known;
  }
  printf("\n%-*s  %-*s  %-*s  %-*s  %-*s  %6s  %12s\n", wn, "NAME", wd, "DTYPE",
         ws, "SHAPE", wp, "PLACEMENT", wb, "SBP", "PIECES", "BYTES");
  int64_t total = 0;
  for (int32_t i = 0; i < n; i++) {
    sl_checkpoint_tensor t;
    sl_checkpoint_get_tensor(c, i, &t);
    sl_shape_print(&t.shape, shape, sizeof shape);
    char dt[32];
    snprintf(dt, sizeof dt, "%s%s", t.dtype_name, t.dtype_known ? "" : "*");
    printf("%-*s  %-*s  %-*s  %-*s  %-*s  %6d  %12lld\n", wn, t.name, wd, dt,
           ws, shape, wp, t.placement[0] ? t.placement : "-", wb,
           t.sbp[0] ? t.sbp : "-", (int)t.pieces, (long long)t.bytes);
    total += t.bytes;
  }
  char h[32];
  human(total, h, sizeof h);
  printf("\ntotal: %d tensor%s, %lld bytes (%s)\n", (int)n, n == 1 ? "" : "s",
         (long long)total, h);
  if (unknown) printf("* a dtype sluice does not compute with\n");
  sl_checkpoint_close(c);
  return 0;
}

static int cmd_convert(int argc, char **argv) {
  if (sl_cli_wants_help(argc, argv)) {
    usage_convert(stdout);
    return 0;
  }
  for (int i = 1; i < argc; i++)
    if (argv[i][0] == '-' && argv[i][1] != '\0') {
      fprintf(stderr, "sluice ckpt convert: unknown flag '%s'\n", argv[i]);
      return 2;
    }
  if (argc != 3) {
    usage_convert(stderr);
    return 2;
  }
  sl_status st = sl_checkpoint_convert(argv[1], argv[2]);
  if (st != SL_OK) return fail("convert", st);
  sl_checkpoint *c;
  st = sl_checkpoint_open(argv[2], &c);
  if (st != SL_OK) return fail("convert", st);
  int64_t total = 0;
  for (int32_t i = 0; i < sl_checkpoint_tensor_count(c); i++) {
    sl_checkpoint_tensor t;
    sl_checkpoint_get_tensor(c, i, &t);
    total += t.bytes;
  }
  char h[32];
  human(total, h, sizeof h);
  printf("wrote %s: %d tensors, %s of data\n", argv[2],
         (int)sl_checkpoint_tensor_count(c), h);
  sl_checkpoint_close(c);
  return 0;
}

int sl_cli_ckpt(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *sub = argv[1];
  if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 ||
      strcmp(sub, "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(sub, "info") == 0) return cmd_info(argc - 1, argv + 1);
  if (strcmp(sub, "convert") == 0) return cmd_convert(argc - 1, argv + 1);
  fprintf(stderr,
          "sluice ckpt: unknown command '%s' (see 'sluice ckpt --help')\n",
          sub);
  return 2;
}
