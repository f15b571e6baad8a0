/* sluice comm — collectives between nodes over the data plane (DESIGN.md
 * section 8): ring all-reduce, reduce-scatter and all-gather,
 * exchange and binomial-tree all-reduces for small buffers (the cost
 * model picks by members and size), a pairwise all-to-all, and an
 * all-reduce through shared registers between daemons on one host
 * (sl__net_coll_set_shared; net_shared.c), for
 * CPU groups with one member per node, their chunks carried as
 * SL__DP_COLL frames on the node pairs' connections (comm/data/dp.h).
 *
 * A group is a list of distinct nodes (the ring order) with an id chosen
 * by the caller; a collective instance is (group id, sequence number),
 * which every member must use for the same operation with the same sizes
 * (the caller numbers them, e.g. one counter per group). Chunks carry the
 * pair, so any number of instances may run at once, and a member may
 * start its part before or after its peers: chunks that arrive before the
 * local start are staged and consumed in arrival order once it starts.
 *
 * The algorithm is the ring (Patarasuk and Yuan, 2009): the buffer is cut
 * into one segment per member and each segment into `lanes` pieces of at
 * most chunk_bytes; each lane is an independent ring, so the lanes
 * pipeline — while one lane's piece is being reduced the others are on the
 * wire. A reduce-scatter step reduces the piece received from the left
 * neighbour into the local one and forwards it to the right; after n-1
 * steps member r holds segment r reduced; an all-gather step stores the
 * received piece and forwards it. Reductions combine values in ring order,
 * so float sums may differ from a serial sum in the last bits.
 *
 * Nothing blocks: start returns after queueing the first chunks, the work
 * runs on the endpoint's loop thread as chunks arrive, and the done
 * callback is called once, on the loop thread (or on the starting thread,
 * before start returns, for an empty or one-member collective).
 * Not installed. */
#ifndef SLUICE_COMM_NET_COLL_H
#define SLUICE_COMM_NET_COLL_H

#include <sluice/sbp.h>
#include <sluice/tensor.h>

#include "dp.h"
#include "sbp_int.h"
#include "shm_pool.h"

typedef struct sl__net_coll sl__net_coll;

typedef struct sl__net_coll_config {
  /* Largest piece per frame; 0: SLUICE_NET_COLL_CHUNK or 1 MiB. */
  uint64_t chunk_bytes;
  /* The all-reduce algorithm: "ring", "exchange", "tree", or "auto" (the
   * cost model picks by members and size: sl__net_all_reduce_algo).
   * NULL: SLUICE_NET_COLL_ALGO, else "auto". Members must agree (a
   * mismatch fails the instance on every member). */
  const char *all_reduce;
  /* The cost model's inter-node figures for "auto": α in µs and β in
   * GB/s; 0: SLUICE_NET_COLL_LATENCY_US / SLUICE_NET_COLL_BANDWIDTH_GBPS,
   * else the CPU defaults of sl_boxing_cost_default. */
  double latency_us, bandwidth_gbps;
  /* The smallest all-reduce (bytes) that goes through shared registers
   * when they are set (sl__net_coll_set_shared); 0: 256 KiB. */
  uint64_t shared_min_bytes;
} sl__net_coll_config;

/* The collectives of endpoint ep: installs the endpoint's COLL hooks (an
 * endpoint has at most one sl__net_coll). cfg may be NULL. SL_ENOMEM. */
sl_status sl__net_coll_create(sl__dp_endpoint *ep,
                              const sl__net_coll_config *cfg,
                              sl__net_coll **out);

/* Frees it; NULL is a no-op. Every started collective must be done, and
 * the endpoint destroyed first (so no hook can still run). */
void sl__net_coll_destroy(sl__net_coll *nc);

/* Called once per successful start; on failure the calling thread's
 * sl_last_error() holds the detail. */
typedef void (*sl__net_coll_done_fn)(void *arg, sl_status st);

/* The group: n distinct nodes in ring order, this endpoint's among them;
 * id and seq name the instance. */
typedef struct sl__net_group {
  uint64_t id;
  const uint32_t *nodes;
  uint32_t n;
} sl__net_group;

/* buf (count elements of dt) becomes the reduction over the members, in
 * place. buf stays valid and untouched by the caller until done. SL_OK:
 * done will be called; SL_EINVAL (bad group, dtype, op, a (group, seq)
 * already started here), SL_ECOMM (a member's pair has failed), SL_ENOMEM:
 * it will not. */
sl_status sl__net_all_reduce(sl__net_coll *nc, const sl__net_group *g,
                             uint64_t seq, void *buf, size_t count, sl_dtype dt,
                             sl_reduce_op op, sl__net_coll_done_fn done,
                             void *arg);

/* sl__net_all_reduce out of place: out (count elements of dt) becomes
 * the reduction over the members of their `in`; in stays unchanged (and
 * is read until done). in may equal out (then as sl__net_all_reduce);
 * otherwise they must not overlap (SL_EINVAL). Saves the caller a copy of
 * in: only the part this member reduces is copied, piece by piece. */
sl_status sl__net_all_reduce_into(sl__net_coll *nc, const sl__net_group *g,
                                  uint64_t seq, const void *in, void *out,
                                  size_t count, sl_dtype dt, sl_reduce_op op,
                                  sl__net_coll_done_fn done, void *arg);

/* Member k hands in counts[k] elements (in; NULL when 0); out gets every
 * member's part in member order (sum of counts elements). in may equal
 * out + its offset. Statuses as sl__net_all_reduce. */
sl_status sl__net_all_gather(sl__net_coll *nc, const sl__net_group *g,
                             uint64_t seq, const void *in, void *out,
                             const size_t *counts, sl_dtype dt,
                             sl__net_coll_done_fn done, void *arg);

/* in holds sum of counts elements (unchanged); member k's out gets the
 * reduction of part k (counts[k] elements). Statuses as
 * sl__net_all_reduce. */
sl_status sl__net_reduce_scatter(sl__net_coll *nc, const sl__net_group *g,
                                 uint64_t seq, const void *in, void *out,
                                 const size_t *counts, sl_dtype dt,
                                 sl_reduce_op op, sl__net_coll_done_fn done,
                                 void *arg);

/* Pairwise all-to-all: in and out hold n parts of count elements each;
 * in's part j goes to member j, whose out part k gets it (k = this
 * member). One frame per pair, all sent at once. in and out must not
 * overlap. Statuses as sl__net_all_reduce. */
sl_status sl__net_all_to_all(sl__net_coll *nc, const sl__net_group *g,
                             uint64_t seq, const void *in, void *out,
                             size_t count, sl_dtype dt,
                             sl__net_coll_done_fn done, void *arg);

/* The general form: member k's in holds one part per member in member
 * order (send_counts[j] elements for member j), out one part per member
 * (recv_counts[j] elements from member j); send_counts[k] must equal
 * recv_counts[k] (the member's own part is copied). One frame per pair,
 * empty ones included. in and out must not overlap. Statuses as
 * sl__net_all_reduce. */
sl_status sl__net_all_to_allv(sl__net_coll *nc, const sl__net_group *g,
                              uint64_t seq, const void *in,
                              const size_t *send_counts, void *out,
                              const size_t *recv_counts, sl_dtype dt,
                              sl__net_coll_done_fn done, void *arg);

/* Gives up on everything: every started instance fails with st and msg
 * (its done is called once its queued chunks are written or dropped, so
 * no chunk still points at the caller's buffer), and every later start
 * fails at once with st until sl__net_coll_reset. For a job that ends
 * while its collectives wait for peers that will never come. Any thread
 * but inside a done callback. */
void sl__net_coll_abort(sl__net_coll *nc, sl_status st, const char *msg);

/* Before the next job: clears the abort and the nodes marked failed (a
 * restarted node may come back), and frees what earlier instances left:
 * failed ones kept to drop their late chunks, and chunks staged for
 * instances never started here. Instances still running stay. */
void sl__net_coll_reset(sl__net_coll *nc);

/* Shared registers (docs/cluster.md, "Shared registers"), set for a job
 * before its first collective and cleared (maps NULL) after its last:
 * pool is this node's register pool (NULL: none); for nodes 0..n-1,
 * views[k] is node k's pool mapped here (zeroed where not; borrowed until
 * cleared) and maps[i * n + j] is nonzero when node i maps node j's pool,
 * the same on every node. An all-reduce of at least shared_min_bytes in
 * "auto" mode whose members all map each other then runs as the shared
 * all-reduce (net_shared.c): the members read each other's values in
 * their pools instead of sending them. SL_EINVAL (n > nnodes), SL_ENOMEM. */
sl_status sl__net_coll_set_shared(sl__net_coll *nc, const sl__shm_pool *pool,
                                  const sl__shm_view *views, uint32_t n,
                                  const uint8_t *maps);

/* SL_OK, or the status of sl__net_coll_abort (since the last reset) with
 * its message as the calling thread's error: for waits outside the
 * collectives that the same abort should end. */
sl_status sl__net_coll_aborted(sl__net_coll *nc);

/* The algorithms an instance may run (net_coll.h's header and
 * docs/cluster.md describe them); the all-reduce's are the cost model's
 * (sbp_int.h). */
typedef enum sl__net_algo {
  SL__NET_ALGO_RING = SL__ALL_REDUCE_RING, /* and reduce-scatter, all-gather */
  SL__NET_ALGO_EXCHANGE = SL__ALL_REDUCE_EXCHANGE, /* one hop */
  SL__NET_ALGO_TREE = SL__ALL_REDUCE_TREE, /* binomial reduce + broadcast */
  SL__NET_ALGO_PAIRWISE = SL__ALL_REDUCE_COUNT, /* all-to-all */
  SL__NET_ALGO_SHARED, /* all-reduce through shared registers */
  SL__NET_ALGO_COUNT
} sl__net_algo;

/* "ring", "exchange", "tree", "pairwise"; "?" for anything else. */
const char *sl__net_algo_name(sl__net_algo a);

/* The algorithm sl__net_all_reduce runs for count elements of dt over n
 * members with this nc's configuration (the one place that decides it):
 * the configured one, or the cheapest by the cost model
 * (sl__cost_all_reduce_best). */
sl__net_algo sl__net_all_reduce_algo(const sl__net_coll *nc, uint32_t n,
                                     size_t count, sl_dtype dt);

typedef struct sl__net_coll_stats {
  uint64_t started, completed, failed;
  uint64_t chunks_sent, chunks_received, chunks_staged;
  uint64_t by_algo[SL__NET_ALGO_COUNT]; /* instances started, per algorithm */
  uint64_t bytes_read_shared; /* read straight from a peer's registers */
} sl__net_coll_stats;

void sl__net_coll_get_stats(sl__net_coll *nc, sl__net_coll_stats *out);

#endif
