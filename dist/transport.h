/* The TCP ring under a process group (not installed): each rank holds one
 * connection to the next rank and one from the previous, and every
 * collective is built of one move, send right while receiving from the left.
 */
#ifndef MX_DIST_TRANSPORT_H
#define MX_DIST_TRANSPORT_H

#include <stddef.h>

#include "kernels/base.h"

typedef struct {
  int rank, world_size;
  int left, right;  /* sockets from rank - 1 and to rank + 1 (mod world); -1 alone */
  double timeout;   /* seconds one exchange may wait for a peer */
} mx__ring;

/* Meets the other ranks at master_addr:master_port (rank 0 listens there,
 * on every interface) and connects the ring. A world of one opens no
 * socket. Errors name op and the step that failed. */
mx_status mx__ring_connect(mx__ring *ring, const char *op, int rank, int world_size, const char *master_addr,
                           int master_port, double timeout);

/* Sends send_bytes to the right neighbour while receiving recv_bytes from
 * the left one, until both are done, a peer fails or ring->timeout passes
 * (each side may be empty). */
mx_status mx__ring_exchange(mx__ring *ring, const char *op, const void *send, size_t send_bytes, void *recv,
                            size_t recv_bytes);

/* Closes both connections; the neighbours' next exchange fails at once. */
void mx__ring_close(mx__ring *ring);

#endif
