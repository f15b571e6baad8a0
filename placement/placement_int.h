/* sluice placement — module interface. A placement is the product of a node
 * list and a device list (every node has the same devices), numbered
 * node-major, viewed as a row-major mesh. */
#ifndef SLUICE_PLACEMENT_INT_H
#define SLUICE_PLACEMENT_INT_H

#include <sluice/placement.h>

struct sl_placement {
  sl_device_type type;
  int nnodes, ndevices, size;
  int *nodes;   /* nnodes ids */
  int *devices; /* ndevices ids */
  int mesh_ndim;
  int mesh[SL_MAX_MESH_AXES];
};

#endif
