/* bench_memory: sluice's planned memory per device against what a training
 * step must hold and against PyTorch's measured peak, one table per model:
 *
 *   MLP          examples/mlp's defaults (4 hidden layers of 1024, in 1024,
 *                10 classes, batch 256, SGD): single on 1 device, dp and tp
 *                on N (--devices, default 4)
 *   MLP, heavy   activations dominate: 8 hidden layers of 512, batch 2048;
 *                single on 1 device
 *   GPT          examples/gpt's defaults (2 blocks, hidden 64, 4 heads, seq
 *                32, vocab 64, batch 8, untied head, Adam): single, dp, tp
 *   GPT, 4x256   --layers 4 --hidden 256 --seq 128, the rest the defaults:
 *                single, dp, tp
 *
 * sluice: each row runs the example (examples/mlp or examples/gpt) with
 * --memory --steps 1 and reads its per-device lines
 *
 *   memory DEVICE peak N bytes (weights W, optimizer O, gradients G,
 *   activations A, communication C, workspace K); allocated M bytes
 *
 * The row's "sluice" is the largest `allocated` over the devices: the
 * planned peak per device.
 *
 * PyTorch (bench/peers/memory_torch.py, one process, one thread, the same
 * model on 1 CPU device) gives, in bytes, weights, gradients, optimizer
 * (state), saved (what autograd saves for backward), transient (the largest
 * other tensor of the step), bound = their sum, and peak (its allocator's
 * measured peak in one step; the peer's docstring says how each is
 * measured). The bound per device on n devices:
 *
 *   single  bound
 *   dp      weights + gradients + optimizer + (saved + transient) / n: every
 *           device holds the whole model, the batch is split
 *   tp      gpt: the bound of one rank of Megatron tensor parallelism,
 *           measured by the peer (memory_torch.py gpt --tp n: the rank's
 *           share of the heads and of fc1/fc2, the rest whole, as
 *           examples/gpt --layout tp splits it; sluice runs Megatron's plan
 *           too, --megatron), whose peak is PyTorch's column of the row;
 *           mlp: bound / n, the ideal split
 *
 * Targets: sluice / bound <= 1.15, and sluice / PyTorch's peak <= 1.0 where
 * the peer ran the row's layout; a "!" marks a ratio over its target.
 *
 * Usage: bench_memory [--devices N] [--python PATH] [--no-torch]
 *        [--mlp PATH] [--gpt PATH] (--help)
 * Exit status 0, 1 when a sluice run gave no memory lines, 2 for bad
 * flags. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#ifndef MEMORY_TORCH_PEER
#define MEMORY_TORCH_PEER "bench/peers/memory_torch.py"
#endif
#ifndef SLUICE_MLP_PATH
#define SLUICE_MLP_PATH "build/examples/mlp"
#endif
#ifndef SLUICE_GPT_PATH
#define SLUICE_GPT_PATH "build/examples/gpt"
#endif

#define MIB (1024.0 * 1024.0)
#define TARGET_BOUND 1.15
#define TARGET_TORCH 1.0
#define MAX_ARGS 24

typedef enum model_kind { MODEL_MLP, MODEL_GPT } model_kind;

/* A model of the benchmark: its flags are given in full to both the example
 * and the peer (the same spelling works for both), so that neither side's
 * defaults can drift from the other's. */
typedef struct model {
  const char *name;  /* the table's model column */
  const char *title; /* the table's heading */
  model_kind kind;
  bool parallel; /* rows for dp and tp too */
  const char *flags[MAX_ARGS];
} model;

static const model models[] = {
    {"mlp",
     "MLP, examples/mlp's defaults: 4 hidden layers of 1024, in 1024, 10 "
     "classes, batch 256, SGD",
     MODEL_MLP,
     true,
     {"--layers", "4", "--hidden", "1024", "--batch", "256", "--in", "1024",
      "--classes", "10", "--optimizer", "sgd", NULL}},
    {"mlp-heavy",
     "MLP, activation-heavy: 8 hidden layers of 512, in 1024, 10 classes, "
     "batch 2048, SGD",
     MODEL_MLP,
     false,
     {"--layers", "8", "--hidden", "512", "--batch", "2048", "--in", "1024",
      "--classes", "10", "--optimizer", "sgd", NULL}},
    {"gpt",
     "GPT, examples/gpt's defaults: 2 blocks, hidden 64, 4 heads, seq 32, "
     "vocab 64, batch 8, untied head, Adam",
     MODEL_GPT,
     true,
     {"--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "32",
      "--vocab", "64", "--batch", "8", "--optimizer", "adam", NULL}},
    {"gpt-4x256",
     "GPT: 4 blocks, hidden 256, 4 heads, seq 128, vocab 64, batch 8, "
     "untied head, Adam",
     MODEL_GPT,
     true,
     {"--layers", "4", "--hidden", "256", "--heads", "4", "--seq", "128",
      "--vocab", "64", "--batch", "8", "--optimizer", "adam", NULL}},
};

typedef struct opts {
  int devices;
  const char *python, *mlp, *gpt;
  bool no_torch;
} opts;

/* ---- running a program ------------------------------------------------- */

/* argv joined by spaces into buf (what the tables print under a row). */
static void join_command(const char *const *argv, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; argv[i] && used < n; i++)
    used +=
        (size_t)snprintf(buf + used, n - used, "%s%s", i ? " " : "", argv[i]);
}

/* Runs argv (NULL-terminated) with its standard output and error merged
 * and collected: the text (malloc'd, NUL-terminated; NULL when it could
 * not start, the reason in why) and its exit status (-1: it did not exit
 * normally; 127: it could not be run). `one_thread` also sets
 * OPENBLAS_NUM_THREADS and OMP_NUM_THREADS to 1 for it (the peer: Debian's
 * torch multiplies in the system OpenBLAS, whose threads
 * torch.set_num_threads does not cover). */
static char *run_capture(const char *const *argv, bool one_thread, int *status,
                         char *why, size_t n) {
  /* bench_peer_start gives us the standard output only; a shell merges the
   * standard error into it without quoting any argument. */
  const char *script = one_thread
                           ? "export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1; "
                             "exec \"$0\" \"$@\" 2>&1"
                           : "exec \"$0\" \"$@\" 2>&1";
  const char *full[MAX_ARGS + 8];
  int k = 0;
  full[k++] = "/bin/sh";
  full[k++] = "-c";
  full[k++] = script;
  for (int i = 0; argv[i] && k < MAX_ARGS + 7; i++)
    full[k++] = argv[i];
  full[k] = NULL;
  bench_peer p;
  *status = -1;
  if (!bench_peer_start(full, &p, why, n)) return NULL;
  size_t cap = 4096, len = 0;
  char *text = malloc(cap);
  while (text) {
    if (len + 1024 > cap) {
      char *more = realloc(text, cap *= 2);
      if (!more) {
        free(text);
        text = NULL;
        break;
      }
      text = more;
    }
    size_t got = fread(text + len, 1, cap - len - 1, p.out);
    if (got == 0) break;
    len += got;
  }
  *status = bench_peer_wait(&p);
  if (!text) snprintf(why, n, "out of memory reading its output");
  if (text) text[len] = '\0';
  return text;
}

/* The last non-empty line of text, into buf. */
static const char *last_line(const char *text, char *buf, size_t n) {
  buf[0] = '\0';
  const char *line = text;
  while (line && *line) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    if (len > 0) snprintf(buf, n, "%.*s", (int)len, line);
    line = end ? end + 1 : NULL;
  }
  return buf;
}

/* ---- sluice ------------------------------------------------------------ */

typedef struct sluice_run {
  bool ok;
  int devices;        /* memory lines read */
  long long alloc;    /* the largest `allocated` */
  char worst[512];    /* the memory line of that device */
  char command[1024]; /* what ran, for the notes */
  char failure[512];  /* why there is no number */
} sluice_run;

/* Parses one line of the examples' --memory output. False when it is not
 * one. */
static bool parse_memory_line(const char *line, char *device, size_t n,
                              long long *allocated) {
  char dev[128];
  long long peak, w, o, g, a, c, k;
  if (sscanf(line,
             "memory %127s peak %lld bytes (weights %lld, optimizer %lld, "
             "gradients %lld, activations %lld, communication %lld, "
             "workspace %lld); allocated %lld bytes",
             dev, &peak, &w, &o, &g, &a, &c, &k, allocated) != 9)
    return false;
  snprintf(device, n, "%s", dev);
  return true;
}

static void sluice_measure(const opts *o, const model *m, const char *layout,
                           int devices, sluice_run *r) {
  memset(r, 0, sizeof *r);
  const char *bin = m->kind == MODEL_MLP ? o->mlp : o->gpt;
  char dev[32];
  snprintf(dev, sizeof dev, "cpu:%d", devices);
  const char *argv[MAX_ARGS + 10]; /* 8 fixed, the flags, --megatron, NULL */
  int k = 0;
  argv[k++] = bin;
  argv[k++] = "--memory";
  argv[k++] = "--steps";
  argv[k++] = "1";
  argv[k++] = "--devices";
  argv[k++] = dev;
  argv[k++] = "--layout";
  argv[k++] = layout;
  for (int i = 0; m->flags[i]; i++)
    argv[k++] = m->flags[i];
  /* The peer's tp rank is Megatron's: sluice's plan the same. */
  if (m->kind != MODEL_MLP && strcmp(layout, "tp") == 0)
    argv[k++] = "--megatron";
  argv[k] = NULL;
  join_command(argv, r->command, sizeof r->command);
  char why[256];
  int status;
  char *text = run_capture(argv, false, &status, why, sizeof why);
  if (!text) {
    snprintf(r->failure, sizeof r->failure, "cannot run %s: %s", bin, why);
    return;
  }
  for (const char *line = text, *end; line && *line;
       line = end ? end + 1 : NULL) {
    end = strchr(line, '\n');
    char one[512], device[128];
    snprintf(one, sizeof one, "%.*s",
             (int)(end ? (size_t)(end - line) : strlen(line)), line);
    long long alloc;
    if (!parse_memory_line(one, device, sizeof device, &alloc)) continue;
    r->devices++;
    if (r->devices == 1 || alloc > r->alloc) {
      r->alloc = alloc;
      snprintf(r->worst, sizeof r->worst, "%s", one);
    }
  }
  char last[400];
  last_line(text, last, sizeof last);
  if (r->devices > 0 && status == 0) {
    r->ok = true;
  } else if (strstr(text, "unknown flag '--memory'")) {
    snprintf(r->failure, sizeof r->failure,
             "%s does not know --memory yet (it said: %s)", bin, last);
  } else if (r->devices == 0) {
    snprintf(r->failure, sizeof r->failure,
             "no 'memory DEVICE peak N bytes (...); allocated M bytes' line "
             "(exit status %d; its last line: %s)",
             status, last[0] ? last : "(none)");
  } else {
    snprintf(r->failure, sizeof r->failure,
             "exit status %d after its memory lines (its last line: %s)",
             status, last);
  }
  if (r->ok && r->devices != devices)
    snprintf(r->failure, sizeof r->failure,
             "%d memory lines for %d devices (the largest is used)", r->devices,
             devices);
  free(text);
}

/* ---- the PyTorch peer -------------------------------------------------- */

typedef struct torch_run {
  bool ok;
  long long weights, gradients, optimizer, saved, transient, bound, peak;
  char line[512]; /* the peer's key=value line */
  char command[1024];
  char note[512]; /* why there is no number, or a failed check */
} torch_run;

/* The value of `key=` among text's space-separated key=value pairs. */
static bool kv_get(const char *text, const char *key, long long *v) {
  size_t n = strlen(key);
  for (const char *at = text; (at = strstr(at, key)) != NULL; at += n)
    if ((at == text || at[-1] == ' ') && at[n] == '=')
      return sscanf(at + n + 1, "%lld", v) == 1;
  return false;
}

/* The peer's step on 1 device, or (tp > 1, gpt) one rank of tp ranks. */
static void torch_measure(const opts *o, const model *m, int tp, torch_run *t) {
  memset(t, 0, sizeof *t);
  const char *argv[MAX_ARGS + 8];
  char tps[16];
  int k = 0;
  argv[k++] = o->python;
  argv[k++] = MEMORY_TORCH_PEER;
  argv[k++] = m->kind == MODEL_MLP ? "mlp" : "gpt";
  for (int i = 0; m->flags[i]; i++)
    argv[k++] = m->flags[i];
  if (tp > 1) {
    snprintf(tps, sizeof tps, "%d", tp);
    argv[k++] = "--tp";
    argv[k++] = tps;
  }
  argv[k] = NULL;
  join_command(argv, t->command, sizeof t->command);
  char why[256];
  int status;
  char *text = run_capture(argv, true, &status, why, sizeof why);
  if (!text) {
    snprintf(t->note, sizeof t->note, "cannot run %s: %s", o->python, why);
    return;
  }
  const char *line = strstr(text, "weights=");
  while (line && line != text && line[-1] != '\n')
    line = strstr(line + 1, "weights=");
  char last[400];
  last_line(text, last, sizeof last);
  if (line) {
    size_t len = strcspn(line, "\n");
    snprintf(t->line, sizeof t->line, "%.*s", (int)len, line);
    t->ok = kv_get(t->line, "weights", &t->weights) &&
            kv_get(t->line, "gradients", &t->gradients) &&
            kv_get(t->line, "optimizer", &t->optimizer) &&
            kv_get(t->line, "saved", &t->saved) &&
            kv_get(t->line, "transient", &t->transient) &&
            kv_get(t->line, "bound", &t->bound) &&
            kv_get(t->line, "peak", &t->peak);
    if (!t->ok)
      snprintf(t->note, sizeof t->note, "cannot parse the peer's line");
    else if (status != 0)
      /* Exit 1 with a line: a sanity check of the peer failed. */
      snprintf(t->note, sizeof t->note,
               "the peer's sanity check failed (exit status %d): %s", status,
               last);
  } else if (status == 3) {
    snprintf(t->note, sizeof t->note, "unavailable, its columns n/a: %s", last);
  } else if (status == 127) {
    snprintf(t->note, sizeof t->note, "cannot run %s, its columns n/a: %s",
             o->python, last);
  } else {
    snprintf(t->note, sizeof t->note, "the peer failed (exit status %d): %s",
             status, last[0] ? last : "(no output)");
  }
  free(text);
}

/* ---- the table --------------------------------------------------------- */

/* "  12.34" or "    n/a" in a field of `w`. */
static void cell(char *buf, size_t n, int w, bool have, double v, int prec) {
  if (have)
    snprintf(buf, n, "%*.*f", w, prec, v);
  else
    snprintf(buf, n, "%*s", w, "n/a");
}

/* The bound per device for `layout` on n devices from the peer's 1-device
 * numbers t, or a tp rank's rank (ok when the peer measured one; see the
 * header). */
static double bound_per_device(const torch_run *t, const torch_run *rank,
                               const char *layout, int n) {
  if (strcmp(layout, "dp") == 0)
    return (double)(t->weights + t->gradients + t->optimizer) +
           (double)(t->saved + t->transient) / n;
  if (strcmp(layout, "tp") == 0)
    return rank->ok ? (double)rank->bound : (double)t->bound / n;
  return (double)t->bound;
}

static void torch_print(const torch_run *t, const char *what, bool no_torch) {
  if (t->ok)
    printf("  PyTorch, %s (bytes): %s\n"
           "    = weights %.2f + gradients %.2f + optimizer %.2f + saved %.2f "
           "+ transient %.2f = bound %.2f MiB; peak %.2f MiB\n",
           what, t->line, (double)t->weights / MIB, (double)t->gradients / MIB,
           (double)t->optimizer / MIB, (double)t->saved / MIB,
           (double)t->transient / MIB, (double)t->bound / MIB,
           (double)t->peak / MIB);
  else if (!no_torch)
    printf("  PyTorch, %s: %s\n", what, t->note);
  if (t->ok && t->note[0]) printf("  PyTorch, %s: %s\n", what, t->note);
  if (!no_torch) printf("    (%s)\n", t->command);
}

/* One model's table; false when a sluice run failed. */
static bool model_table(const opts *o, const model *m) {
  const char *layouts[3] = {"single", "dp", "tp"};
  int nrows = m->parallel ? 3 : 1;
  sluice_run runs[3];
  torch_run t = {0}, rank = {0};
  bool tp_peer = m->parallel && m->kind == MODEL_GPT && !o->no_torch;
  if (!o->no_torch) torch_measure(o, m, 1, &t);
  if (tp_peer) torch_measure(o, m, o->devices, &rank);
  for (int i = 0; i < nrows; i++)
    sluice_measure(o, m, layouts[i], i ? o->devices : 1, &runs[i]);

  printf("\n%s\n", m->title);
  printf("%-10s %-6s %7s %12s %12s %9s %13s %11s\n", "model", "layout",
         "devices", "sluice MiB", "bound MiB", "sl/bound", "PyTorch MiB",
         "sl/PyTorch");
  printf("%-10s %-6s %7s %12s %12s %9s %13s %11s\n", "", "", "", "per device",
         "per device", "<= 1.15", "peak per dev", "<= 1.0");
  bool all_ok = true;
  for (int i = 0; i < nrows; i++) {
    const sluice_run *r = &runs[i];
    int n = i ? o->devices : 1;
    bool tp = strcmp(layouts[i], "tp") == 0;
    /* The peer's run of this row's layout, if it made one. */
    const torch_run *peer = i == 0 ? &t : tp && rank.ok ? &rank : NULL;
    double sl = (double)r->alloc,
           bd = t.ok ? bound_per_device(&t, &rank, layouts[i], n) : 0;
    bool measured = peer != NULL && peer->ok;
    double pk = measured ? (double)peer->peak : 0;
    char c_sl[32], c_bd[32], c_rb[32], c_pk[32], c_rp[32];
    if (r->ok)
      cell(c_sl, sizeof c_sl, 12, true, sl / MIB, 2);
    else
      snprintf(c_sl, sizeof c_sl, "%12s", "failed");
    cell(c_bd, sizeof c_bd, 12, t.ok, bd / MIB, 2);
    cell(c_rb, sizeof c_rb, 9, r->ok && t.ok, sl / bd, 3);
    cell(c_pk, sizeof c_pk, 13, measured, pk / MIB, 2);
    cell(c_rp, sizeof c_rp, 11, r->ok && measured, sl / pk, 3);
    bool over_b = r->ok && t.ok && sl / bd > TARGET_BOUND,
         over_p = r->ok && measured && sl / pk > TARGET_TORCH;
    printf("%-10s %-6s %7d %s %s %s%s %s %s%s\n", m->name, layouts[i], n, c_sl,
           c_bd, c_rb, over_b ? "!" : " ", c_pk, c_rp, over_p ? "!" : "");
    all_ok = all_ok && r->ok;
  }
  torch_print(&t, "1 device", o->no_torch);
  if (tp_peer) {
    char what[64];
    snprintf(what, sizeof what, "a tp rank of %d", o->devices);
    torch_print(&rank, what, o->no_torch);
  }
  for (int i = 0; i < nrows; i++) {
    const sluice_run *r = &runs[i];
    if (r->ok)
      printf("  sluice %s, largest device: %s\n", layouts[i], r->worst);
    if (r->failure[0]) printf("  sluice %s: %s\n", layouts[i], r->failure);
    if (!r->ok || i == 0) printf("    (%s)\n", r->command);
  }
  return all_ok;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_memory [--devices N] [--python PATH] [--no-torch] "
          "[--mlp PATH] [--gpt PATH]\n"
          "sluice's planned memory per device (examples/mlp and examples/gpt "
          "--memory)\nagainst the memory a training step must hold and "
          "PyTorch's measured peak\n(bench/peers/memory_torch.py), a table "
          "per model (see the source's header).\n"
          "  --devices N   devices of the dp and tp rows (default 4)\n"
          "  --python P    the peer's interpreter, with torch (default "
          "/usr/bin/python3)\n"
          "  --no-torch    sluice's columns only\n"
          "  --mlp PATH    examples/mlp's binary (default %s)\n"
          "  --gpt PATH    examples/gpt's binary (default %s)\n",
          SLUICE_MLP_PATH, SLUICE_GPT_PATH);
}

int main(int argc, char **argv) {
  opts o = {4, "/usr/bin/python3", SLUICE_MLP_PATH, SLUICE_GPT_PATH, false};
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--devices") && v) {
      char *end;
      long d = strtol(v, &end, 10);
      if (*end || d < 2 || d > 64) {
        fprintf(stderr, "bench_memory: --devices wants 2..64, got '%s'\n", v);
        return 2;
      }
      o.devices = (int)d;
      i++;
    } else if (!strcmp(argv[i], "--python") && v) {
      o.python = v;
      i++;
    } else if (!strcmp(argv[i], "--mlp") && v) {
      o.mlp = v;
      i++;
    } else if (!strcmp(argv[i], "--gpt") && v) {
      o.gpt = v;
      i++;
    } else if (!strcmp(argv[i], "--no-torch")) {
      o.no_torch = true;
    } else {
      fprintf(stderr, "bench_memory: bad argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  printf("bench_memory: sluice's planned peak per device (the largest "
         "`allocated` of\nthe example's --memory lines) against the bound a "
         "framework must hold and\nPyTorch's measured peak on 1 CPU device "
         "(%s %s)\n",
         o.python, MEMORY_TORCH_PEER);
  bool ok = true;
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
    ok = model_table(&o, &models[i]) && ok;
  printf("\nMiB = 2^20 bytes. bound, from PyTorch's 1-device step: weights + "
         "gradients +\noptimizer state + saved (what autograd keeps for "
         "backward) + transient (the\nlargest other tensor of the step); per "
         "device on n devices: single: bound;\ndp: weights + gradients + "
         "optimizer + (saved + transient) / n; tp: gpt, the\nbound of one "
         "rank of Megatron tensor parallelism as PyTorch runs it (its\nshare "
         "of the heads and of fc1/fc2, the rest whole), and that rank's "
         "peak;\nmlp, bound / n (the ideal split). Targets: sluice / bound "
         "<= %.2f, sluice /\nPyTorch <= %.1f; \"!\" marks a ratio over its "
         "target.\n",
         TARGET_BOUND, TARGET_TORCH);
  if (!ok)
    printf("\nbench_memory: some sluice runs gave no memory lines (see "
           "above).\n");
  return ok ? 0 : 1;
}
