/* sluice launch: a cluster of N daemons on this machine for one program
 * (docs/cluster.md). The launcher hosts the control plane's master itself
 * (so any daemon may die without taking the cluster with it), starts N
 * `sluice daemon` processes against it with --external-master, runs the
 * program with SLUICE_MASTER and SLUICE_TOKEN set, prefixes each daemon's
 * log lines with "[node R] ", and when the program exits stops the
 * daemons (SIGTERM, then SIGKILL after a grace period) and returns the
 * program's exit status. Every child dies with the launcher
 * (PR_SET_PDEATHSIG) and sits in one process group with the others.
 *
 * The daemons share the launcher's CPUs out, as the nodes of a real
 * cluster have cores of their own: daemon r may use the r-th of N even
 * parts of them (when there are at least N), so that each sizes its CPU
 * devices' threads, pinning and waiting from its own part instead of all
 * of them taking every core. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sluice/cluster.h>

#include "cli.h"

#define MAX_NODES 64
#define GRACE_MS 10000

static const char usage[] =
    "usage: sluice launch --nnodes N --devices cpu:K [--listen ADDR]\n"
    "                     [--heartbeat-timeout-ms MS] -- PROGRAM [ARGS]\n\n"
    "Starts N daemons on this machine, runs PROGRAM against them (its\n"
    "sessions run on the daemons: SLUICE_MASTER and SLUICE_TOKEN are set\n"
    "for it), streams the daemons' logs prefixed by node, stops them when\n"
    "the program ends and exits with the program's status (128+signal when\n"
    "it was killed). The master runs in the launcher. The daemons share\n"
    "this process's CPUs out evenly (each its own part, when there are at\n"
    "least N), as a cluster's nodes have cores of their own.\n\n"
    "  --nnodes N           daemons to start (1..64)\n"
    "  --devices cpu:K      devices of each daemon\n"
    "  --listen ADDR        address everything binds (default 127.0.0.1)\n"
    "  --heartbeat-timeout-ms MS  a node silent this long is lost (5000)\n\n"
    "Exit status: the program's; 2 bad flags; 1 the cluster did not start.\n";

static volatile sig_atomic_t got_signal;

static void on_signal(int sig) { got_signal = sig; }

static int bad(const char *fmt, const char *arg) {
  fprintf(stderr, "sluice launch: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (see 'sluice launch --help')\n");
  return 2;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct node {
  pid_t pid;
  int fd; /* its stdout+stderr, -1 once closed */
  char buf[4096];
  size_t len;
  bool exited;
} node;

extern char **environ;

/* In the child: die with the launcher, even if it was already gone. */
static void child_setup(pid_t launcher, pid_t group) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(127);
  setpgid(0, group);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
}

static void flush_lines(node *n, int rank, bool all) {
  size_t start = 0;
  for (size_t i = 0; i < n->len; i++) {
    if (n->buf[i] != '\n') continue;
    fprintf(stderr, "[node %d] %.*s\n", rank, (int)(i - start), n->buf + start);
    start = i + 1;
  }
  if (all && start < n->len) {
    fprintf(stderr, "[node %d] %.*s\n", rank, (int)(n->len - start),
            n->buf + start);
    start = n->len;
  }
  if (start == 0 && n->len == sizeof n->buf) { /* a very long line */
    fprintf(stderr, "[node %d] %.*s\n", rank, (int)n->len, n->buf);
    start = n->len;
  }
  memmove(n->buf, n->buf + start, n->len - start);
  n->len -= start;
  fflush(stderr);
}

/* Reads what the daemons wrote, waiting at most wait_ms. */
static void pump_logs(node *nodes, int nn, int wait_ms) {
  struct pollfd pfd[MAX_NODES];
  int map[MAX_NODES], k = 0;
  for (int r = 0; r < nn; r++)
    if (nodes[r].fd >= 0) {
      pfd[k].fd = nodes[r].fd;
      pfd[k].events = POLLIN;
      map[k++] = r;
    }
  if (k == 0) {
    if (wait_ms > 0) poll(NULL, 0, wait_ms);
    return;
  }
  if (poll(pfd, (nfds_t)k, wait_ms) <= 0) return;
  for (int i = 0; i < k; i++) {
    if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    node *n = &nodes[map[i]];
    ssize_t got = read(n->fd, n->buf + n->len, sizeof n->buf - n->len);
    if (got > 0) {
      n->len += (size_t)got;
      flush_lines(n, map[i], false);
    } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
      flush_lines(n, map[i], true);
      close(n->fd);
      n->fd = -1;
    }
  }
}

static void reap(node *nodes, int nn) {
  for (int r = 0; r < nn; r++) {
    if (nodes[r].exited || nodes[r].pid <= 0) continue;
    int ws;
    if (waitpid(nodes[r].pid, &ws, WNOHANG) == nodes[r].pid)
      nodes[r].exited = true;
  }
}

static bool all_exited(node *nodes, int nn) {
  for (int r = 0; r < nn; r++)
    if (!nodes[r].exited && nodes[r].pid > 0) return false;
  return true;
}

/* SIGTERM, a grace period while logs drain, then SIGKILL. */
static void stop_nodes(node *nodes, int nn) {
  for (int r = 0; r < nn; r++)
    if (!nodes[r].exited && nodes[r].pid > 0) kill(nodes[r].pid, SIGTERM);
  int64_t until = now_ms() + GRACE_MS;
  while (!all_exited(nodes, nn) && now_ms() < until) {
    pump_logs(nodes, nn, 50);
    reap(nodes, nn);
  }
  for (int r = 0; r < nn; r++)
    if (!nodes[r].exited && nodes[r].pid > 0) {
      fprintf(stderr, "sluice launch: node %d did not stop; killing it\n", r);
      kill(nodes[r].pid, SIGKILL);
      waitpid(nodes[r].pid, NULL, 0);
      nodes[r].exited = true;
    }
  for (int i = 0; i < 20; i++)
    pump_logs(nodes, nn, 0);
  for (int r = 0; r < nn; r++)
    if (nodes[r].fd >= 0) {
      flush_lines(&nodes[r], r, true);
      close(nodes[r].fd);
      nodes[r].fd = -1;
    }
}

/* environ with the n "NAME=value" entries of set in place of any of the
 * same names, built before fork: the child of a threaded process (the
 * master's service runs a thread) may not allocate. The entries stay the
 * caller's; free only the array. */
static char **env_with(char *const *base, const char *const *set, size_t n) {
  size_t count = 0;
  while (base[count])
    count++;
  char **env = calloc(n + count + 1, sizeof *env);
  if (!env) return NULL;
  size_t k = 0;
  for (size_t j = 0; j < n; j++)
    env[k++] = (char *)set[j];
  for (size_t i = 0; i < count; i++) {
    bool named = false;
    for (size_t j = 0; j < n && !named; j++)
      named = strncmp(base[i], set[j], strcspn(set[j], "=") + 1) == 0;
    if (!named) env[k++] = base[i];
  }
  return env;
}

/* Part r of n of the CPUs this process may use, even in size; false (all
 * of them for everyone) when there are fewer CPUs than parts. */
static bool cpu_part(int r, int n, cpu_set_t *part) {
  cpu_set_t all;
  CPU_ZERO(part);
  if (sched_getaffinity(0, sizeof all, &all) != 0) return false;
  int count = CPU_COUNT(&all);
  if (count < n) return false;
  int lo = (int)((int64_t)count * r / n),
      hi = (int)((int64_t)count * (r + 1) / n);
  for (int c = 0, k = 0; c < CPU_SETSIZE && k < hi; c++) {
    if (!CPU_ISSET(c, &all)) continue;
    if (k >= lo) CPU_SET(c, part);
    k++;
  }
  return true;
}

static bool random_token(char *out, size_t n) {
  unsigned char raw[24];
  FILE *f = fopen("/dev/urandom", "rb");
  if (!f) return false;
  bool ok = fread(raw, 1, sizeof raw, f) == sizeof raw;
  fclose(f);
  for (size_t i = 0; ok && i < sizeof raw && 2 * i + 2 < n; i++)
    snprintf(out + 2 * i, 3, "%02x", raw[i]);
  return ok;
}

int sl_cli_launch(int argc, char **argv) {
  int dash = -1;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--") == 0) {
      dash = i;
      break;
    }
  int nflags = dash < 0 ? argc : dash;
  if (sl_cli_wants_help(nflags, argv)) {
    fputs(usage, stdout);
    return 0;
  }
  long nnodes = 0, hb = 0;
  const char *devices = NULL, *listen = "127.0.0.1";
  for (int i = 1; i < nflags; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < nflags ? argv[i + 1] : NULL;
    if (strncmp(a, "--", 2) != 0) return bad("unexpected argument '%s'", a);
    if (!v) return bad("%s needs a value", a);
    i++;
    char *end = NULL;
    if (strcmp(a, "--nnodes") == 0) {
      nnodes = strtol(v, &end, 10);
      if (!*v || *end || nnodes < 1 || nnodes > MAX_NODES)
        return bad("--nnodes '%s': 1 to 64 nodes", v);
    } else if (strcmp(a, "--devices") == 0) {
      devices = v;
    } else if (strcmp(a, "--listen") == 0) {
      listen = v;
    } else if (strcmp(a, "--heartbeat-timeout-ms") == 0) {
      hb = strtol(v, &end, 10);
      if (!*v || *end || hb < 1 || hb > 3600000)
        return bad("--heartbeat-timeout-ms '%s': not a duration", v);
    } else {
      return bad("unknown flag '%s'", a);
    }
  }
  if (nnodes < 1 || !devices)
    return bad("%s", "--nnodes and --devices are required");
  if (dash < 0 || dash + 1 >= argc)
    return bad("%s", "no program: sluice launch [flags] -- PROGRAM [ARGS]");
  char token[64];
  if (!random_token(token, sizeof token)) {
    fprintf(stderr, "sluice launch: cannot read /dev/urandom\n");
    return 1;
  }
  char listen_addr[300], master[300], self[4096];
  snprintf(listen_addr, sizeof listen_addr,
           strchr(listen, ':') ? "[%s]:0" : "%s:0", listen);
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) {
    fprintf(stderr, "sluice launch: cannot find the sluice binary\n");
    return 1;
  }
  self[sl] = '\0';
  sl_master_config mc =
      SL_MASTER_CONFIG(.listen = listen_addr, .nnodes = (int)nnodes,
                       .token = token, .heartbeat_timeout_ms = (uint32_t)hb);
  sl_master *srv = NULL;
  if (sl_master_create(&mc, &srv) != SL_OK) {
    fprintf(stderr, "sluice launch: master: %s\n", sl_last_error());
    return 1;
  }
  snprintf(master, sizeof master, strchr(listen, ':') ? "[%s]:%d" : "%s:%d",
           listen, sl_master_port(srv));
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  /* The daemons get the token, the program the token and master; a
   * SLUICE_MASTER of the launcher's own is not the daemons' (--master). */
  char token_var[96], master_var[320];
  snprintf(token_var, sizeof token_var, "SLUICE_TOKEN=%s", token);
  snprintf(master_var, sizeof master_var, "SLUICE_MASTER=%s", master);
  const char *daemon_set[] = {token_var, "SLUICE_MASTER="};
  const char *prog_set[] = {token_var, master_var};
  char **daemon_env = env_with(environ, daemon_set, 2);
  char **prog_env = env_with(environ, prog_set, 2);
  if (!daemon_env || !prog_env) {
    fprintf(stderr, "sluice launch: out of memory\n");
    free(daemon_env);
    free(prog_env);
    sl_master_destroy(srv);
    return 1;
  }
  fflush(NULL);
  pid_t me = getpid(), group = 0;
  node nodes[MAX_NODES];
  memset(nodes, 0, sizeof nodes);
  int rc = 1;
  for (int r = 0; r < nnodes; r++) {
    nodes[r].fd = -1;
    int p[2];
    if (pipe(p) != 0) {
      fprintf(stderr, "sluice launch: pipe: %s\n", strerror(errno));
      goto stop;
    }
    /* Built before fork: the child of a threaded process may not allocate. */
    cpu_set_t part;
    bool shared = cpu_part(r, (int)nnodes, &part);
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "sluice launch: fork: %s\n", strerror(errno));
      close(p[0]);
      close(p[1]);
      goto stop;
    }
    if (pid == 0) {
      child_setup(me, group);
      if (shared) sched_setaffinity(0, sizeof part, &part);
      dup2(p[1], 1);
      dup2(p[1], 2);
      close(p[0]);
      close(p[1]);
      char rank[16], nn[16], hbs[16];
      snprintf(rank, sizeof rank, "%d", r);
      snprintf(nn, sizeof nn, "%ld", nnodes);
      snprintf(hbs, sizeof hbs, "%ld", hb ? hb : 5000);
      char *args[] = {self,
                      "daemon",
                      "--master",
                      master,
                      "--node-rank",
                      rank,
                      "--nnodes",
                      nn,
                      "--devices",
                      (char *)devices,
                      "--listen",
                      (char *)listen,
                      "--external-master",
                      "--heartbeat-timeout-ms",
                      hbs,
                      NULL};
      execve(self, args, daemon_env);
      fprintf(stderr, "exec %s: %s\n", self, strerror(errno));
      _exit(127);
    }
    if (group == 0) group = pid;
    setpgid(pid, group);
    close(p[1]);
    fcntl(p[0], F_SETFD, FD_CLOEXEC);
    nodes[r].pid = pid;
    nodes[r].fd = p[0];
  }
  pid_t prog = fork();
  if (prog < 0) {
    fprintf(stderr, "sluice launch: fork: %s\n", strerror(errno));
    goto stop;
  }
  if (prog == 0) {
    child_setup(me, group);
    execvpe(argv[dash + 1], argv + dash + 1, prog_env);
    fprintf(stderr, "sluice launch: cannot run '%s': %s\n", argv[dash + 1],
            strerror(errno));
    _exit(127);
  }
  setpgid(prog, group);
  int ws = 0;
  bool told = false;
  for (;;) {
    pump_logs(nodes, (int)nnodes, 100);
    reap(nodes, (int)nnodes);
    pid_t w = waitpid(prog, &ws, WNOHANG);
    if (w == prog) break;
    if (got_signal) {
      kill(prog, got_signal);
      got_signal = 0;
    }
    if (all_exited(nodes, (int)nnodes) && !told) {
      /* No node left to run anything: the program would only wait. */
      fprintf(stderr, "sluice launch: every daemon exited; stopping the "
                      "program\n");
      kill(prog, SIGTERM);
      told = true;
    }
  }
  if (WIFEXITED(ws))
    rc = WEXITSTATUS(ws);
  else if (WIFSIGNALED(ws))
    rc = 128 + WTERMSIG(ws);
stop:
  stop_nodes(nodes, (int)nnodes);
  sl_master_destroy(srv);
  free(daemon_env);
  free(prog_env);
  return rc;
}
