/* Printing a tensor the way PyTorch's repr does:
 *
 *     tensor([[0.5000, 1.2500],
 *             [2.0000, 3.0000]], dtype=float16)
 *
 * Floats print with 4 decimals, as integers with a trailing dot when every
 * value is whole, and in scientific notation when magnitudes span more than
 * 1000x or leave [1e-4, 1e8]. Above 1000 elements only the first and last
 * 3 of each dimension print, with "..." between. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor_impl.h"

#define LINE_WIDTH 80
#define SUMMARY_THRESHOLD 1000
#define EDGE_ITEMS 3

typedef struct {
  char *text;
  size_t len, cap;
  bool failed;
} buffer;

static void put(buffer *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (b->failed || n < 0) return;
  if (b->len + (size_t)n + 1 > b->cap) {
    size_t cap = (b->len + (size_t)n + 1) * 2;
    char *grown = realloc(b->text, cap);
    if (!grown) {
      b->failed = true;
      return;
    }
    b->text = grown;
    b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->text + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

typedef enum { FMT_FIXED, FMT_WHOLE, FMT_SCI, FMT_INT, FMT_BOOL } format_kind;

typedef struct {
  format_kind kind;
  int width;
  const double *f;  /* floating values (double) */
  const int64_t *i; /* integer values */
  const bool *b;    /* bool values */
  bool summarize;
  int ndim;
  int64_t shape[MX_MAX_DIMS], strides[MX_MAX_DIMS];
} printer;

static int format_value(const printer *p, int64_t index, char *out, size_t size) {
  switch (p->kind) {
  case FMT_INT: return snprintf(out, size, "%lld", (long long)p->i[index]);
  case FMT_BOOL: return snprintf(out, size, "%s", p->b[index] ? "True" : "False");
  default: break;
  }
  double v = p->f[index];
  if (isnan(v)) return snprintf(out, size, "nan");
  if (isinf(v)) return snprintf(out, size, v < 0 ? "-inf" : "inf");
  switch (p->kind) {
  case FMT_WHOLE: return snprintf(out, size, "%.0f.", v);
  case FMT_SCI: return snprintf(out, size, "%.4e", v);
  default: return snprintf(out, size, "%.4f", v);
  }
}

/* Picks the float format from the magnitudes of the finite non-zero values
 * among those that print. */
static format_kind float_format(const double *v, const int64_t *shown, int64_t n) {
  bool whole = true, any = false;
  double lo = INFINITY, hi = 0;
  for (int64_t i = 0; i < n; i++) {
    double x = v[shown[i]];
    if (!isfinite(x) || x == 0) continue;
    double a = fabs(x);
    any = true;
    lo = a < lo ? a : lo;
    hi = a > hi ? a : hi;
    if (ceil(x) != x) whole = false;
  }
  if (!any) return FMT_WHOLE;
  if (whole) return hi / lo > 1000 || hi > 1e8 ? FMT_SCI : FMT_WHOLE;
  return hi / lo > 1000 || hi > 1e8 || lo < 1e-4 ? FMT_SCI : FMT_FIXED;
}

/* The width every element is padded to: that of the widest value, counting
 * for floats only the finite non-zero ones (as PyTorch does). */
static int value_width(const printer *p, const int64_t *shown, int64_t n) {
  int width = 1;
  for (int64_t i = 0; i < n; i++) {
    if (p->f && (!isfinite(p->f[shown[i]]) || p->f[shown[i]] == 0)) continue;
    char text[64];
    int w = format_value(p, shown[i], text, sizeof text);
    width = w > width ? w : width;
  }
  return width;
}

static bool skipped(const printer *p, int dim, int64_t k) {
  return p->summarize && p->shape[dim] > 2 * EDGE_ITEMS && k >= EDGE_ITEMS &&
         k < p->shape[dim] - EDGE_ITEMS;
}

static void print_dim(buffer *b, const printer *p, int dim, int64_t base, int indent) {
  int64_t size = p->shape[dim];
  put(b, "[");
  if (dim == p->ndim - 1) { /* a row: ", " between items, wrapped at 80 columns */
    int per_line = (LINE_WIDTH - indent) / (p->width + 2);
    if (per_line < 1) per_line = 1;
    int on_line = 0;
    for (int64_t k = 0; k < size; k++) {
      char text[80];
      if (skipped(p, dim, k)) {
        snprintf(text, sizeof text, " ...");
        k = size - EDGE_ITEMS - 1;
      } else {
        char value[64];
        int n = format_value(p, base + k * p->strides[dim], value, sizeof value);
        snprintf(text, sizeof text, "%*s%s", p->width > n ? p->width - n : 0, "", value);
      }
      if (on_line == per_line) {
        put(b, ",\n%*s", indent + 1, "");
        on_line = 0;
      } else if (on_line > 0) {
        put(b, ", ");
      }
      put(b, "%s", text);
      on_line++;
    }
  } else {
    for (int64_t k = 0; k < size; k++) {
      if (k > 0) {
        put(b, ",");
        for (int nl = 0; nl < p->ndim - dim - 1; nl++) put(b, "\n");
        put(b, "%*s", indent + 1, "");
      }
      if (skipped(p, dim, k)) {
        put(b, "...");
        k = size - EDGE_ITEMS - 1;
        continue;
      }
      print_dim(b, p, dim + 1, base + k * p->strides[dim], indent + 1);
    }
  }
  put(b, "]");
}

/* The linear indices of the elements that print (all, or the edges of
 * each dim when summarising): the format and width come from these. */
static void collect_shown(const printer *p, int dim, int64_t base, int64_t *out, int64_t *n) {
  if (dim == p->ndim) {
    out[(*n)++] = base;
    return;
  }
  for (int64_t k = 0; k < p->shape[dim]; k++) {
    if (skipped(p, dim, k)) {
      k = p->shape[dim] - EDGE_ITEMS - 1;
      continue;
    }
    collect_shown(p, dim + 1, base + k * p->strides[dim], out, n);
  }
}

/* Host copies of the values: doubles for floats, int64 for integers. */
static mx_tensor *host_values(const mx_tensor *t) {
  mx_dtype as = mx_dtype_is_floating(t->dtype) ? MX_F64 : t->dtype == MX_BOOL ? MX_BOOL : MX_I64;
  mx_tensor *host = mx__tensor_alloc("mx_to_string", mx_shape_of(t->ndim, t->shape), as, MX_CPU);
  if (host && mx_copy_(host, t) != MX_OK) {
    mx_release(host);
    return NULL;
  }
  return host;
}

/* Adds ", <suffix>", on a new line when the current one would pass 80
 * columns (PyTorch's _add_suffixes, its +2s included). */
static void suffix(buffer *b, const char *fmt, ...) {
  char text[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (b->failed) return;
  const char *last_newline = strrchr(b->text, '\n');
  size_t line_len = b->len - (last_newline ? (size_t)(last_newline - b->text) : (size_t)-1) + 1;
  if (line_len + strlen(text) + 2 > LINE_WIDTH)
    put(b, ",\n%*s%s", 7, "", text);
  else
    put(b, ", %s", text);
}

char *mx_to_string(const mx_tensor *t) {
  if (!t) {
    mx__null_input("mx_to_string", "t");
    return NULL;
  }
  mx_tensor *host = host_values(t);
  if (!host) return NULL;
  int64_t n = mx_numel(t);
  printer p = {.ndim = t->ndim, .summarize = n > SUMMARY_THRESHOLD};
  memcpy(p.shape, t->shape, sizeof p.shape);
  mx__contiguous_strides(t->ndim, t->shape, p.strides);
  int64_t *shown = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  if (!shown) {
    mx_release(host);
    mx__error(MX_OUT_OF_MEMORY, "mx_to_string: out of memory");
    return NULL;
  }
  int64_t n_shown = 0;
  if (n) collect_shown(&p, 0, 0, shown, &n_shown);
  void *data = mx__kview_of(host).data;
  if (host->dtype == MX_F64) {
    p.f = data;
    p.kind = float_format(p.f, shown, n_shown);
  } else if (host->dtype == MX_BOOL) {
    p.b = data;
    p.kind = FMT_BOOL;
  } else {
    p.i = data;
    p.kind = FMT_INT;
  }
  p.width = value_width(&p, shown, n_shown);
  free(shown);
  buffer b = {0};
  put(&b, "tensor(");
  if (n == 0) {
    put(&b, "[]");
  } else if (t->ndim == 0) {
    char text[64];
    format_value(&p, 0, text, sizeof text);
    put(&b, "%s", text);
  } else {
    print_dim(&b, &p, 0, 0, 7);
  }
  if (t->device != MX_CPU) suffix(&b, "device='%s'", mx_device_name(t->device));
  if (n == 0 && t->ndim != 1) {
    char dims[MX__DIMS_STR] = "(";
    size_t k = 1;
    for (int i = 0; i < t->ndim; i++)
      k += (size_t)snprintf(dims + k, sizeof dims - k, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    snprintf(dims + k, sizeof dims - k, t->ndim == 1 ? ",)" : ")");
    suffix(&b, "size=%s", dims);
  }
  /* float32, int64 and bool go unnamed, except that an empty tensor names
   * every dtype but float32 */
  bool named = t->dtype != MX_F32 && (n == 0 || (t->dtype != MX_I64 && t->dtype != MX_BOOL));
  if (named) suffix(&b, "dtype=%s", mx_dtype_name(t->dtype));
  put(&b, ")");
  mx_release(host);
  if (b.failed) {
    free(b.text);
    mx__error(MX_OUT_OF_MEMORY, "mx_to_string: out of memory");
    return NULL;
  }
  return b.text;
}

void mx_fprint(FILE *f, const mx_tensor *t) {
  char *text = mx_to_string(t);
  fprintf(f, "%s\n", text ? text : "(null)");
  free(text);
}

void mx_print(const mx_tensor *t) { mx_fprint(stdout, t); }
