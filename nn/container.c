/* Containers: Sequential (children applied in turn) and Residual (body(x) + shortcut(x)). */
#include <stdio.h>

#include "nn/nn_internal.h"

/* The kinds whose forward can absorb a following ReLU (nn_internal.h): each answers for its own modules. A kind
 * opts in with one line here. */
static mx__forward_relu_fn (*const fusing_kinds[])(const mx_module *m) = {
    mx__conv_forward_relu, mx__batch_norm_forward_relu, mx__linear_forward_relu};

/* first's forward with second (the next child) folded in, when second is the plain ReLU module and nothing watches
 * either forward (mx__module_observed: hooks and summaries see each child's output); NULL: run them in turn. Saved
 * tensors are the same either way (the input, the weights, the ReLU's output), so saved-tensor hooks and activation
 * checkpointing see no difference. */
static mx__forward_relu_fn fused_with_relu(const mx_module *first, const mx_module *second) {
  if (!mx__module_is_relu(second) || mx__module_observed(first) || mx__module_observed(second)) return NULL;
  for (size_t k = 0; k < sizeof fusing_kinds / sizeof fusing_kinds[0]; k++) {
    mx__forward_relu_fn fused = fusing_kinds[k](first);
    if (fused) return fused;
  }
  return NULL;
}

/* The ReLU relu and the MaxPool pool after it (the next child, or NULL) as one max_pool_relu, under
 * fused_with_relu's rules; NULL: run them in turn. This fusion wins over the ReLU's with the child before it: that
 * child runs plain, and the ReLU's full-resolution output is neither stored nor masked in backward. The saved
 * tensors differ from the children's (the ReLU's output is not among them), so saved-tensor hooks see fewer; the
 * choice depends on the modules alone, so activation checkpointing's recomputation saves what its forward did. */
static mx__forward_relu_fn pool_after_relu(const mx_module *relu, const mx_module *pool) {
  if (!pool || !mx__module_is_relu(relu) || mx__module_observed(relu) || mx__module_observed(pool)) return NULL;
  return mx__max_pool_relu_forward(pool);
}

/* The Conv2d conv, the ReLU relu and the MaxPool2d pool after it as one conv2d_max_pool_relu, under
 * fused_with_relu's rules; NULL: the other fusions decide. It wins over both of the ReLU's: the convolution's
 * full-resolution output and its gradient never become tensors. The saved tensors are the convolution's inputs,
 * the pooled output and its indices: fewer than the children's, as pool_after_relu's. */
static mx__conv_pool_fn conv_relu_pool(const mx_module *conv, const mx_module *relu, const mx_module *pool) {
  if (!relu || !pool || !mx__module_is_relu(relu) || mx__module_observed(conv) || mx__module_observed(relu) ||
      mx__module_observed(pool))
    return NULL;
  return mx__conv_max_pool_relu_forward(conv, pool);
}

static mx_tensor *sequential_forward(mx_module *m, const mx_tensor *x) {
  int n = mx_module_num_children(m);
  if (n == 0) return mx_reshape(x, mx_shape_get(x)); /* an empty Sequential is the identity */
  mx_tensor *y = NULL;
  for (int i = 0; i < n; i++) {
    mx_module *child = mx_module_child(m, i, NULL);
    mx_module *next = i + 1 < n ? mx_module_child(m, i + 1, NULL) : NULL;
    mx_module *after = i + 2 < n ? mx_module_child(m, i + 2, NULL) : NULL;
    const mx_tensor *in = i ? y : x;
    mx__conv_pool_fn three = conv_relu_pool(child, next, after);
    if (three && (y = three(child, after, in))) {
      i += 2; /* the ReLU and the pool ran too */
      continue;
    }
    if (three) mx_clear_error(); /* the other fusions or the children in turn fail as they would have */
    mx_module *owner = next; /* the module whose fused forward runs: the pool after a ReLU child */
    mx__forward_relu_fn fused = pool_after_relu(child, next);
    if (!fused && next && !pool_after_relu(next, after)) { /* no pool takes next (a ReLU) from child */
      fused = fused_with_relu(child, next);
      owner = child;
    }
    if (fused && (y = fused(owner, in))) {
      i++; /* the second module ran too */
      continue;
    }
    if (fused) mx_clear_error(); /* the children in turn fail as they would have, naming the layer */
    y = mx_module_forward(child, in);
    if (!y) return NULL;
  }
  return y;
}

static const mx_module_type sequential_type = {.name = "Sequential", .forward = sequential_forward};

mx_status mx_sequential_append(mx_module *seq, mx_module *m) {
  const char *fn = "mx_sequential_append";
  mx_status status = MX_OK;
  if (!seq || !m) {
    status = mx__null_input(fn, !seq ? "seq" : "m");
  } else if (mx_module_type_of(seq) != &sequential_type) {
    status = mx__error(MX_INVALID_ARGUMENT, "%s: the module is a %s, not a Sequential", fn,
                       mx_module_type_of(seq)->name);
  } else {
    char name[24];
    snprintf(name, sizeof name, "%d", mx_module_num_children(seq));
    return mx_module_add_child(seq, name, m);
  }
  mx__module_free_orphan(m);
  return status;
}

mx_module *mx_sequential_new(int n, mx_module *const *modules) {
  const char *fn = "mx_sequential_new";
  mx_module *seq = NULL;
  if (n < 0) mx__error(MX_INVALID_ARGUMENT, "%s: n must be >= 0, got %d", fn, n);
  else if (n > 0 && !modules) mx__null_input(fn, "modules");
  else seq = mx_module_new(&sequential_type, NULL);
  bool ok = seq != NULL;
  for (int i = 0; i < n && modules; i++) {
    if (ok && !modules[i]) {
      char arg[32];
      snprintf(arg, sizeof arg, "modules[%d]", i);
      mx__null_input(fn, arg);
      ok = false;
    } else if (ok) {
      ok = mx_sequential_append(seq, modules[i]) == MX_OK;
    } else {
      mx__module_free_orphan(modules[i]);
    }
  }
  if (!ok) mx_module_free(seq);
  return ok ? seq : NULL;
}

static mx_tensor *residual_forward(mx_module *m, const mx_tensor *x) {
  mx_tensor *body = mx_module_forward(mx_module_child(m, 0, NULL), x);
  if (!body) return NULL;
  mx_module *shortcut = mx_module_get_child(m, "shortcut");
  return mx_add(body, shortcut ? mx_module_forward(shortcut, x) : x);
}

static const mx_module_type residual_type = {.name = "Residual", .forward = residual_forward};

mx_module *mx_residual_new(mx_module *body, mx_module *shortcut) {
  if (!body) {
    mx__null_input("mx_residual_new", "body");
    mx__module_free_orphan(shortcut);
    return NULL;
  }
  mx_module *m = mx_module_new(&residual_type, NULL);
  if (!m) {
    mx__module_free_orphan(body);
    mx__module_free_orphan(shortcut);
    return NULL;
  }
  mx_status status = mx_module_add_child(m, "body", body);
  if (shortcut) {
    if (status == MX_OK) status = mx_module_add_child(m, "shortcut", shortcut);
    else mx__module_free_orphan(shortcut);
  }
  if (status != MX_OK) {
    mx_module_free(m);
    return NULL;
  }
  return m;
}
