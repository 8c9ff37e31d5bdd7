/* The CPU kernels' default thread count on a busy machine: fewer threads
 * while other programs keep the cores busy (kernels/cpu/contention.c says
 * why and how it is detected). */
#ifndef MX_KERNELS_CPU_CONTENTION_H
#define MX_KERNELS_CPU_CONTENTION_H

#include <stdbool.h>
#include <stdint.h>

/* A window's share of time the asking thread waited for a core above
 * which the machine counts as busy. */
#define MX_BUSY_WAITED_FRACTION 0.2
/* How long one window is, and how long a smaller count is kept before the
 * full count is tried again: from the first hold, doubling each time the
 * full count meets a busy machine again, up to the last. */
#define MX_BUSY_WINDOW_NS 50000000LL
#define MX_BUSY_FIRST_HOLD_NS 1000000000LL
#define MX_BUSY_LAST_HOLD_NS 16000000000LL

typedef struct {
  int full;              /* the count on an idle machine */
  int now;               /* the count to use */
  int64_t hold_until_ns; /* while now < full: when to try full again */
  int64_t hold_ns;       /* the next hold's length */
} mx__busy_state;

/* The state before any window: the full count. */
mx__busy_state mx__busy_start(int full);
/* The state after a window that ended at now_ns, in which the thread
 * waited for a core waited_fraction of the time. */
void mx__busy_update(mx__busy_state *s, double waited_fraction, int64_t now_ns);

/* The threads to use now, given the full count: full until a window shows a
 * busy machine (and always where the system does not say how long threads
 * wait: outside Linux). Cheap enough to ask before every parallel loop. */
int mx__busy_threads(int full);

#endif
