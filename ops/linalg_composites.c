/* Products of several tensors as composites: chain_matmul and multi_dot
 * (the cheapest order by the matrix-chain dynamic program), einsum (one
 * bmm per pair of operands, left to right), tensordot and cross. */
#include <stdlib.h>
#include <string.h>

#include "ops/op_table.h"

static mx_status out_of_memory(const char *op) { return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op); }

/* The dispatcher takes a list: the given tensors in order. */
static mx_tensor *call_list(mx_op op, int n, mx_tensor *const *list, const mx__args *args) {
  if (n < 0 || (n > 0 && !list)) {
    mx__error(MX_INVALID_ARGUMENT, "mx_%s: %d tensors given", mx__ops[op].name, n);
    return NULL;
  }
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  return mx__dispatch(op, n, (const mx_tensor *const *)list, args, out) == MX_OK ? out[0] : NULL;
}

/* --- chain_matmul and multi_dot ------------------------------------------------------------- */

/* mats[i..j] multiplied in the order split[][] chose. */
static mx_tensor *multiply_chain(mx_tensor *const *mats, const int *split, int n, int i, int j) {
  if (i == j) return mats[i];
  int k = split[i * n + j];
  return mx_mm(multiply_chain(mats, split, n, i, k), multiply_chain(mats, split, n, k + 1, j));
}

/* The product of the chain; mats[i] is (p[i], p[i+1]). The order is
 * PyTorch's: for three matrices (ab)c unless a(bc) is strictly cheaper; for
 * more, the classic O(n^3) program, the first split of the least cost. */
static mx_tensor *chain_product(const char *op, mx_tensor *const *mats, const int64_t *p, int n) {
  if (n == 1) return mx_reshape(mats[0], mx_shape_get(mats[0]));
  if (n == 2) return mx_mm(mats[0], mats[1]);
  if (n == 3) {
    double a = (double)p[0], b = (double)p[1], c = (double)p[2], d = (double)p[3];
    double left = a * c * (b + d), right = b * d * (a + c);
    return left > right ? mx_mm(mats[0], mx_mm(mats[1], mats[2])) : mx_mm(mx_mm(mats[0], mats[1]), mats[2]);
  }
  double *cost = calloc((size_t)n * (size_t)n, sizeof *cost);
  int *split = calloc((size_t)n * (size_t)n, sizeof *split);
  if (!cost || !split) {
    free(cost);
    free(split);
    out_of_memory(op);
    return NULL;
  }
  for (int len = 1; len < n; len++)
    for (int i = 0; i + len < n; i++) {
      int j = i + len;
      cost[i * n + j] = -1;
      for (int k = i; k < j; k++) {
        double q = cost[i * n + k] + cost[(k + 1) * n + j] + (double)p[i] * (double)p[k + 1] * (double)p[j + 1];
        if (cost[i * n + j] < 0 || q < cost[i * n + j]) cost[i * n + j] = q, split[i * n + j] = k;
      }
    }
  mx_tensor *out = multiply_chain(mats, split, n, 0, n - 1);
  free(cost);
  free(split);
  return out;
}

/* multi_dot: the first and last tensors may be vectors (a row and a
 * column); chain_matmul takes matrices only. */
static mx_status chain_forward(mx__call *c, const char *op, bool vectors) {
  int n = c->n_in;
  if (n < (vectors ? 2 : 1))
    return mx__error(MX_INVALID_ARGUMENT, "%s: expected at least %d tensors, got %d", op, vectors ? 2 : 1, n);
  char x[MX__DIMS_STR], y[MX__DIMS_STR];
  for (int i = 0; i < n; i++) {
    mx_tensor *t = c->in[i];
    bool edge = vectors && (i == 0 || i == n - 1);
    if (t->ndim != 2 && !(edge && t->ndim == 1))
      return mx__error(MX_SHAPE_ERROR, "%s: tensor %d must be %s, got shape %s", op, i,
                       edge ? "1-d or 2-d" : "2-d", mx__dims_str(x, t->ndim, t->shape));
    if (t->dtype != c->in[0]->dtype)
      return mx__error(MX_DTYPE_ERROR, "%s: expected one dtype, got %s (tensor 0) and %s (tensor %d)", op,
                       mx_dtype_name(c->in[0]->dtype), mx_dtype_name(t->dtype), i);
  }
  mx_tensor **mats = malloc(sizeof *mats * (size_t)n);
  int64_t *p = malloc(sizeof *p * (size_t)(n + 1));
  if (!mats || !p) {
    free(mats);
    free(p);
    return out_of_memory(op);
  }
  bool row = c->in[0]->ndim == 1, column = n > 1 && c->in[n - 1]->ndim == 1;
  mx_status status = MX_OK;
  for (int i = 0; i < n && status == MX_OK; i++) {
    mx_tensor *t = c->in[i];
    mats[i] = t->ndim == 2 ? t : mx_unsqueeze(t, i == 0 ? 0 : 1);
    if (!mats[i]) status = mx_last_status();
    else p[i] = mats[i]->shape[0];
    if (status == MX_OK && i > 0 && mats[i - 1]->shape[1] != mats[i]->shape[0])
      status = mx__error(MX_SHAPE_ERROR, "%s: tensors %d and %d cannot be multiplied: shapes %s and %s (%lld != %lld)",
                         op, i - 1, i, mx__dims_str(x, c->in[i - 1]->ndim, c->in[i - 1]->shape),
                         mx__dims_str(y, t->ndim, t->shape), (long long)mats[i - 1]->shape[1],
                         (long long)mats[i]->shape[0]);
  }
  if (status == MX_OK) {
    p[n] = mats[n - 1]->shape[1];
    mx_tensor *out = chain_product(op, mats, p, n);
    if (out && column) out = mx_select(out, 1, 0);
    if (out && row) out = mx_select(out, 0, 0);
    status = OUT0(c, out);
  }
  free(mats);
  free(p);
  return status;
}

mx_status mx__fwd_chain_matmul(mx__call *c) { return chain_forward(c, "mx_chain_matmul", false); }
mx_status mx__fwd_multi_dot(mx__call *c) { return chain_forward(c, "mx_multi_dot", true); }

/* --- einsum ---------------------------------------------------------------------------------- */

/* Labels: 'A'-'Z' are 0-25, 'a'-'z' 26-51, the dims under '...' 52 on
 * (right-aligned across operands, so they broadcast like NumPy's). */
enum { N_LETTERS = 52, N_LABELS = N_LETTERS + MX_MAX_DIMS, ELLIPSIS = -1, MAX_TERM = MX_MAX_DIMS + 1 };

typedef struct {
  int ndim;
  int label[MX_MAX_DIMS];
} labelled;

static int letter_label(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
  return -2;
}

static char label_char(int label) { return (char)(label < 26 ? 'A' + label : 'a' + label - 26); }

/* The subscripts of one term: letters and at most one ELLIPSIS. */
static mx_status parse_term(const char *s, size_t len, int operand, int *out, int *count, bool *ellipsis) {
  *count = 0;
  *ellipsis = false;
  for (size_t k = 0; k < len; k++) {
    char ch = s[k];
    if (ch == '.') {
      if (k + 2 >= len || s[k + 1] != '.' || s[k + 2] != '.' || *ellipsis)
        return mx__error(MX_INVALID_ARGUMENT, "mx_einsum: '.' must be part of an ellipsis '...', at most one per term");
      *ellipsis = true;
      out[(*count)++] = ELLIPSIS;
      k += 2;
      continue;
    }
    int label = letter_label(ch);
    if (label < 0)
      return mx__error(MX_INVALID_ARGUMENT, "mx_einsum: invalid subscript '%c' (subscripts are letters)", ch);
    if (*count >= MAX_TERM)
      return operand >= 0 ? mx__error(MX_SHAPE_ERROR, "mx_einsum: operand %d has more than %d subscripts", operand, MX_MAX_DIMS)
                          : mx__error(MX_SHAPE_ERROR, "mx_einsum: the output has more than %d subscripts", MX_MAX_DIMS);
    out[(*count)++] = label;
  }
  return MX_OK;
}

/* The diagonal of dims p < q (equal sizes) as t's last dim. */
static mx_tensor *diagonal(const mx_tensor *t, int p, int q) {
  mx_shape perm = {0}, shape = {0};
  for (int d = 0; d < t->ndim; d++)
    if (d != p && d != q) perm.d[perm.ndim++] = d, shape.d[shape.ndim++] = t->shape[d];
  perm.d[perm.ndim++] = p;
  perm.d[perm.ndim++] = q;
  int64_t n = t->shape[p];
  shape.d[shape.ndim++] = n * n;
  mx_tensor *flat = mx_reshape(mx_permute(t, perm), shape);
  return mx_slice(flat, -1, 0, n * n, n + 1);
}

/* The state of one einsum call. */
typedef struct {
  int n;
  labelled *lab;       /* per operand, after '...' is expanded */
  int64_t size[N_LABELS];
  bool in_output[N_LABELS];
  labelled output;
  int n_ellipsis;      /* dims under '...' in the output and inputs */
} einsum_plan;

/* Parses the equation against the operands' shapes. */
static mx_status plan_einsum(const char *equation, int n, mx_tensor *const *ops, einsum_plan *plan) {
  size_t len = strlen(equation);
  char *eq = malloc(len + 1);
  if (!eq) return out_of_memory("mx_einsum");
  size_t m = 0;
  for (size_t k = 0; k < len; k++)
    if (equation[k] != ' ') eq[m++] = equation[k];
  eq[m] = '\0';
  char *arrow = strstr(eq, "->");
  char *dash = strchr(eq, '-');
  mx_status status = MX_OK;
  if (dash && dash != arrow) status = mx__error(MX_INVALID_ARGUMENT, "mx_einsum: '-' must be part of '->'");
  size_t lhs_len = arrow ? (size_t)(arrow - eq) : m;
  int terms = 1;
  for (size_t k = 0; k < lhs_len; k++) terms += eq[k] == ',';
  if (status == MX_OK && terms != n)
    status = mx__error(MX_INVALID_ARGUMENT, "mx_einsum: the equation '%s' has %d operand%s but %d tensor%s given",
                       equation, terms, terms == 1 ? "" : "s", n, n == 1 ? " was" : "s were");
  int raw[MAX_TERM], count;
  bool ellipsis;
  int seen_in[N_LABELS] = {0}; /* which operand (+1) gave a label its size */
  int occurrences[N_LETTERS] = {0};
  plan->n_ellipsis = 0;
  const char *term = eq;
  for (int i = 0; i < n && status == MX_OK; i++) {
    size_t term_len = strcspn(term, ",-");
    if (term + term_len > eq + lhs_len) term_len = (size_t)(eq + lhs_len - term);
    status = parse_term(term, term_len, i, raw, &count, &ellipsis);
    if (status != MX_OK) break;
    int named = count - ellipsis, nd = ops[i]->ndim;
    if (nd < named || (!ellipsis && nd != named)) {
      status = mx__error(MX_SHAPE_ERROR, "mx_einsum: operand %d has %d dims but its subscripts '%.*s' name %s%d", i, nd,
                         (int)term_len, term, ellipsis ? "at least " : "", named);
      break;
    }
    int under = nd - named; /* dims under '...' */
    if (under > plan->n_ellipsis) plan->n_ellipsis = under;
    labelled *l = &plan->lab[i];
    l->ndim = 0;
    for (int k = 0; k < count; k++) {
      if (raw[k] != ELLIPSIS) {
        l->label[l->ndim++] = raw[k];
        occurrences[raw[k]]++;
      } else {
        for (int e = 0; e < under; e++) l->label[l->ndim++] = -100 - (under - e); /* fixed below */
      }
    }
    term += term_len + 1;
  }
  /* the dims under '...' right-aligned: the last is label N_LETTERS + n_ellipsis - 1 */
  for (int i = 0; i < n && status == MX_OK; i++)
    for (int d = 0; d < plan->lab[i].ndim; d++)
      if (plan->lab[i].label[d] <= -100) plan->lab[i].label[d] = N_LETTERS + plan->n_ellipsis + (plan->lab[i].label[d] + 100);
  /* sizes: a repeated subscript within an operand must agree exactly, across operands 1 broadcasts */
  for (int l = 0; l < N_LABELS; l++) plan->size[l] = -1;
  for (int i = 0; i < n && status == MX_OK; i++) {
    int64_t here[N_LABELS];
    for (int l = 0; l < N_LABELS; l++) here[l] = -1;
    for (int d = 0; d < plan->lab[i].ndim && status == MX_OK; d++) {
      int l = plan->lab[i].label[d];
      int64_t s = ops[i]->shape[d];
      if (here[l] >= 0 && here[l] != s) {
        status = mx__error(MX_SHAPE_ERROR, "mx_einsum: subscript '%c' is repeated in operand %d with sizes %lld and %lld",
                           label_char(l), i, (long long)here[l], (long long)s);
        break;
      }
      here[l] = s;
      if (plan->size[l] < 0 || plan->size[l] == 1) {
        if (plan->size[l] != s) seen_in[l] = i + 1;
        plan->size[l] = s;
      } else if (s != 1 && s != plan->size[l]) {
        if (l < N_LETTERS)
          status = mx__error(MX_SHAPE_ERROR, "mx_einsum: subscript '%c' has size %lld in operand %d but %lld in operand %d",
                             label_char(l), (long long)s, i, (long long)plan->size[l], seen_in[l] - 1);
        else
          status = mx__error(MX_SHAPE_ERROR, "mx_einsum: the dims under '...' do not broadcast: size %lld in operand %d, "
                             "%lld in operand %d", (long long)s, i, (long long)plan->size[l], seen_in[l] - 1);
      }
    }
  }
  /* the output: as written, or '...' then the subscripts used once, in order */
  memset(plan->in_output, 0, sizeof plan->in_output);
  labelled *out = &plan->output;
  out->ndim = 0;
  if (status == MX_OK && arrow) {
    status = parse_term(arrow + 2, strlen(arrow + 2), -1, raw, &count, &ellipsis);
    for (int k = 0; k < count && status == MX_OK; k++) {
      int l = raw[k];
      if (l == ELLIPSIS) {
        for (int e = 0; e < plan->n_ellipsis; e++) out->label[out->ndim++] = N_LETTERS + e;
        continue;
      }
      if (!occurrences[l])
        status = mx__error(MX_INVALID_ARGUMENT, "mx_einsum: output subscript '%c' does not appear in the inputs",
                           label_char(l));
      else if (plan->in_output[l])
        status = mx__error(MX_INVALID_ARGUMENT, "mx_einsum: output subscript '%c' appears more than once", label_char(l));
      else if (out->ndim >= MX_MAX_DIMS)
        status = mx__error(MX_SHAPE_ERROR, "mx_einsum: the output would have more than %d dims", MX_MAX_DIMS);
      else
        out->label[out->ndim++] = l;
      plan->in_output[l] = true;
    }
  } else if (status == MX_OK) {
    for (int e = 0; e < plan->n_ellipsis; e++) out->label[out->ndim++] = N_LETTERS + e;
    for (int l = 0; l < N_LETTERS && status == MX_OK; l++) {
      if (occurrences[l] != 1) continue;
      if (out->ndim >= MX_MAX_DIMS)
        status = mx__error(MX_SHAPE_ERROR, "mx_einsum: the output would have more than %d dims", MX_MAX_DIMS);
      else
        out->label[out->ndim++] = l;
    }
  }
  for (int k = 0; k < out->ndim; k++) plan->in_output[out->label[k]] = true;
  free(eq);
  return status;
}

static bool has_label(const labelled *l, int label) {
  for (int d = 0; d < l->ndim; d++)
    if (l->label[d] == label) return true;
  return false;
}

/* Drops dims d (a mask) from t by reshaping (they have size 1) or summing. */
static mx_tensor *drop_dims(mx_tensor *t, labelled *l, uint32_t mask, bool sum) {
  if (!mask || !t) return t;
  mx_shape kept = {0}, dims = {0};
  labelled left = {0};
  for (int d = 0; d < l->ndim; d++) {
    if (mask & (1u << d)) {
      dims.d[dims.ndim++] = d;
    } else {
      kept.d[kept.ndim++] = t->shape[d];
      left.label[left.ndim++] = l->label[d];
    }
  }
  *l = left;
  return sum ? mx_sum(t, dims, false) : mx_reshape(t, kept);
}

/* t with its dims permuted to the labels in order. */
static mx_tensor *arrange(mx_tensor *t, const labelled *have, const int *order, int n) {
  mx_shape perm = {n, {0}};
  bool identity = true;
  for (int k = 0; k < n; k++) {
    for (int d = 0; d < have->ndim; d++)
      if (have->label[d] == order[k]) perm.d[k] = d;
    identity &= perm.d[k] == k;
  }
  return identity ? t : mx_permute(t, perm);
}

static int64_t product(const einsum_plan *plan, const int *labels, int n) {
  int64_t p = 1;
  for (int k = 0; k < n; k++) p *= plan->size[labels[k]];
  return p;
}

/* a (labels la) times b (labels lb), keeping the labels keep[] says are
 * still needed: batch (both, kept), contracted (both, not kept), a's own, b's own. */
static mx_tensor *contract_pair(const einsum_plan *plan, mx_tensor *a, labelled *la, mx_tensor *b, const labelled *lb,
                                const bool *keep) {
  int batch[MX_MAX_DIMS], sum[MX_MAX_DIMS], own_a[MX_MAX_DIMS], own_b[MX_MAX_DIMS];
  int nb = 0, ns = 0, na = 0, no = 0;
  for (int d = 0; d < la->ndim; d++) {
    int l = la->label[d];
    if (!has_label(lb, l)) own_a[na++] = l;
    else if (keep[l]) batch[nb++] = l;
    else sum[ns++] = l;
  }
  for (int d = 0; d < lb->ndim; d++)
    if (!has_label(la, lb->label[d])) own_b[no++] = lb->label[d];
  if (nb + na + no > MX_MAX_DIMS) {
    mx__error(MX_SHAPE_ERROR, "mx_einsum: an intermediate result would have %d dims (at most %d)", nb + na + no,
              MX_MAX_DIMS);
    return NULL;
  }
  int order_a[MX_MAX_DIMS], order_b[MX_MAX_DIMS];
  memcpy(order_a, batch, sizeof(int) * (size_t)nb);
  memcpy(order_a + nb, own_a, sizeof(int) * (size_t)na);
  memcpy(order_a + nb + na, sum, sizeof(int) * (size_t)ns);
  memcpy(order_b, batch, sizeof(int) * (size_t)nb);
  memcpy(order_b + nb, sum, sizeof(int) * (size_t)ns);
  memcpy(order_b + nb + ns, own_b, sizeof(int) * (size_t)no);
  int64_t B = product(plan, batch, nb), M = product(plan, own_a, na), K = product(plan, sum, ns),
          N = product(plan, own_b, no);
  mx_tensor *a3 = mx_reshape(arrange(a, la, order_a, la->ndim), MX_SHAPE(B, M, K));
  mx_tensor *b3 = mx_reshape(arrange(b, lb, order_b, lb->ndim), MX_SHAPE(B, K, N));
  labelled out = {0};
  mx_shape shape = {0};
  for (int k = 0; k < nb; k++) out.label[out.ndim++] = batch[k];
  for (int k = 0; k < na; k++) out.label[out.ndim++] = own_a[k];
  for (int k = 0; k < no; k++) out.label[out.ndim++] = own_b[k];
  for (int k = 0; k < out.ndim; k++) shape.d[shape.ndim++] = plan->size[out.label[k]];
  *la = out;
  return mx_reshape(mx_bmm(a3, b3), shape);
}

mx_status mx__fwd_einsum(mx__call *c) {
  const char *equation = c->args->ptr;
  int n = c->n_in;
  if (!equation) return mx__error(MX_NULL_INPUT, "mx_einsum: argument 'equation' is NULL");
  if (n < 1) return mx__error(MX_INVALID_ARGUMENT, "mx_einsum: no operands given");
  einsum_plan plan = {.n = n, .lab = calloc((size_t)n, sizeof(labelled))};
  mx_tensor **t = calloc((size_t)n, sizeof *t);
  if (!plan.lab || !t) {
    free(plan.lab);
    free(t);
    return out_of_memory("mx_einsum");
  }
  mx_status status = plan_einsum(equation, n, c->in, &plan);
  /* each operand alone: diagonals of repeated subscripts, size-1 dims that broadcast dropped */
  for (int i = 0; i < n && status == MX_OK; i++) {
    labelled *l = &plan.lab[i];
    t[i] = c->in[i];
    for (bool again = true; again && t[i];) {
      again = false;
      for (int p = 0; p < l->ndim && !again; p++)
        for (int q = p + 1; q < l->ndim && !again; q++) {
          if (l->label[p] != l->label[q]) continue;
          int label = l->label[p];
          t[i] = diagonal(t[i], p, q);
          labelled left = {0};
          for (int d = 0; d < l->ndim; d++)
            if (d != p && d != q) left.label[left.ndim++] = l->label[d];
          left.label[left.ndim++] = label;
          *l = left;
          again = true;
        }
    }
    uint32_t broadcast = 0;
    for (int d = 0; t[i] && d < l->ndim; d++)
      if (t[i]->shape[d] == 1 && plan.size[l->label[d]] != 1) broadcast |= 1u << d;
    t[i] = drop_dims(t[i], l, broadcast, false);
    if (!t[i]) status = mx_last_status();
  }
  /* subscripts in one operand only and not in the output are summed at once */
  for (int i = 0; i < n && status == MX_OK; i++) {
    uint32_t own = 0;
    for (int d = 0; d < plan.lab[i].ndim; d++) {
      int l = plan.lab[i].label[d];
      bool elsewhere = plan.in_output[l];
      for (int j = 0; j < n && !elsewhere; j++) elsewhere = j != i && has_label(&plan.lab[j], l);
      if (!elsewhere) own |= 1u << d;
    }
    t[i] = drop_dims(t[i], &plan.lab[i], own, true);
    if (!t[i]) status = mx_last_status();
  }
  /* left to right, one bmm per pair */
  mx_tensor *acc = status == MX_OK ? t[0] : NULL;
  labelled acc_labels = plan.lab[0];
  for (int j = 1; j < n && acc; j++) {
    bool keep[N_LABELS];
    for (int l = 0; l < N_LABELS; l++) {
      keep[l] = plan.in_output[l];
      for (int k = j + 1; k < n && !keep[l]; k++) keep[l] = has_label(&plan.lab[k], l);
    }
    acc = contract_pair(&plan, acc, &acc_labels, t[j], &plan.lab[j], keep);
  }
  if (acc) {
    mx_tensor *arranged = arrange(acc, &acc_labels, plan.output.label, plan.output.ndim);
    /* a new handle even when nothing changed (the result is not an input) */
    acc = arranged == c->in[0] ? mx_reshape(arranged, mx_shape_get(arranged)) : arranged;
  }
  free(plan.lab);
  free(t);
  if (status != MX_OK) return status;
  return OUT0(c, acc);
}

/* --- tensordot and cross ----------------------------------------------------------------------- */

typedef struct {
  mx_shape a, b;
} dims_pair;

mx_status mx__fwd_tensordot(mx__call *c) {
  mx_tensor *a = c->in[0], *b = c->in[1];
  mx_shape da, db;
  if (c->args->i[1] == 0) { /* a count: a's last dims with b's first */
    int64_t count = c->args->i[0];
    if (count < 0 || count > a->ndim || count > b->ndim)
      return mx__error(MX_INVALID_ARGUMENT, "mx_tensordot: cannot contract %lld dims of tensors with %d and %d dims",
                       (long long)count, a->ndim, b->ndim);
    da = (mx_shape){(int)count, {0}}, db = da;
    for (int k = 0; k < count; k++) da.d[k] = a->ndim - count + k, db.d[k] = k;
  } else {
    const dims_pair *pair = c->args->ptr;
    da = pair->a, db = pair->b;
    if (da.ndim != db.ndim)
      return mx__error(MX_INVALID_ARGUMENT, "mx_tensordot: the dims lists have different lengths (%d and %d)", da.ndim,
                       db.ndim);
  }
  uint32_t used_a = 0, used_b = 0;
  for (int k = 0; k < da.ndim; k++) {
    int pa = mx__wrap_dim("mx_tensordot", (int)da.d[k], a->ndim);
    int pb = pa < 0 ? -1 : mx__wrap_dim("mx_tensordot", (int)db.d[k], b->ndim);
    if (pb < 0) return mx_last_status();
    if (((used_a >> pa) & 1) || ((used_b >> pb) & 1))
      return mx__error(MX_INVALID_ARGUMENT, "mx_tensordot: dim %d of %s is contracted twice", ((used_a >> pa) & 1) ? pa : pb,
                       ((used_a >> pa) & 1) ? "a" : "b");
    if (a->shape[pa] != b->shape[pb])
      return mx__error(MX_SHAPE_ERROR, "mx_tensordot: dim %d of a has size %lld but dim %d of b has size %lld", pa,
                       (long long)a->shape[pa], pb, (long long)b->shape[pb]);
    used_a |= 1u << pa, used_b |= 1u << pb;
    da.d[k] = pa, db.d[k] = pb;
  }
  /* a as (free, contracted), b as (contracted, free), one mm */
  mx_shape perm_a = {0}, perm_b = {0}, shape = {0};
  int64_t free_a = 1, free_b = 1, k_size = 1;
  for (int d = 0; d < a->ndim; d++)
    if (!((used_a >> d) & 1)) perm_a.d[perm_a.ndim++] = d, free_a *= a->shape[d];
  for (int k = 0; k < da.ndim; k++) perm_a.d[perm_a.ndim++] = da.d[k], k_size *= a->shape[da.d[k]];
  for (int k = 0; k < db.ndim; k++) perm_b.d[perm_b.ndim++] = db.d[k];
  for (int d = 0; d < b->ndim; d++)
    if (!((used_b >> d) & 1)) perm_b.d[perm_b.ndim++] = d, free_b *= b->shape[d];
  int out_ndim = (a->ndim - da.ndim) + (b->ndim - db.ndim);
  if (out_ndim > MX_MAX_DIMS)
    return mx__error(MX_SHAPE_ERROR, "mx_tensordot: the result would have %d dims (at most %d)", out_ndim, MX_MAX_DIMS);
  for (int k = 0; k < a->ndim - da.ndim; k++) shape.d[shape.ndim++] = a->shape[perm_a.d[k]];
  for (int k = db.ndim; k < b->ndim; k++) shape.d[shape.ndim++] = b->shape[perm_b.d[k]];
  mx_tensor *a2 = mx_reshape(mx_permute(a, perm_a), MX_SHAPE(free_a, k_size));
  mx_tensor *b2 = mx_reshape(mx_permute(b, perm_b), MX_SHAPE(k_size, free_b));
  return OUT0(c, mx_reshape(mx_mm(a2, b2), shape));
}

/* a x b along dim (size 3), broadcasting: c_i = a_{i+1} b_{i+2} - a_{i+2} b_{i+1}. */
mx_status mx__fwd_cross(mx__call *c) {
  mx_shape shape;
  mx_status status = mx__broadcast_shape("mx_cross", 2, c->in, &shape);
  if (status != MX_OK) return status;
  int dim = mx__wrap_dim("mx_cross", (int)c->args->i[0], shape.ndim);
  if (dim < 0) return mx_last_status();
  int64_t sa = c->in[0]->ndim - shape.ndim + dim >= 0 ? c->in[0]->shape[c->in[0]->ndim - shape.ndim + dim] : 1;
  int64_t sb = c->in[1]->ndim - shape.ndim + dim >= 0 ? c->in[1]->shape[c->in[1]->ndim - shape.ndim + dim] : 1;
  if (sa != 3 || sb != 3)
    return mx__error(MX_SHAPE_ERROR, "mx_cross: dim %d must have size 3 in both inputs, got %lld and %lld", dim,
                     (long long)sa, (long long)sb);
  mx_tensor *a = mx_broadcast_to(c->in[0], shape), *b = mx_broadcast_to(c->in[1], shape);
  mx_tensor *first = mx_mul(mx_roll(a, -1, dim), mx_roll(b, -2, dim));
  mx_tensor *second = mx_mul(mx_roll(a, -2, dim), mx_roll(b, -1, dim));
  return OUT0(c, mx_sub(first, second));
}

/* --- public functions -------------------------------------------------------------------------- */

mx_tensor *mx_chain_matmul(int n, mx_tensor *const *matrices) { return call_list(MX_OP_CHAIN_MATMUL, n, matrices, NULL); }
mx_tensor *mx_multi_dot(int n, mx_tensor *const *tensors) { return call_list(MX_OP_MULTI_DOT, n, tensors, NULL); }
mx_tensor *mx_einsum(const char *equation, int n, mx_tensor *const *operands) {
  return call_list(MX_OP_EINSUM, n, operands, &(mx__args){.ptr = (void *)equation});
}
mx_tensor *mx_tensordot(const mx_tensor *a, const mx_tensor *b, int64_t dims) {
  return mx__call2(MX_OP_TENSORDOT, a, b, &(mx__args){.i = {dims, 0}});
}
mx_tensor *mx_tensordot_dims(const mx_tensor *a, const mx_tensor *b, mx_shape dims_a, mx_shape dims_b) {
  dims_pair pair = {dims_a, dims_b};
  return mx__call2(MX_OP_TENSORDOT, a, b, &(mx__args){.i = {0, 1}, .ptr = &pair});
}
mx_tensor *mx_cross(const mx_tensor *a, const mx_tensor *b, int dim) {
  return mx__call2(MX_OP_CROSS, a, b, &(mx__args){.i = {dim}});
}
