/* Environments for a child or a load, built without writing the process's
 * own: setenv reallocates the environment array and glibc frees the old
 * one, which another thread's getenv may be walking at that instant. */
#include <string.h>

#include "core_int.h"

char **sl__env_with(char *const *base, const char *const *set, size_t n) {
  size_t count = 0;
  while (base && base[count])
    count++;
  char **env = sl__calloc(n + count + 1, sizeof *env);
  if (!env) return NULL;
  size_t k = 0;
  for (size_t j = 0; j < n; j++)
    env[k++] = (char *)set[j];
  for (size_t i = 0; i < count; i++) {
    bool replaced = false;
    for (size_t j = 0; j < n && !replaced; j++) {
      const char *eq = strchr(set[j], '=');
      size_t len = eq ? (size_t)(eq - set[j]) + 1 : strlen(set[j]);
      replaced = strncmp(base[i], set[j], len) == 0;
    }
    if (!replaced) env[k++] = base[i];
  }
  return env;
}
