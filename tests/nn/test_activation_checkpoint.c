/* Activation checkpointing: gradients bit for bit those of the plain forward (fp32, bf16 and f16 autocast,
 * dropout), nesting, several outputs, mx_grad and create_graph, the memory the graph keeps, and the errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "../common/expect_error.h"

enum { BATCH = 8, IN = 16, HIDDEN = 32, OUT = 8 };

/* Linear, GELU, Dropout (default generator), Linear, Tanh, Dropout (its own generator), Linear, GELU. */
typedef struct {
  mx_module *net;
  mx_generator *dropout_gen;
  mx_tensor *x, *target;
} model;

static model model_new(void) {
  model m;
  mx_generator *init = mx_generator_new(7);
  m.dropout_gen = mx_generator_new(11);
  m.net = mx_sequential_new(8, (mx_module *[]){mx_linear_new(IN, HIDDEN, true, init), mx_gelu_new(false),
                                               mx_dropout_new(0.3, NULL), mx_linear_new(HIDDEN, HIDDEN, true, init),
                                               mx_tanh_new(), mx_dropout_new(0.2, m.dropout_gen),
                                               mx_linear_new(HIDDEN, OUT, true, init), mx_gelu_new(false)});
  cr_assert_not_null(m.net, "%s", mx_last_error());
  m.x = mx_randn(MX_SHAPE(BATCH, IN), MX_F32, MX_CPU, init);
  m.target = mx_randn(MX_SHAPE(BATCH, OUT), MX_F32, MX_CPU, init);
  cr_assert_eq(mx_set_requires_grad(m.x, true), MX_OK);
  mx_generator_free(init);
  return m;
}

static void model_free(model *m) {
  mx_module_free(m->net);
  mx_generator_free(m->dropout_gen);
  mx_release(m->x);
  mx_release(m->target);
}

static void zero_grads(model *m) {
  for (int i = 0; i < mx_module_num_parameters(m->net); i++) mx_zero_grad(mx_module_parameter(m->net, i, NULL));
  mx_zero_grad(m->x);
}

typedef enum { PLAIN, WHOLE, SEQUENTIAL_2, SEQUENTIAL_3, NESTED } how;

static mx_status whole_net(void *user, int n_in, mx_tensor *const *in, int n_out, mx_tensor **out) {
  out[0] = mx_module_forward(user, in[0]);
  return out[0] ? MX_OK : mx_last_status();
}

/* children [start, end) of the model's net */
typedef struct {
  model *m;
  int start, end;
} span;

static mx_status run_span(void *user, int n_in, mx_tensor *const *in, int n_out, mx_tensor **out) {
  const span *s = user;
  mx_tensor *y = in[0];
  for (int i = s->start; i < s->end && y; i++) y = mx_module_forward(mx_module_child(s->m->net, i, NULL), y);
  out[0] = y;
  return y ? MX_OK : mx_last_status();
}

static mx_activation_checkpoint_options options_for(model *m) {
  return (mx_activation_checkpoint_options){.n_generators = 1, .generators = &m->dropout_gen};
}

/* user: the outer span, followed by the inner one (which must live until backward) */
static mx_status nested_outer(void *user, int n_in, mx_tensor *const *in, int n_out, mx_tensor **out) {
  span *outer = user, *inner = outer + 1;
  span before = {outer->m, outer->start, inner->start}, after = {outer->m, inner->end, outer->end};
  mx_activation_checkpoint_options options = options_for(outer->m);
  mx_tensor *a = NULL, *b = NULL;
  mx_status status = run_span(&before, 1, in, 1, &a);
  if (status == MX_OK) status = mx_activation_checkpoint(run_span, inner, 1, &a, 1, &b, &options);
  if (status == MX_OK) status = run_span(&after, 1, &b, 1, out);
  return status;
}

/* The loss of the model's forward, checkpointed as `how` says (the spans stay valid until backward). NESTED:
 * children [0, 4) checkpointed with [1, 3) checkpointed again inside, then [4, 8) checkpointed. */
static mx_tensor *forward(model *m, how h, span *spans) {
  mx_activation_checkpoint_options options = options_for(m);
  mx_tensor *y = NULL;
  mx_status status = MX_OK;
  switch (h) {
  case PLAIN: y = mx_module_forward(m->net, m->x); break;
  case WHOLE: status = mx_activation_checkpoint(whole_net, m->net, 1, &m->x, 1, &y, &options); break;
  case SEQUENTIAL_2: y = mx_activation_checkpoint_sequential(m->net, 2, m->x, &options); break;
  case SEQUENTIAL_3: y = mx_activation_checkpoint_sequential(m->net, 3, m->x, &options); break;
  case NESTED:
    spans[0] = (span){m, 0, 4};
    spans[1] = (span){m, 1, 3};
    spans[2] = (span){m, 4, 8};
    status = mx_activation_checkpoint(nested_outer, &spans[0], 1, &m->x, 1, &y, &options);
    mx_tensor *first = y;
    if (status == MX_OK) status = mx_activation_checkpoint(run_span, &spans[2], 1, &first, 1, &y, &options);
    break;
  }
  cr_assert(status == MX_OK && y, "forward: %s", mx_last_error());
  return mx_mse_loss(y, m->target, MX_REDUCTION_MEAN);
}

/* Every gradient (the parameters', then x's) and the loss, as float32 bits, in one block. */
typedef struct {
  float *values;
  size_t count;
} grads;

static grads collect_grads(model *m, mx_tensor *loss) {
  int n = mx_module_num_parameters(m->net);
  size_t count = 1;
  for (int i = 0; i < n; i++) count += (size_t)mx_numel(mx_module_parameter(m->net, i, NULL));
  count += (size_t)mx_numel(m->x);
  grads g = {malloc(sizeof(float) * count), count};
  float *at = g.values;
  cr_assert_eq(mx_to_host(mx_to_dtype(loss, MX_F32), at++, sizeof(float)), MX_OK);
  for (int i = 0; i <= n; i++) {
    mx_tensor *t = i < n ? mx_module_parameter(m->net, i, NULL) : m->x;
    mx_tensor *grad = mx_grad_of(t);
    cr_assert_not_null(grad, "no gradient for tensor %d", i);
    size_t numel = (size_t)mx_numel(t);
    cr_assert_eq(mx_to_host(grad, at, sizeof(float) * numel), MX_OK, "%s", mx_last_error());
    at += numel;
  }
  return g;
}

/* One training step's loss and gradients, from the same random state. */
static grads step(model *m, how h, bool autocast, mx_dtype dtype) {
  zero_grads(m);
  mx_manual_seed(1234);
  mx_generator_set_state(m->dropout_gen, 99, 0);
  mx_scope *s = mx_scope_begin();
  span spans[3];
  mx_tensor *loss = NULL;
  MX_AUTOCAST(MX_CPU, dtype, autocast, true) { loss = forward(m, h, spans); }
  cr_assert_not_null(loss, "%s", mx_last_error());
  uint64_t seed, offset, seed2, offset2;
  mx_generator_get_state(NULL, &seed, &offset);
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
  mx_generator_get_state(NULL, &seed2, &offset2);
  cr_expect(seed == seed2 && offset == offset2, "the recomputation must leave the random state as it found it");
  grads g = collect_grads(m, loss);
  mx_scope_end(s);
  return g;
}

static void expect_same_bits(grads a, grads b, const char *what) {
  cr_assert_eq(a.count, b.count);
  size_t differ = 0, first = 0;
  for (size_t i = a.count; i-- > 0;)
    if (memcmp(&a.values[i], &b.values[i], sizeof(float))) differ++, first = i;
  cr_expect_eq(differ, 0, "%s: %zu of %zu values differ from the plain run, the first at %zu (%.9g vs %.9g)", what,
               differ, a.count, first, a.values[first], b.values[first]);
  free(b.values);
}

static void check_all(bool autocast, mx_dtype dtype) {
  model m = model_new();
  grads plain = step(&m, PLAIN, autocast, dtype);
  grads again = step(&m, PLAIN, autocast, dtype);
  expect_same_bits(plain, again, "the plain run repeated"); /* the comparison below means something */
  expect_same_bits(plain, step(&m, WHOLE, autocast, dtype), "the whole net checkpointed");
  expect_same_bits(plain, step(&m, SEQUENTIAL_2, autocast, dtype), "checkpointed every 2 layers");
  expect_same_bits(plain, step(&m, SEQUENTIAL_3, autocast, dtype), "checkpointed every 3 layers");
  expect_same_bits(plain, step(&m, NESTED, autocast, dtype), "nested checkpoints");
  free(plain.values);
  model_free(&m);
}

Test(activation_checkpoint, gradients_match_bit_for_bit_in_float32) { check_all(false, MX_BF16); }
Test(activation_checkpoint, gradients_match_bit_for_bit_under_bf16_autocast) { check_all(true, MX_BF16); }
Test(activation_checkpoint, gradients_match_bit_for_bit_under_f16_autocast) { check_all(true, MX_F16); }

Test(activation_checkpoint, dropout_draws_new_masks_without_rng_state) {
  model m = model_new();
  grads plain = step(&m, PLAIN, false, MX_BF16);
  zero_grads(&m);
  mx_manual_seed(1234);
  mx_generator_set_state(m.dropout_gen, 99, 0);
  mx_scope *s = mx_scope_begin();
  mx_activation_checkpoint_options options = {.no_rng_state = true};
  mx_tensor *y = NULL;
  cr_assert_eq(mx_activation_checkpoint(whole_net, m.net, 1, &m.x, 1, &y, &options), MX_OK);
  mx_tensor *loss = mx_mse_loss(y, m.target, MX_REDUCTION_MEAN);
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
  grads g = collect_grads(&m, loss);
  cr_expect_eq(g.values[0], plain.values[0], "the forward is the same");
  cr_expect(memcmp(g.values + 1, plain.values + 1, sizeof(float) * (g.count - 1)) != 0,
            "other masks in backward give other gradients");
  free(g.values);
  free(plain.values);
  mx_scope_end(s);
  model_free(&m);
}

/* --- memory -------------------------------------------------------------------------------------------- */

/* The bytes of the graph's saved tensors, and the storage bytes in use once the forward's handles are gone. */
static void measure(model *m, how h, int64_t *saved, int64_t *in_use) {
  mx_manual_seed(5);
  mx_memory_stats before = mx_memory_stats_get(MX_CPU);
  mx_scope *s = mx_scope_begin();
  span spans[3];
  mx_tensor *loss = mx_keep(forward(m, h, spans));
  mx_scope_end(s);
  *saved = mx_graph_saved_bytes(loss);
  *in_use = mx_memory_stats_get(MX_CPU).bytes_in_use - before.bytes_in_use;
  mx_release(loss);
}

Test(activation_checkpoint, the_graph_keeps_fewer_bytes) {
  model m = model_new();
  cr_assert_eq(mx_set_requires_grad(m.x, false), MX_OK); /* then x itself is not saved by the graph */
  int64_t plain_saved, plain_in_use, saved, in_use;
  measure(&m, PLAIN, &plain_saved, &plain_in_use);
  /* all a checkpointed graph saves is the loss's, and the layers' parameters, which linear keeps by reference (a
   * leaf that requires grad is never packed: it lives anyway) */
  int64_t parameters = mx_module_parameter_count(m.net) * 4;
  mx_tensor *y = mx_zeros(MX_SHAPE(BATCH, OUT), MX_F32, MX_CPU);
  mx_set_requires_grad(y, true);
  mx_tensor *loss_alone = mx_mse_loss(y, m.target, MX_REDUCTION_MEAN);
  int64_t loss_saved = mx_graph_saved_bytes(loss_alone);
  cr_assert_gt(loss_saved, 0);
  measure(&m, WHOLE, &saved, &in_use);
  cr_expect_eq(saved, loss_saved + parameters, "the checkpointed graph saves %lld bytes, the loss alone %lld",
               (long long)saved, (long long)loss_saved);
  cr_expect_gt(plain_saved, loss_saved + BATCH * HIDDEN * 4 * 4, "the plain graph saves %lld bytes",
               (long long)plain_saved);
  cr_expect_lt(in_use, plain_in_use, "in use after the forward: %lld checkpointed, %lld plain", (long long)in_use,
               (long long)plain_in_use);
  /* nested: the second checkpoint keeps its input (layer 3's output), the inner one keeps nothing (its input is
   * dropped by the outer checkpoint) */
  int64_t nested_saved, nested_in_use;
  measure(&m, NESTED, &nested_saved, &nested_in_use);
  cr_expect_eq(nested_saved, loss_saved + parameters);
  cr_expect_eq(nested_in_use, in_use + BATCH * HIDDEN * 4, "in use after the nested forward: %lld, whole: %lld",
               (long long)nested_in_use, (long long)in_use);
  /* every 3 layers: the last segment's activations are saved as usual */
  int64_t seq_saved, seq_in_use;
  measure(&m, SEQUENTIAL_3, &seq_saved, &seq_in_use);
  cr_expect(seq_saved > saved && seq_saved < plain_saved, "every 3 layers: %lld bytes saved", (long long)seq_saved);
  mx_release(loss_alone);
  mx_release(y);
  model_free(&m);
}

/* --- several inputs and outputs, mx_grad, create_graph, retain_graph ------------------------------------- */

/* (a, b, scale) -> (tanh(a)^2 * b * scale, exp(a) + b); b and scale need no grad. The square saves tanh(a), which
 * a gradient of the gradient must reach through. */
static mx_status two_outputs(void *user, int n_in, mx_tensor *const *in, int n_out, mx_tensor **out) {
  mx_tensor *h = mx_tanh(in[0]);
  out[0] = mx_mul(mx_mul(mx_mul(h, h), in[1]), in[2]);
  out[1] = mx_add(mx_exp(in[0]), in[1]);
  return out[0] && out[1] ? MX_OK : mx_last_status();
}

static mx_tensor *two_output_loss(mx_tensor *a, mx_tensor *b, mx_tensor *scale, bool checkpoint) {
  mx_tensor *out[2];
  mx_tensor *in[3] = {a, b, scale};
  if (checkpoint) cr_assert_eq(mx_activation_checkpoint(two_outputs, NULL, 3, in, 2, out, NULL), MX_OK);
  else cr_assert_eq(two_outputs(NULL, 3, in, 2, out), MX_OK);
  return mx_add(mx_sum(mx_mul(out[0], out[0]), MX_ALL_DIMS, false), mx_sum(mx_sin(out[1]), MX_ALL_DIMS, false));
}

Test(activation_checkpoint, several_inputs_and_outputs_with_mx_grad_and_create_graph) {
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(3);
  mx_tensor *a = mx_randn(MX_SHAPE(5, 4), MX_F64, MX_CPU, gen), *b = mx_randn(MX_SHAPE(5, 4), MX_F64, MX_CPU, gen);
  mx_tensor *scale = mx_full(MX_SHAPE(1), 0.5, MX_F64, MX_CPU);
  mx_set_requires_grad(a, true);
  double want[2][20], got[2][20];
  for (int checkpoint = 0; checkpoint < 2; checkpoint++) {
    /* first order through mx_grad, then a gradient penalty through create_graph */
    mx_tensor *loss = two_output_loss(a, b, scale, checkpoint);
    mx_tensor *g = NULL;
    cr_assert_eq(mx_grad(1, &loss, 1, &a, NULL, true, true, false, &g), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_to_host(g, want[checkpoint], sizeof want[0]), MX_OK);
    mx_tensor *penalty = mx_sum(mx_mul(g, g), MX_ALL_DIMS, false);
    mx_zero_grad(a);
    cr_assert_eq(mx_backward(penalty, NULL, false), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_to_host(mx_grad_of(a), got[checkpoint], sizeof got[0]), MX_OK);
  }
  cr_expect_arr_eq(want[0], want[1], sizeof want[0], "first-order gradients");
  cr_expect_arr_eq(got[0], got[1], sizeof got[0], "gradients of the gradient penalty");
  /* retain_graph: a second backward gives the same gradient again */
  mx_zero_grad(a);
  mx_tensor *loss = two_output_loss(a, b, scale, true);
  cr_assert_eq(mx_backward(loss, NULL, true), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
  double twice[20];
  cr_assert_eq(mx_to_host(mx_grad_of(a), twice, sizeof twice), MX_OK);
  for (int i = 0; i < 20; i++) cr_expect_eq(twice[i], 2 * want[0][i], "element %d", i);
  mx_generator_free(gen);
  mx_scope_end(s);
}

static int users_freed;
static void count_free(void *user) { users_freed++; }

Test(activation_checkpoint, without_grad_mode_fn_just_runs) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_full(MX_SHAPE(3), 0.5, MX_F32, MX_CPU), *b = mx_ones(MX_SHAPE(3), MX_F32, MX_CPU);
  mx_set_requires_grad(a, true);
  mx_tensor *out[2];
  users_freed = 0;
  mx_activation_checkpoint_options options = {.free_user = count_free};
  MX_NO_GRAD {
    cr_assert_eq(mx_activation_checkpoint(two_outputs, NULL, 3, (mx_tensor *[]){a, b, b}, 2, out, &options), MX_OK);
  }
  cr_expect_not(mx_requires_grad(out[0]));
  cr_expect_float_eq(mx_at(out[0], MX_SHAPE(0)), tanh(0.5) * tanh(0.5), 1e-6);
  cr_expect_float_eq(mx_at(out[1], MX_SHAPE(0)), exp(0.5) + 1, 1e-6);
  cr_expect_eq(users_freed, 1);
  /* with a graph, user is freed with it */
  cr_assert_eq(mx_activation_checkpoint(two_outputs, NULL, 3, (mx_tensor *[]){a, b, b}, 2, out, &options), MX_OK);
  cr_expect_eq(users_freed, 1);
  mx_tensor *loss = mx_sum(out[0], MX_ALL_DIMS, false);
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
  mx_scope_end(s);
  cr_expect_eq(users_freed, 2);
}

/* (a, b) -> (tanh(a), b): an output that is an input comes back as a new handle on it */
static mx_status pass_through(void *user, int n_in, mx_tensor *const *in, int n_out, mx_tensor **out) {
  out[0] = mx_tanh(in[0]);
  out[1] = in[1];
  return out[0] ? MX_OK : mx_last_status();
}

Test(activation_checkpoint, an_input_returned_as_an_output) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_full(MX_SHAPE(2), 0.5, MX_F32, MX_CPU), *b = mx_full(MX_SHAPE(2), 2, MX_F32, MX_CPU);
  mx_set_requires_grad(a, true);
  mx_set_requires_grad(b, true);
  mx_tensor *out[2];
  for (int grad = 0; grad < 2; grad++) {
    mx_set_grad_enabled(grad);
    cr_assert_eq(mx_activation_checkpoint(pass_through, NULL, 2, (mx_tensor *[]){a, b}, 2, out, NULL), MX_OK);
    mx_set_grad_enabled(true);
    cr_expect_neq(out[1], b);
    cr_expect_eq(mx_at(out[1], MX_SHAPE(1)), 2);
  }
  mx_tensor *loss = mx_sum(mx_mul(out[0], out[1]), MX_ALL_DIMS, false);
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
  cr_expect_float_eq(mx_at(mx_grad_of(b), MX_SHAPE(0)), tanh(0.5), 1e-6);
  cr_expect_float_eq(mx_at(mx_grad_of(a), MX_SHAPE(0)), 2 * (1 - tanh(0.5) * tanh(0.5)), 1e-6);
  mx_scope_end(s);
}

/* --- errors ---------------------------------------------------------------------------------------------- */

static bool training_flag = true;

/* saves one tensor more when the flag is off */
static mx_status flag_dependent(void *user, int n_in, mx_tensor *const *in, int n_out, mx_tensor **out) {
  out[0] = training_flag ? mx_tanh(in[0]) : mx_tanh(mx_exp(in[0]));
  return out[0] ? MX_OK : mx_last_status();
}

static mx_status failing(void *user, int n_in, mx_tensor *const *in, int n_out, mx_tensor **out) {
  out[0] = mx_tanh(in[0]);
  return MX_OK;
}

static mx_status grad_inside(void *user, int n_in, mx_tensor *const *in, int n_out, mx_tensor **out) {
  mx_tensor *y = mx_sum(mx_tanh(in[0]), MX_ALL_DIMS, false);
  return mx_grad(1, &y, 1, in, NULL, false, false, false, out);
}

Test(activation_checkpoint, errors_name_the_function) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_full(MX_SHAPE(3), 0.5, MX_F32, MX_CPU), *out[2] = {a, a};
  mx_set_requires_grad(a, true);
  EXPECT_STATUS_ERROR(mx_activation_checkpoint(NULL, NULL, 1, &a, 1, out, NULL),
                      "mx_activation_checkpoint: argument 'fn' is NULL");
  cr_expect_null(out[0]);
  EXPECT_STATUS_ERROR(mx_activation_checkpoint(failing, NULL, 1, (mx_tensor *[]){NULL}, 1, out, NULL),
                      "mx_activation_checkpoint: argument 'inputs[0]' is NULL");
  EXPECT_STATUS_ERROR(mx_activation_checkpoint(failing, NULL, 17, &a, 1, out, NULL),
                      "mx_activation_checkpoint: n_inputs must be in [0, 16], got 17 (pass more through user)");
  EXPECT_STATUS_ERROR(mx_activation_checkpoint(failing, NULL, 1, &a, 0, out, NULL),
                      "mx_activation_checkpoint: n_outputs must be at least 1, got 0");
  EXPECT_STATUS_ERROR(mx_activation_checkpoint(failing, NULL, 1, &a, 2, out, NULL),
                      "mx_activation_checkpoint: fn returned MX_OK but left outputs[1] NULL");
  mx_activation_checkpoint_options bad = {.n_generators = 1};
  EXPECT_STATUS_ERROR(mx_activation_checkpoint(failing, NULL, 1, &a, 1, out, &bad),
                      "mx_activation_checkpoint: options->n_generators is 1 but options->generators is NULL");
  EXPECT_ERROR(mx_activation_checkpoint_sequential(NULL, 1, a, NULL),
               "mx_activation_checkpoint_sequential: argument 'seq' is NULL");
  mx_module *lin = mx_linear_new(3, 3, true, NULL);
  EXPECT_ERROR(mx_activation_checkpoint_sequential(lin, 1, a, NULL),
               "mx_activation_checkpoint_sequential: the module is a Linear, not a Sequential");
  mx_module_free(lin);

  EXPECT_STATUS_ERROR(mx_activation_checkpoint(grad_inside, NULL, 1, &a, 1, out, NULL),
                      "mx_activation_checkpoint: a tensor saved inside the checkpointed function was needed before "
                      "the function returned (a backward or mx_grad inside it?); differentiate outside the "
                      "checkpointed function");

  /* a second backward through a freed checkpointed graph */
  mx_tensor *y;
  cr_assert_eq(mx_activation_checkpoint(flag_dependent, NULL, 1, &a, 1, &y, NULL), MX_OK);
  mx_tensor *loss = mx_sum(y, MX_ALL_DIMS, false);
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
  EXPECT_STATUS_ERROR(mx_backward(loss, NULL, false),
                      "mx_backward: trying to backward through the graph a second time (the saved tensors of "
                      "TANHBackward, packed by mx_activation_checkpoint, were freed by the first backward); pass "
                      "retain_graph=true the first time");

  /* a recomputation that differs from the forward */
  cr_assert_eq(mx_activation_checkpoint(flag_dependent, NULL, 1, &a, 1, &y, NULL), MX_OK);
  training_flag = false;
  EXPECT_STATUS_ERROR(mx_backward(mx_sum(y, MX_ALL_DIMS, false), NULL, false),
                      "mx_activation_checkpoint: the recomputation in backward saved 2 tensors for backward where "
                      "the forward saved 1: fn must run the same ops on the same inputs both times (did a flag it "
                      "reads, such as a module's training mode, change in between?)");
  training_flag = true;

  /* an input changed in place between forward and backward */
  mx_tensor *b = mx_full(MX_SHAPE(3), 0.5, MX_F32, MX_CPU), *pair[2];
  cr_assert_eq(mx_activation_checkpoint(two_outputs, NULL, 3, (mx_tensor *[]){a, b, b}, 2, pair, NULL), MX_OK);
  loss = mx_sum(pair[0], MX_ALL_DIMS, false);
  cr_assert_eq(mx_add_(b, b), MX_OK);
  EXPECT_STATUS_ERROR(mx_backward(loss, NULL, false),
                      "mx_backward: a tensor needed for gradient computation has been modified by an in-place "
                      "operation: the float32 [3] saved by ActivationCheckpoint is at version 1; expected version 0");
  mx_scope_end(s);
}
