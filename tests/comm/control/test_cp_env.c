/* Control plane: bootstrap from the environment (SLUICE_*, torchrun-style,
 * Slurm) and Slurm host lists. */
#include "cp_helpers.h"

/* Parses a NULL-ended list of "NAME=value" strings. */
static sl_status parse(sl__cp_env *e, ...) {
  char *envp[32];
  int n = 0;
  va_list ap;
  va_start(ap, e);
  for (char *s; (s = va_arg(ap, char *)) && n < 31;)
    envp[n++] = s;
  va_end(ap);
  envp[n] = NULL;
  return sl__cp_env_parse(envp, e);
}

static void test_sluice_variables(void **state) {
  (void)state;
  sl__cp_env e;
  CHECK_OK(parse(&e, "SLUICE_MASTER=head:7000", "SLUICE_NODE_RANK=2",
                 "SLUICE_NNODES=4", "SLUICE_TOKEN=s3cret",
                 "SLUICE_HEARTBEAT_TIMEOUT_MS=1500", "PATH=/bin", NULL));
  assert_string_equal(e.master, "head:7000");
  assert_string_equal(e.master_from, "SLUICE_MASTER");
  assert_int_equal(e.node_rank, 2);
  assert_int_equal(e.nnodes, 4);
  assert_string_equal(e.token, "s3cret");
  assert_string_equal(e.bind, "127.0.0.1");
  assert_int_equal(e.heartbeat_timeout_ms, 1500);
  sl__cp_env_free(&e);
  /* Unset (or empty) rank, nnodes and token; a bind address. */
  CHECK_OK(parse(&e, "SLUICE_MASTER=[::1]:7000",
                 "SLUICE_NODE_RANK=", "SLUICE_BIND=0.0.0.0", NULL));
  assert_string_equal(e.master, "[::1]:7000");
  assert_int_equal(e.node_rank, SL__CP_RANK_ANY);
  assert_int_equal(e.nnodes, 0);
  assert_null(e.token);
  assert_string_equal(e.bind, "0.0.0.0");
  assert_int_equal(e.heartbeat_timeout_ms, SL__CP_DEFAULT_HEARTBEAT_TIMEOUT_MS);
  sl__cp_env_free(&e);
}

static void test_torchrun_variables(void **state) {
  (void)state;
  sl__cp_env e;
  CHECK_OK(parse(&e, "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", "NODE_RANK=1",
                 "NNODES=2", NULL));
  assert_string_equal(e.master, "10.0.0.1:29500");
  assert_string_equal(e.master_from, "MASTER_ADDR and MASTER_PORT");
  assert_int_equal(e.node_rank, 1);
  assert_int_equal(e.nnodes, 2);
  sl__cp_env_free(&e);
  CHECK_OK(parse(&e, "MASTER_ADDR=fe80::1", "MASTER_PORT=1", NULL));
  assert_string_equal(e.master, "[fe80::1]:1");
  sl__cp_env_free(&e);
  /* SLUICE_MASTER wins over MASTER_ADDR (torchrun's store is another
   * service); agreeing ranks from both families are fine. */
  CHECK_OK(parse(&e, "SLUICE_MASTER=a:1", "MASTER_ADDR=b", "MASTER_PORT=2",
                 "SLUICE_NODE_RANK=0", "NODE_RANK=0", NULL));
  assert_string_equal(e.master, "a:1");
  assert_int_equal(e.node_rank, 0);
  sl__cp_env_free(&e);
}

static void test_slurm_variables(void **state) {
  (void)state;
  sl__cp_env e;
  CHECK_OK(parse(&e, "SLURM_STEP_NODELIST=gpu[07-09,12],cpu1",
                 "SLURM_JOB_NODELIST=other[1-2]", "SLURM_NODEID=3",
                 "SLURM_NNODES=4", NULL));
  assert_string_equal(e.master, "gpu07:29610");
  assert_string_equal(e.master_from, "SLURM_STEP_NODELIST");
  assert_int_equal(e.node_rank, 3);
  assert_int_equal(e.nnodes, 4);
  sl__cp_env_free(&e);
  CHECK_OK(parse(&e, "SLURM_JOB_NODELIST=n1,n2", "SLUICE_MASTER_PORT=6000",
                 "SLURM_JOB_NUM_NODES=2", NULL));
  assert_string_equal(e.master, "n1:6000");
  assert_int_equal(e.nnodes, 2);
  sl__cp_env_free(&e);
  CHECK_OK(parse(&e, "SLURM_NODELIST=solo", "MASTER_PORT=6001", NULL));
  assert_string_equal(e.master, "solo:6001");
  sl__cp_env_free(&e);
}

static void test_inconsistent(void **state) {
  (void)state;
  sl__cp_env e;
  CHECK_FAILS(parse(&e, NULL), SL_EINVAL, "no master");
  CHECK_FAILS(parse(&e, "SLUICE_MASTER=head", NULL), SL_EINVAL,
              "SLUICE_MASTER: address 'head'");
  CHECK_FAILS(parse(&e, "SLUICE_MASTER=head:0", NULL), SL_EINVAL, "port 0");
  CHECK_FAILS(parse(&e, "MASTER_ADDR=h", NULL), SL_EINVAL,
              "MASTER_PORT is not");
  CHECK_FAILS(parse(&e, "MASTER_PORT=5", NULL), SL_EINVAL,
              "MASTER_ADDR is not");
  CHECK_FAILS(parse(&e, "MASTER_ADDR=h", "MASTER_PORT=99999", NULL), SL_EINVAL,
              "MASTER_PORT='99999'");
  CHECK_FAILS(parse(&e, "SLUICE_MASTER=h:1", "SLUICE_NODE_RANK=x", NULL),
              SL_EINVAL, "SLUICE_NODE_RANK='x'");
  CHECK_FAILS(parse(&e, "SLUICE_MASTER=h:1", "SLUICE_NODE_RANK=-1", NULL),
              SL_EINVAL, "SLUICE_NODE_RANK='-1'");
  CHECK_FAILS(parse(&e, "SLUICE_MASTER=h:1", "SLUICE_NNODES=0", NULL),
              SL_EINVAL, "SLUICE_NNODES='0'");
  CHECK_FAILS(
      parse(&e, "SLUICE_MASTER=h:1", "SLUICE_NODE_RANK=1", "NODE_RANK=2", NULL),
      SL_EINVAL, "SLUICE_NODE_RANK=1 but NODE_RANK=2");
  CHECK_FAILS(parse(&e, "SLUICE_MASTER=h:1", "SLUICE_NODE_RANK=1",
                    "SLURM_NODEID=0", NULL),
              SL_EINVAL, "SLUICE_NODE_RANK=1 but SLURM_NODEID=0");
  CHECK_FAILS(
      parse(&e, "SLUICE_MASTER=h:1", "NNODES=2", "SLURM_NNODES=3", NULL),
      SL_EINVAL, "NNODES=2 but SLURM_NNODES=3");
  CHECK_FAILS(parse(&e, "SLUICE_MASTER=h:1", "NODE_RANK=2", "NNODES=2", NULL),
              SL_EINVAL,
              "node rank 2 (NODE_RANK) is not below the node "
              "count 2 (NNODES)");
  CHECK_FAILS(
      parse(&e, "SLUICE_MASTER=h:1", "SLUICE_HEARTBEAT_TIMEOUT_MS=0", NULL),
      SL_EINVAL, "SLUICE_HEARTBEAT_TIMEOUT_MS='0'");
  CHECK_FAILS(parse(&e, "SLURM_STEP_NODELIST=gpu[07", NULL), SL_EINVAL,
              "SLURM_STEP_NODELIST: Slurm host list 'gpu[07'");
  /* Failures leave nothing behind. */
  assert_null(e.master);
  assert_null(e.token);
}

/* A session's own master and token come before every variable; a bad
 * master is named as the session's. */
static void test_given(void **state) {
  (void)state;
  sl__cp_env e;
  char *envp[] = {"SLUICE_MASTER=env:1", "SLUICE_TOKEN=from-env",
                  "SLUICE_NODE_RANK=1", NULL};
  CHECK_OK(sl__cp_env_parse_given(envp, "given:2", "from-config", &e));
  assert_string_equal(e.master, "given:2");
  assert_string_equal(e.master_from, "the session's master");
  assert_string_equal(e.token, "from-config");
  assert_int_equal(e.node_rank, 1); /* the rest from the variables */
  sl__cp_env_free(&e);
  /* NULL (or "" for the master): the variables'. */
  CHECK_OK(sl__cp_env_parse_given(envp, "", NULL, &e));
  assert_string_equal(e.master, "env:1");
  assert_string_equal(e.token, "from-env");
  sl__cp_env_free(&e);
  /* A master given with no variable at all. */
  char *empty[] = {NULL};
  CHECK_OK(sl__cp_env_parse_given(empty, "127.0.0.1:9", NULL, &e));
  assert_string_equal(e.master, "127.0.0.1:9");
  assert_null(e.token);
  sl__cp_env_free(&e);
  CHECK_FAILS(sl__cp_env_parse_given(envp, "nohost", NULL, &e), SL_EINVAL,
              "the session's master: address 'nohost'");
  CHECK_FAILS(sl__cp_env_parse_given(envp, "h:0", NULL, &e), SL_EINVAL,
              "the session's master 'h:0': port 0");
}

static void test_slurm_host_lists(void **state) {
  (void)state;
  static const char *const ok[][2] = {
      {"node1", "node1"},
      {"node[1-4]", "node1"},
      {"node[007-010]", "node007"},
      {"n[3,1-2],m5", "n3"},
      {"rack[2-3]-n[01-04]", "rack2-n01"},
      {"a,b,c", "a"},
      {"x[5]y", "x5y"},
  };
  for (size_t i = 0; i < SL_ARRAY_LEN(ok); i++) {
    char *h;
    CHECK_OK(sl__cp_slurm_first_host(ok[i][0], &h));
    assert_string_equal(h, ok[i][1]);
    sl__free(h);
  }
  static const char *const bad[] = {"",       ",a",  "n[",    "n[]",
                                    "n[a-b]", "n]1", "n[1-2", "[x]"};
  for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
    char *h = (char *)1;
    CHECK_FAILS(sl__cp_slurm_first_host(bad[i], &h), SL_EINVAL,
                "Slurm host list");
    assert_null(h);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sluice_variables),
      cmocka_unit_test(test_torchrun_variables),
      cmocka_unit_test(test_slurm_variables),
      cmocka_unit_test(test_inconsistent),
      cmocka_unit_test(test_given),
      cmocka_unit_test(test_slurm_host_lists),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
