/* The reader of the PyTorch fixture files, and the comparison with their tensors, shared by the suites that use
 * them (ops, optim, nn, rnn). */
#include "fixture_io.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *fx_read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)size + 1);
  if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
    free(buf);
    buf = NULL;
  }
  if (buf) buf[size] = '\0';
  fclose(f);
  return buf;
}

static bool parse_dtype(const char *s, mx_dtype *dtype, unsigned dtypes) {
  static const struct {
    const char *name;
    mx_dtype dtype;
  } names[] = {{"f64", MX_F64}, {"f32", MX_F32}, {"f16", MX_F16}, {"bf16", MX_BF16},
               {"i64", MX_I64}, {"i32", MX_I32}, {"u8", MX_U8},   {"bool", MX_BOOL}};
  for (size_t k = 0; k < sizeof names / sizeof *names; k++)
    if (!strcmp(s, names[k].name)) return *dtype = names[k].dtype, (dtypes & FX_DTYPE(names[k].dtype)) != 0;
  return false;
}

bool fx_parse_tensor(char **save, fx_tensor *t, unsigned dtypes) {
  char *tok = strtok_r(NULL, " ", save);
  if (!tok || !parse_dtype(tok, &t->dtype, dtypes)) return false;
  if (!(tok = strtok_r(NULL, " ", save))) return false;
  t->shape.ndim = atoi(tok);
  if (t->shape.ndim < 0 || t->shape.ndim > MX_MAX_DIMS) return false;
  t->n = 1;
  for (int d = 0; d < t->shape.ndim; d++) {
    if (!(tok = strtok_r(NULL, " ", save))) return false;
    t->shape.d[d] = atoll(tok);
    t->n *= t->shape.d[d];
  }
  t->v = malloc(sizeof(double) * (size_t)(t->n ? t->n : 1));
  for (int64_t k = 0; k < t->n; k++) {
    if (!(tok = strtok_r(NULL, " ", save))) return false;
    t->v[k] = strtod(tok, NULL);
  }
  return true;
}

int fx_count_cases(const char *path) {
  char *buf = fx_read_file(path);
  if (!buf) return -1;
  int n = 0;
  for (char *p = buf; (p = strstr(p, "case ")); p += 5) n += p == buf || p[-1] == '\n';
  free(buf);
  return n;
}

bool fx_load_case(const char *path, int k, void *c, bool (*header)(void *c, const char *line),
                  bool (*body)(void *c, char *line)) {
  char *buf = fx_read_file(path);
  if (!buf) return false;
  int index = -1;
  bool ok = false, inside = false;
  char *save = NULL;
  for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (!inside) {
      if (!strncmp(line, "case ", 5) && ++index == k && !(inside = header(c, line))) break;
    } else if (!strcmp(line, "end")) {
      ok = true;
      break;
    } else if (!body(c, line)) {
      break;
    }
  }
  free(buf);
  return ok;
}

int *fx_case_ids(int n, size_t *count) {
  int *ids = cr_malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  ids[0] = -1;
  for (int k = 0; k < n; k++) ids[k] = k;
  *count = n > 0 ? (size_t)n : 1;
  return ids;
}

mx_tensor *fx_to_mx(const fx_tensor *t) {
  size_t size = mx_dtype_size(t->dtype);
  char *data = malloc(size * (size_t)(t->n ? t->n : 1));
  for (int64_t k = 0; k < t->n; k++) {
    double v = t->v[k];
    void *p = data + (size_t)k * size;
    switch (t->dtype) {
    case MX_F64: *(double *)p = v; break;
    case MX_F32: *(float *)p = (float)v; break;
    case MX_F16: *(uint16_t *)p = mx_f32_to_f16((float)v); break;
    case MX_BF16: *(uint16_t *)p = mx_f32_to_bf16((float)v); break;
    case MX_I64: *(int64_t *)p = (int64_t)v; break;
    case MX_I32: *(int32_t *)p = (int32_t)v; break;
    case MX_U8: *(uint8_t *)p = (uint8_t)v; break;
    case MX_BOOL: *(bool *)p = v != 0; break;
    default: break;
    }
  }
  mx_tensor *out = mx_from_data(data, t->shape, t->dtype, MX_CPU);
  free(data);
  return out;
}

static char *shape_str(mx_shape s, char *buf, size_t size) {
  size_t n = (size_t)snprintf(buf, size, "(");
  for (int d = 0; d < s.ndim && n < size; d++)
    n += (size_t)snprintf(buf + n, size - n, d ? ", %lld" : "%lld", (long long)s.d[d]);
  if (n < size) snprintf(buf + n, size - n, ")");
  return buf;
}

void fx_expect_matches(const char *id, const char *what, const mx_tensor *got, const fx_tensor *want, double rtol) {
  cr_assert_not_null(got, "%s: %s is NULL: %s", id, what, mx_last_error());
  cr_expect_eq(mx_dtype_of(got), want->dtype, "%s: %s dtype %s, PyTorch %s", id, what, mx_dtype_name(mx_dtype_of(got)),
               mx_dtype_name(want->dtype));
  mx_shape shape = mx_shape_get(got);
  bool same_shape = shape.ndim == want->shape.ndim;
  for (int d = 0; same_shape && d < shape.ndim; d++) same_shape = shape.d[d] == want->shape.d[d];
  char a[96], b[96];
  cr_assert(same_shape, "%s: %s shape %s, PyTorch %s", id, what, shape_str(shape, a, sizeof a),
            shape_str(want->shape, b, sizeof b));
  mx_tensor *as_f64 = mx_to_dtype(got, MX_F64);
  cr_assert_not_null(as_f64, "%s", mx_last_error());
  double *v = malloc(sizeof(double) * (size_t)(want->n ? want->n : 1));
  cr_assert_eq(mx_to_host(as_f64, v, sizeof(double) * (size_t)want->n), MX_OK, "%s", mx_last_error());
  double scale = 0;
  for (int64_t k = 0; k < want->n; k++)
    if (isfinite(want->v[k]) && fabs(want->v[k]) > scale) scale = fabs(want->v[k]);
  int wrong = 0;
  for (int64_t k = 0; k < want->n; k++) {
    double e = want->v[k], g = v[k];
    bool ok;
    if (isnan(e) || isnan(g)) ok = isnan(e) && isnan(g);
    else if (isinf(e) || isinf(g)) ok = e == g;
    else ok = fabs(g - e) <= rtol * (fabs(e) + 1e-3 * scale);
    if (!ok && wrong++ < 4)
      cr_expect(ok, "%s: %s[%lld] is %.17g, PyTorch %.17g (difference %.3g)", id, what, (long long)k, g, e,
                fabs(g - e));
  }
  cr_expect_eq(wrong, 0, "%s: %s: %d of %lld values differ from PyTorch", id, what, wrong, (long long)want->n);
  free(v);
}

void fx_expect_close_to_f64(const char *id, const char *what, const mx_tensor *got, const fx_tensor *want, double rtol) {
  cr_assert_not_null(got, "%s: %s is NULL: %s", id, what, mx_last_error());
  cr_assert_eq(mx_numel(got), want->n, "%s: %s has %lld values, PyTorch %lld", id, what, (long long)mx_numel(got),
               (long long)want->n);
  double *v = malloc(sizeof(double) * (size_t)(want->n ? want->n : 1)), scale = 0;
  cr_assert_eq(mx_to_host(mx_to_dtype(got, MX_F64), v, sizeof(double) * (size_t)want->n), MX_OK, "%s",
               mx_last_error());
  for (int64_t j = 0; j < want->n; j++) scale = fmax(scale, fabs(want->v[j]));
  int bad = 0;
  for (int64_t j = 0; j < want->n; j++)
    if (!(fabs(v[j] - want->v[j]) <= rtol * (fabs(want->v[j]) + scale)) && bad++ < 4)
      cr_expect(false, "%s: float32 %s[%lld] is %.9g, PyTorch (float64) %.17g", id, what, (long long)j, v[j],
                want->v[j]);
  free(v);
}

const char *fx_arg(const char *args, const char *key) {
  size_t n = strlen(key);
  for (const char *p = args; (p = strstr(p, key)); p += n)
    if ((p == args || p[-1] == ' ') && p[n] == '=') return p + n + 1;
  return NULL;
}

double fx_rtol(mx_dtype dtype) {
  switch (dtype) {
  case MX_F64: return 1e-10;
  case MX_F32: return 1e-5;
  case MX_F16: return 1.0 / 4096;
  case MX_BF16: return 1.0 / 512;
  default: return 0;
  }
}
