/* Summaries: the exact table for small models, modes and statistics left as they were, failures. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

/* What mx_module_summary prints for m and input_shape (the caller frees it); asserts success. */
static char *summary_text(mx_module *m, mx_shape input_shape) {
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  cr_assert_not_null(f);
  cr_assert_eq(mx_module_summary(m, input_shape, f), MX_OK, "%s", mx_last_error());
  fclose(f);
  return text;
}

static mx_module *conv_net(void) {
  mx_module *net = mx_sequential_new(5, (mx_module *[]){
      mx_conv2d_new(1, 4, MX_DIMS(3), MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1, true, NULL),
      mx_batch_norm2d_new(4, 1e-5, 0.1, true, true), mx_relu_new(), mx_flatten_new(1, -1),
      mx_linear_new(4 * 8 * 8, 10, true, NULL)});
  cr_assert_not_null(net, "%s", mx_last_error());
  return net;
}

Test(nn_summary, conv_net_table) {
  mx_module *net = conv_net();
  char *text = summary_text(net, MX_SHAPE(2, 1, 8, 8));
  const char *want =
      "------------------------------------------------------------------------------------------------------------\n"
      "Layer  Type                                                                            Output shape  Param #\n"
      "============================================================================================================\n"
      "0      Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))                 [2, 4, 8, 8]       40\n"
      "1      BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)  [2, 4, 8, 8]        8\n"
      "2      ReLU()                                                                          [2, 4, 8, 8]        0\n"
      "3      Flatten(start_dim=1, end_dim=-1)                                                [2, 256]            0\n"
      "4      Linear(in_features=256, out_features=10, bias=True)                             [2, 10]         2,570\n"
      "============================================================================================================\n"
      "Total params: 2,618\n"
      "Trainable params: 2,618\n"
      "Non-trainable params: 0\n"
      "Input shape: [2, 1, 8, 8]\n"
      "Output shape: [2, 10]\n"
      "------------------------------------------------------------------------------------------------------------\n";
  cr_expect_str_eq(text, want);
  free(text);
  mx_module_free(net);
}

/* A custom module with a parameter of its own and a child it never calls. */
static mx_tensor *scaled_forward(mx_module *m, const mx_tensor *x) {
  return mx_mul(mx_module_forward(mx_module_get_child(m, "inner"), x), mx_module_get_parameter(m, "scale"));
}
static const mx_module_type scaled_type = {.name = "Scaled", .forward = scaled_forward};

Test(nn_summary, own_parameters_frozen_ones_and_unused_children) {
  mx_module *m = mx_module_new(&scaled_type, NULL);
  cr_assert_eq(mx_module_add_parameter(m, "scale", mx_ones(MX_SHAPE(3), MX_F32, MX_CPU)), MX_OK);
  cr_assert_eq(mx_module_add_child(m, "inner", mx_linear_new(1000, 3, false, NULL)), MX_OK);
  cr_assert_eq(mx_module_add_child(m, "spare", mx_conv_transpose2d_new(2, 4, MX_DIMS(2, 3), MX_DIMS(2), MX_DEFAULT,
                                                                       MX_DIMS(1), MX_DEFAULT, 2, false, NULL)),
               MX_OK);
  mx_set_requires_grad(mx_module_get_parameter(m, "spare.weight"), false);
  char *text = summary_text(m, MX_SHAPE(5, 1000));
  const char *want =
      "-------------------------------------------------------------------"
      "-----------------------------------------------------------------\n"
      "Layer   Type                                                       "
      "                                            Output shape  Param #\n"
      "==================================================================="
      "=================================================================\n"
      "(root)  Scaled()                                                   "
      "                                            [5, 3]              3\n"
      "inner   Linear(in_features=1000, out_features=3, bias=False)       "
      "                                            [5, 3]          3,000\n"
      "spare   ConvTranspose2d(2, 4, kernel_size=(2, 3), stride=(2, 2), ou"
      "tput_padding=(1, 1), groups=2, bias=False)  -                  24\n"
      "==================================================================="
      "=================================================================\n"
      "Total params: 3,027\n"
      "Trainable params: 3,003\n"
      "Non-trainable params: 24\n"
      "Input shape: [5, 1000]\n"
      "Output shape: [5, 3]\n"
      "-------------------------------------------------------------------"
      "-----------------------------------------------------------------\n";
  cr_expect_str_eq(text, want);
  free(text);
  mx_module_free(m);
}

Test(nn_summary, restores_modes_and_leaves_statistics) {
  mx_module *net = conv_net();
  mx_module_train(mx_module_get_child(net, "2"), false); /* one child in eval, the rest training */
  char *text = summary_text(net, MX_SHAPE(2, 1, 8, 8));
  free(text);
  cr_expect(mx_module_is_training(net));
  cr_expect(mx_module_is_training(mx_module_get_child(net, "1")));
  cr_expect_not(mx_module_is_training(mx_module_get_child(net, "2")));
  cr_expect_eq(mx_item(mx_module_get_buffer(net, "1.num_batches_tracked")), 0); /* ran in eval mode */
  cr_expect_eq(mx_at(mx_module_get_buffer(net, "1.running_var"), MX_SHAPE(0)), 1);
  for (int i = 0; i < mx_module_num_parameters(net); i++) cr_expect_null(mx_grad_of(mx_module_parameter(net, i, NULL)));
  mx_module_free(net);
}

Test(nn_summary, given_input_and_failures) {
  mx_module *emb = mx_sequential_new(2, (mx_module *[]){mx_embedding_new(10, 3, MX_NO_PADDING_IDX, NULL),
                                                        mx_flatten_new(1, -1)});
  mx_clear_error();
  cr_expect_eq(mx_module_summary(emb, MX_SHAPE(2, 4), stdout), MX_DTYPE_ERROR); /* zeros are float32 */
  cr_expect_str_eq(mx_last_error(), "mx_module_summary: mx_module_forward: layer 0 (Embedding): mx_embedding: indices "
                                    "must be int64, got float32");
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  mx_scope *s = mx_scope_begin();
  cr_assert_eq(mx_module_summary_input(emb, mx_zeros(MX_SHAPE(2, 4), MX_I64, MX_CPU), f), MX_OK, "%s", mx_last_error());
  mx_scope_end(s);
  fclose(f);
  cr_expect(strstr(text, "0      Embedding(10, 3)                  [2, 4, 3]          30\n"), "%s", text);
  cr_expect(strstr(text, "Output shape: [2, 12]\n"), "%s", text);
  free(text);
  mx_module_free(emb);
}
