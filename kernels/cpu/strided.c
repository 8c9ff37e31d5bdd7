/* Row iteration over strided views, with dimension merging and OpenMP. */
#include "kernels/cpu/strided.h"

#include "kernels/cpu/parallel.h"

typedef struct {
  int ndim;
  int64_t shape[MX_MAX_DIMS];
  int64_t stride[MX__MAX_OPERANDS][MX_MAX_DIMS]; /* in bytes */
} merged_dims;

/* Whether dim a is walked inside dim b: by the strides of the first view
 * that tells them apart (a 0 stride, a broadcast, tells nothing), as
 * PyTorch's TensorIterator orders them; in row-major order when none does. */
static bool walks_inside(int n, const mx_kview *const *views, int a, int b) {
  for (int k = 0; k < n; k++) {
    int64_t sa = views[k]->strides[a], sb = views[k]->strides[b];
    if (sa != 0 && sb != 0 && sa != sb) return sa < sb;
  }
  return a > b;
}

/* Drops size-1 dims and merges neighbours that are contiguous in every view,
 * into m, walking the dims in memory order (the views' strides, the
 * output's first) or, when row_major, in their own order. A channels-last
 * output and inputs of its layout are then one long row, as row-major ones
 * are. Only the entries below m->ndim are written and read: zeroing all of
 * it, and returning it by value, were two thirds of a tiny op's
 * mx__cpu_foreach. */
static void merge_dims(int n, const mx_kview *const *views, bool row_major, merged_dims *m) {
  m->ndim = 0;
  const mx_kview *out = views[0];
  int order[MX_MAX_DIMS], dims = 0;
  for (int d = 0; d < out->ndim; d++) {
    if (out->shape[d] == 1) continue;
    int at = dims++; /* insertion sort, outermost first: a few compares when already in order */
    while (!row_major && at > 0 && walks_inside(n, views, order[at - 1], d)) {
      order[at] = order[at - 1];
      at--;
    }
    order[at] = d;
  }
  for (int j = 0; j < dims; j++) {
    int d = order[j];
    int64_t s[MX__MAX_OPERANDS];
    bool mergeable = m->ndim > 0;
    for (int k = 0; k < n; k++) {
      s[k] = views[k]->strides[d] * (int64_t)mx_dtype_size(views[k]->dtype);
      if (mergeable && m->stride[k][m->ndim - 1] != s[k] * out->shape[d]) mergeable = false;
    }
    if (mergeable) {
      m->shape[m->ndim - 1] *= out->shape[d];
    } else {
      m->shape[m->ndim] = out->shape[d];
      m->ndim++;
    }
    for (int k = 0; k < n; k++) m->stride[k][m->ndim - 1] = s[k];
  }
  if (m->ndim == 0) { /* a single element */
    m->ndim = 1;
    m->shape[0] = 1;
    for (int k = 0; k < n; k++) m->stride[k][0] = 0;
  }
}

int64_t mx__cpu_row_chunk(int64_t row_len, int threads) {
  if (threads < 2 || row_len < 2 * MX_PARALLEL_MIN_ELEMENTS) return row_len;
  /* a whole number of chunks per thread, so that the static schedule gives
   * each thread the same share (13 chunks of the minimum would give two
   * threads 7 and 6); each a multiple of 16 elements, whole vectors */
  int64_t per_thread = (row_len + (int64_t)threads * MX_PARALLEL_MIN_ELEMENTS - 1) /
                       ((int64_t)threads * MX_PARALLEL_MIN_ELEMENTS);
  int64_t chunks = per_thread * threads;
  return ((row_len + chunks - 1) / chunks + 15) / 16 * 16;
}

/* The rows of the views, cut into tasks of at most `chunk` elements, or
 * walked in tiles (tile_dim >= 0, below). */
typedef struct {
  merged_dims m;
  int n;
  const mx_kview *const *views;
  bool row_major; /* rows in row-major order: `first` is their index */
  int64_t row_len, chunk, chunks_per_row;
  int tile_dim;        /* the merged dim tiled with the inner one; -1: none */
  int64_t tile_blocks; /* blocks of TILE_OUTER along it */
} row_tasks;

/* Operands in two layouts (a channels-last input to a row-major output, or
 * the reverse): along the output's rows such an input steps a cache line or
 * more per element, and the row functions take their scalar loops (a
 * 128x32x28x28 relu_backward took 27 ms against 0.2 in one layout). So the
 * walk goes by tiles of TILE_OUTER rows of TILE_INNER elements, along the
 * dim where that input is dense, and each strided input is first gathered
 * into a dense tile in the output's order: the rows are then dense, their
 * loops vectorised, and the gather reads each cache line while it is in L1. */
#define TILE_OUTER 32
#define TILE_INNER 64

/* The merged dim to tile with the inner one: where an input steps one
 * element while it steps 64 bytes or more along the inner dim; -1 when
 * every input follows the output's order. */
static int transposed_dim(const row_tasks *p) {
  int inner = p->m.ndim - 1;
  for (int k = 1; k < p->n && inner > 0; k++) {
    int64_t size = (int64_t)mx_dtype_size(p->views[k]->dtype), along = p->m.stride[k][inner];
    if (along < 64 && along > -64) continue;
    for (int d = inner - 1; d >= 0; d--)
      if (p->m.stride[k][d] == size && p->m.shape[d] > 1) return d;
  }
  return -1;
}

/* rows x n elements of `size` bytes from src (rows step row_step bytes,
 * elements elem_step) into dst, dense, row after row. Along the rows first:
 * the steps a transposed input makes densely. */
static void gather(char *dst, const char *src, int64_t rows, int64_t n, int64_t row_step, int64_t elem_step,
                   int64_t size) {
#define GATHER(type)                                                                                   \
  for (int64_t i = 0; i < n; i++)                                                                      \
    for (int64_t r = 0; r < rows; r++)                                                                 \
      ((type *)dst)[r * n + i] = *(const type *)(src + r * row_step + i * elem_step);
  switch (size) {
  case 1: GATHER(uint8_t) break;
  case 2: GATHER(uint16_t) break;
  case 4: GATHER(uint32_t) break;
  default: GATHER(uint64_t) break;
  }
#undef GATHER
}

/* Task t of a tiled walk: TILE_OUTER rows along tile_dim (fewer in its last
 * block) at one place in the other dims, in runs of TILE_INNER elements. */
static void run_tile(const row_tasks *p, int64_t t, mx__row_fn fn, void *ctx) {
  int inner = p->m.ndim - 1, j = p->tile_dim;
  int64_t rest = t / p->tile_blocks, j0 = (t % p->tile_blocks) * TILE_OUTER;
  int64_t j1 = j0 + TILE_OUTER < p->m.shape[j] ? j0 + TILE_OUTER : p->m.shape[j];
  char *base[MX__MAX_OPERANDS];
  for (int k = 0; k < p->n; k++) base[k] = (char *)p->views[k]->data;
  for (int d = inner - 1; d >= 0; d--) {
    if (d == j) continue;
    int64_t i = rest % p->m.shape[d];
    rest /= p->m.shape[d];
    for (int k = 0; k < p->n; k++) base[k] += i * p->m.stride[k][d];
  }
  /* the strided inputs' tiles, dense: row jj - j0 at (jj - j0) * n elements */
  _Alignas(64) char tile[MX__MAX_OPERANDS - 1][TILE_OUTER * TILE_INNER * sizeof(double)];
  bool gathered[MX__MAX_OPERANDS] = {false};
  mx__row row = {.first = -1};
  for (int k = 0; k < p->n; k++) {
    int64_t size = (int64_t)mx_dtype_size(p->views[k]->dtype), along = p->m.stride[k][inner];
    gathered[k] = k > 0 && along != 0 && along != size;
    row.step[k] = gathered[k] ? size : along;
  }
  for (int64_t i0 = 0; i0 < p->row_len; i0 += TILE_INNER) {
    int64_t n = p->row_len - i0 < TILE_INNER ? p->row_len - i0 : TILE_INNER;
    for (int k = 1; k < p->n; k++)
      if (gathered[k])
        gather(tile[k - 1], base[k] + j0 * p->m.stride[k][j] + i0 * p->m.stride[k][inner], j1 - j0, n,
               p->m.stride[k][j], p->m.stride[k][inner], row.step[k]);
    row.n = n;
    for (int64_t jj = j0; jj < j1; jj++) {
      for (int k = 0; k < p->n; k++)
        row.ptr[k] = gathered[k] ? tile[k - 1] + (jj - j0) * n * row.step[k]
                                 : base[k] + jj * p->m.stride[k][j] + i0 * p->m.stride[k][inner];
      fn(&row, ctx);
    }
  }
}

static void run_task(const row_tasks *p, int64_t t, mx__row_fn fn, void *ctx) {
  int inner = p->m.ndim - 1;
  int64_t r = t / p->chunks_per_row, start = (t % p->chunks_per_row) * p->chunk;
  mx__row row = {.n = p->row_len - start < p->chunk ? p->row_len - start : p->chunk,
                 .first = p->row_major ? r * p->row_len + start : -1};
  for (int k = 0; k < p->n; k++) {
    row.ptr[k] = (char *)p->views[k]->data + start * p->m.stride[k][inner];
    row.step[k] = p->m.stride[k][inner];
  }
  int64_t rest = r;
  for (int d = inner - 1; d >= 0; d--) {
    int64_t i = rest % p->m.shape[d];
    rest /= p->m.shape[d];
    for (int k = 0; k < p->n; k++) row.ptr[k] += i * p->m.stride[k][d];
  }
  fn(&row, ctx);
}

static void run_any(const row_tasks *p, int64_t t, mx__row_fn fn, void *ctx) {
  if (p->tile_dim >= 0) run_tile(p, t, fn, ctx);
  else run_task(p, t, fn, ctx);
}

static void foreach(int n, const mx_kview *const *views, bool row_major, mx__row_fn fn, void *ctx) {
  int64_t numel = mx__kview_numel(views[0]);
  if (numel == 0) return;
  row_tasks p;
  merge_dims(n, views, row_major, &p.m);
  p.n = n, p.views = views, p.row_major = row_major;
  p.row_len = p.m.shape[p.m.ndim - 1];
  int64_t rows = numel / p.row_len;
  /* Long rows are split into chunks so a single contiguous row still uses
   * every thread. */
  p.chunk = rows == 1 ? mx__cpu_row_chunk(p.row_len, mx__cpu_threads_here()) : p.row_len;
  p.chunks_per_row = (p.row_len + p.chunk - 1) / p.chunk;
  int64_t tasks = rows * p.chunks_per_row;
  p.tile_dim = row_major ? -1 : transposed_dim(&p);
  if (p.tile_dim >= 0) {
    p.tile_blocks = (p.m.shape[p.tile_dim] + TILE_OUTER - 1) / TILE_OUTER;
    tasks = rows / p.m.shape[p.tile_dim] * p.tile_blocks;
  }
  /* Small views skip the parallel region altogether: even with its `if`
   * false, entering one costs more than a tiny op's whole kernel. So do
   * views converted inside a region already (matmul.c's shares), where a
   * nested region would run on one thread anyway. */
  if (numel < MX_PARALLEL_MIN_ELEMENTS || mx__cpu_threads_here() < 2) {
    for (int64_t t = 0; t < tasks; t++) run_any(&p, t, fn, ctx);
    return;
  }
  MX_PARALLEL_FOR(numel)
  for (int64_t t = 0; t < tasks; t++) run_any(&p, t, fn, ctx);
}

void mx__cpu_foreach(int n, const mx_kview *const *views, mx__row_fn fn, void *ctx) {
  foreach(n, views, false, fn, ctx);
}

void mx__cpu_foreach_row(const mx_kview *out, const mx_kview *in, mx__row_fn fn, void *ctx) {
  const mx_kview *views[2] = {out, in};
  foreach(in ? 2 : 1, views, false, fn, ctx);
}

void mx__cpu_foreach_row_indexed(const mx_kview *out, const mx_kview *in, mx__row_fn fn, void *ctx) {
  const mx_kview *views[2] = {out, in};
  foreach(in ? 2 : 1, views, true, fn, ctx);
}
