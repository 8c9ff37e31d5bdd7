/* Host-run CUDA kernels against the CPU backend (tests/gpu/host_grid.h):
 * fill, convert, random and bernoulli, the elementwise ops, indexing, AMP's
 * unscale, histograms and scale update, and the optimizer steps, on random shapes in
 * every layout and grid cap. */
#include <math.h>
#include <string.h>

#include "kernels/elementwise.h"
#include "tests/gpu/host_grid.h"

static const mx_backend &cpu = mx__cpu_backend;

static layout out_layout(rng &r) { return (layout)r.range(0, BROADCAST - 1); }
static layout in_layout(rng &r) { return (layout)r.range(0, LAYOUT_COUNT - 1); }
/* An input's layout: half the time the output's, so that every operand
 * sharing one layout (flatten_operands) comes up often. */
static layout in_layout_like(layout out, rng &r) { return r.range(0, 1) ? out : in_layout(r); }

void test_fill_convert_random(rng &r) {
  for (int round = 0; round < rounds(12); round++)
    for (mx_dtype dtype : every_dtype) {
      pick_grid_cap(r);
      int64_t shape[4];
      int ndim = (int)r.range(0, 4);
      random_shape(r, ndim, 13, 6, shape);
      layout how = out_layout(r);
      describe("fill %s, %d dims, layout %d", mx_dtype_name(dtype), ndim, how);
      host_tensor a = make_tensor(dtype, ndim, shape, how, r), b;
      fill_values(a, AWKWARD, r);
      b = a;
      double value = dtype == MX_BOOL           ? (double)r.range(0, 1)
                     : mx_dtype_floating(dtype) ? awkward_value(r)
                                                : (double)r.range(-99, 99);
      check_status(cpu.fill(&a.v, value), mx__cuda_fill(&b.v, value), "fill");
      same_values(a, b, 0, 0, "fill");

      mx_dtype from = every_dtype[r.range(0, 7)];
      describe("convert %s to %s, %d dims, layout %d", mx_dtype_name(from), mx_dtype_name(dtype), ndim, how);
      host_tensor src = make_tensor(from, ndim, shape, in_layout_like(how, r), r);
      fill_values(src, AWKWARD, r);
      check_status(cpu.convert(&a.v, &src.v), mx__cuda_convert(&b.v, &src.v), "convert");
      same_values(a, b, 0, 0, "convert");

      mx_rand_params p;
      memset(&p, 0, sizeof p);
      p.kind = mx_dtype_floating(dtype) ? (mx_rand_kind)r.range(0, 3) : MX_RAND_INT;
      p.a = r.unit(), p.b = 1 + r.unit();
      p.low = dtype == MX_BOOL ? 0 : r.range(-5, 0);
      p.high = dtype == MX_BOOL ? 2 : p.low + r.range(1, 9);
      p.seed = r.next(), p.offset = r.next() >> 8;
      describe("random kind %d into %s, %d dims, layout %d", p.kind, mx_dtype_name(dtype), ndim, how);
      check_status(cpu.random(&a.v, &p), mx__cuda_random(&b.v, &p), "random");
      same_values(a, b, 0, 0, "random");

      describe("bernoulli into %s, %d dims, layout %d", mx_dtype_name(dtype), ndim, how);
      host_tensor prob = make_tensor(float_dtypes[r.range(0, 3)], ndim, shape, in_layout(r), r);
      fill_values(prob, POSITIVE, r);
      check_status(cpu.bernoulli(&a.v, &prob.v, &p), mx__cuda_bernoulli(&b.v, &prob.v, &p), "bernoulli");
      same_values(a, b, 0, 0, "bernoulli");
    }
}

void test_elementwise(rng &r) {
  for (int round = 0; round < rounds(3); round++)
    for (mx_dtype dtype : every_dtype) {
      for (int code = 0; code < MX_UN_COUNT; code++) {
        if (!mx_dtype_floating(dtype) && !mx__unary_has_int(code)) continue;
        pick_grid_cap(r);
        int64_t shape[4];
        int ndim = (int)r.range(0, 4);
        random_shape(r, ndim, 11, 8, shape);
        layout how = out_layout(r), from = in_layout_like(how, r);
        describe("unary %d on %s, %d dims, layouts %d <- %d", code, mx_dtype_name(dtype), ndim, how, from);
        host_tensor in = make_tensor(dtype, ndim, shape, from, r), a = make_tensor(dtype, ndim, shape, how, r), b;
        fill_values(in, AWKWARD, r);
        fill_values(a, AWKWARD, r);
        b = a;
        double x = r.range(-3, 3) + 0.5 * r.range(0, 1), y = x + r.range(0, 4);
        check_status(cpu.unary(code, &a.v, &in.v, x, y), mx__cuda_unary(code, &b.v, &in.v, x, y), "unary");
        same_values(a, b, 0, 0, "unary"); /* the same libm calls on both sides */
      }
      for (int code = 0; code < MX_BIN_COUNT; code++) {
        if (!mx_dtype_floating(dtype) && !mx__binary_has_int(code)) continue;
        pick_grid_cap(r);
        int64_t shape[4];
        int ndim = (int)r.range(0, 4);
        random_shape(r, ndim, 11, 8, shape);
        layout how = out_layout(r), lx = in_layout_like(how, r), ly = in_layout_like(how, r);
        mx_dtype out_dtype = code >= MX_BIN_EQ ? MX_BOOL : dtype;
        describe("binary %d on %s, %d dims, layouts %d <- %d, %d", code, mx_dtype_name(dtype), ndim, how, lx, ly);
        host_tensor x = make_tensor(dtype, ndim, shape, lx, r), y = make_tensor(dtype, ndim, shape, ly, r);
        host_tensor a = make_tensor(out_dtype, ndim, shape, how, r), b;
        fill_values(x, AWKWARD, r);
        fill_values(y, AWKWARD, r);
        fill_values(a, AWKWARD, r);
        b = a;
        double alpha = r.range(-2, 2) + 0.25 * r.range(0, 3);
        check_status(cpu.binary(code, &a.v, &x.v, &y.v, alpha), mx__cuda_binary(code, &b.v, &x.v, &y.v, alpha),
                     "binary");
        same_values(a, b, 0, 0, "binary");
      }
      pick_grid_cap(r);
      int64_t shape[4];
      int ndim = (int)r.range(0, 4);
      random_shape(r, ndim, 11, 8, shape);
      describe("where on %s, %d dims", mx_dtype_name(dtype), ndim);
      layout how = out_layout(r);
      host_tensor cond = make_tensor(MX_BOOL, ndim, shape, in_layout_like(how, r), r);
      host_tensor x = make_tensor(dtype, ndim, shape, in_layout_like(how, r), r),
                  y = make_tensor(dtype, ndim, shape, in_layout_like(how, r), r);
      host_tensor a = make_tensor(dtype, ndim, shape, how, r), b;
      fill_values(cond, AWKWARD, r);
      fill_values(x, AWKWARD, r);
      fill_values(y, AWKWARD, r);
      b = a;
      check_status(cpu.where(&a.v, &cond.v, &x.v, &y.v), mx__cuda_where(&b.v, &cond.v, &x.v, &y.v), "where");
      same_values(a, b, 0, 0, "where");
    }
}

/* Indices in [0, size), one in bad_odds out of range. */
static void fill_indices(host_tensor &index, int64_t size, int bad_odds, rng &r) {
  int64_t *p = (int64_t *)index.store.data();
  for (int64_t i = 0; i < index.slots(); i++)
    p[i] = bad_odds && r.range(1, bad_odds) == 1 ? (r.range(0, 1) ? size : -1) : r.range(0, size > 0 ? size - 1 : 0);
}

void test_indexing(rng &r) {
  for (int round = 0; round < rounds(60); round++) {
    pick_grid_cap(r);
    mx_dtype dtype = every_dtype[r.range(0, 7)];
    int ndim = (int)r.range(1, 4), dim = (int)r.range(0, ndim - 1);
    int64_t shape[4], other[4];
    random_shape(r, ndim, 7, 10, shape);
    memcpy(other, shape, sizeof shape);
    other[dim] = r.range(1, 6);
    int bad_odds = r.range(0, 3) == 0 ? 40 : 0;
    errors_expected = bad_odds > 0; /* an index out of range fails both alike */

    /* gather: out and index of shape, x of other */
    describe("gather %s, %d dims along %d", mx_dtype_name(dtype), ndim, dim);
    host_tensor x = make_tensor(dtype, ndim, other, in_layout(r), r),
                index = make_tensor(MX_I64, ndim, shape, in_layout(r), r);
    host_tensor a = make_tensor(dtype, ndim, shape, out_layout(r), r), b;
    fill_values(x, AWKWARD, r);
    fill_indices(index, other[dim], bad_odds, r);
    b = a;
    mx_status sa = cpu.gather(&a.v, &x.v, &index.v, dim), sb = mx__cuda_gather(&b.v, &x.v, &index.v, dim);
    check_status(sa, sb, "gather");
    if (sa == MX_OK) same_values(a, b, 0, 0, "gather");

    /* index_select: out of shape, x of other, a 1-d index of shape[dim] */
    describe("index_select %s, %d dims along %d", mx_dtype_name(dtype), ndim, dim);
    host_tensor line = make_tensor(MX_I64, 1, &shape[dim], r.range(0, 1) ? GAPPED : CONTIGUOUS, r);
    fill_indices(line, other[dim], bad_odds, r);
    a = make_tensor(dtype, ndim, shape, out_layout(r), r);
    b = a;
    sa = cpu.index_select(&a.v, &x.v, &line.v, dim), sb = mx__cuda_index_select(&b.v, &x.v, &line.v, dim);
    check_status(sa, sb, "index_select");
    if (sa == MX_OK) same_values(a, b, 0, 0, "index_select");

    /* scatter(-add): out of other, index and src of shape; index_add/copy: a 1-d index */
    if (dtype == MX_BOOL) {
      errors_expected = false;
      continue;
    }
    host_tensor src = make_tensor(dtype, ndim, shape, in_layout(r), r);
    fill_values(src, SMALL_INT, r);
    for (int accumulate = 0; accumulate < 2; accumulate++) {
      describe("scatter%s %s, %d dims along %d", accumulate ? "_add" : "", mx_dtype_name(dtype), ndim, dim);
      a = make_tensor(dtype, ndim, other, out_layout(r), r);
      fill_values(a, SMALL_INT, r);
      b = a;
      sa = cpu.scatter(&a.v, &index.v, &src.v, dim, accumulate),
      sb = mx__cuda_scatter(&b.v, &index.v, &src.v, dim, accumulate);
      check_status(sa, sb, "scatter");
      if (sa == MX_OK) same_values(a, b, 0, 0, "scatter");

      describe("index_%s %s, %d dims along %d", accumulate ? "add" : "copy", mx_dtype_name(dtype), ndim, dim);
      a = make_tensor(dtype, ndim, other, out_layout(r), r);
      fill_values(a, AWKWARD, r);
      b = a;
      double alpha = r.range(-2, 2) + 0.5;
      sa = cpu.index_add(&a.v, &line.v, &src.v, dim, alpha, accumulate);
      sb = mx__cuda_index_add(&b.v, &line.v, &src.v, dim, alpha, accumulate);
      check_status(sa, sb, "index_add");
      if (sa == MX_OK) same_values(a, b, 0, 0, "index_add");
    }
    errors_expected = false;
  }
}

/* n tensors of random shapes (up to 4 dims), dtypes from `dtypes`, in
 * random layouts (or, dense, each row-major or channels-last: a kernel's
 * dense float32 path, which takes channels-last weights' gradients too). */
static std::vector<host_tensor> tensor_list(int n, const mx_dtype *dtypes, int n_dtypes, value_kind kind, rng &r,
                                            bool dense = false) {
  std::vector<host_tensor> list;
  for (int t = 0; t < n; t++) {
    int64_t shape[4];
    int ndim = (int)r.range(0, 4);
    random_shape(r, ndim, ndim == 4 ? 5 : 9, 8, shape);
    layout how = dense ? (r.range(0, 1) ? CHANNELS_LAST : CONTIGUOUS) : out_layout(r);
    list.push_back(make_tensor(dtypes[r.range(0, n_dtypes - 1)], ndim, shape, how, r));
    fill_values(list.back(), kind, r);
  }
  return list;
}

void test_amp(rng &r) {
  static const mx_dtype grad_dtypes[] = {MX_F32, MX_F64, MX_BF16};
  for (int round = 0; round < rounds(40); round++) {
    pick_grid_cap(r);
    /* past one launch's gradients (185 in CUDA 13's 32 KiB of arguments) a quarter of the rounds */
    int n = (int)r.range(1, r.range(0, 3) ? 45 : MX_CUDA_UNSCALE_PER_LAUNCH + 30);
    bool dense_f32 = r.range(0, 2) == 0; /* the kernel's float32 path: autocast's gradients */
    describe("amp_unscale of %d %sgradients", n, dense_f32 ? "dense float32 " : "");
    value_kind kind = r.range(0, 2) ? POSITIVE : AWKWARD;
    std::vector<host_tensor> a = tensor_list(n, grad_dtypes, dense_f32 ? 1 : 3, kind, r, dense_f32), b = a;
    std::vector<mx_kview> va, vb;
    for (int t = 0; t < n; t++) va.push_back(a[t].v), vb.push_back(b[t].v);
    float scale = (float)ldexp(1.0, (int)r.range(-3, 20)), found_a = 0, found_b = 0;
    std::vector<int64_t> stats_a(3 * n, 7), stats_b(3 * n, 7);
    bool with_stats = r.range(0, 1);
    check_status(cpu.amp_unscale(n, va.data(), &scale, &found_a, with_stats ? stats_a.data() : NULL),
                 mx__cuda_amp_unscale(n, vb.data(), &scale, &found_b, with_stats ? stats_b.data() : NULL),
                 "amp_unscale");
    for (int t = 0; t < n; t++) same_values(a[t], b[t], 0, 0, "amp_unscale");
    check(found_a == found_b, "amp_unscale found_inf: CPU %g, host grid %g", found_a, found_b);
    check(stats_a == stats_b, "amp_unscale statistics differ");

    /* past the 8 gradients of one histogram launch */
    int hn = n < 20 ? n : 20;
    describe("amp_unscale_histogram of %d gradients", hn);
    a = tensor_list(hn, grad_dtypes, 3, r.range(0, 2) ? POSITIVE : AWKWARD, r), b = a;
    va.clear(), vb.clear();
    for (int t = 0; t < hn; t++) va.push_back(a[t].v), vb.push_back(b[t].v);
    std::vector<int64_t> hist_a((size_t)2 * hn * MX_AMP_HIST_BINS, 3), hist_b = hist_a;
    found_a = found_b = 0;
    check_status(
        cpu.amp_unscale_histogram(hn, va.data(), &scale, &found_a, with_stats ? stats_a.data() : NULL, hist_a.data()),
        mx__cuda_amp_unscale_histogram(hn, vb.data(), &scale, &found_b, with_stats ? stats_b.data() : NULL,
                                       hist_b.data()),
        "amp_unscale_histogram");
    for (int t = 0; t < hn; t++) same_values(a[t], b[t], 0, 0, "amp_unscale_histogram");
    check(found_a == found_b, "amp_unscale_histogram found_inf: CPU %g, host grid %g", found_a, found_b);
    check(stats_a == stats_b, "amp_unscale_histogram statistics differ");
    check(hist_a == hist_b, "amp_unscale_histogram histograms differ");

    describe("amp_histogram of %s", mx_dtype_name(a[0].v.dtype));
    hist_a.assign(MX_AMP_HIST_BINS, 1), hist_b = hist_a;
    check_status(cpu.amp_histogram(&a[0].v, hist_a.data()), mx__cuda_amp_histogram(&b[0].v, hist_b.data()),
                 "amp_histogram");
    check(hist_a == hist_b, "amp_histogram histograms differ");

    /* the update reads its flag, then clears it and the counts when asked (the GradScaler's next check's) */
    bool clearing = r.range(0, 1);
    describe("amp_update_scale%s", clearing ? ", clearing its flag and counts" : "");
    mx_amp_update_params p = {2.0, 0.5, (int32_t)r.range(1, 4), r.range(0, 1) ? 0.0 : 1.0,
                              r.range(0, 1) ? 0.0 : 65536.0};
    float scale_a = scale, scale_b = scale, flag = (float)r.range(0, 1), found_c = flag, found_d = flag;
    int32_t tracker_a = (int32_t)r.range(0, 3), tracker_b = tracker_a;
    int64_t counters_a[3] = {5, 1, 1}, counters_b[3] = {5, 1, 1};
    stats_a.assign(stats_a.size(), 7), stats_b = stats_a;
    mx_amp_clear clear_a{}, clear_b{};
    if (clearing) {
      clear_a = {&found_c, stats_a.data(), (int64_t)stats_a.size()};
      clear_b = {&found_d, stats_b.data(), (int64_t)stats_b.size()};
    }
    check_status(cpu.amp_update_scale(&scale_a, &tracker_a, &found_c, &p, counters_a, &clear_a),
                 mx__cuda_amp_update_scale(&scale_b, &tracker_b, &found_d, &p, counters_b, &clear_b),
                 "amp_update_scale");
    check(scale_a == scale_b && tracker_a == tracker_b && !memcmp(counters_a, counters_b, sizeof counters_a),
          "amp_update_scale: CPU scale %g tracker %d, host grid scale %g tracker %d", scale_a, tracker_a, scale_b,
          tracker_b);
    check(counters_b[1] == 1 + (flag != 0), "amp_update_scale read the flag %g before clearing it", flag);
    check(found_c == found_d && stats_a == stats_b, "amp_update_scale cleared differently");
    check(found_d == (clearing ? 0 : flag) && stats_b[0] == (clearing ? 0 : 7) && stats_b.back() == stats_b[0],
          "amp_update_scale %s", clearing ? "left a flag or a count uncleared" : "cleared what it was not asked to");
  }
}

/* One parameter's buffers: param, grad (its shape, another layout) and
 * state (float, or double for float64), contiguous; a dense float32 one may
 * have a 16-bit cast for the step to write (cast_dtype float32: none). */
struct optim_param {
  host_tensor param, grad;
  std::vector<std::vector<double>> state; /* as doubles or floats in the same words */
  int64_t step;
  mx_dtype cast_dtype;
  std::vector<uint16_t> cast;
  bool cast_written;
};

static void run_optim(bool adam, std::vector<optim_param> &ps, const void *h, const float *found_inf,
                      const float *grad_scale, bool on_grid, mx_status *status) {
  std::vector<mx_optim_item> items(ps.size());
  std::vector<mx_optim_cast> casts(ps.size());
  for (size_t t = 0; t < ps.size(); t++) {
    memset(&items[t], 0, sizeof items[t]);
    items[t].param = ps[t].param.v;
    items[t].grad = ps[t].grad.v;
    for (size_t k = 0; k < ps[t].state.size(); k++) items[t].state[k] = ps[t].state[k].data();
    items[t].step = ps[t].state.empty() && !adam ? NULL : &ps[t].step;
    casts[t] = {ps[t].cast.data(), ps[t].cast_dtype, false};
    if (ps[t].cast_dtype != MX_F32) items[t].cast = &casts[t];
  }
  int n = (int)ps.size();
  if (adam)
    *status = on_grid ? mx__cuda_adam_step(n, items.data(), (const mx_adam_hparams *)h, found_inf, grad_scale)
                      : cpu.adam_step(n, items.data(), (const mx_adam_hparams *)h, found_inf, grad_scale);
  else
    *status = on_grid ? mx__cuda_sgd_step(n, items.data(), (const mx_sgd_hparams *)h, found_inf, grad_scale)
                      : cpu.sgd_step(n, items.data(), (const mx_sgd_hparams *)h, found_inf, grad_scale);
  for (size_t t = 0; t < ps.size(); t++) ps[t].cast_written = casts[t].written;
}

/* Whether p's cast holds its parameter rounded as kernels/math.h rounds (mx_to_dtype's bits). */
static bool cast_is_of_param(const optim_param &p, int t) {
  const float *v = (const float *)p.param.v.data;
  for (int64_t i = 0; i < p.param.numel(); i++) {
    uint16_t want = p.cast_dtype == MX_BF16 ? mx_f32_to_bf16(v[i]) : mx_f32_to_f16(v[i]);
    if (!check(p.cast[i] == want,
               "optimizer cast of parameter %d, element %lld: 0x%04x, the parameter %.9g rounds to 0x%04x", t,
               (long long)i, p.cast[i], v[i], want))
      return false;
  }
  return true;
}

void test_optim(rng &r) {
  for (int round = 0; round < rounds(40); round++) {
    pick_grid_cap(r);
    bool adam = r.range(0, 1);
    /* past one launch's parameters (81 in CUDA 13's 32 KiB of arguments) a quarter of the rounds */
    int n = (int)r.range(1, r.range(0, 3) ? 25 : MX_CUDA_OPTIM_PER_LAUNCH + 20);
    mx_sgd_hparams sgd = {0.1,   r.range(0, 1) ? 0.9 : 0.0, 0.1 * r.range(0, 2), 0.01 * r.range(0, 1),
                          false, r.range(0, 1) == 1};
    sgd.nesterov = sgd.momentum > 0 && sgd.dampening == 0 && r.range(0, 1);
    mx_adam_hparams adam_h = {
        1e-3, 0.9, 0.999, 1e-8, 0.01 * r.range(0, 1), r.range(0, 1) == 1, r.range(0, 1) == 1, r.range(0, 1) == 1};
    int states = adam ? (adam_h.amsgrad ? 3 : 2) : (sgd.momentum > 0 ? 1 : 0);
    /* a third of the rounds all float32 and contiguous: the kernels' DENSE_F32 launches */
    bool dense_f32 = r.range(0, 2) == 0;
    std::vector<optim_param> a;
    for (int t = 0; t < n; t++) {
      optim_param p;
      int64_t shape[3];
      int ndim = (int)r.range(0, 3);
      random_shape(r, ndim, 9, 8, shape);
      mx_dtype dtype = dense_f32 ? MX_F32 : float_dtypes[r.range(0, 3)];
      p.param = make_tensor(dtype, ndim, shape, dense_f32 ? CONTIGUOUS : out_layout(r), r);
      p.grad = make_tensor(dtype, ndim, shape, dense_f32 ? CONTIGUOUS : out_layout(r), r);
      fill_values(p.param, POSITIVE, r);
      fill_values(p.grad, SMALL_INT, r);
      p.step = r.range(0, 2);
      int64_t numel = p.param.numel();
      /* casts where sgd_adam.c asks for them: dense float32 parameters, half of them */
      bool castable = dtype == MX_F32 && mx__kview_is_contiguous(&p.param.v) && r.range(0, 1);
      p.cast_dtype = castable ? (r.range(0, 1) ? MX_BF16 : MX_F16) : MX_F32;
      p.cast.assign((size_t)numel + 1, 0xdead); /* one past the end: no write may reach it */
      p.cast_written = false;
      for (int k = 0; k < states; k++) {
        p.state.push_back(std::vector<double>((size_t)numel + 1));
        for (int64_t i = 0; i < numel; i++) { /* positive, as exp_avg_sq must be */
          double v = 0.01 + r.unit();
          if (dtype == MX_F64)
            p.state[k][i] = v;
          else
            ((float *)p.state[k].data())[i] = (float)v;
        }
      }
      a.push_back(p);
    }
    std::vector<optim_param> b = a;
    float found = r.range(0, 5) == 0 ? 1.0f : 0.0f, scale = 1024.0f;
    const float *found_inf = r.range(0, 1) ? &found : NULL, *grad_scale = r.range(0, 1) ? &scale : NULL;
    describe("%s over %d %sparameters, found_inf %s, grad_scale %s", adam ? "adam" : "sgd", n,
             dense_f32 ? "dense float32 " : "", found_inf ? (found ? "1" : "0") : "none", grad_scale ? "1024" : "none");
    mx_status sa, sb;
    const void *h = adam ? (const void *)&adam_h : (const void *)&sgd;
    run_optim(adam, a, h, found_inf, grad_scale, false, &sa);
    run_optim(adam, b, h, found_inf, grad_scale, true, &sb);
    check_status(sa, sb, "optimizer step");
    for (int t = 0; t < n; t++) {
      same_values(a[t].param, b[t].param, 0, 0, "optimizer parameter");
      same_values(a[t].grad, b[t].grad, 0, 0, "optimizer gradient");
      check(a[t].state == b[t].state, "optimizer state of parameter %d differs", t);
      check(a[t].step == b[t].step, "optimizer step count of parameter %d: CPU %lld, host grid %lld", t,
            (long long)a[t].step, (long long)b[t].step);
      if (a[t].cast_dtype == MX_F32 || sa != MX_OK) continue;
      /* the CPU writes a cast only when it steps; CUDA, which cannot tell the host of a skip, always (of the
       * parameter as it stands) */
      bool skipped = found_inf && found != 0;
      check(a[t].cast_written == !skipped && b[t].cast_written,
            "optimizer cast of parameter %d written: CPU %d, host grid %d", t, a[t].cast_written, b[t].cast_written);
      if (!skipped) check(a[t].cast == b[t].cast, "optimizer cast of parameter %d: CPU and host grid differ", t);
      cast_is_of_param(b[t], t);
      check(b[t].cast.back() == 0xdead, "optimizer cast of parameter %d: written past its end", t);
    }
  }
}
