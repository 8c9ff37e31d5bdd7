/* The model summary (like torchsummary): each layer's name, type, output shape and parameter count, and totals. */
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "nn/nn_internal.h"

typedef struct {
  int n;
  mx_module **module;
  const char **name;
  bool *training, *seen;
  mx_shape *shape; /* each module's output shape at its first call */
} layer_table;

static void record(mx_module *m, const mx_tensor *out, void *ctx) {
  layer_table *t = ctx;
  for (int i = 0; i < t->n; i++)
    if (t->module[i] == m && !t->seen[i]) t->seen[i] = true, t->shape[i] = mx_shape_get(out);
}

static void shape_repr(char *buf, size_t size, mx_shape s) {
  buf[0] = '\0';
  mx__append(buf, size, "[");
  for (int i = 0; i < s.ndim; i++) mx__append(buf, size, "%s%lld", i ? ", " : "", (long long)s.d[i]);
  mx__append(buf, size, "]");
}

/* 1234567 as "1,234,567". */
static void count_repr(char *buf, size_t size, int64_t v) {
  char digits[32];
  snprintf(digits, sizeof digits, "%lld", (long long)v);
  size_t n = strlen(digits), k = 0;
  for (size_t i = 0; i < n && k + 2 < size; i++) {
    if (i && (n - i) % 3 == 0) buf[k++] = ',';
    buf[k++] = digits[i];
  }
  buf[k] = '\0';
}

typedef struct {
  char name[256], type[384], shape[96], params[32];
} row;

static void rule(FILE *f, char c, int width) {
  for (int i = 0; i < width; i++) fputc(c, f);
  fputc('\n', f);
}

static int max_int(int a, int b) { return a > b ? a : b; }

static void print_table(FILE *f, const layer_table *t, const mx_module *m, const mx_tensor *x, mx_shape out) {
  row *rows = calloc((size_t)t->n, sizeof *rows);
  if (!rows) return;
  int n_rows = 0, w[4] = {5, 4, 12, 7}; /* "Layer", "Type", "Output shape", "Param #" */
  for (int i = 0; i < t->n; i++) {
    int64_t own = mx__module_own_parameter_count(t->module[i], NULL);
    if (i == 0 && t->n > 1 && own == 0) continue; /* the root gets a row only for parameters of its own */
    row *r = &rows[n_rows++];
    const mx_module_type *type = mx_module_type_of(t->module[i]);
    char extra[320] = "";
    if (type->extra) type->extra(t->module[i], extra, sizeof extra);
    snprintf(r->name, sizeof r->name, "%s", i ? t->name[i] : "(root)");
    snprintf(r->type, sizeof r->type, "%s(%s)", type->name, extra);
    if (t->seen[i]) shape_repr(r->shape, sizeof r->shape, t->shape[i]);
    else snprintf(r->shape, sizeof r->shape, "-");
    count_repr(r->params, sizeof r->params, own);
    w[0] = max_int(w[0], (int)strlen(r->name)), w[1] = max_int(w[1], (int)strlen(r->type));
    w[2] = max_int(w[2], (int)strlen(r->shape)), w[3] = max_int(w[3], (int)strlen(r->params));
  }
  int width = w[0] + w[1] + w[2] + w[3] + 6;
  rule(f, '-', width);
  fprintf(f, "%-*s  %-*s  %-*s  %*s\n", w[0], "Layer", w[1], "Type", w[2], "Output shape", w[3], "Param #");
  rule(f, '=', width);
  for (int i = 0; i < n_rows; i++)
    fprintf(f, "%-*s  %-*s  %-*s  %*s\n", w[0], rows[i].name, w[1], rows[i].type, w[2], rows[i].shape, w[3],
            rows[i].params);
  free(rows);
  rule(f, '=', width);
  int64_t total = 0, trainable = 0;
  for (int i = 0; i < mx_module_num_parameters(m); i++) {
    mx_tensor *p = mx_module_parameter(m, i, NULL);
    total += mx_numel(p);
    if (mx_requires_grad(p)) trainable += mx_numel(p);
  }
  char count[32], shape[96];
  count_repr(count, sizeof count, total);
  fprintf(f, "Total params: %s\n", count);
  count_repr(count, sizeof count, trainable);
  fprintf(f, "Trainable params: %s\n", count);
  count_repr(count, sizeof count, total - trainable);
  fprintf(f, "Non-trainable params: %s\n", count);
  shape_repr(shape, sizeof shape, mx_shape_get(x));
  fprintf(f, "Input shape: %s\n", shape);
  shape_repr(shape, sizeof shape, out);
  fprintf(f, "Output shape: %s\n", shape);
  rule(f, '-', width);
}

static void table_free(layer_table *t) {
  free(t->module), free(t->name), free(t->training), free(t->seen), free(t->shape);
}

mx_status mx_module_summary_input(mx_module *m, const mx_tensor *x, FILE *f) {
  const char *fn = "mx_module_summary";
  if (!m || !x || !f) return mx__null_input(fn, !m ? "m" : !x ? "x" : "f");
  layer_table t = {.n = mx_module_num_modules(m)};
  if (t.n == 0) return mx__error_prefix(fn);
  t.module = calloc((size_t)t.n, sizeof *t.module), t.name = calloc((size_t)t.n, sizeof *t.name);
  t.training = calloc((size_t)t.n, sizeof *t.training), t.seen = calloc((size_t)t.n, sizeof *t.seen);
  t.shape = calloc((size_t)t.n, sizeof *t.shape);
  if (!t.module || !t.name || !t.training || !t.seen || !t.shape) {
    table_free(&t);
    return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory for %d layers", fn, t.n);
  }
  for (int i = 0; i < t.n; i++) {
    t.module[i] = mx_module_module(m, i, &t.name[i]);
    t.training[i] = mx_module_is_training(t.module[i]);
  }
  mx__module_observer prev;
  void *prev_ctx;
  mx__module_observe(record, &t, &prev, &prev_ctx);
  mx_module_train(m, false);
  mx_scope *scope = mx_scope_begin();
  mx_tensor *y = NULL;
  MX_NO_GRAD { y = scope ? mx_module_forward(m, x) : NULL; }
  mx_shape out = y ? mx_shape_get(y) : MX_SCALAR;
  mx_scope_end(scope);
  mx__module_observe(prev, prev_ctx, NULL, NULL);
  for (int i = 0; i < t.n; i++) mx_module_train(t.module[i], t.training[i]); /* depth first: each sets its own */
  mx_status status = MX_OK;
  if (y) print_table(f, &t, m, x, out);
  else status = mx__error_prefix(fn);
  table_free(&t);
  return status;
}

mx_status mx_module_summary(mx_module *m, mx_shape input_shape, FILE *f) {
  if (!m || !f) return mx__null_input("mx_module_summary", !m ? "m" : "f");
  mx_dtype dtype = MX_F32;
  mx_device device = MX_CPU;
  if (mx_module_num_parameters(m) > 0) {
    dtype = mx_dtype_of(mx_module_parameter(m, 0, NULL));
    device = mx_device_of(mx_module_parameter(m, 0, NULL));
  }
  mx_scope *scope = mx_scope_begin();
  if (!scope) return mx_last_status();
  mx_tensor *x = mx_zeros(input_shape, dtype, device);
  mx_status status = x ? mx_module_summary_input(m, x, f) : mx__error_prefix("mx_module_summary");
  mx_scope_end(scope);
  return status;
}
