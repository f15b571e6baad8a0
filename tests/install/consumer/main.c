/* A program outside the tree: finds the installed sluice, links it, and
 * uses it. Prints the canonical form of a placement. */
#include <stdio.h>

#include <sluice/sluice.h>

int main(void) {
  sl_placement *p;
  if (sl_placement_parse("cpu:0-3[2,2]", &p) != SL_OK) {
    fprintf(stderr, "%s\n", sl_last_error());
    return 1;
  }
  char buf[64];
  sl_placement_print(p, buf, sizeof buf);
  printf("%s\n", buf);
  sl_placement_destroy(p);
  return 0;
}
