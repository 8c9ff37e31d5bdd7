/* Activation layers: ReLU, LeakyReLU, PReLU, GELU, SiLU, Tanh, Sigmoid, Softmax, LogSoftmax. */
#include <stdlib.h>

#include "nn/nn_internal.h"

typedef struct {
  double slope;     /* LeakyReLU */
  bool tanh;        /* GELU's approximation */
  int dim;          /* Softmax, LogSoftmax */
  int64_t count;    /* PReLU's parameters */
  mx_tensor *weight; /* PReLU */
} act_self;

/* A module of type with the given settings. */
static mx_module *act_new(const mx_module_type *type, act_self settings) {
  mx_module *m = mx__module_alloc(type, sizeof(act_self));
  if (m) *(act_self *)mx_module_self(m) = settings;
  return m;
}

static mx_tensor *relu_forward(mx_module *m, const mx_tensor *x) { return mx_relu(x); }
static mx_tensor *silu_forward(mx_module *m, const mx_tensor *x) { return mx_silu(x); }
static mx_tensor *tanh_forward(mx_module *m, const mx_tensor *x) { return mx_tanh(x); }
static mx_tensor *sigmoid_forward(mx_module *m, const mx_tensor *x) { return mx_sigmoid(x); }

static const mx_module_type relu_type = {.name = "ReLU", .forward = relu_forward, .free_self = free};
static const mx_module_type silu_type = {.name = "SiLU", .forward = silu_forward, .free_self = free};
static const mx_module_type tanh_type = {.name = "Tanh", .forward = tanh_forward, .free_self = free};
static const mx_module_type sigmoid_type = {.name = "Sigmoid", .forward = sigmoid_forward, .free_self = free};

mx_module *mx_relu_new(void) { return act_new(&relu_type, (act_self){0}); }
bool mx__module_is_relu(const mx_module *m) { return mx_module_type_of(m) == &relu_type; }
mx_module *mx_silu_new(void) { return act_new(&silu_type, (act_self){0}); }
mx_module *mx_tanh_new(void) { return act_new(&tanh_type, (act_self){0}); }
mx_module *mx_sigmoid_new(void) { return act_new(&sigmoid_type, (act_self){0}); }

/* --- LeakyReLU --------------------------------------------------------------------------------------------------- */

static mx_tensor *leaky_relu_forward(mx_module *m, const mx_tensor *x) {
  return mx_leaky_relu(x, ((const act_self *)mx_module_self(m))->slope);
}

static void leaky_relu_extra(const mx_module *m, char *buf, size_t size) {
  char slope[32];
  mx__float_repr(slope, sizeof slope, ((const act_self *)mx_module_self(m))->slope);
  snprintf(buf, size, "negative_slope=%s", slope);
}

static const mx_module_type leaky_relu_type = {.name = "LeakyReLU", .forward = leaky_relu_forward, .free_self = free,
                                               .extra = leaky_relu_extra};

mx_module *mx_leaky_relu_new(double negative_slope) {
  return act_new(&leaky_relu_type, (act_self){.slope = negative_slope});
}

/* --- PReLU -------------------------------------------------------------------------------------------------------- */

static mx_tensor *prelu_forward(mx_module *m, const mx_tensor *x) {
  return mx_prelu(x, ((const act_self *)mx_module_self(m))->weight);
}

static void prelu_extra(const mx_module *m, char *buf, size_t size) {
  snprintf(buf, size, "num_parameters=%lld", (long long)((const act_self *)mx_module_self(m))->count);
}

static const mx_module_type prelu_type = {.name = "PReLU", .forward = prelu_forward, .free_self = free,
                                          .extra = prelu_extra};

mx_module *mx_prelu_new(int64_t num_parameters, double init) {
  if (num_parameters <= 0) {
    mx__error(MX_INVALID_ARGUMENT, "mx_prelu_new: num_parameters must be positive, got %lld",
              (long long)num_parameters);
    return NULL;
  }
  mx_module *m = act_new(&prelu_type, (act_self){.count = num_parameters});
  if (!m) return NULL;
  act_self *s = mx_module_self(m);
  if (!(s->weight = mx__add_parameter(m, "weight", MX_SHAPE(num_parameters))) ||
      mx_init_constant_(s->weight, init) != MX_OK) {
    mx_module_free(m);
    return NULL;
  }
  return m;
}

/* --- GELU --------------------------------------------------------------------------------------------------------- */

static mx_tensor *gelu_forward(mx_module *m, const mx_tensor *x) {
  return ((const act_self *)mx_module_self(m))->tanh ? mx_gelu_tanh(x) : mx_gelu(x);
}

static void gelu_extra(const mx_module *m, char *buf, size_t size) {
  snprintf(buf, size, "approximate='%s'", ((const act_self *)mx_module_self(m))->tanh ? "tanh" : "none");
}

static const mx_module_type gelu_type = {.name = "GELU", .forward = gelu_forward, .free_self = free,
                                         .extra = gelu_extra};

mx_module *mx_gelu_new(bool tanh_approximation) { return act_new(&gelu_type, (act_self){.tanh = tanh_approximation}); }

/* --- Softmax, LogSoftmax ----------------------------------------------------------------------------------------- */

static mx_tensor *softmax_forward(mx_module *m, const mx_tensor *x) {
  return mx_softmax(x, ((const act_self *)mx_module_self(m))->dim);
}
static mx_tensor *log_softmax_forward(mx_module *m, const mx_tensor *x) {
  return mx_log_softmax(x, ((const act_self *)mx_module_self(m))->dim);
}

static void dim_extra(const mx_module *m, char *buf, size_t size) {
  snprintf(buf, size, "dim=%d", ((const act_self *)mx_module_self(m))->dim);
}

static const mx_module_type softmax_type = {.name = "Softmax", .forward = softmax_forward, .free_self = free,
                                            .extra = dim_extra};
static const mx_module_type log_softmax_type = {.name = "LogSoftmax", .forward = log_softmax_forward,
                                                .free_self = free, .extra = dim_extra};

mx_module *mx_softmax_new(int dim) { return act_new(&softmax_type, (act_self){.dim = dim}); }
mx_module *mx_log_softmax_new(int dim) { return act_new(&log_softmax_type, (act_self){.dim = dim}); }
