/* The error messages of the module tree, the containers, the layer constructors and forwards, and init. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include <mixgrad.h>

/* Clears the error before each test's calls, and checks status and message after one. */
static void expect_error(mx_status got, mx_status want, const char *message) {
  cr_expect_eq(got, want, "status %s, expected %s (%s)", mx_status_str(got), mx_status_str(want), mx_last_error());
  cr_expect_str_eq(mx_last_error(), message);
  mx_clear_error();
}

static void expect_null(const void *got, mx_status want, const char *message) {
  cr_expect_null(got);
  expect_error(mx_last_status(), want, message);
}

static mx_tensor *forward_only(mx_module *m, const mx_tensor *x) { return mx_reshape(x, mx_shape_get(x)); }
static const mx_module_type plain_type = {.name = "Plain", .forward = forward_only};

Test(nn_errors, registration) {
  mx_clear_error();
  mx_module *m = mx_module_new(&plain_type, NULL);
  cr_assert_eq(mx_module_add_parameter(m, "w", mx_zeros(MX_SHAPE(2), MX_F32, MX_CPU)), MX_OK);
  expect_error(mx_module_add_parameter(m, "w", mx_zeros(MX_SHAPE(2), MX_F32, MX_CPU)), MX_INVALID_ARGUMENT,
               "mx_module_add_parameter: this Plain already has a parameter named 'w'");
  expect_error(mx_module_add_buffer(m, "w", mx_zeros(MX_SHAPE(2), MX_F32, MX_CPU)), MX_INVALID_ARGUMENT,
               "mx_module_add_buffer: this Plain already has a parameter named 'w'");
  expect_error(mx_module_add_child(m, "w", mx_relu_new()), MX_INVALID_ARGUMENT,
               "mx_module_add_child: this Plain already has a parameter named 'w'");
  expect_error(mx_module_add_parameter(m, "", mx_zeros(MX_SHAPE(2), MX_F32, MX_CPU)), MX_INVALID_ARGUMENT,
               "mx_module_add_parameter: a name cannot be empty");
  expect_error(mx_module_add_buffer(m, "a.b", mx_zeros(MX_SHAPE(2), MX_F32, MX_CPU)), MX_INVALID_ARGUMENT,
               "mx_module_add_buffer: name 'a.b' cannot contain '.'");
  expect_error(mx_module_add_parameter(m, NULL, mx_zeros(MX_SHAPE(2), MX_F32, MX_CPU)), MX_NULL_INPUT,
               "mx_module_add_parameter: argument 'name' is NULL");
  expect_error(mx_module_add_parameter(m, "idx", mx_zeros(MX_SHAPE(2), MX_I64, MX_CPU)), MX_DTYPE_ERROR,
               "mx_module_add_parameter: parameter 'idx' of Plain must be floating point, got int64");
  mx_scope *s = mx_scope_begin();
  mx_tensor *leaf = mx_ones(MX_SHAPE(2), MX_F32, MX_CPU);
  mx_set_requires_grad(leaf, true);
  expect_error(mx_module_add_parameter(m, "made", mx_mul_scalar(leaf, 2)), MX_INVALID_ARGUMENT,
               "mx_module_add_parameter: parameter 'made' of Plain is not a leaf (made by MULBackward); register "
               "mx_detach(t)");
  mx_scope_end(s);
  mx_tensor *w = mx_module_get_parameter(m, "w");
  expect_error(mx_module_add_parameter(m, "w2", w), MX_INVALID_ARGUMENT,
               "mx_module_add_parameter: the tensor for 'w2' is already registered in this module tree");
  mx_module *child = mx_relu_new();
  cr_assert_eq(mx_module_add_child(m, "child", child), MX_OK);
  expect_error(mx_module_add_buffer(child, "b", w), MX_INVALID_ARGUMENT,
               "mx_module_add_buffer: the tensor for 'b' is already registered in this module tree");
  cr_expect_eq(mx_at(w, MX_SHAPE(1)), 0); /* still alive */
  expect_error(mx_module_add_parameter(m, "none", NULL), MX_NULL_INPUT,
               "mx_module_add_parameter: argument 't' is NULL");
  expect_error(mx_module_add_buffer(NULL, "b", mx_zeros(MX_SHAPE(2), MX_F32, MX_CPU)), MX_NULL_INPUT,
               "mx_module_add_buffer: argument 'm' is NULL");
  /* a NULL input keeps the first message, so a failed constructor is reported once */
  expect_error(mx_module_add_child(m, "fc", mx_linear_new(-1, 2, true, NULL)), MX_NULL_INPUT,
               "mx_linear_new: in_features (-1) and out_features (2) must be >= 0");
  cr_expect_eq(mx_module_num_parameters(m), 1);
  cr_expect_eq(mx_module_num_buffers(m), 0);
  cr_expect_eq(mx_module_num_children(m), 1);
  mx_module_free(m);
}

Test(nn_errors, tree) {
  mx_clear_error();
  mx_module *a = mx_sequential_new(1, (mx_module *[]){mx_relu_new()});
  mx_module *b = mx_sequential_new(0, NULL);
  mx_module *relu = mx_module_child(a, 0, NULL);
  expect_error(mx_sequential_append(b, relu), MX_STATE_ERROR,
               "mx_module_add_child: the ReLU to add as '0' already belongs to a Sequential");
  expect_error(mx_module_add_child(relu, "loop", a), MX_INVALID_ARGUMENT,
               "mx_module_add_child: adding this Sequential under itself would make a cycle");
  expect_error(mx_module_add_child(a, "self", a), MX_INVALID_ARGUMENT,
               "mx_module_add_child: adding this Sequential under itself would make a cycle");
  mx_module_free(relu);
  expect_error(mx_last_status(), MX_STATE_ERROR,
               "mx_module_free: this ReLU is a child of a Sequential; free the root module instead");
  expect_null(mx_module_child(a, 1, NULL), MX_INDEX_ERROR,
              "mx_module_child: index 1 is out of range for a Sequential with 1 children");
  expect_null(mx_module_parameter(a, 0, NULL), MX_INDEX_ERROR,
              "mx_module_parameter: index 0 is out of range for a Sequential with 0 parameters");
  expect_null(mx_module_buffer(a, -1, NULL), MX_INDEX_ERROR,
              "mx_module_buffer: index -1 is out of range for a Sequential with 0 buffers");
  expect_null(mx_module_module(a, 2, NULL), MX_INDEX_ERROR,
              "mx_module_module: index 2 is out of range for a Sequential with 2 modules");
  expect_error(mx_sequential_append(relu, mx_relu_new()), MX_INVALID_ARGUMENT,
               "mx_sequential_append: the module is a ReLU, not a Sequential");
  expect_null(mx_sequential_new(3, (mx_module *[]){mx_relu_new(), NULL, mx_tanh_new()}), MX_NULL_INPUT,
              "mx_sequential_new: argument 'modules[1]' is NULL");
  expect_null(mx_sequential_new(2, (mx_module *[]){mx_dropout_new(2, NULL), mx_tanh_new()}), MX_INVALID_ARGUMENT,
              "mx_dropout_new: the probability p must be in [0, 1], got 2");
  expect_null(mx_residual_new(NULL, mx_relu_new()), MX_NULL_INPUT, "mx_residual_new: argument 'body' is NULL");
  expect_null(mx_module_new(NULL, NULL), MX_INVALID_ARGUMENT, "mx_module_new: the type is NULL");
  expect_null(mx_module_new(&(mx_module_type){.name = "NoForward"}, NULL), MX_INVALID_ARGUMENT,
              "mx_module_new: the type needs a name and a forward (or forward_n)");
  expect_null(mx_module_forward(a, NULL), MX_NULL_INPUT, "mx_module_forward: argument 'x' is NULL");
  mx_module_free(a);
  mx_module_free(b);
}

Test(nn_errors, forward_names_the_layer) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_module *net = mx_sequential_new(2, (mx_module *[]){mx_linear_new(4, 3, true, NULL),
                                                       mx_residual_new(mx_linear_new(5, 2, true, NULL), NULL)});
  mx_tensor *x = mx_zeros(MX_SHAPE(2, 4), MX_F32, MX_CPU);
  expect_null(mx_module_forward(net, x), MX_SHAPE_ERROR,
              "mx_module_forward: layer 1.body (Linear): mx_linear: input [2,3] and weight [2,5] do not fit: 3 input "
              "features, weight expects 5");
  mx_module *bn = mx_batch_norm2d_new(3, 1e-5, 0.1, true, true);
  expect_null(mx_module_forward(bn, mx_zeros(MX_SHAPE(2, 3, 4), MX_F32, MX_CPU)), MX_SHAPE_ERROR,
              "mx_module_forward: BatchNorm2d: expected a 4-d input (N, C, 2 spatial dims), got 3 dims");
  expect_null(mx_module_forward(bn, mx_zeros(MX_SHAPE(2, 4, 4, 4), MX_F32, MX_CPU)), MX_SHAPE_ERROR,
              "mx_module_forward: BatchNorm2d: expected 3 channels (dim 1), got 4");
  mx_module *bn1 = mx_batch_norm1d_new(3, 1e-5, 0.1, true, true);
  expect_null(mx_module_forward(bn1, mx_zeros(MX_SHAPE(2, 3, 4, 4), MX_F32, MX_CPU)), MX_SHAPE_ERROR,
              "mx_module_forward: BatchNorm1d: expected a 2-d or 3-d input (N, C[, L]), got 4 dims");
  mx_module *gn = mx_group_norm_new(2, 4, 1e-5, true);
  expect_null(mx_module_forward(gn, mx_zeros(MX_SHAPE(2, 6, 3), MX_F32, MX_CPU)), MX_SHAPE_ERROR,
              "mx_module_forward: GroupNorm: expected (N, 4, *) input, got 3 dims with 6 channels");
  mx_module *bil = mx_bilinear_new(2, 3, 1, true, NULL);
  expect_null(mx_module_forward(bil, mx_zeros(MX_SHAPE(4, 4), MX_F32, MX_CPU)), MX_SHAPE_ERROR,
              "mx_module_forward: Bilinear: expected the two inputs concatenated along the last dim (2 + 3 features), "
              "got 4");
  expect_null(mx_bilinear_forward(net, x, x), MX_INVALID_ARGUMENT,
              "mx_bilinear_forward: the module is a Sequential, not a Bilinear");
  mx_module *all[] = {net, bn, bn1, gn, bil};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) mx_module_free(all[i]);
  mx_scope_end(s);
}

Test(nn_errors, constructors) {
  mx_clear_error();
  expect_null(mx_conv2d_new(3, 4, MX_DIMS(3), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 2, true, NULL), MX_INVALID_ARGUMENT,
              "mx_conv2d_new: in_channels (3) and out_channels (4) must be divisible by groups (2)");
  expect_null(mx_conv1d_new(3, 4, MX_DIMS(3), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 0, true, NULL), MX_INVALID_ARGUMENT,
              "mx_conv1d_new: groups must be positive, got 0");
  expect_null(mx_conv3d_new(3, 4, MX_DIMS(3, 3), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1, true, NULL),
              MX_INVALID_ARGUMENT, "mx_conv3d_new: kernel needs 1 or 3 values, got 2");
  expect_null(mx_conv2d_new(3, 4, MX_DIMS(3), MX_DIMS(0), MX_DEFAULT, MX_DEFAULT, 1, true, NULL), MX_INVALID_ARGUMENT,
              "mx_conv2d_new: stride must be >= 1, got 0");
  expect_null(mx_conv2d_new(0, 4, MX_DIMS(3), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1, true, NULL), MX_INVALID_ARGUMENT,
              "mx_conv2d_new: in_channels (0) and out_channels (4) must be positive");
  expect_null(mx_conv_transpose2d_new(3, 4, MX_DIMS(3), MX_DIMS(2), MX_DEFAULT, MX_DIMS(2), MX_DEFAULT, 1, true, NULL),
              MX_INVALID_ARGUMENT,
              "mx_conv_transpose2d_new: output_padding 2 must be smaller than the stride (2) or the dilation (1) in "
              "dim 0");
  expect_null(mx_max_pool2d_new(MX_DIMS(2), MX_DEFAULT, MX_DIMS(2), MX_DEFAULT), MX_INVALID_ARGUMENT,
              "mx_max_pool2d_new: padding 2 must be at most half the kernel 2 (dim 0)");
  expect_null(mx_avg_pool1d_new(MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, true), MX_INVALID_ARGUMENT,
              "mx_avg_pool1d_new: kernel needs 1 or 1 values, got 0");
  expect_null(mx_adaptive_avg_pool2d_new(0, 2), MX_INVALID_ARGUMENT,
              "mx_adaptive_avg_pool2d_new: the output size (0, 2) must be positive");
  expect_null(mx_batch_norm2d_new(0, 1e-5, 0.1, true, true), MX_INVALID_ARGUMENT,
              "mx_batch_norm2d_new: num_features must be positive and eps >= 0, got 0 and 1e-05");
  expect_null(mx_group_norm_new(3, 4, 1e-5, true), MX_INVALID_ARGUMENT,
              "mx_group_norm_new: num_channels (4) must be divisible by num_groups (3), both positive, and eps >= 0 "
              "(got 1e-05)");
  expect_null(mx_layer_norm_new(MX_SHAPE(3, 0), 1e-5, true), MX_INVALID_ARGUMENT,
              "mx_layer_norm_new: normalized_shape needs 1 to 8 positive sizes (got 2 dims) and eps >= 0 (got 1e-05)");
  expect_null(mx_embedding_new(5, 2, 5, NULL), MX_INDEX_ERROR,
              "mx_embedding_new: padding_idx 5 is out of range for 5 embeddings");
  expect_null(mx_embedding_new(5, 0, MX_NO_PADDING_IDX, NULL), MX_INVALID_ARGUMENT,
              "mx_embedding_new: num_embeddings (5) and embedding_dim (0) must be positive");
  expect_null(mx_prelu_new(0, 0.25), MX_INVALID_ARGUMENT, "mx_prelu_new: num_parameters must be positive, got 0");
  expect_null(mx_bilinear_new(2, -3, 1, true, NULL), MX_INVALID_ARGUMENT,
              "mx_bilinear_new: the feature counts (2, -3, 1) must be >= 0");
  expect_null(mx_dropout_new(NAN, NULL), MX_INVALID_ARGUMENT,
              "mx_dropout_new: the probability p must be in [0, 1], got nan");
}

Test(nn_errors, init) {
  mx_clear_error();
  mx_scope *s = mx_scope_begin();
  mx_tensor *v = mx_empty(MX_SHAPE(5), MX_F32, MX_CPU);
  expect_error(mx_init_fans(v, NULL, NULL), MX_SHAPE_ERROR,
               "mx_init_fans: fan in and fan out cannot be computed for a tensor of fewer than 2 dims (got 1)");
  expect_error(mx_init_xavier_uniform_(v, 1, NULL), MX_SHAPE_ERROR,
               "mx_init_xavier_uniform_: mx_init_fans: fan in and fan out cannot be computed for a tensor of fewer "
               "than 2 dims (got 1)");
  expect_error(mx_init_uniform_(v, 1, 0, NULL), MX_INVALID_ARGUMENT,
               "mx_init_uniform_: the bounds need a <= b, got a = 1 and b = 0");
  expect_error(mx_init_normal_(v, 0, -1, NULL), MX_INVALID_ARGUMENT, "mx_init_normal_: std must be >= 0, got -1");
  expect_error(mx_init_normal_(mx_zeros(MX_SHAPE(2), MX_I64, MX_CPU), 0, 1, NULL), MX_DTYPE_ERROR,
               "mx_init_normal_: needs a floating tensor, got int64");
  expect_error(mx_init_kaiming_normal_(mx_empty(MX_SHAPE(2, 2), MX_F32, MX_CPU), 0, (mx_fan_mode)7, MX_GAIN_RELU, NULL),
               MX_INVALID_ARGUMENT, "mx_init_kaiming_normal_: mode 7 is neither MX_FAN_IN nor MX_FAN_OUT");
  expect_error(mx_init_kaiming_uniform_(mx_empty(MX_SHAPE(2, 2), MX_F32, MX_CPU), 0, MX_FAN_IN, (mx_nonlinearity)40,
                                        NULL),
               MX_INVALID_ARGUMENT, "mx_init_kaiming_uniform_: mx_init_calculate_gain: unknown nonlinearity 40");
  expect_error(mx_init_zeros_(NULL), MX_NULL_INPUT, "mx_init_constant_: argument 't' is NULL");
  mx_scope_end(s);
}
