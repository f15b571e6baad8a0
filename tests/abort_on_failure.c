/* Linked into every cmocka test. A failure on a thread other than the
 * test's own (an actor's stream, a daemon, gRPC) must print and stop.
 * Left alone, cmocka stores the message for the case's verdict and
 * longjmps into the test from whichever thread failed, which can end the
 * process with nothing printed at all.
 * CMOCKA_TEST_ABORT=1 prints the message and aborts instead; a failing
 * executable then skips its later cases. Set before main, while the
 * process has one thread; CMOCKA_TEST_ABORT=0 in the environment keeps
 * cmocka's own behaviour. */
#include <stdlib.h>

__attribute__((constructor)) static void abort_on_failure(void) {
  setenv("CMOCKA_TEST_ABORT", "1", 0);
}
