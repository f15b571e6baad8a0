/* The sluice command's subcommands. Each takes argv starting at its own
 * name and returns the process exit code. */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

#include <sluice/sluice.h>

typedef struct sl_cli_command {
  const char *name;
  const char *summary;
  int (*run)(int argc, char **argv);
} sl_cli_command;

int sl_cli_info(int argc, char **argv);
int sl_cli_boxing(int argc, char **argv);

/* True when argv[1..] asks for help ("--help" or "-h" anywhere). */
bool sl_cli_wants_help(int argc, char **argv);

#endif
