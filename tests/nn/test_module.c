/* The module tree: registration, lookup, dotted names and their order, ownership, train/eval, containers, and a
 * custom module trained for one step. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include <mixgrad.h>

/* --- a custom module in under 30 lines: a two-layer MLP ----------------------------------------------------------- */

static mx_tensor *mlp_forward(mx_module *m, const mx_tensor *x) {
  mx_tensor *h = mx_relu(mx_module_forward(mx_module_get_child(m, "fc1"), x));
  return mx_module_forward(mx_module_get_child(m, "fc2"), h);
}

static const mx_module_type mlp_type = {.name = "MLP", .forward = mlp_forward};

static mx_module *mlp_new(int64_t in, int64_t hidden, int64_t out, mx_generator *gen) {
  mx_module *m = mx_module_new(&mlp_type, NULL);
  if (mx_module_add_child(m, "fc1", mx_linear_new(in, hidden, true, gen)) != MX_OK ||
      mx_module_add_child(m, "fc2", mx_linear_new(hidden, out, true, gen)) != MX_OK) {
    mx_module_free(m);
    return NULL;
  }
  return m;
}

/* --- end of the custom module ------------------------------------------------------------------------------------ */

Test(nn_module, custom_mlp_trains_one_step) {
  mx_generator *gen = mx_generator_new(7);
  mx_module *net = mlp_new(3, 8, 2, gen);
  cr_assert_not_null(net, "%s", mx_last_error());
  cr_expect_str_eq(mx_module_type_of(net)->name, "MLP");
  const char *want[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
  cr_assert_eq(mx_module_num_parameters(net), 4);
  mx_tensor *params[4];
  for (int i = 0; i < 4; i++) {
    const char *name;
    params[i] = mx_module_parameter(net, i, &name);
    cr_expect_str_eq(name, want[i]);
    cr_expect(mx_is_leaf(params[i]) && mx_requires_grad(params[i]));
  }
  cr_expect_eq(mx_module_parameter_count(net), 3 * 8 + 8 + 8 * 2 + 2);

  mx_sgd_opts o = mx_sgd_defaults();
  o.lr = 0.1;
  mx_optimizer *opt = mx_sgd_new(4, params, &o);
  cr_assert_not_null(opt, "%s", mx_last_error());
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_randn(MX_SHAPE(16, 3), MX_F32, MX_CPU, gen);
  mx_tensor *target = mx_randn(MX_SHAPE(16, 2), MX_F32, MX_CPU, gen);
  mx_tensor *loss = mx_mse_loss(mx_module_forward(net, x), target, MX_REDUCTION_MEAN);
  cr_assert_not_null(loss, "%s", mx_last_error());
  double before = mx_item(loss);
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
  /* the step is p - lr grad, element by element */
  mx_tensor *expected = mx_sub(params[2], mx_mul_scalar(mx_grad_of(params[2]), 0.1));
  cr_assert_eq(mx_optimizer_step(opt), MX_OK, "%s", mx_last_error());
  for (int k = 0; k < 16; k++)
    cr_expect_float_eq(mx_at(params[2], MX_SHAPE(k / 8, k % 8)), mx_at(expected, MX_SHAPE(k / 8, k % 8)), 1e-7);
  double after = mx_item(mx_mse_loss(mx_module_forward(net, x), target, MX_REDUCTION_MEAN));
  cr_expect_lt(after, before, "one SGD step should lower the loss: %g -> %g", before, after);
  mx_scope_end(s);
  mx_optimizer_free(opt);
  mx_module_free(net);
  mx_generator_free(gen);
}

/* Linear, Residual(Sequential(Linear, ReLU), Linear), BatchNorm1d in a Sequential. */
static mx_module *nested(void) {
  mx_module *body = mx_sequential_new(2, (mx_module *[]){mx_linear_new(4, 4, true, NULL), mx_relu_new()});
  mx_module *net = mx_sequential_new(3, (mx_module *[]){mx_linear_new(3, 4, true, NULL),
                                                       mx_residual_new(body, mx_linear_new(4, 4, false, NULL)),
                                                       mx_batch_norm1d_new(4, 1e-5, 0.1, true, true)});
  cr_assert_not_null(net, "%s", mx_last_error());
  return net;
}

Test(nn_module, dotted_names_depth_first) {
  mx_module *net = nested();
  const char *params[] = {"0.weight", "0.bias", "1.body.0.weight", "1.body.0.bias", "1.shortcut.weight",
                          "2.weight", "2.bias"};
  cr_assert_eq(mx_module_num_parameters(net), 7);
  for (int i = 0; i < 7; i++) {
    const char *name;
    cr_assert_not_null(mx_module_parameter(net, i, &name));
    cr_expect_str_eq(name, params[i]);
    cr_expect_eq(mx_module_get_parameter(net, params[i]), mx_module_parameter(net, i, NULL));
  }
  const char *buffers[] = {"2.running_mean", "2.running_var", "2.num_batches_tracked"};
  cr_assert_eq(mx_module_num_buffers(net), 3);
  for (int i = 0; i < 3; i++) {
    const char *name;
    mx_tensor *b = mx_module_buffer(net, i, &name);
    cr_expect_str_eq(name, buffers[i]);
    cr_expect_not(mx_requires_grad(b));
  }
  const char *modules[] = {"", "0", "1", "1.body", "1.body.0", "1.body.1", "1.shortcut", "2"};
  const char *types[] = {"Sequential", "Linear", "Residual", "Sequential", "Linear", "ReLU", "Linear", "BatchNorm1d"};
  cr_assert_eq(mx_module_num_modules(net), 8);
  for (int i = 0; i < 8; i++) {
    const char *name;
    mx_module *m = mx_module_module(net, i, &name);
    cr_expect_str_eq(name, modules[i]);
    cr_expect_str_eq(mx_module_type_of(m)->name, types[i]);
  }
  /* a child's names are relative to it */
  mx_module *residual = mx_module_get_child(net, "1");
  cr_assert_not_null(residual);
  const char *name;
  mx_module_parameter(residual, 2, &name);
  cr_expect_str_eq(name, "shortcut.weight");
  cr_expect_eq(mx_module_get_child(net, "1.body.1"), mx_module_module(net, 5, NULL));
  cr_expect_null(mx_module_get_parameter(net, "1.body.weight"));
  cr_expect_null(mx_module_get_parameter(net, "3.weight"));
  cr_expect_null(mx_module_get_buffer(net, "0.weight"));
  cr_expect_eq(mx_module_parameter_count(net), 3 * 4 + 4 + 16 + 4 + 16 + 4 + 4);
  mx_module_free(net);
}

Test(nn_module, names_outlive_later_registrations) {
  mx_module *net = mx_sequential_new(1, (mx_module *[]){mx_linear_new(2, 2, true, NULL)});
  const char *first;
  mx_module_parameter(net, 1, &first);
  cr_expect_str_eq(first, "0.bias");
  cr_assert_eq(mx_sequential_append(net, mx_linear_new(2, 1, true, NULL)), MX_OK);
  cr_assert_eq(mx_module_add_parameter(mx_module_child(net, 0, NULL), "scale", mx_ones(MX_SHAPE(1), MX_F32, MX_CPU)),
               MX_OK);
  cr_assert_eq(mx_module_num_parameters(net), 5); /* rebuilt: 0.weight 0.bias 0.scale 1.weight 1.bias */
  const char *again, *scale;
  mx_module_parameter(net, 1, &again);
  mx_module_parameter(net, 2, &scale);
  cr_expect_str_eq(first, "0.bias"); /* the old pointer still reads */
  cr_expect_eq(again, first);        /* and is the same string */
  cr_expect_str_eq(scale, "0.scale");
  mx_module_free(net);
}

Test(nn_module, registration_takes_ownership) {
  mx_memory_stats before = mx_memory_stats_get(MX_CPU);
  mx_module *m = mx_module_new(&mlp_type, NULL);
  mx_scope *s = mx_scope_begin();
  mx_tensor *w = mx_full(MX_SHAPE(2, 3), 0.5, MX_F32, MX_CPU);
  mx_tensor *b = mx_zeros(MX_SHAPE(2), MX_I64, MX_CPU);
  cr_assert_eq(mx_module_add_parameter(m, "w", w), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_module_add_buffer(m, "steps", b), MX_OK, "%s", mx_last_error());
  mx_scope_end(s); /* the scope no longer owns them */
  cr_expect_eq(mx_module_get_parameter(m, "w"), w);
  cr_expect_eq(mx_at(w, MX_SHAPE(1, 2)), 0.5);
  cr_expect(mx_is_leaf(w) && mx_requires_grad(w));
  cr_expect_eq(mx_module_get_buffer(m, "steps"), b);
  cr_expect_not(mx_requires_grad(b));
  cr_expect_eq(mx_memory_stats_get(MX_CPU).live_tensors, before.live_tensors + 2);
  mx_module_free(m);
  cr_expect_eq(mx_memory_stats_get(MX_CPU).live_tensors, before.live_tensors);
  cr_expect_eq(mx_memory_stats_get(MX_CPU).bytes_in_use, before.bytes_in_use);
}

Test(nn_module, lookup_and_children) {
  mx_module *net = nested();
  cr_expect_eq(mx_module_num_children(net), 3);
  const char *name;
  mx_module *child = mx_module_child(net, 1, &name);
  cr_expect_str_eq(name, "1");
  cr_expect_str_eq(mx_module_type_of(child)->name, "Residual");
  cr_expect_eq(mx_module_get_child(net, "1"), child);
  cr_expect_null(mx_module_get_child(net, "body"));
  cr_expect_eq(mx_module_num_children(child), 2);
  mx_module_child(child, 1, &name);
  cr_expect_str_eq(name, "shortcut");
  cr_expect_null(mx_module_self(net));
  cr_expect_null(mx_module_get_parameter(net, "weight"));
  mx_module_free(net);
}

Test(nn_module, train_and_eval_reach_every_child) {
  mx_module *net = nested();
  int n = mx_module_num_modules(net);
  for (int i = 0; i < n; i++) cr_expect(mx_module_is_training(mx_module_module(net, i, NULL)));
  mx_module_train(net, false);
  for (int i = 0; i < n; i++) cr_expect_not(mx_module_is_training(mx_module_module(net, i, NULL)));
  mx_module_train(mx_module_get_child(net, "1"), true); /* a subtree alone */
  cr_expect_not(mx_module_is_training(net));
  cr_expect(mx_module_is_training(mx_module_get_child(net, "1.body.0")));
  cr_expect_not(mx_module_is_training(mx_module_get_child(net, "2")));
  mx_module_free(net);
}

Test(nn_module, sequential_residual_forward_values) {
  mx_scope *s = mx_scope_begin();
  mx_module *lin = mx_linear_new(2, 2, true, NULL);
  float w[] = {1, 2, -1, 0.5f}, b[] = {0.5f, -1};
  mx_copy_(mx_module_get_parameter(lin, "weight"), mx_from_data(w, MX_SHAPE(2, 2), MX_F32, MX_CPU));
  mx_copy_(mx_module_get_parameter(lin, "bias"), mx_from_data(b, MX_SHAPE(2), MX_F32, MX_CPU));
  mx_module *net = mx_sequential_new(2, (mx_module *[]){mx_residual_new(lin, NULL), mx_relu_new()});
  float xv[] = {1, -2};
  mx_tensor *y = mx_module_forward(net, mx_from_data(xv, MX_SHAPE(1, 2), MX_F32, MX_CPU));
  cr_assert_not_null(y, "%s", mx_last_error());
  /* lin(x) = (1 - 4 + 0.5, -1 - 1 - 1) = (-2.5, -3); + x = (-1.5, -5); relu = (0, 0) */
  cr_expect_eq(mx_at(y, MX_SHAPE(0, 0)), 0);
  cr_expect_eq(mx_at(y, MX_SHAPE(0, 1)), 0);
  float xv2[] = {2, 1};
  y = mx_module_forward(net, mx_from_data(xv2, MX_SHAPE(1, 2), MX_F32, MX_CPU));
  /* lin = (2 + 2 + 0.5, -2 + 0.5 - 1) = (4.5, -2.5); + x = (6.5, -1.5); relu = (6.5, 0) */
  cr_expect_eq(mx_at(y, MX_SHAPE(0, 0)), 6.5);
  cr_expect_eq(mx_at(y, MX_SHAPE(0, 1)), 0);
  mx_module *empty = mx_sequential_new(0, NULL);
  cr_assert_not_null(empty, "%s", mx_last_error());
  mx_tensor *same = mx_module_forward(empty, y);
  cr_expect_eq(mx_at(same, MX_SHAPE(0, 0)), 6.5);
  mx_module_free(empty);
  mx_module_free(net);
  mx_scope_end(s);
}

/* A forward outside any scope leaves only its output, once the modules
 * hold what they keep between steps (the first training forward makes the
 * batch norm's 1 that counts its batches; it goes with the module). */
Test(nn_module, forward_frees_its_temporaries) {
  mx_module *net = nested();
  mx_tensor *x = mx_randn(MX_SHAPE(5, 3), MX_F32, MX_CPU, NULL);
  mx_memory_stats first = mx_memory_stats_get(MX_CPU);
  mx_tensor *y = NULL;
  MX_NO_GRAD { y = mx_module_forward(net, x); } /* outside any scope: only y is the caller's */
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_expect_eq(mx_memory_stats_get(MX_CPU).live_tensors, first.live_tensors + 2, "y and the batch norm's 1");
  mx_release(y);
  mx_memory_stats before = mx_memory_stats_get(MX_CPU);
  MX_NO_GRAD { y = mx_module_forward(net, x); }
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_expect_eq(mx_memory_stats_get(MX_CPU).live_tensors, before.live_tensors + 1, "y only");
  mx_release(y);
  mx_release(x);
  mx_module_free(net);
}

Test(nn_module, sequential_append_names_in_turn) {
  mx_module *seq = mx_sequential_new(0, NULL);
  for (int i = 0; i < 12; i++) cr_assert_eq(mx_sequential_append(seq, mx_identity_new()), MX_OK);
  const char *name;
  mx_module_child(seq, 11, &name);
  cr_expect_str_eq(name, "11");
  cr_expect_eq(mx_module_num_modules(seq), 13);
  mx_module_free(seq);
}

/* mx_module_to: to the device the tensors are on, nothing changes; to a
 * device that is not there, an error, and nothing has moved (the CUDA move
 * itself is checked in tests/gpu). Gradients stay when nothing moves. */
Test(nn_module, to_a_missing_device_moves_nothing) {
  mx_generator *gen = mx_generator_new(3);
  mx_module *m = mx_sequential_new(
      2, (mx_module *[]){mx_linear_new(4, 3, true, gen), mx_batch_norm1d_new(3, 1e-5, 0.1, true, true)});
  mx_generator_free(gen);
  cr_assert_not_null(m, "%s", mx_last_error());
  int n = mx_module_num_parameters(m), nb = mx_module_num_buffers(m);
  cr_assert_eq(n, 4);
  cr_assert_geq(nb, 2);
  mx_tensor *w = mx_module_parameter(m, 0, NULL);
  const void *data = mx_data_ptr(w);
  mx_tensor *loss = mx_sum(w, MX_ALL_DIMS, false);
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
  mx_release(loss);
  cr_assert_eq(mx_module_to(m, MX_CPU), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_module_parameter(m, 0, NULL), w);
  cr_assert_eq(mx_data_ptr(w), data, "a move to where it is copies nothing");
  cr_assert_not_null(mx_grad_of(w), "and keeps the gradient");
  if (mx_cuda_device_count() == 0) {
    mx_clear_error();
    cr_assert_neq(mx_module_to(m, MX_CUDA), MX_OK);
    cr_assert(strstr(mx_last_error(), mx_cuda_built() ? "no CUDA device" : "built without CUDA") != NULL, "%s",
              mx_last_error());
    for (int i = 0; i < n; i++) cr_assert_eq(mx_device_of(mx_module_parameter(m, i, NULL)), MX_CPU);
    for (int i = 0; i < nb; i++) cr_assert_eq(mx_device_of(mx_module_buffer(m, i, NULL)), MX_CPU);
    cr_assert_eq(mx_data_ptr(w), data);
  }
  cr_assert_eq(mx_module_to(NULL, MX_CPU), MX_NULL_INPUT);
  mx_module_free(m);
}

/* --- several tensors in and out: forward_n -------------------------------------------------------------------------- */

/* A cell carrying a state: (x, h) -> (y = x + h, h' = x * h), one or two
 * outputs; with one input, h is zeros. The temporary (x * 2) shows the call frees what it made. */
static mx_status carry_forward_n(mx_module *m, int n_in, const mx_tensor *const *in, int n_out, mx_tensor **out) {
  (void)m;
  const mx_tensor *x = in[0];
  mx_tensor *h = n_in > 1 && in[1] ? (mx_tensor *)in[1] : mx_zeros_like(x);
  mx_tensor *twice = mx_mul_scalar(x, 2.0);
  if (!(out[0] = mx_sub(mx_add(twice, h), x))) return mx_last_status();
  if (n_out > 1 && !(out[1] = mx_mul(x, h))) return mx_last_status();
  return MX_OK;
}
static const mx_module_type carry_type = {.name = "Carry", .forward_n = carry_forward_n};

/* A parent whose forward_n runs its child "cell" on (x, h) twice. */
static mx_status twice_forward_n(mx_module *m, int n_in, const mx_tensor *const *in, int n_out, mx_tensor **out) {
  mx_module *cell = mx_module_get_child(m, "cell");
  mx_tensor *mid[2];
  mx_status st = mx_module_forward_n(cell, n_in, in, 2, mid);
  return st == MX_OK ? mx_module_forward_n(cell, 2, (const mx_tensor *const *)mid, n_out, out) : st;
}
static const mx_module_type twice_type = {.name = "Twice", .forward_n = twice_forward_n};

Test(nn_module, forward_n_takes_and_returns_several_tensors) {
  mx_module *cell = mx_module_new(&carry_type, NULL);
  cr_assert_not_null(cell, "%s", mx_last_error());
  mx_tensor *x = mx_from_data((float[]){1, 2, 3}, MX_SHAPE(3), MX_F32, MX_CPU);
  mx_tensor *h = mx_from_data((float[]){10, 20, 30}, MX_SHAPE(3), MX_F32, MX_CPU);
  mx_memory_stats before = mx_memory_stats_get(MX_CPU);
  mx_tensor *out[2];
  MX_NO_GRAD { cr_assert_eq(mx_module_forward_n(cell, 2, (const mx_tensor *[]){x, h}, 2, out), MX_OK, "%s",
                            mx_last_error()); }
  cr_expect_eq(mx_memory_stats_get(MX_CPU).live_tensors, before.live_tensors + 2, "only the two outputs live on");
  for (int i = 0; i < 3; i++) {
    cr_expect_eq(mx_at(out[0], MX_SHAPE(i)), (i + 1) * 11.0);
    cr_expect_eq(mx_at(out[1], MX_SHAPE(i)), (i + 1) * (i + 1) * 10.0);
  }
  /* one in, one out: mx_module_forward reaches forward_n too (h = zeros) */
  mx_tensor *y = mx_module_forward(cell, x);
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_expect_eq(mx_at(y, MX_SHAPE(2)), 3.0);
  mx_release(y);
  mx_release(out[0]);
  mx_release(out[1]);
  mx_release(x);
  mx_release(h);
  mx_module_free(cell);
}

Test(nn_module, forward_n_names_the_failing_layer_and_leaves_no_outputs) {
  mx_module *net = mx_module_new(&twice_type, NULL);
  cr_assert_eq(mx_module_add_child(net, "cell", mx_module_new(&carry_type, NULL)), MX_OK, "%s", mx_last_error());
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_ones(MX_SHAPE(3), MX_F32, MX_CPU), *h = mx_ones(MX_SHAPE(4), MX_F32, MX_CPU);
  mx_tensor *out[2] = {x, x};
  cr_assert_eq(mx_module_forward_n(net, 2, (const mx_tensor *[]){x, h}, 2, out), MX_SHAPE_ERROR);
  cr_expect_null(out[0]);
  cr_expect_null(out[1]);
  cr_expect(strncmp(mx_last_error(), "mx_module_forward_n: layer cell (Carry): mx_add: ", 49) == 0, "%s",
            mx_last_error());
  /* a module with a plain forward takes one tensor to one */
  mx_module *lin = mx_linear_new(3, 2, true, NULL);
  cr_assert_eq(mx_module_forward_n(lin, 2, (const mx_tensor *[]){x, h}, 1, out), MX_INVALID_ARGUMENT);
  cr_expect_str_eq(mx_last_error(), "mx_module_forward_n: Linear has a forward of one tensor to one (no forward_n), "
                                    "called with 2 inputs and 1 outputs");
  cr_assert_eq(mx_module_forward_n(lin, 1, (const mx_tensor *[]){x}, 1, out), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_numel(out[0]), 2);
  mx_scope_end(s);
  mx_module_free(lin);
  mx_module_free(net);
}
