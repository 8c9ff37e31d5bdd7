/* Writes the public functions of the elementwise rows of ops/ops.def at build time: their prototypes, each with its
 * row's doc line (elementwise_api.h, installed beside ops/ops.h), and their definitions (elementwise_api.c), so a row
 * is the whole op. Usage: gen_elementwise_api HEADER.h SOURCE.c */
#include <stdio.h>
#include <string.h>

typedef struct {
  const char *enum_name, *name, *policy, *params, *doc;
  int arity; /* tensor inputs: 1 (x) or 2 (a, b) */
} row;

static const row rows[] = {
#define MX_UNARY(E, name, policy, save, grad, domain, params, doc) {#E, #name, #policy, params, doc, 1},
#define MX_BINARY(E, name, policy, save, grad, domain_a, domain_b, params, doc) {#E, #name, #policy, params, doc, 2},
#define MX_OP(...)
#include "ops/ops.def"
#undef MX_UNARY
#undef MX_BINARY
#undef MX_OP
};

/* One parameter of a row's "params": its name, and the value it is fixed to ("" when the caller passes it). */
typedef struct {
  char name[64], fixed[64];
} param;

/* Splits "beta, threshold" or "alpha = 1" into params; returns how many. */
static int parse_params(const char *text, param *out, int max) {
  int n = 0;
  while (*text && n < max) {
    size_t len = strcspn(text, ",");
    char item[128];
    snprintf(item, sizeof item, "%.*s", (int)len, text);
    param *p = &out[n++];
    p->fixed[0] = '\0';
    if (sscanf(item, " %63[A-Za-z0-9_] = %63s", p->name, p->fixed) < 1) return -1;
    text += len;
    if (*text == ',') text++;
  }
  return n;
}

static const char *policy_words(const char *policy) {
  if (!strcmp(policy, "LOWER")) return "the autocast dtype";
  if (!strcmp(policy, "FP32")) return "float32";
  if (!strcmp(policy, "PROMOTE")) return "the widest input dtype";
  return NULL;
}

/* "mx_tensor *mx_<name>(const mx_tensor *x, double p...)" */
static void signature(FILE *f, const row *r, const param *p, int n) {
  const char *tensors = r->arity == 1 ? "const mx_tensor *x" : "const mx_tensor *a, const mx_tensor *b";
  fprintf(f, "mx_tensor *mx_%s(%s", r->name, tensors);
  for (int i = 0; i < n; i++)
    if (!p[i].fixed[0]) fprintf(f, ", double %s", p[i].name);
  fputc(')', f);
}

/* The doc line as a comment, wrapped at 110 columns. */
static void comment(FILE *f, const row *r) {
  char text[1024];
  const char *cast = policy_words(r->policy);
  if (cast)
    snprintf(text, sizeof text, "%s. Autocast computes it in %s.", r->doc, cast);
  else
    snprintf(text, sizeof text, "%s.", r->doc);
  const char *word = text;
  int column = fprintf(f, "/*");
  while (*word) {
    size_t len = strcspn(word, " ");
    if (column + 1 + (int)len > 110) {
      fputs("\n *", f);
      column = 2;
    }
    column += fprintf(f, " %.*s", (int)len, word);
    word += len;
    while (*word == ' ') word++;
  }
  fputs(" */\n", f);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s HEADER.h SOURCE.c\n", argv[0]);
    return 2;
  }
  FILE *h = fopen(argv[1], "w"), *c = fopen(argv[2], "w");
  if (!h || !c) {
    perror(h ? argv[2] : argv[1]);
    return 1;
  }
  fputs("/* The elementwise ops: one function per MX_UNARY and MX_BINARY row of ops/ops.def, each with the row's doc\n"
        " * line. Written by ops/gen_elementwise_api.c when the library is built (edit the rows, not this file);\n"
        " * included by ops/ops.h. The unary ones take x, the binary ones a and b, which broadcast and promote like\n"
        " * mx_add. */\n"
        "#ifndef MX_OPS_ELEMENTWISE_API_H\n#define MX_OPS_ELEMENTWISE_API_H\n\n#include \"tensor/tensor.h\"\n\n"
        "MX_API_BEGIN\n",
        h);
  fputs("/* The public functions of the elementwise rows of ops/ops.def (written by ops/gen_elementwise_api.c). */\n"
        "#include \"ops/op_table.h\"\n",
        c);
  /* the unary rows, then the binary ones, wherever in the table they are (new rows go at its end) */
  for (int arity = 1; arity <= 2; arity++) {
    fprintf(h, "\n/* --- elementwise %s --- */\n", arity == 1 ? "unary" : "binary, broadcasting");
    for (size_t k = 0; k < sizeof rows / sizeof *rows; k++) {
      const row *r = &rows[k];
      if (r->arity != arity) continue;
      param p[4];
      int n = parse_params(r->params, p, 4);
      if (n < 0) {
        fprintf(stderr, "ops/ops.def: %s: cannot read the params \"%s\"\n", r->name, r->params);
        return 1;
      }
      comment(h, r);
      signature(h, r, p, n);
      fputs(";\n", h);

      fputc('\n', c);
      signature(c, r, p, n);
      fprintf(c, " {\n  return mx__call%d(MX_OP_%s, %s, ", r->arity, r->enum_name, r->arity == 1 ? "x" : "a, b");
      if (n == 0) {
        fputs("NULL);\n}\n", c);
        continue;
      }
      fputs("&(mx__args){.f = {", c);
      for (int i = 0; i < n; i++) fprintf(c, "%s%s", i ? ", " : "", p[i].fixed[0] ? p[i].fixed : p[i].name);
      fputs("}});\n}\n", c);
    }
  }
  fputs("\nMX_API_END\n\n#endif\n", h);
  return fclose(h) == 0 && fclose(c) == 0 ? 0 : 1;
}
