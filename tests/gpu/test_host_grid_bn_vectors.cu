/* Host-run CUDA batch_norm_vectors (kernels/cuda/batch_norm_vectors.cu) against the CPU's, bit for bit: both
 * formulas, with and without their optional parts (running statistics; dx's coefficients), float32 and float64
 * vectors of 0 to 600 channels (several grid-stride rounds under small grid caps), awkward and positive values. */
#include "tests/gpu/host_grid.h"

static const mx_backend &cpu = mx__cpu_backend;

static host_tensor vector_of(mx_dtype dtype, int64_t channels, value_kind kind, rng &r) {
  host_tensor t = make_tensor(dtype, 1, &channels, CONTIGUOUS, r);
  fill_values(t, kind, r);
  return t;
}

void test_batch_norm_vectors(rng &r) {
  static const double eps[3] = {1e-5, 1e-3, 0}, momentum[3] = {0.1, 1.0 / 3, 0.9};
  for (int round = 0; round < rounds(40); round++)
    for (mx_dtype dtype : {MX_F32, MX_F64}) {
      pick_grid_cap(r);
      int64_t channels = r.range(0, 5) ? r.range(1, 600) : r.range(0, 3);
      bool forward = r.range(0, 1), optional = r.range(0, 1);
      double count = r.range(0, 3) ? (double)r.range(2, 100000) : 2;
      describe("batch_norm_vectors %s, %s, %lld channels, %s", forward ? "forward" : "backward",
               mx_dtype_name(dtype), (long long)channels,
               optional ? (forward ? "running statistics" : "dx's coefficients") : "no optional part");
      /* var positive or awkward (NaN from a negative one, infinities), the others awkward */
      host_tensor in[8];
      for (int k = 0; k < 8; k++) in[k] = vector_of(dtype, channels, k == 1 && r.range(0, 2) ? POSITIVE : AWKWARD, r);
      host_tensor out_a[4], out_b[4], running_a[2], running_b[2];
      for (int k = 0; k < 4; k++) out_a[k] = vector_of(dtype, channels, AWKWARD, r), out_b[k] = out_a[k];
      for (int k = 0; k < 2; k++) running_a[k] = vector_of(dtype, channels, k ? POSITIVE : AWKWARD, r);
      for (int k = 0; k < 2; k++) running_b[k] = running_a[k];
      mx_bn_vectors a;
      memset(&a, 0, sizeof a);
      a.eps = eps[r.range(0, 2)], a.momentum = momentum[r.range(0, 2)], a.count = count;
      a.var = &in[1].v;
      if (forward) {
        a.mean = &in[0].v, a.weight = &in[2].v, a.bias = &in[3].v, a.scale = &out_a[0].v, a.shift = &out_a[1].v;
        if (optional) a.running_mean = &running_a[0].v, a.running_var = &running_a[1].v;
      } else {
        a.sum_gxc = &in[4].v, a.dweight = &out_a[0].v;
        if (optional) {
          a.weight = &in[2].v, a.sum_g = &in[5].v, a.grad_mean = &in[6].v, a.grad_var = &in[7].v;
          a.scale = &out_a[1].v, a.xc_scale = &out_a[2].v, a.shift = &out_a[3].v;
        }
      }
      mx_bn_vectors b = a; /* the same inputs, outputs and running statistics of its own */
      host_tensor *outs_a[6] = {&out_a[0], &out_a[1], &out_a[2], &out_a[3], &running_a[0], &running_a[1]};
      host_tensor *outs_b[6] = {&out_b[0], &out_b[1], &out_b[2], &out_b[3], &running_b[0], &running_b[1]};
      const mx_kview **slots[6] = {&b.scale, &b.shift, &b.xc_scale, &b.dweight, &b.running_mean, &b.running_var};
      for (int s = 0; s < 6; s++)
        for (int k = 0; k < 6; k++)
          if (*slots[s] == &outs_a[k]->v) *slots[s] = &outs_b[k]->v;
      check_status(cpu.batch_norm_vectors(forward ? MX_BN_VECTORS_FORWARD : MX_BN_VECTORS_BACKWARD, &a),
                   mx__cuda_batch_norm_vectors(forward ? MX_BN_VECTORS_FORWARD : MX_BN_VECTORS_BACKWARD, &b),
                   "batch_norm_vectors");
      const char *names[6] = {"out 0", "out 1", "out 2", "out 3", "running mean", "running var"};
      for (int k = 0; k < 6; k++) same_values(*outs_a[k], *outs_b[k], 0, 0, names[k]);
    }
}
