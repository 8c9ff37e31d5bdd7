/* A run's identity and its divergence (issue #33, items 3 and 4), probed
 * through the MNIST demo run as a child process (MX_MNIST_DEMO, set by
 * tests/reliability/meson.build) on scratch IDX files: a resume with any
 * changed setting is refused with each difference listed, --allow-change
 * lets a change through and rebuilds the one-cycle schedule, a checkpoint
 * without settings still resumes, and a run that diverges under f16, bf16 or
 * no autocast stops with exit code 3 and leaves its checkpoints as they
 * were. The settings' API (mx_checkpoint_save_with_settings and
 * mx_checkpoint_settings_read) and the GradScaler's skip limit under the
 * trainer's use are checked in-process.
 *
 * Each run trains a few steps of the MLP on one OpenMP thread. Under
 * valgrind the runs that train are skipped, as in tests/examples/test_demos.c
 * (oneDNN's JIT code there makes a traced demo fail); the flag errors still
 * run. */
#include <criterion/criterion.h>
#include <math.h>
#include <mixgrad.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/common/child_run.h"
#include "tests/common/expect_error.h"
#include "tests/data/data_files.h"

#ifdef MX_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

TestSuite(resume, .init = make_tmp_dir, .fini = remove_tmp_dir);
TestSuite(divergence, .init = make_tmp_dir, .fini = remove_tmp_dir);
TestSuite(run_settings, .init = make_tmp_dir, .fini = remove_tmp_dir);

/* Skips the test, first removing its directory: Criterion runs no .fini after a skip. */
static void skip_training_under_valgrind(void) {
  if (!RUNNING_ON_VALGRIND) return;
  remove_tmp_dir();
  cr_skip_test("under valgrind: oneDNN's JIT kernels make a traced demo fail");
}

static const char *mnist(void) {
  const char *path = getenv("MX_MNIST_DEMO");
  cr_assert(path && *path, "MX_MNIST_DEMO is not set (tests/reliability/meson.build sets it)");
  return path;
}

/* --- running the demo ------------------------------------------------------------ */

/* Runs the demo with args (NULL-terminated). */
static child_run run_args(const char *const *args) {
  const char *argv[64] = {mnist()};
  int n = 1;
  while (args[n - 1]) {
    cr_assert_lt(n, 63);
    argv[n] = args[n - 1];
    n++;
  }
  return child_run_argv(argv, 0);
}

#define RUN(...) run_args((const char *const[]){__VA_ARGS__, NULL})

static void expect_status(const child_run *r, int status, const char *what) {
  cr_assert_eq(r->status, status, "%s exited with %d, expected %d\n--- stdout:\n%s\n--- stderr:\n%s", what, r->status,
               status, r->out, r->err);
}

static bool starts_with(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

/* --- the data: 40 training and 20 test images, two label sets ----------------------- */

enum { TRAIN = 40, TEST = 20, SIDE = 28 };

static uint8_t label_of(uint32_t i, int shift) { return (uint8_t)((i + (uint32_t)shift) % 10); }

/* dir/<prefix>-images-idx3-ubyte (data_files.h's test images) and its labels. */
static void write_set(const char *dir, const char *prefix, uint32_t n, int shift) {
  uint8_t labels[TRAIN];
  for (uint32_t i = 0; i < n; i++) labels[i] = label_of(i, shift);
  size_t len;
  uint8_t *bytes = idx_images(n, SIDE, SIDE, &len);
  write_raw(fmt("%s/%s-images-idx3-ubyte", dir, prefix), bytes, len);
  free(bytes);
  bytes = idx_labels(n, labels, &len);
  write_raw(fmt("%s/%s-labels-idx1-ubyte", dir, prefix), bytes, len);
  free(bytes);
}

/* A folder of MNIST-format files whose labels are shifted by shift; its path (a copy). */
static char *make_data(const char *name, int shift) {
  char *dir = strdup(tmp_subdir(name));
  write_set(dir, "train", TRAIN, shift);
  write_set(dir, "t10k", TEST, shift);
  return dir;
}

/* The CRC-32 the demo keeps of that data: labels then images, training set then test set. */
static unsigned long data_crc(int shift) {
  uLong crc = crc32(0, NULL, 0);
  for (int set = 0; set < 2; set++) {
    uint32_t n = set ? TEST : TRAIN;
    for (uint32_t i = 0; i < n; i++) {
      uint8_t l = label_of(i, shift);
      crc = crc32(crc, &l, 1);
    }
    for (uint32_t i = 0; i < n; i++)
      for (int p = 0; p < SIDE * SIDE; p++) {
        uint8_t v = test_pixel(i, p);
        crc = crc32(crc, &v, 1);
      }
  }
  return crc;
}

/* --- the metrics CSV: each step row's lr and loss scale ------------------------------- */

typedef struct {
  int n;
  char lr[64][32], scale[64][32];
} step_rows;

/* kind,step,epoch,loss,accuracy,lr,loss_scale,... */
static step_rows read_steps(const char *path) {
  char *text = read_file(path, NULL), *rest = text, *line;
  step_rows s = {0};
  strsep(&rest, "\n"); /* the header */
  while ((line = strsep(&rest, "\n")) != NULL && *line) {
    if (!starts_with(line, "step,")) continue;
    cr_assert_lt(s.n, 64);
    char *field = line;
    for (int i = 0; i < 5; i++) field = strchr(field, ',') + 1;
    cr_assert_eq(sscanf(field, "%31[^,],%31[^,]", s.lr[s.n], s.scale[s.n]), 2, "row '%s'", line);
    s.n++;
  }
  free(text);
  return s;
}

/* --- refused resumes ----------------------------------------------------------------- */

static const char *const schedule_8 = "one-cycle over 8 steps with 25% warm-up";

/* Trains 2 of the 8 steps (4 per epoch, batch 10) on data, saving ck. */
static void save_base(const char *data, const char *ck) {
  child_run r = RUN("--data", data, "--model", "mlp", "--batch", "10", "--epochs", "2", "--steps", "2", "--save", ck);
  expect_status(&r, 0, "the run that saves the checkpoint");
  child_run_free(&r);
}

/* A resume of ck on data with extra flags (up to 6, NULL-padded) exits
 * with 2, prints nothing on stdout and exactly the refusal with these
 * difference lines and this last line on stderr, and leaves ck as it was. */
static void expect_refused(const char *data, const char *ck, const char *const extra[6], const char *lines,
                           const char *last) {
  size_t size_before, size_after;
  char *before = read_file(ck, &size_before);
  const char *args[24] = {"--data", data, "--model", "mlp", "--batch", "10", "--epochs", "2", "--resume", ck};
  int n = 10;
  for (int i = 0; i < 6 && extra[i]; i++) args[n++] = extra[i];
  args[n] = NULL;
  child_run r = run_args(args);
  expect_status(&r, 2, fmt("the resume with %s %s", extra[0], extra[1]));
  cr_expect_str_eq(r.out, "");
  cr_expect_str_eq(r.err, fmt("--resume %s: the checkpoint's run differs from this one:\n%s%s\n", ck, lines, last));
  char *after = read_file(ck, &size_after);
  cr_expect(size_after == size_before && !memcmp(before, after, size_before), "%s changed", ck);
  free(before);
  free(after);
  child_run_free(&r);
}

/* A copy that outlives fmt's rotating buffers. */
static char *keep(const char *s) {
  char *copy = strdup(s);
  cr_assert_not_null(copy);
  return copy;
}

static char *hint(const char *names) {
  return keep(fmt("to change the run deliberately, add --allow-change %s (see --help); or start afresh without "
                  "--resume", names));
}

Test(resume, each_changed_setting_is_refused_and_listed) {
  skip_training_under_valgrind();
  char *a = make_data("a", 0), *b = make_data("b", 3);
  char *ck = keep(tmp_path("ck.safetensors"));
  save_base(a, ck);
  const char *fixed = "the model and the optimizer cannot change on a resume: start afresh without --resume";
  struct {
    const char *extra[6];
    char *lines, *last;
  } cases[] = {
      {{"--epochs", "3"},
       keep(fmt("  --epochs: saved 2, given 3\n  schedule: saved %s, given one-cycle over 12 steps with 25%% warm-up\n",
                schedule_8)),
       hint("epochs")},
      {{"--batch", "20"},
       keep(fmt("  --batch: saved 10, given 20\n  schedule: saved %s, given one-cycle over 4 steps with 50%% warm-up\n",
                schedule_8)),
       hint("batch")},
      {{"--lr", "0.01"}, keep("  --lr: saved 0.003, given 0.01\n"), hint("lr")},
      {{"--seed", "7"}, keep("  --seed: saved 1, given 7\n"), hint("seed")},
      {{"--amp", "f16"}, keep("  --amp: saved bf16, given f16\n"), hint("amp")},
      {{"--data", b},
       keep(fmt("  data: saved 40 + 20 samples of 1x28x28 with CRC-32 %08lx (--data %s), given 40 + 20 samples of "
                "1x28x28 with CRC-32 %08lx (--data %s)\n", data_crc(0), a, data_crc(3), b)),
       hint("data")},
      {{"--model", "cnn"}, keep("  --model: saved mlp, given cnn\n"), keep(fixed)},
      {{"--optimizer", "sgd"}, keep("  --optimizer: saved adam, given sgd\n"), keep(fixed)},
      /* several at once, one of them allowed: all listed, the others named */
      {{"--seed", "7", "--epochs", "3", "--allow-change", "epochs"},
       keep(fmt("  --epochs: saved 2, given 3\n  schedule: saved %s, given one-cycle over 12 steps with 25%% warm-up\n"
                "  --seed: saved 1, given 7\n", schedule_8)),
       hint("seed")},
  };
  cr_assert_neq(data_crc(0), data_crc(3));
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    expect_refused(a, ck, cases[i].extra, cases[i].lines, cases[i].last);
    free(cases[i].lines);
    free(cases[i].last);
  }
  free(a);
  free(b);
  free(ck);
}

/* --- deliberate changes ------------------------------------------------------------- */

/* More epochs and another peak lr: the schedule is rebuilt, so the resumed
 * steps take the very lrs of a run started with the new flags (not the old
 * schedule's last lr again). */
Test(resume, allowed_change_rebuilds_the_schedule) {
  skip_training_under_valgrind();
  char *data = make_data("d", 0);
  char ck[1024], straight[1024], resumed[1024];
  snprintf(ck, sizeof ck, "%s", tmp_path("ck.safetensors"));
  snprintf(straight, sizeof straight, "%s", tmp_path("straight.csv"));
  snprintf(resumed, sizeof resumed, "%s", tmp_path("resumed.csv"));
  child_run a = RUN("--data", data, "--model", "mlp", "--batch", "10", "--epochs", "3", "--lr", "0.01", "--metrics",
                     straight);
  expect_status(&a, 0, "the run with the new flags from the start");
  child_run b = RUN("--data", data, "--model", "mlp", "--batch", "10", "--epochs", "1", "--save", ck);
  expect_status(&b, 0, "the one-epoch run");
  child_run c = RUN("--data", data, "--model", "mlp", "--batch", "10", "--epochs", "3", "--lr", "0.01", "--resume", ck,
                     "--allow-change", "lr,epochs", "--metrics", resumed);
  expect_status(&c, 0, "the resume with --allow-change lr,epochs");
  step_rows sa = read_steps(straight), sc = read_steps(resumed);
  cr_assert_eq(sa.n, 12);
  cr_assert_eq(sc.n, 8, "the resumed run took %d steps, expected 8 (steps 5 to 12)", sc.n);
  const char *want = fmt("resuming %s at step 4 (epoch 2)\n"
                         "--allow-change: --epochs 1 -> 3: the run now ends at step 12\n"
                         "--allow-change: --lr 0.003 -> 0.01: the schedule now peaks at 0.01\n"
                         "--allow-change: the one-cycle schedule is rebuilt over 12 steps (peak lr 0.01) and goes on "
                         "from step 4 at lr %s\n", ck, sa.lr[4]);
  cr_expect(starts_with(c.out, want), "stdout does not begin with\n%s\n--- it is:\n%s", want, c.out);
  for (int i = 0; i < sc.n; i++) cr_expect_str_eq(sc.lr[i], sa.lr[4 + i], "the lr of step %d", 5 + i);
  cr_expect_str_neq(sc.lr[0], sc.lr[1], "the resumed steps repeat one lr");
  child_run_free(&a);
  child_run_free(&b);
  child_run_free(&c);
  free(data);
}

/* bf16 to f16: the run goes on with a new GradScaler at 2^16. */
Test(resume, allowed_amp_change_starts_a_grad_scaler) {
  skip_training_under_valgrind();
  char *data = make_data("d", 0);
  char ck[1024], csv[1024];
  snprintf(ck, sizeof ck, "%s", tmp_path("ck.safetensors"));
  snprintf(csv, sizeof csv, "%s", tmp_path("m.csv"));
  save_base(data, ck);
  child_run r = RUN("--data", data, "--model", "mlp", "--batch", "10", "--epochs", "2", "--amp", "f16", "--resume", ck,
                     "--allow-change", "amp", "--metrics", csv);
  expect_status(&r, 0, "the resume with --amp f16 --allow-change amp");
  const char *want = fmt("resuming %s at step 2 (epoch 1)\n"
                         "--allow-change: --amp bf16 -> f16: autocast f16 from step 2, with a new GradScaler\n"
                         "MNIST mlp: ", ck);
  cr_expect(starts_with(r.out, want), "stdout does not begin with\n%s\n--- it is:\n%s", want, r.out);
  step_rows s = read_steps(csv);
  cr_assert_eq(s.n, 6);
  cr_expect_str_eq(s.scale[0], "65536");
  child_run_free(&r);
  free(data);
}

/* A checkpoint saved without run settings (here: their keys renamed in
 * place, as an older mixgrad wrote none) resumes with a note. */
Test(resume, checkpoint_without_settings_resumes_with_a_note) {
  skip_training_under_valgrind();
  char *data = make_data("d", 0);
  char ck[1024];
  snprintf(ck, sizeof ck, "%s", tmp_path("ck.safetensors"));
  save_base(data, ck);
  size_t size;
  char *bytes = read_file(ck, &size);
  int renamed = 0;
  for (char *p = bytes; (p = memmem(p, size - (size_t)(p - bytes), "\"run.", 5)) != NULL; p++) p[1] = 'o', renamed++;
  cr_assert_eq(renamed, 11, "%d run settings in the file", renamed);
  write_raw(ck, bytes, size);
  free(bytes);
  child_run r = RUN("--data", data, "--model", "mlp", "--batch", "10", "--epochs", "2", "--seed", "9", "--resume", ck);
  expect_status(&r, 0, "the resume of a checkpoint without settings");
  cr_expect(starts_with(r.out, fmt("resuming %s at step 2 (epoch 1)\nnote: %s holds no run settings (an older "
                                   "checkpoint): they are not checked\n", ck, ck)),
            "stdout:\n%s", r.out);
  child_run_free(&r);
  free(data);
}

/* --- the flag ---------------------------------------------------------------------------- */

Test(resume, allow_change_needs_a_resume_and_known_names) {
  child_run r = RUN("--synthetic", "20", "--allow-change", "epochs");
  expect_status(&r, 2, "--allow-change without --resume");
  cr_expect_str_eq(r.err, "mnist: --allow-change applies to a --resume only (see --help)\n");
  child_run_free(&r);
  r = RUN("--synthetic", "20", "--resume", "x", "--allow-change", "epochs,model");
  expect_status(&r, 2, "--allow-change epochs,model");
  cr_expect_str_eq(r.err, "mnist: --allow-change 'epochs,model': expected a comma-separated list of amp, batch, "
                          "data, epochs, lr, ranks, schedule, seed (see --help)\n");
  child_run_free(&r);
  r = RUN("--help");
  expect_status(&r, 0, "--help");
  cr_expect(strstr(r.out, "  --allow-change L   with --resume: ") != NULL, "--help:\n%s", r.out);
  child_run_free(&r);
}

/* --- divergence ---------------------------------------------------------------------- */

/* Under each autocast mode an absurd peak lr makes the run diverge within
 * a few steps: exit code 3, the reason and what to try on stderr, and no
 * checkpoint written (a new path stays absent) or overwritten (one saved
 * before by a good run keeps its bytes, also when the run resumed from it). */
Test(divergence, absurd_lr_stops_every_precision_and_saves_nothing) {
  skip_training_under_valgrind();
  char *data = make_data("d", 0);
  const char *amps[] = {"f16", "bf16", "off"};
  for (int k = 0; k < 3; k++) {
    char good[1024], fresh[1024];
    snprintf(good, sizeof good, "%s", tmp_path(fmt("good-%s.safetensors", amps[k])));
    snprintf(fresh, sizeof fresh, "%s", tmp_path(fmt("fresh-%s.safetensors", amps[k])));
    child_run g = RUN("--data", data, "--model", "mlp", "--batch", "10", "--epochs", "2", "--amp", amps[k], "--steps",
                       "4", "--save", good);
    expect_status(&g, 0, fmt("the good run under --amp %s", amps[k]));
    size_t size_before, size_after;
    char *before = read_file(good, &size_before);
    /* the same path, and a new one */
    child_run same = RUN("--data", data, "--model", "mlp", "--batch", "10", "--epochs", "2", "--amp", amps[k],
                          "--lr", "1000", "--save", good);
    child_run resumed = RUN("--data", data, "--model", "mlp", "--batch", "10", "--epochs", "2", "--amp", amps[k],
                             "--lr", "1000", "--resume", good, "--allow-change", "lr", "--save", good);
    child_run other = RUN("--data", data, "--model", "mlp", "--batch", "10", "--epochs", "2", "--amp", amps[k],
                           "--lr", "1000", "--save", fresh);
    child_run *runs[] = {&same, &resumed, &other};
    for (int i = 0; i < 3; i++) {
      expect_status(runs[i], 3, fmt("--amp %s --lr 1000 (run %d)", amps[k], i));
      cr_expect(starts_with(runs[i]->err, "training diverged at step "), "--amp %s, run %d: stderr:\n%s", amps[k], i,
                runs[i]->err);
      cr_expect(strstr(runs[i]->err, "nothing was saved after it (an earlier checkpoint stays as it was); try a "
                                     "smaller --lr (this run's peak is 1000)") != NULL,
                "--amp %s, run %d: stderr:\n%s", amps[k], i, runs[i]->err);
      cr_expect(strstr(runs[i]->out, "test accuracy") == NULL, "--amp %s, run %d reported a result", amps[k], i);
      child_run_free(runs[i]);
    }
    char *after = read_file(good, &size_after);
    cr_expect(size_after == size_before && !memcmp(before, after, size_before), "--amp %s: %s was overwritten",
              amps[k], good);
    cr_expect(access(fresh, F_OK) != 0, "--amp %s: %s was written", amps[k], fresh);
    free(before);
    free(after);
    child_run_free(&g);
  }
  free(data);
}

/* Sets the f16 checkpoint's loss scale (metadata "scaler.scale") to value,
 * padded with leading zeros to the old value's length so that nothing else
 * in the file moves. */
static void set_scale(const char *ck, const char *value) {
  size_t size;
  char *bytes = read_file(ck, &size);
  const char key[] = "\"scaler.scale\":\"";
  char *v = memmem(bytes, size, key, strlen(key));
  cr_assert(v, "%s has no scaler.scale", ck);
  v += strlen(key);
  size_t len = strcspn(v, "\""), want = strlen(value);
  cr_assert_geq(len, want, "the scale '%.*s' is shorter than '%s'", (int)len, v, value);
  memset(v, '0', len - want);
  memcpy(v + len - want, value, want);
  write_raw(ck, bytes, size);
  free(bytes);
}

/* The GradScaler's guard rails, default in the demos: a scale so large that
 * every step overflows (1e30: each skip halves it, never enough) stops at the
 * 26th skip in a row; a step skipped at the scale's floor (1) stops at once. */
Test(divergence, grad_scaler_guard_rails_stop_an_f16_run) {
  skip_training_under_valgrind();
  char *data = make_data("d", 0);
  char ck[1024];
  snprintf(ck, sizeof ck, "%s", tmp_path("ck.safetensors"));
  const char *base[] = {"--data", data, "--model", "mlp", "--batch", "2", "--epochs", "2", "--amp", "f16"};
  child_run g = RUN(base[0], base[1], base[2], base[3], base[4], base[5], base[6], base[7], base[8], base[9],
                     "--steps", "2", "--save", ck);
  expect_status(&g, 0, "the f16 run that saves the checkpoint");
  child_run_free(&g);
  set_scale(ck, "1e+30");
  child_run r = RUN(base[0], base[1], base[2], base[3], base[4], base[5], base[6], base[7], base[8], base[9],
                     "--resume", ck);
  expect_status(&r, 3, "the resume at scale 1e30");
  cr_expect(starts_with(r.err, "training diverged at step 28: mx_scaler_update: 26 consecutive steps skipped (limit "
                               "25): the gradients keep overflowing at scale "),
            "stderr:\n%s", r.err);
  child_run_free(&r);

  set_scale(ck, "1"); /* the floor; then an lr that breaks the weights makes a step skip there */
  r = RUN(base[0], base[1], base[2], base[3], base[4], base[5], base[6], base[7], base[8], base[9], "--resume", ck,
          "--lr", "1000", "--allow-change", "lr");
  expect_status(&r, 3, "the resume at the floor with --lr 1000");
  cr_expect(starts_with(r.err, "training diverged at step "), "stderr:\n%s", r.err);
  cr_expect(strstr(r.err, ": the gradients overflow float16 even at the loss scale's floor, 1\n") != NULL,
            "stderr:\n%s", r.err);
  cr_expect(strstr(r.err, ", --amp bf16 (float32's range, no loss scaling), or check the data\n") != NULL,
            "stderr:\n%s", r.err);
  child_run_free(&r);
  free(data);
}

/* The scaler's count of skips in a row when every step reads its info (as
 * the demos' trainer does): a clean step read as such spares the update its
 * read of the count, and the limit still stops the third skip in a row. */
Test(divergence, skip_limit_holds_when_step_infos_are_read) {
  mx_scaler_opts o = mx_scaler_defaults();
  o.enabled = true, o.max_consecutive_skips = 2;
  mx_scaler *s = mx_scaler_new(&o);
  mx_tensor *p = mx_full(MX_SHAPE(3), 1.0, MX_F32, MX_CPU);
  cr_assert(s && p, "%s", mx_last_error());
  mx_set_requires_grad(p, true);
  mx_sgd_opts so = mx_sgd_defaults();
  so.lr = 0.1;
  mx_optimizer *opt = mx_sgd_new(1, &p, &so);
  cr_assert_not_null(opt, "%s", mx_last_error());
  const bool overflows[] = {true, true, false, true, true, true};
  for (int i = 0; i < 6; i++) {
    mx_scope *scope = mx_scope_begin();
    cr_assert_eq(mx_optimizer_zero_grad(opt, true), MX_OK);
    mx_tensor *c = mx_full(MX_SHAPE(3), overflows[i] ? INFINITY : 0.25, MX_F32, MX_CPU);
    mx_tensor *loss = mx_sum(mx_mul(p, c), MX_ALL_DIMS, false);
    cr_assert_eq(mx_backward(mx_scaler_scale(s, loss), NULL, false), MX_OK, "%s", mx_last_error());
    mx_scaler_step_info info;
    cr_assert_eq(mx_scaler_step(s, opt, &info), MX_OK, "%s", mx_last_error());
    cr_assert_eq(info.stepped, !overflows[i], "step %d", i + 1);
    mx_status st = mx_scaler_update(s);
    if (i < 5) cr_assert_eq(st, MX_OK, "update %d: %s", i + 1, mx_last_error());
    else {
      cr_expect_eq(st, MX_STATE_ERROR);
      cr_expect_str_eq(mx_last_error(), "mx_scaler_update: 3 consecutive steps skipped (limit 2): the gradients keep "
                                        "overflowing at scale 2048; checked set 0: 1 gradients held 3 inf and 0 NaN");
    }
    cr_expect_eq(mx_scaler_stats_get(s).consecutive_skips, i < 2 ? i + 1 : i - 2, "after step %d", i + 1);
    mx_scope_end(scope);
  }
  mx_optimizer_free(opt);
  mx_release(p);
  mx_scaler_free(s);
}

/* --- the settings' API ---------------------------------------------------------------- */

static mx_module *small_net(void) {
  mx_module *net = mx_linear_new(3, 2, true, NULL);
  cr_assert_not_null(net, "%s", mx_last_error());
  return net;
}

Test(run_settings, saved_and_read_back_in_order) {
  mx_module *net = small_net();
  const char *path = tmp_path("ck.safetensors");
  const char *keys[] = {"model", "epochs", "data"}, *values[] = {"mlp", "3", "60000 + 10000 samples, \"quoted\""};
  mx_checkpoint ck = {net, NULL, NULL, NULL, NULL, 5, 1};
  mx_checkpoint_settings run = {3, keys, values};
  cr_assert_eq(mx_checkpoint_save_with_settings(path, &ck, &run), MX_OK, "%s", mx_last_error());
  mx_checkpoint_settings got;
  cr_assert_eq(mx_checkpoint_settings_read(path, &got), MX_OK, "%s", mx_last_error());
  cr_assert_eq(got.n, 3);
  for (int i = 0; i < 3; i++) {
    cr_expect_str_eq(got.keys[i], keys[i]);
    cr_expect_str_eq(got.values[i], values[i]);
  }
  mx_checkpoint_settings_free(&got);
  cr_expect_eq(got.n, 0);
  cr_expect_null(got.keys);
  /* the checkpoint itself loads as before, the settings aside */
  mx_checkpoint back = {net, NULL, NULL, NULL, NULL, 0, 0};
  cr_assert_eq(mx_checkpoint_load(path, &back), MX_OK, "%s", mx_last_error());
  cr_expect_eq(back.step, 5);
  /* without settings: none read back */
  cr_assert_eq(mx_checkpoint_save(path, &ck), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_checkpoint_settings_read(path, &got), MX_OK, "%s", mx_last_error());
  cr_expect_eq(got.n, 0);
  mx_checkpoint_settings_free(&got);
  mx_module_free(net);
}

Test(run_settings, bad_settings_and_files_are_errors) {
  mx_module *net = small_net();
  const char *path = tmp_path("ck.safetensors");
  mx_checkpoint ck = {net, NULL, NULL, NULL, NULL, 0, 0};
  const char *twice[] = {"lr", "lr"}, *values[] = {"1", "2"}, *empty[] = {"lr", ""}, *no_value[] = {"1", NULL};
  EXPECT_STATUS_ERROR(mx_checkpoint_save_with_settings(path, &ck, &(mx_checkpoint_settings){2, twice, values}),
                      "mx_checkpoint_save_with_settings: settings: settings 0 and 1 have the same key 'lr'");
  EXPECT_STATUS_ERROR(mx_checkpoint_save_with_settings(path, &ck, &(mx_checkpoint_settings){2, empty, values}),
                      "mx_checkpoint_save_with_settings: settings: setting 1 has an empty key");
  EXPECT_STATUS_ERROR(mx_checkpoint_save_with_settings(path, &ck, &(mx_checkpoint_settings){2, twice, no_value}),
                      "mx_checkpoint_save_with_settings: settings: setting 1 has a NULL value");
  EXPECT_STATUS_ERROR(mx_checkpoint_save_with_settings(path, &ck, &(mx_checkpoint_settings){1, NULL, values}),
                      "mx_checkpoint_save_with_settings: settings: 1 settings with keys NULL and values given");
  cr_expect(access(path, F_OK) != 0, "a refused save wrote %s", path);
  mx_checkpoint_settings got = {0};
  cr_assert_eq(mx_module_save(net, path), MX_OK, "%s", mx_last_error());
  EXPECT_STATUS_ERROR(mx_checkpoint_settings_read(path, &got),
                      fmt("mx_checkpoint_settings_read: %s: not a training checkpoint (its metadata 'format' is "
                          "missing, not 'mixgrad.checkpoint.1')", path));
  cr_expect_eq(got.n, 0);
  EXPECT_STATUS_ERROR(mx_checkpoint_settings_read(NULL, &got), "mx_checkpoint_settings_read: argument 'path' is NULL");
  mx_module_free(net);
}
