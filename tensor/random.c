/* Random tensors from Philox generators: (seed, offset) is the whole state. */
#include <stdlib.h>

#include "tensor/tensor_impl.h"

struct mx_generator {
  _Atomic uint64_t seed;
  _Atomic uint64_t offset; /* the next Philox counter to draw */
};

static mx_generator default_generator = {67280421310721u, 0}; /* PyTorch's default seed */

mx_generator *mx_default_generator(void) { return &default_generator; }

mx_generator *mx_generator_new(uint64_t seed) {
  mx_generator *g = calloc(1, sizeof *g);
  if (!g) {
    mx__error(MX_OUT_OF_MEMORY, "mx_generator_new: out of memory");
    return NULL;
  }
  atomic_init(&g->seed, seed);
  atomic_init(&g->offset, 0);
  return g;
}

void mx_generator_free(mx_generator *gen) {
  if (gen != &default_generator) free(gen);
}

void mx_manual_seed(uint64_t seed) { mx_generator_set_state(&default_generator, seed, 0); }

void mx_generator_get_state(const mx_generator *gen, uint64_t *seed, uint64_t *offset) {
  mx_generator *g = gen ? (mx_generator *)gen : &default_generator;
  if (seed) *seed = atomic_load(&g->seed);
  if (offset) *offset = atomic_load(&g->offset);
}

void mx_generator_set_state(mx_generator *gen, uint64_t seed, uint64_t offset) {
  mx_generator *g = gen ? gen : &default_generator;
  atomic_store(&g->seed, seed);
  atomic_store(&g->offset, offset);
}

/* Reserves n counters: one Philox block per element. */
static mx_rand_params reserve(mx_generator *gen, mx_rand_kind kind, int64_t n) {
  mx_generator *g = gen ? gen : &default_generator;
  mx_rand_params p = {.kind = kind, .seed = atomic_load(&g->seed)};
  p.offset = atomic_fetch_add(&g->offset, (uint64_t)n);
  return p;
}

static mx_tensor *random_tensor(const char *op, mx_shape shape, mx_dtype dtype, mx_device device,
                                mx_generator *gen, mx_rand_params params) {
  mx_tensor *t = mx__tensor_alloc(op, shape, dtype, device);
  if (!t) return NULL;
  mx_rand_params drawn = reserve(gen, params.kind, mx_numel(t));
  params.seed = drawn.seed;
  params.offset = drawn.offset;
  mx_kview v = mx__kview_of(t);
  if (t->storage->backend->random(&v, &params) != MX_OK) {
    mx_release(t);
    return NULL;
  }
  return t;
}

static bool need_float(const char *op, mx_dtype dtype) {
  if (mx__check_dtype(op, dtype) != MX_OK) return false;
  if (mx_dtype_is_floating(dtype)) return true;
  mx__error(MX_DTYPE_ERROR, "%s: dtype %s is not a floating type", op, mx_dtype_name(dtype));
  return false;
}

mx_tensor *mx_rand(mx_shape shape, mx_dtype dtype, mx_device device, mx_generator *gen) {
  if (!need_float("mx_rand", dtype)) return NULL;
  return random_tensor("mx_rand", shape, dtype, device, gen,
                       (mx_rand_params){.kind = MX_RAND_UNIFORM, .a = 0, .b = 1});
}

mx_tensor *mx_randn(mx_shape shape, mx_dtype dtype, mx_device device, mx_generator *gen) {
  if (!need_float("mx_randn", dtype)) return NULL;
  return random_tensor("mx_randn", shape, dtype, device, gen,
                       (mx_rand_params){.kind = MX_RAND_NORMAL, .a = 0, .b = 1});
}

mx_tensor *mx_randint(int64_t low, int64_t high, mx_shape shape, mx_dtype dtype, mx_device device,
                      mx_generator *gen) {
  if (low >= high) {
    mx__error(MX_INVALID_ARGUMENT, "mx_randint: low %lld must be below high %lld", (long long)low,
              (long long)high);
    return NULL;
  }
  if (dtype == MX_BOOL) {
    mx__error(MX_DTYPE_ERROR, "mx_randint: dtype bool is not numeric");
    return NULL;
  }
  return random_tensor("mx_randint", shape, dtype, device, gen,
                       (mx_rand_params){.kind = MX_RAND_INT, .low = low, .high = high});
}

mx_tensor *mx_bernoulli_p(mx_shape shape, double p, mx_dtype dtype, mx_device device, mx_generator *gen) {
  if (!(p >= 0 && p <= 1)) {
    mx__error(MX_INVALID_ARGUMENT, "mx_bernoulli_p: probability %g is not in [0, 1]", p);
    return NULL;
  }
  return random_tensor("mx_bernoulli_p", shape, dtype, device, gen,
                       (mx_rand_params){.kind = MX_RAND_BERNOULLI, .a = p});
}

mx_tensor *mx_bernoulli(const mx_tensor *p, mx_generator *gen) {
  if (!p) {
    mx__null_input("mx_bernoulli", "p");
    return NULL;
  }
  mx_tensor *t = mx_empty_like(p);
  if (!t) return NULL;
  mx_rand_params params = reserve(gen, MX_RAND_BERNOULLI, mx_numel(t));
  mx_kview out = mx__kview_of(t), probs = mx__kview_of(p);
  if (t->storage->backend->bernoulli(&out, &probs, &params) != MX_OK) {
    mx_release(t);
    return NULL;
  }
  return t;
}
