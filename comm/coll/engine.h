/* sluice comm — the collective engines behind one table (STYLE.md,
 * "Pluggable parts"; DESIGN.md section 8).
 *
 * An actor that is a member of a boxing step's collective arrives at its
 * engine with its buffers and defers its firing; the engine calls back
 * once the member's part of the round is complete — its output written,
 * or on a GPU queued and passed by the member's stream. Which engine runs
 * a step is decided by lowering (the plan's task engine) and the session
 * makes it; actors only ever call the wrappers below. The engines:
 *
 *   in-process  every member in this process: comm.c's workers, the direct
 *               or parallel algorithm (coll.c), exchanges of pieces too;
 *   nodes       members in several processes: this process's members
 *               arrive at a span (span_coll.c), whose rounds go over the
 *               data plane (net_coll.c: ring or tree, exchanges, the
 *               hierarchical all-reduce, shared registers between the
 *               daemons of one host — chosen there, per round);
 *   device      CUDA members: NCCL's collective, or a device exchange
 *               (dev_boxing.h), on one process or spanning several.
 *
 * Not installed. */
#ifndef SLUICE_COLL_ENGINE_H
#define SLUICE_COLL_ENGINE_H

#include "comm_int.h"
#include "device_iface.h"

/* One member's arrival: its index in the collective, its buffers (in may
 * be NULL when in_bytes is 0, likewise out), and for a device engine the
 * stream its work goes on (NULL for the others). done(arg, st) is called
 * exactly once when the arrival returns SL_OK, from whichever thread
 * completes the member; on failure the calling thread's sl_last_error()
 * holds the detail. */
typedef struct sl__coll_arrival {
  int member;
  const void *in;
  size_t in_bytes;
  void *out;
  size_t out_bytes;
  sl__stream *stream;
  sl__coll_done_fn done;
  void *arg;
} sl__coll_arrival;

/* An engine's operations. abort completes the members waiting in ctx with
 * st (msg: why, or NULL) and fails every later arrival; any thread, more
 * than once. destroy frees ctx (NULL where ctx's owner frees it: an
 * in-process collective belongs to its sl__comm). */
typedef struct sl__coll_engine_i {
  const char *name;
  sl_status (*arrive)(void *ctx, const sl__coll_arrival *a);
  void (*abort)(void *ctx, sl_status st, const char *msg);
  void (*destroy)(void *ctx);
} sl__coll_engine_i;

typedef struct sl__coll_engine {
  const sl__coll_engine_i *i;
  void *ctx;
} sl__coll_engine;

/* The engines; ctx is an sl__coll, an sl__span, an sl__dgroup. */
extern const sl__coll_engine_i sl__coll_engine_inproc;
extern const sl__coll_engine_i sl__coll_engine_nodes;
extern const sl__coll_engine_i sl__coll_engine_device;

/* The thin wrappers everything calls. arrive: the engine's SL_OK (done
 * will be called) or its error (done will not). */
sl_status sl__coll_engine_arrive(const sl__coll_engine *e,
                                 const sl__coll_arrival *a);
void sl__coll_engine_abort(const sl__coll_engine *e, sl_status st,
                           const char *msg);
void sl__coll_engine_destroy(sl__coll_engine *e);

#endif
