/* The collective engines' table (engine.h): each engine's operations as
 * thin adapters onto the collective that does the work. */
#include "engine.h"

#include "dev_boxing.h"
#include "span_coll.h"

sl_status sl__coll_engine_arrive(const sl__coll_engine *e,
                                 const sl__coll_arrival *a) {
  return e->i->arrive(e->ctx, a);
}

void sl__coll_engine_abort(const sl__coll_engine *e, sl_status st,
                           const char *msg) {
  e->i->abort(e->ctx, st, msg);
}

void sl__coll_engine_destroy(sl__coll_engine *e) {
  if (e->i && e->i->destroy) e->i->destroy(e->ctx);
  e->i = NULL;
  e->ctx = NULL;
}

/* ---- in-process ------------------------------------------------------------
 */

static sl_status inproc_arrive(void *ctx, const sl__coll_arrival *a) {
  return sl__coll_arrive(ctx, a->member, a->in, a->in_bytes, a->out,
                         a->out_bytes, a->done, a->arg);
}

static void inproc_abort(void *ctx, sl_status st, const char *msg) {
  (void)msg;
  sl__coll_abort(ctx, st);
}

const sl__coll_engine_i sl__coll_engine_inproc = {
    .name = "in-process",
    .arrive = inproc_arrive,
    .abort = inproc_abort,
    .destroy = NULL,
};

/* ---- members on several nodes ----------------------------------------------
 */

static sl_status nodes_arrive(void *ctx, const sl__coll_arrival *a) {
  return sl__span_arrive(ctx, a->member, a->in, a->in_bytes, a->out,
                         a->out_bytes, a->done, a->arg);
}

static void nodes_abort(void *ctx, sl_status st, const char *msg) {
  (void)msg;
  sl__span_abort(ctx, st);
}

static void nodes_destroy(void *ctx) { sl__span_destroy(ctx); }

const sl__coll_engine_i sl__coll_engine_nodes = {
    .name = "nodes",
    .arrive = nodes_arrive,
    .abort = nodes_abort,
    .destroy = nodes_destroy,
};

/* ---- CUDA devices ----------------------------------------------------------
 */

static sl_status device_arrive(void *ctx, const sl__coll_arrival *a) {
  return sl__dgroup_arrive(ctx, a->member, a->in, a->out, a->stream, a->done,
                           a->arg);
}

static void device_abort(void *ctx, sl_status st, const char *msg) {
  (void)msg; /* a spanning group's sequencer keeps the first reason */
  sl__dgroup_abort(ctx, st);
}

static void device_destroy(void *ctx) { sl__dgroup_destroy(ctx); }

const sl__coll_engine_i sl__coll_engine_device = {
    .name = "device",
    .arrive = device_arrive,
    .abort = device_abort,
    .destroy = device_destroy,
};
