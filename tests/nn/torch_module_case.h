/* What the module-against-PyTorch tests (test_rnn_torch.c, test_transformer_torch.c) share: a fixture's named
 * tensors, and setting a module's parameters to PyTorch's and comparing results bit for bit. */
#ifndef MX_TESTS_NN_TORCH_MODULE_CASE_H
#define MX_TESTS_NN_TORCH_MODULE_CASE_H

#include <stdbool.h>

#include "../ops/fixture_io.h"

/* A tensor of a fixture case with its name ("weight_ih_l0", "out", ...). */
typedef struct {
  char name[48];
  fx_tensor t;
} torch_named;

/* The tensor called name among list's n, or NULL. */
const fx_tensor *torch_find(const torch_named *list, int n, const char *name);

bool torch_same_shape(mx_shape a, mx_shape b);

/* Expects a and b (float32) to hold the very same floats; id and what name the case and the tensor. */
void torch_expect_identical(const char *id, const char *what, const mx_tensor *a, const mx_tensor *b);

/* Asserts the module's parameters are PyTorch's n, name for name and shape for shape, in named_parameters() order,
 * and gives them its values. */
void torch_set_parameters(const char *id, const torch_named *param, int n, mx_module *m);

#endif
