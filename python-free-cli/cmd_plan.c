/* sluice plan: prints a program's actor plan — tasks per machine, device
 * and stream, their registers and bytes — as text or Graphviz DOT, or its
 * memory per device, or simulates one step (--simulate).
 *
 * The plan comes from a file the program wrote: any program run with
 * SLUICE_PLAN_DUMP=prog.pb (or calling sl_session_write_plan /
 * sl_graph_write_plan with SL_PLAN_PROTOBUF) leaves its plan there, e.g.
 *   SLUICE_PLAN_DUMP=mlp.pb ./mlp --layout dp --devices cpu:4 --steps 1
 *   sluice plan mlp.pb --dot > mlp.dot
 * docs/plan.md describes both outputs. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/session.h>

#include "cli.h"

int sl_cli_plan(int argc, char **argv);

static void usage(FILE *f) {
  fprintf(f, "usage: sluice plan FILE.pb [--dot | --text | --memory | --pb] "
             "[--node N] [-o OUT]\n"
             "       sluice plan FILE.pb --simulate [--costs TRACE.json] "
             "[--gflops G] [--gbps B] [-o OUT]\n\n"
             "Prints the actor plan of a program: per machine, device and\n"
             "stream its tasks (ops, boxing steps, feeds, fetches) with their\n"
             "input and output registers, shapes, bytes and register counts;\n"
             "with --dot, a Graphviz graph with boxing tasks marked; with\n"
             "--memory, each device's memory: allocated and peak bytes, by\n"
             "what they hold, and how many registers share its block.\n\n"
             "FILE.pb is what a program writes when run with\n"
             "SLUICE_PLAN_DUMP=FILE.pb (or through sl_session_write_plan):\n"
             "  SLUICE_PLAN_DUMP=mlp.pb ./mlp --layout dp --devices cpu:4 "
             "--steps 1\n"
             "  sluice plan mlp.pb --dot -o mlp.dot && dot -Tsvg mlp.dot > "
             "mlp.svg\n\n"
             "  --text    text (the default)\n"
             "  --dot     Graphviz DOT\n"
             "  --memory  the per-device memory table (docs/plan.md)\n"
             "  --pb      the protobuf plan again (checks and normalises it)\n"
             "  --node N  only what node N runs: its devices' tasks and\n"
             "            memory, the ticks that gate them, the boxing steps\n"
             "            it takes part in; inputs from other nodes say\n"
             "            which node and task they come from. With --pb: the\n"
             "            part of the plan node N's daemon receives (N = the\n"
             "            driver's number: the program's part)\n"
             "  -o OUT    write to OUT instead of standard output\n\n"
             "  --simulate      replay one step as a discrete-event "
             "simulation:\n"
             "                  predicted step time, each device's busy "
             "time,\n"
             "                  bubble, memory and registers, its order of\n"
             "                  pipeline passes; a deadlock is named task by\n"
             "                  task (exit status 1)\n"
             "  --costs TRACE   measured costs: each task's median firing time "
             "in\n"
             "                  a trace a run wrote with SLUICE_TRACE=TRACE\n"
             "  --gflops G      the model's matmul rate per device "
             "(default 50)\n"
             "  --gbps B        the model's rate for other kernels and copies\n"
             "                  (default 10)\n");
}

int sl_cli_plan(int argc, char **argv) {
  if (sl_cli_wants_help(argc, argv)) {
    usage(stdout);
    return 0;
  }
  const char *in = NULL, *out = "-";
  sl_plan_format fmt = SL_PLAN_TEXT;
  int node = -1;
  bool sim = false;
  sl_sim_config sc = sl_sim_config_default();
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--dot") == 0) {
      fmt = SL_PLAN_DOT;
    } else if (strcmp(a, "--text") == 0) {
      fmt = SL_PLAN_TEXT;
    } else if (strcmp(a, "--memory") == 0) {
      fmt = SL_PLAN_MEMORY;
    } else if (strcmp(a, "--pb") == 0) {
      fmt = SL_PLAN_PROTOBUF;
    } else if (strcmp(a, "--simulate") == 0) {
      sim = true;
    } else if (strcmp(a, "--costs") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "sluice plan: --costs needs a trace file\n");
        return 2;
      }
      sc.costs = argv[++i];
    } else if (strcmp(a, "--gflops") == 0 || strcmp(a, "--gbps") == 0) {
      char *end = NULL;
      double v = i + 1 < argc ? strtod(argv[i + 1], &end) : 0;
      if (i + 1 >= argc || end == argv[i + 1] || *end || !(v > 0)) {
        fprintf(stderr, "sluice plan: %s needs a positive number\n", a);
        return 2;
      }
      if (strcmp(a, "--gflops") == 0)
        sc.gflops = v;
      else
        sc.copy_gbps = v;
      i++;
    } else if (strcmp(a, "--node") == 0) {
      char *end = NULL;
      errno = 0;
      long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
      if (i + 1 >= argc || errno || end == argv[i + 1] || *end || v < 0 ||
          v > INT_MAX) {
        fprintf(stderr,
                "sluice plan: --node needs a node number (0, 1, ...)\n");
        return 2;
      }
      node = (int)v;
      i++;
    } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "sluice plan: %s needs a path\n", a);
        return 2;
      }
      out = argv[++i];
    } else if (a[0] == '-' && a[1] != '\0') {
      fprintf(stderr,
              "sluice plan: unknown flag '%s' (see 'sluice plan --help')\n", a);
      return 2;
    } else if (in) {
      fprintf(stderr, "sluice plan: more than one plan file ('%s', '%s')\n", in,
              a);
      return 2;
    } else {
      in = a;
    }
  }
  if (!in) {
    usage(stderr);
    return 2;
  }
  if (!sim && (sc.costs || sc.gflops > 0 || sc.copy_gbps > 0)) {
    fprintf(stderr, "sluice plan: --costs, --gflops and --gbps go with "
                    "--simulate\n");
    return 2;
  }
  if (sim) {
    if (node >= 0 || fmt != SL_PLAN_TEXT) {
      fprintf(stderr, "sluice plan: --simulate simulates the whole plan; it "
                      "takes no --node or other format\n");
      return 2;
    }
    sl_simulation r;
    sl_status st = sl_plan_file_simulate(in, &sc, &r, out);
    if (st != SL_OK) {
      fprintf(stderr, "sluice plan: %s: %s\n", sl_status_str(st),
              sl_last_error());
      return st == SL_EINVAL ? 1 : 2;
    }
    return 0;
  }
  if (fmt == SL_PLAN_PROTOBUF && strcmp(out, "-") == 0) {
    fprintf(stderr, "sluice plan: --pb writes binary; give -o OUT\n");
    return 2;
  }
  sl_status st = sl_plan_file_convert_node(in, fmt, node, out);
  if (st != SL_OK) {
    fprintf(stderr, "sluice plan: %s: %s\n", sl_status_str(st),
            sl_last_error());
    return 2;
  }
  return 0;
}
