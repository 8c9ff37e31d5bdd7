/* The process group's NCCL communicator, for collectives on CUDA tensors:
 * made on the first one (rank 0's NCCL id broadcast over MPI), the
 * collectives it has started until the device completes them, and the
 * watchdog's NCCL half (an asynchronous error, or one that waits past the
 * timeout, ends the job). NCCL itself is in the CUDA module
 * (kernels/cuda/nccl.cu), so a CPU program never loads it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/dist_internal.h"
#include "kernels/base_internal.h"

#define MAX_IN_FLIGHT 256 /* collectives started whose completion the device has not shown yet */

struct mx__dist_nccl {
  const mx__nccl_api *api;
  mx__nccl_comm *comm;
  pthread_mutex_t lock; /* the list below: the watchdog reads it */
  int n;
  mx__call calls[MAX_IN_FLIGHT];
  double since[MAX_IN_FLIGHT];
  mx__nccl_done *done[MAX_IN_FLIGHT];
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* This rank's NCCL id: made by rank 0 and broadcast (a world of one makes
 * its own); every rank learns whether every rank can go on, so that none
 * waits in NCCL's bootstrap for a rank that failed before it. */
static mx_status share_id(mx_process_group *g, const char *op, const mx__nccl_api *api, bool usable,
                          unsigned char id[MX__NCCL_ID_BYTES]) {
  mx_status st = usable ? MX_OK : mx_last_status();
  if (st == MX_OK && g->rank == 0) st = api->unique_id(id);
  if (g->world == 1) return st;
#if MX_HAVE_MPI
  char why[512];
  snprintf(why, sizeof why, "%s", st == MX_OK ? "" : mx_last_error());
  int ok = st == MX_OK, all_ok = 0;
  int code = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, g->comm);
  if (code == MPI_SUCCESS && all_ok) code = MPI_Bcast(id, MX__NCCL_ID_BYTES, MPI_BYTE, 0, g->comm);
  g->mpi_failed |= code != MPI_SUCCESS;
  if (code != MPI_SUCCESS) return mx__dist_mpi_status(code, op);
  if (st != MX_OK) return mx__error(st, "%s", why);
  if (!all_ok) return mx__error(MX_BACKEND_ERROR, "another rank could not start NCCL (its own error says why)");
#else
  (void)op;
#endif
  return st;
}

mx__dist_nccl *mx__dist_nccl_get(mx_process_group *g, const char *op) {
  if (g->nccl) return g->nccl;
  const mx__nccl_api *api = mx__cuda_nccl(); /* the CUDA backend, started: else "no CUDA device", "built without CUDA" */
  unsigned char id[MX__NCCL_ID_BYTES] = {0};
  mx_status st = share_id(g, op, api, api != NULL, id);
  mx__dist_nccl *n = st == MX_OK ? calloc(1, sizeof *n) : NULL;
  if (st == MX_OK && !n) st = mx__error(MX_OUT_OF_MEMORY, "out of memory");
  if (st == MX_OK) st = api->comm_create(id, g->rank, g->world, g->local_rank, &n->comm);
  if (st != MX_OK) {
    free(n);
    char why[768];
    snprintf(why, sizeof why, "%s", mx_last_error()); /* mx__error writes over the message it reads */
    mx__error(st, "%s: collectives on CUDA tensors run on NCCL, which cannot start: %s", op, why);
    mx__dist_broke(g, mx_last_status());
    return NULL;
  }
  n->api = api;
  pthread_mutex_init(&n->lock, NULL);
#if MX_HAVE_MPI
  if (g->comm != MPI_COMM_NULL) pthread_mutex_lock(&g->lock); /* the watchdog reads g->nccl */
  g->nccl = n;
  if (g->comm != MPI_COMM_NULL) pthread_mutex_unlock(&g->lock);
#else
  g->nccl = n;
#endif
  return n;
}

/* Drops the collectives the device has completed; -1 with the error set
 * when a query failed. Under n->lock. */
static int reap(mx__dist_nccl *n) {
  for (int i = 0; i < n->n;) {
    int done = n->api->query(n->comm, n->done[i]);
    if (done < 0) return -1;
    if (!done) {
      i++;
      continue;
    }
    n->api->done_free(n->comm, n->done[i]);
    n->n--;
    n->calls[i] = n->calls[n->n], n->since[i] = n->since[n->n], n->done[i] = n->done[n->n];
  }
  return 0;
}

mx_status mx__dist_nccl_start(mx_process_group *g, const char *op, const mx__call *call, const mx__nccl_op *nop,
                              mx__nccl_done **done) {
  *done = NULL;
  mx__dist_nccl *n = mx__dist_nccl_get(g, op);
  if (!n) return mx_last_status();
  mx_status st = MX_OK;
  pthread_mutex_lock(&n->lock);
  if (reap(n) < 0)
    st = mx_last_status();
  else if (n->n == MAX_IN_FLIGHT)
    st = mx__error(MX_STATE_ERROR, "%d NCCL collectives are still running on the device", MAX_IN_FLIGHT);
  if (st == MX_OK) st = n->api->start(n->comm, nop, done);
  if (st == MX_OK) {
    n->calls[n->n] = *call, n->since[n->n] = now(), n->done[n->n++] = *done;
  }
  pthread_mutex_unlock(&n->lock);
  if (st != MX_OK) mx__error_prefix(op);
  return mx__dist_broke(g, st);
}

mx_status mx__dist_nccl_finish(mx_process_group *g, const char *op, const mx__nccl_done *done) {
  mx__dist_nccl *n = g->nccl;
  mx_status st = MX_OK;
  pthread_mutex_lock(&n->lock);
  for (int i = 0; i < n->n; i++) /* not in the list: completed and reaped, nothing to wait for */
    if (n->done[i] == done) st = n->api->finish(n->comm, done);
  pthread_mutex_unlock(&n->lock);
  if (st != MX_OK) mx__error_prefix(op);
  return mx__dist_broke(g, st);
}

#if MX_HAVE_MPI
bool mx__dist_nccl_watch(mx_process_group *g) {
  mx__dist_nccl *n = g->nccl;
  if (!n) return false;
  pthread_mutex_lock(&n->lock);
  mx_status st = reap(n) < 0 ? mx_last_status() : n->api->async_error(n->comm);
  int oldest = -1;
  for (int i = 0; i < n->n; i++)
    if (oldest < 0 || n->since[i] < n->since[oldest]) oldest = i;
  double waited = oldest >= 0 ? now() - n->since[oldest] : 0;
  bool end = st != MX_OK || waited > g->timeout;
  if (end) {
    char what[160] = "no collective pending";
    if (oldest >= 0) {
      char call[140];
      mx__dist_describe(&n->calls[oldest], call, sizeof call);
      snprintf(what, sizeof what, "collective #%lld, %s", (long long)n->calls[oldest].seq, call);
    }
    if (st != MX_OK)
      fprintf(stderr, "mixgrad: rank %d of %d: NCCL failed (%s) with %s on the device; ending the job with "
              "ncclCommAbort and MPI_Abort\n", g->rank, g->world, mx_last_error(), what);
    else
      fprintf(stderr, "mixgrad: rank %d of %d: NCCL %s has waited %.1f s, past the process group's timeout of %g s "
              "(a rank died, stopped or calls something else); ending the job with ncclCommAbort and MPI_Abort\n",
              g->rank, g->world, what, waited, g->timeout);
    fflush(stderr);
    n->api->abort(n->comm);
  }
  pthread_mutex_unlock(&n->lock);
  return end;
}
#endif

void mx__dist_nccl_free(mx_process_group *g) {
  mx__dist_nccl *n = g->nccl;
  if (!n) return;
  /* an event not yet completed is released when it completes */
  for (int i = 0; i < n->n; i++) n->api->done_free(n->comm, n->done[i]);
  (void)n->api->destroy(n->comm); /* free returns no status: a failure stays the thread's last error */
  pthread_mutex_destroy(&n->lock);
  free(n);
  g->nccl = NULL;
}
