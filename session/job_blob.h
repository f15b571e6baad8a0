/* sluice session — the job blob (docs/cluster.md, "A job, step by
 * step"): the bytes a remote session submits to every node for a job.
 * Its own file so that its decoder is fuzzed alone (tests/fuzz). */
#ifndef SLUICE_SESSION_JOB_BLOB_H
#define SLUICE_SESSION_JOB_BLOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sluice/core.h>

/* What every node receives for a job (the same bytes for all): the
 * program's data-plane address (it is rank `nnodes` there), the cluster
 * size, the job's hang timeout and its plan (sl__pplan_pack), which the
 * daemon runs as it is, every fact checked on reading
 * (sl__pplan_check_runtime). */
typedef struct sl__job_blob {
  const char *driver_addr; /* "host:port" */
  uint32_t nnodes;
  int64_t hang_timeout_ms;
  const uint8_t *plan;
  size_t plan_len;
  bool trace; /* the program wants a trace: each node hands its in */
  /* The job's piece 0 is step base_step; starts (NULL or ""): how its
   * variables start instead of their initializers, as lines of text that
   * session/handoff.c writes and reads (a checkpoint, the previous job's
   * values, values the program wrote). */
  int64_t base_step;
  const char *starts;
  /* The program's sl_session_config.cpu_threads, cpu_pin and spin_us (0:
   * each node's own default). */
  int32_t cpu_threads, cpu_pin, spin_us;
} sl__job_blob;

/* Packs b into a malloc'd buffer (sl__free). SL_ENOMEM. */
sl_status sl__job_blob_pack(const sl__job_blob *b, uint8_t **buf, size_t *len);
/* Parses buf; the pointers of *out point into buf (driver_addr into a
 * static-size copy in out_addr, 256 bytes; starts into out_starts,
 * SL__JOB_BLOB_STARTS bytes). SL_EINVAL for malformed. */
#define SL__JOB_BLOB_PATH 4096
#define SL__JOB_BLOB_STARTS 65536
sl_status sl__job_blob_unpack(const uint8_t *buf, size_t len, char *out_addr,
                              char *out_starts, sl__job_blob *out);

#endif
