/* Runs a program as a child process and captures its exit status, stdout
 * and stderr, for tests that drive the built `sluice` binary. */
#ifndef SLUICE_TEST_CLI_RUN_H
#define SLUICE_TEST_CLI_RUN_H

typedef struct cli_result {
  int status; /* exit code, or 128 + signal number when killed */
  char *out;  /* NUL-terminated captured stdout */
  char *err;  /* NUL-terminated captured stderr */
} cli_result;

/* Runs prog (a path, or a name looked up in PATH) with argv (NULL-
 * terminated, argv[0] included). Returns 0, or -1 when the process could not
 * be started or captured (errno-style failure of the harness itself). */
int cli_run(const char *prog, const char *const *argv, cli_result *r);
void cli_result_free(cli_result *r);

/* Number of lines in s (a final line without '\n' counts). */
int cli_line_count(const char *s);

#endif
