/* The reader of the PyTorch fixture files shared by the op, loss, composite and grid_sample tests. */
#include "fixture_io.h"

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
