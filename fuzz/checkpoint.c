/* mx_checkpoint_load on any bytes, into a small run (two linear layers
 * around a batch norm, Adam with its state after a step, a GradScaler, a
 * step schedule, a generator). Refused, the file changes nothing: the run
 * saves the same bytes as before. Accepted, what was loaded saves, loads
 * back and saves the same bytes again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz.h"
#include "mixgrad.h"

typedef struct {
  mx_module *model;
  mx_optimizer *opt;
  mx_scaler *scaler;
  mx_schedule *schedule;
  mx_generator *gen;
  mx_checkpoint ckpt;
} run;

static run r;
/* The run as made, restored after each accepted file: a copy of the path,
 * since mx_fuzz_path's buffers are reused. */
static char reference[256];

static void run_free(void) {
  mx_schedule_free(r.schedule);
  mx_scaler_free(r.scaler);
  mx_optimizer_free(r.opt);
  mx_module_free(r.model);
  mx_generator_free(r.gen);
}

static void run_make(void) {
  r.gen = mx_generator_new(1);
  r.model = mx_sequential_new(3, (mx_module *[]){mx_linear_new(3, 4, true, r.gen),
                                                  mx_batch_norm1d_new(4, 1e-5, 0.1, true, true),
                                                  mx_linear_new(4, 2, true, r.gen)});
  mx_tensor *params[6];
  int n = mx_module_num_parameters(r.model);
  for (int i = 0; i < n && i < 6; i++) params[i] = mx_module_parameter(r.model, i, NULL);
  mx_adam_opts o = mx_adam_defaults();
  r.opt = mx_adam_new(n, params, &o);
  mx_scaler_opts so = mx_scaler_defaults();
  r.scaler = mx_scaler_new(&so);
  r.schedule = mx_step_lr_new(r.opt, 2, 0.5);
  mx_fuzz_check(r.model && n == 6 && r.opt && r.scaler && r.schedule, "the run is made");
  mx_scope *s = mx_scope_begin(); /* one step, so that Adam has its state */
  mx_tensor *loss = mx_sum(mx_module_forward(r.model, mx_randn(MX_SHAPE(5, 3), MX_F32, MX_CPU, r.gen)), MX_ALL_DIMS,
                           false);
  mx_fuzz_check(loss && mx_backward(loss, NULL, false) == MX_OK && mx_optimizer_step(r.opt) == MX_OK &&
                    mx_schedule_step(r.schedule) == MX_OK,
                "the run takes a step");
  mx_scope_end(s);
  r.ckpt = (mx_checkpoint){r.model, r.opt, r.scaler, r.gen, r.schedule, 7, 1};
  snprintf(reference, sizeof reference, "%s", mx_fuzz_path("reference.ckpt"));
  mx_fuzz_check(mx_checkpoint_save(reference, &r.ckpt) == MX_OK, "the run saves");
  atexit(run_free);
}

/* The bytes the run saves now (malloc'ed). */
static uint8_t *saved_bytes(const char *name, size_t *size) {
  const char *path = mx_fuzz_path(name);
  mx_fuzz_check(mx_checkpoint_save(path, &r.ckpt) == MX_OK, "the run saves");
  return mx_fuzz_read(path, size);
}

static bool same_bytes(const uint8_t *a, size_t na, const uint8_t *b, size_t nb) {
  return na == nb && memcmp(a, b, na) == 0;
}

const char *mx_fuzz_checkpoint_reference(void) {
  if (!r.model) run_make();
  return reference;
}

bool mx_fuzz_checkpoint(const uint8_t *data, size_t size) {
  if (!r.model) run_make();
  size_t n_before, n_after;
  uint8_t *before = saved_bytes("before.ckpt", &n_before);
  const char *path = mx_fuzz_write("input.ckpt", data, size);
  bool accepted = mx_checkpoint_load(path, &r.ckpt) == MX_OK;
  if (!accepted) {
    mx_fuzz_expect_refusal("mx_checkpoint_load", path, NULL);
    uint8_t *after = saved_bytes("after.ckpt", &n_after);
    mx_fuzz_check(same_bytes(before, n_before, after, n_after), "a refused checkpoint changes nothing");
    free(after);
  } else {
    uint8_t *after = saved_bytes("after.ckpt", &n_after);
    mx_fuzz_check(mx_checkpoint_load(mx_fuzz_path("after.ckpt"), &r.ckpt) == MX_OK, "what was loaded loads back");
    size_t n_again;
    uint8_t *again = saved_bytes("again.ckpt", &n_again);
    mx_fuzz_check(same_bytes(after, n_after, again, n_again), "what was loaded saves the same bytes twice");
    free(after);
    free(again);
    mx_fuzz_check(mx_checkpoint_load(reference, &r.ckpt) == MX_OK, "the run as made loads back");
  }
  free(before);
  return accepted;
}
