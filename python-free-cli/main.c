/* The sluice command: dispatches to one subcommand per file. Uses only the
 * public API. Exit codes: 0 success, 1 a failed check (verify), 2 bad usage
 * or input. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int sl_cli_plan(int argc, char **argv);   /* cmd_plan.c */
int sl_cli_daemon(int argc, char **argv); /* cmd_daemon.c */
int sl_cli_launch(int argc, char **argv); /* cmd_launch.c */
int sl_cli_ckpt(int argc, char **argv);   /* cmd_ckpt.c */

static const sl_cli_command commands[] = {
    {"info", "version, build features and visible devices", sl_cli_info},
    {"boxing", "explain and verify a conversion between layouts",
     sl_cli_boxing},
    {"plan", "a program's actor plan as text or Graphviz DOT", sl_cli_plan},
    {"daemon", "serve one node of a cluster", sl_cli_daemon},
    {"launch", "run a program on N daemons of this machine", sl_cli_launch},
    {"ckpt", "inspect or convert a checkpoint or safetensors file",
     sl_cli_ckpt},
};

static void usage(FILE *f) {
  fprintf(f, "usage: sluice [--help] [--version] COMMAND [ARGS]\n\n"
             "sluice is a distributed deep-learning runtime. Commands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(f, "\nRun 'sluice COMMAND --help' for a command's flags.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("sluice %s\n", sl_version());
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(argv[1], commands[i].name) == 0)
      return commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "sluice: unknown command '%s' (see 'sluice --help')\n",
          argv[1]);
  return 2;
}
