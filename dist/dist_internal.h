/* What the process group shares with DDP (not installed). */
#ifndef MX_DIST_DIST_INTERNAL_H
#define MX_DIST_DIST_INTERNAL_H

#include "dist/dist.h"

/* All-reduces buf, a dense 1-d CPU tensor, in place; errors name op. */
mx_status mx__dist_reduce(mx_process_group *g, const char *op, mx_tensor *buf, mx_dist_reduce_op how);

/* MX_OK when g can take a call; otherwise the error (NULL, or broken). */
mx_status mx__dist_usable(const mx_process_group *g, const char *op);

#endif
