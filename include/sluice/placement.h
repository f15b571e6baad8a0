/* sluice — placements: which devices a global tensor lives on, and how they
 * form a mesh.
 *
 * Text form TYPE:[NODES/]DEVICES[MESH]:
 *   cpu:0-3          node 0, devices 0..3, a 1-D mesh of 4
 *   cuda:0-1/0-7     nodes 0 and 1, devices 0..7 on each: 16 ranks
 *   cuda:0-1/0-3[2,4] the same 8 ranks as a 2x4 mesh
 *   cpu:0,2          devices 0 and 2
 * NODES and DEVICES are comma lists of numbers and ranges a-b. Ranks are
 * numbered node-major: rank = node_index * ndevices + device_index. The mesh
 * (up to SL_MAX_MESH_AXES axes) must multiply to the rank count; rank i's
 * mesh coordinate is the row-major index of i. */
#ifndef SLUICE_PLACEMENT_H
#define SLUICE_PLACEMENT_H

#include <sluice/core.h>
#include <sluice/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SL_MAX_MESH_AXES 4
/* Hard bounds that keep parsing and planning bounded; generous for real
 * clusters (a placement names at most 65536 ranks). */
#define SL_MAX_PLACEMENT_RANKS 65536
#define SL_MAX_NODE_ID 1000000
#define SL_MAX_DEVICE_ID 1000000

typedef struct sl_placement sl_placement;

/* Parses the text form. SL_EINVAL with a message naming the offending token
 * for a malformed spec (unknown type, range end before start, duplicate id,
 * mesh not matching the rank count, ...). *out is NULL on failure. */
SL_API sl_status sl_placement_parse(const char *text, sl_placement **out);

/* Builds a placement from explicit lists: nnodes node ids, ndevices device
 * ids (the same on every node), and a mesh of mesh_ndim extents (mesh may be
 * NULL for a 1-D mesh). Ids must be distinct and in range. */
SL_API sl_status sl_placement_create(sl_device_type type, int nnodes,
                                     const int *nodes, int ndevices,
                                     const int *devices, int mesh_ndim,
                                     const int *mesh, sl_placement **out);

/* A deep copy. */
SL_API sl_status sl_placement_copy(const sl_placement *p, sl_placement **out);

SL_API void sl_placement_destroy(sl_placement *p);

/* Canonical text form into buf like snprintf (returns the needed length):
 * ranges compressed, node list omitted when it is just node 0, mesh omitted
 * when 1-D. Parsing the output gives an equal placement. */
SL_API int sl_placement_print(const sl_placement *p, char *buf, size_t size);

SL_API sl_device_type sl_placement_device_type(const sl_placement *p);
/* Number of ranks (devices). */
SL_API int sl_placement_size(const sl_placement *p);
SL_API int sl_placement_node_count(const sl_placement *p);
SL_API int sl_placement_mesh_ndim(const sl_placement *p);
SL_API int sl_placement_mesh_dim(const sl_placement *p, int axis);

/* Rank -> (node id, device id). SL_EINVAL for a rank out of range. */
SL_API sl_status sl_placement_rank_device(const sl_placement *p, int rank,
                                          int *node, int *device);
/* (node id, device id) -> rank, or -1 when the device is not in p. */
SL_API int sl_placement_rank_of(const sl_placement *p, int node, int device);

/* Rank -> mesh coordinate (mesh_ndim entries) and back. */
SL_API void sl_placement_rank_coord(const sl_placement *p, int rank,
                                    int *coord);
SL_API int sl_placement_coord_rank(const sl_placement *p, const int *coord);

/* The sub-group along a mesh axis through a rank: the mesh_dim(axis) ranks
 * whose coordinates equal rank's on every other axis, in coordinate order.
 * ranks must hold mesh_dim(axis) ints. */
SL_API sl_status sl_placement_axis_group(const sl_placement *p, int axis,
                                         int rank, int *ranks);

/* Same type, same devices in the same order, same mesh. */
SL_API bool sl_placement_equal(const sl_placement *a, const sl_placement *b);
/* Same type and the same set of devices, in any order and mesh. */
SL_API bool sl_placement_same_devices(const sl_placement *a,
                                      const sl_placement *b);

#ifdef __cplusplus
}
#endif
#endif
