/* The GPT demo's training step timed, mixgrad's side (bench/gpt_step.py is PyTorch's twin; run_gpt.py runs both,
 * alternating, and writes bench/gpt.md).
 *
 *     OMP_NUM_THREADS=2 build/bench/gpt_step --model small --amp bf16 --warmup 3 --repeat 20
 *
 * A step is the demo's (examples/gpt/gpt.c): zero_grad (set_to_none), the model's forward under autocast over a
 * batch of 32 windows of the context length, cross-entropy over every position, backward (through an enabled
 * GradScaler for f16), the AdamW step, and the end of the step's scope. Every step reuses one random batch. The
 * result is one JSON line on stdout:
 *
 *     {"impl":"mixgrad","model":"small","amp":"bf16","batch":32,"threads":2,"times_ms":[...],"params":...}
 *
 * and a one-line summary on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "examples/gpt/model.h"
#include "mixgrad.h"

static int fail(const char *what) {
  fprintf(stderr, "gpt_step: %s: %s\n", what, mx_last_error());
  return 1;
}

static int usage(void) {
  fprintf(stderr, "usage: gpt_step [--model small|tiny] [--amp off|bf16|f16] [--batch N] [--warmup N] [--repeat N]\n");
  return 2;
}

int main(int argc, char **argv) {
  const char *model = "small", *amp_name = "bf16";
  long batch = 32, warmup = 3, repeat = 20;
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc) return usage();
    const char *flag = argv[i], *v = argv[++i];
    if (!strcmp(flag, "--model")) model = v;
    else if (!strcmp(flag, "--amp")) amp_name = v;
    else if (!strcmp(flag, "--batch")) batch = strtol(v, NULL, 10);
    else if (!strcmp(flag, "--warmup")) warmup = strtol(v, NULL, 10);
    else if (!strcmp(flag, "--repeat")) repeat = strtol(v, NULL, 10);
    else return usage();
  }
  const mx_gpt_config *c = mx_gpt_config_named(model);
  mx_dtype amp = !strcmp(amp_name, "f16") ? MX_F16 : !strcmp(amp_name, "bf16") ? MX_BF16 : MX_F32;
  if (!c || (amp == MX_F32 && strcmp(amp_name, "off")) || batch < 1 || warmup < 0 || repeat < 1) return usage();
  mx_manual_seed(1);
  mx_module *net = mx_gpt_new(c);
  if (!net) return fail("model");
  int n = mx_module_num_parameters(net);
  mx_tensor **params = malloc((size_t)n * sizeof *params);
  for (int i = 0; params && i < n; i++) params[i] = mx_module_parameter(net, i, NULL);
  mx_adam_opts o = mx_adamw_defaults();
  o.lr = 1e-3;
  mx_optimizer *opt = params ? mx_adamw_new(n, params, &o) : NULL;
  free(params);
  mx_scaler_opts so = mx_scaler_defaults();
  so.enabled = amp == MX_F16;
  mx_scaler *scaler = mx_scaler_new(&so);
  mx_tensor *x = mx_randint(0, c->vocab, MX_SHAPE(batch, c->ctx), MX_I64, MX_CPU, NULL);
  mx_tensor *y = mx_randint(0, c->vocab, MX_SHAPE(batch * c->ctx), MX_I64, MX_CPU, NULL);
  double *times = malloc(sizeof *times * (size_t)repeat);
  int rc = opt && scaler && x && y && times ? 0 : fail("setup");
  for (long step = 0; rc == 0 && step < warmup + repeat; step++) {
    double t0 = bench_now_ms();
    mx_scope *s = mx_scope_begin();
    mx_tensor *loss = NULL;
    mx_status st = mx_optimizer_zero_grad(opt, true);
    MX_AUTOCAST(MX_CPU, amp == MX_F32 ? MX_AUTOCAST_DEFAULT_DTYPE : amp, amp != MX_F32, true) {
      mx_tensor *logits = mx_module_forward(net, x);
      loss = logits ? mx_cross_entropy(mx_reshape(logits, MX_SHAPE(-1, c->vocab)), y, NULL, MX_IGNORE_INDEX,
                                       MX_REDUCTION_MEAN, 0.0)
                    : NULL;
    }
    if (st == MX_OK) st = loss ? mx_backward(mx_scaler_scale(scaler, loss), NULL, false) : mx_last_status();
    if (st == MX_OK) st = mx_scaler_step(scaler, opt, NULL);
    if (st == MX_OK) st = mx_scaler_update(scaler);
    mx_scope_end(s);
    if (st != MX_OK) rc = fail("step");
    if (step >= warmup) times[step - warmup] = bench_now_ms() - t0;
  }
  if (rc == 0) {
    printf("{\"impl\":\"mixgrad\",\"model\":\"%s\",\"amp\":\"%s\",\"batch\":%ld,\"threads\":%d,", model, amp_name, batch,
           bench_threads());
    bench_json_doubles(stdout, "times_ms", times, (int)repeat);
    printf(",\"params\":%lld}\n", (long long)mx_module_parameter_count(net));
    fprintf(stderr, "gpt_step: mixgrad %s amp %s, batch %ld, %d threads: median %.2f ms over %ld steps\n", model,
            amp_name, batch, bench_threads(), bench_median(times, (int)repeat), repeat);
  }
  free(times);
  mx_release(x);
  mx_release(y);
  mx_scaler_free(scaler);
  mx_optimizer_free(opt);
  mx_module_free(net);
  return rc;
}
