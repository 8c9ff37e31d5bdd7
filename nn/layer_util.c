/* What the layer constructors share: registering fresh tensors, the default fan-in init, argument lists, reprs. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_internal.h"

mx_tensor *mx__add_parameter(mx_module *m, const char *name, mx_shape shape) {
  mx_tensor *t = mx_empty(shape, MX_F32, MX_CPU);
  if (!t) return NULL;
  return mx_module_add_parameter(m, name, t) == MX_OK ? t : NULL;
}

mx_tensor *mx__add_buffer(mx_module *m, const char *name, mx_tensor *t) {
  return t && mx_module_add_buffer(m, name, t) == MX_OK ? t : NULL;
}

mx_status mx__init_fan_in_uniform(mx_tensor *w, mx_tensor *b, mx_generator *gen) {
  int64_t fan_in;
  mx_status status = mx_init_kaiming_uniform_(w, sqrt(5.0), MX_FAN_IN, MX_GAIN_LEAKY_RELU, gen);
  if (status != MX_OK || !b) return status;
  if ((status = mx_init_fans(w, &fan_in, NULL)) != MX_OK) return status;
  double bound = fan_in > 0 ? 1 / sqrt((double)fan_in) : 0;
  return mx_init_uniform_(b, -bound, bound, gen);
}

void mx__append(char *buf, size_t size, const char *fmt, ...) {
  size_t len = strlen(buf);
  if (len + 1 >= size) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + len, size - len, fmt, ap);
  va_end(ap);
}

void mx__float_repr(char *buf, size_t size, double v) {
  if (isnan(v) || isinf(v)) {
    snprintf(buf, size, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
    return;
  }
  char digits[40];
  int precision = 1;
  for (; precision < 17; precision++) { /* the shortest digits that read back as v */
    snprintf(digits, sizeof digits, "%.*e", precision - 1, v);
    if (strtod(digits, NULL) == v) break;
  }
  snprintf(digits, sizeof digits, "%.*e", precision - 1, v);
  int exponent = atoi(strchr(digits, 'e') + 1);
  if (exponent < -4 || exponent >= 16) { /* Python's repr switches to exponents there */
    snprintf(buf, size, "%s", digits);
    return;
  }
  int decimals = precision - 1 - exponent;
  snprintf(buf, size, "%.*f%s", decimals > 0 ? decimals : 0, v, decimals > 0 ? "" : ".0");
}

const char *mx__bool_repr(bool b) { return b ? "True" : "False"; }

void mx__list_repr(char *buf, size_t size, mx_shape s, bool always_tuple) {
  buf[0] = '\0';
  if (s.ndim == 1 && !always_tuple) {
    mx__append(buf, size, "%lld", (long long)s.d[0]);
    return;
  }
  mx__append(buf, size, "(");
  for (int i = 0; i < s.ndim; i++) mx__append(buf, size, "%s%lld", i ? ", " : "", (long long)s.d[i]);
  mx__append(buf, size, "%s)", s.ndim == 1 ? "," : "");
}

mx_status mx__check_list(const char *fn, const char *what, mx_shape s, int spatial, int64_t min, bool empty_ok) {
  if (s.ndim == 0 && empty_ok) return MX_OK;
  if (s.ndim != 1 && s.ndim != spatial)
    return mx__error(MX_INVALID_ARGUMENT, "%s: %s needs 1 or %d values, got %d", fn, what, spatial, s.ndim);
  for (int i = 0; i < s.ndim; i++)
    if (s.d[i] < min)
      return mx__error(MX_INVALID_ARGUMENT, "%s: %s must be >= %lld, got %lld", fn, what, (long long)min,
                       (long long)s.d[i]);
  return MX_OK;
}

mx_shape mx__expand_list(mx_shape s, int spatial, int64_t def) {
  mx_shape out = {spatial, {0}};
  for (int i = 0; i < spatial; i++) out.d[i] = s.ndim == 0 ? def : s.d[s.ndim == 1 ? 0 : i];
  return out;
}
