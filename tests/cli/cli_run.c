/* Child processes with captured output (see cli_run.h). Output goes to
 * temporary files rather than pipes so that a child writing a lot to both
 * streams cannot block on a full pipe while the parent waits. */
#include "cli_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char *slurp(FILE *f) {
  if (fseek(f, 0, SEEK_END) != 0) return NULL;
  long n = ftell(f);
  if (n < 0 || fseek(f, 0, SEEK_SET) != 0) return NULL;
  char *s = malloc((size_t)n + 1);
  if (!s) return NULL;
  size_t got = fread(s, 1, (size_t)n, f);
  s[got] = '\0';
  return s;
}

int cli_run(const char *prog, const char *const *argv, cli_result *r) {
  memset(r, 0, sizeof *r);
  FILE *out = tmpfile(), *err = tmpfile();
  int rc = -1;
  if (!out || !err) goto done;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) goto done;
  if (pid == 0) {
    if (dup2(fileno(out), 1) < 0 || dup2(fileno(err), 2) < 0) _exit(126);
    execvp(prog, (char *const *)argv);
    _exit(127);
  }
  int ws;
  if (waitpid(pid, &ws, 0) != pid) goto done;
  r->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  r->out = slurp(out);
  r->err = slurp(err);
  if (r->out && r->err) rc = 0;
done:
  if (out) fclose(out);
  if (err) fclose(err);
  if (rc != 0) cli_result_free(r);
  return rc;
}

void cli_result_free(cli_result *r) {
  free(r->out);
  free(r->err);
  r->out = r->err = NULL;
}

int cli_line_count(const char *s) {
  int n = 0;
  for (const char *p = s; *p; p++)
    if (*p == '\n' || p[1] == '\0') n++;
  return n;
}
