/* The training demos end to end (examples/mnist, examples/cifar10), each run
 * as a child process: training on synthetic data and on IDX files written
 * here (raw and gzipped), the metrics CSV, bit-exact resume, the gnuplot
 * picture, and the exit codes and messages of bad flags, bad data and
 * --device cuda without a GPU, and two and three ranks under scripts/launch
 * (mpirun) against one process. tests/examples/meson.build passes the demos' paths in
 * MX_MNIST_DEMO and MX_CIFAR10_DEMO, the launcher's in MX_LAUNCH.
 *
 * MX_TEST_QUICK (set, non-empty and not "0"; CI sets it for the sanitizer and
 * valgrind runs, which trace the demos too) shrinks the runs and skips the
 * CIFAR-10 training, a ResNet-9 that takes seconds even natively. Under
 * valgrind the runs that train are skipped: oneDNN's JIT kernels report
 * errors there (uninitialised values valgrind cannot follow through JIT
 * code), and --error-exitcode turns them into the demo's exit code. ASan and
 * UBSan check those runs; valgrind checks the ones that fail early. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/common/child_run.h"
#include "tests/data/data_files.h"

#ifdef MX_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

TestSuite(mnist, .init = make_tmp_dir, .fini = remove_tmp_dir);
TestSuite(cifar10, .init = make_tmp_dir, .fini = remove_tmp_dir);

static bool quick(void) {
  const char *q = getenv("MX_TEST_QUICK");
  return q && *q && strcmp(q, "0") != 0;
}

/* Skips the test, first removing its directory: Criterion runs no .fini
 * after a skip. */
static void skip(const char *why) {
  remove_tmp_dir();
  cr_skip_test("%s", why);
}

/* For the tests whose demo trains (see the top of the file). */
static void skip_training_under_valgrind(void) {
  if (RUNNING_ON_VALGRIND) skip("under valgrind: oneDNN's JIT kernels make a traced demo fail");
}

/* The demo's path from the environment meson sets. */
static const char *demo(const char *var) {
  const char *path = getenv(var);
  cr_assert(path && *path, "%s is not set (tests/examples/meson.build sets it)", var);
  return path;
}

#define MNIST demo("MX_MNIST_DEMO")
#define CIFAR10 demo("MX_CIFAR10_DEMO")

/* The last 3000 characters: enough of a failed run's output to see why. */
static const char *tail(const char *s) {
  size_t n = strlen(s);
  return n > 3000 ? s + n - 3000 : s;
}

#define RUN(...) child_run_argv((const char *const[]){__VA_ARGS__, NULL}, 0)

static bool starts_with(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

/* The run ended with this exit code; its output says why when not. */
static void expect_status(const child_run *r, int status, const char *what) {
  cr_assert_eq(r->status, status, "%s exited with %d, expected %d\n--- stdout:\n%s\n--- stderr:\n%s", what,
               r->status, status, tail(r->out), tail(r->err));
}

/* --- the metrics CSV --------------------------------------------------------- */

enum { KIND, STEP, EPOCH, LOSS, ACCURACY, LR, LOSS_SCALE, SKIPPED, TEST_LOSS, TEST_ACCURACY, FIELDS };
static const char csv_header[] = "kind,step,epoch,loss,accuracy,lr,loss_scale,skipped,test_loss,test_accuracy";

typedef struct {
  char *line;          /* the row as written, for exact comparisons */
  char *field[FIELDS]; /* its fields, split in a copy */
} csv_row;

typedef struct {
  csv_row *steps, *epochs;
  int n_steps, n_epochs;
} metrics;

/* Splits a copy of line at its commas: exactly FIELDS fields. */
static csv_row parse_row(const char *line, const char *path) {
  csv_row row = {.line = strdup(line)};
  char *rest = strdup(line);
  int n = 0;
  for (char *f; (f = strsep(&rest, ",")) != NULL; n++) {
    cr_assert_lt(n, FIELDS, "%s: too many fields in '%s'", path, line);
    row.field[n] = f;
  }
  cr_assert_eq(n, FIELDS, "%s: %d fields in '%s', expected %d", path, n, line, FIELDS);
  return row;
}

/* The CSV --metrics wrote: the header, then step rows and epoch rows. */
static metrics read_metrics(const char *path) {
  char *text = read_file(path, NULL), *rest = text, *line;
  metrics m = {0};
  line = strsep(&rest, "\n");
  cr_assert_str_eq(line, csv_header, "%s: the header", path);
  int cap = 0;
  while ((line = strsep(&rest, "\n")) != NULL && *line) {
    csv_row row = parse_row(line, path);
    bool step = !strcmp(row.field[KIND], "step");
    cr_assert(step || !strcmp(row.field[KIND], "epoch"), "%s: a row of kind '%s'", path, row.field[KIND]);
    if (m.n_steps + m.n_epochs == cap) {
      cap = cap ? 2 * cap : 64;
      m.steps = realloc(m.steps, (size_t)cap * sizeof *m.steps);
      m.epochs = realloc(m.epochs, (size_t)cap * sizeof *m.epochs);
      cr_assert(m.steps && m.epochs);
    }
    if (step) m.steps[m.n_steps++] = row;
    else m.epochs[m.n_epochs++] = row;
  }
  cr_assert(rest == NULL, "%s: an empty line before the end", path);
  free(text);
  return m;
}

static void free_metrics(metrics *m) {
  for (int i = 0; i < m->n_steps + m->n_epochs; i++) {
    csv_row *r = i < m->n_steps ? &m->steps[i] : &m->epochs[i - m->n_steps];
    free(r->line);
    free(r->field[0]); /* the split copy */
  }
  free(m->steps);
  free(m->epochs);
}

/* The field as a number: it must be one, whole. */
static double number(const csv_row *r, int field) {
  char *end;
  double v = strtod(r->field[field], &end);
  cr_assert(*r->field[field] && !*end, "field %d of '%s' is not a number", field, r->line);
  return v;
}

/* Step rows numbered 1, 2, ... in order, their epochs as batches per epoch say. */
static void expect_steps(const metrics *m, int n, int batches) {
  cr_assert_eq(m->n_steps, n, "%d step rows, expected %d", m->n_steps, n);
  for (int i = 0; i < n; i++) {
    cr_expect_eq(number(&m->steps[i], STEP), i + 1, "row '%s'", m->steps[i].line);
    cr_expect_eq(number(&m->steps[i], EPOCH), i / batches + 1, "row '%s'", m->steps[i].line);
  }
}

static double mean_loss(const metrics *m, int first, int count) {
  double sum = 0;
  for (int i = first; i < first + count; i++) sum += number(&m->steps[i], LOSS);
  return sum / count;
}

/* The mean loss of the last 5 steps is below 0.7 times that of the first 5. */
static void expect_loss_falls(const metrics *m) {
  cr_assert_geq(m->n_steps, 10, "too few steps (%d) to see the loss fall", m->n_steps);
  double first = mean_loss(m, 0, 5), last = mean_loss(m, m->n_steps - 5, 5);
  cr_expect_lt(last, 0.7 * first, "the loss went from %g (first 5 steps) to %g (last 5)", first, last);
}

/* The last epoch row's test accuracy is well above chance (0.1). */
static void expect_learned(const metrics *m, int epochs) {
  cr_assert_eq(m->n_epochs, epochs, "%d epoch rows, expected %d", m->n_epochs, epochs);
  double acc = number(&m->epochs[epochs - 1], TEST_ACCURACY);
  cr_expect_gt(acc, 0.5, "test accuracy %g after %d epochs", acc, epochs);
}

/* stdout ends with the summary ("<title>: test accuracy ...") and the
 * "curves: <path>" line --metrics adds after it. */
static void expect_summary(const char *out, const char *title, const char *csv) {
  const char *curves = fmt("\ncurves: %s\n", csv);
  size_t n = strlen(out), k = strlen(curves);
  cr_assert(n > k && !strcmp(out + n - k, curves), "stdout does not end with '%s':\n%s", curves + 1, tail(out));
  const char *summary = out + n - k;
  while (summary > out && summary[-1] != '\n') summary--;
  const char *want = fmt("%s: test accuracy ", title);
  cr_expect(starts_with(summary, want), "the summary line is not '%s...':\n%s", want, tail(out));
}

/* The GradScaler's scale in each step row: 2^16 at first, halved after each
 * skipped step (f16 can overflow now and then), never grown (it waits 100
 * clean steps, more than these runs take); and stdout's account agrees. */
static void expect_scaler_trajectory(const metrics *m, const char *out) {
  double scale = 65536;
  int skipped = 0;
  cr_expect_str_eq(m->steps[0].field[LOSS_SCALE], "65536");
  for (int i = 0; i < m->n_steps; i++) {
    cr_expect_eq(number(&m->steps[i], LOSS_SCALE), scale, "row '%s': expected scale %g", m->steps[i].line, scale);
    if (number(&m->steps[i], SKIPPED) != 0) scale /= 2, skipped++;
  }
  cr_expect_leq(skipped, m->n_steps / 5, "%d of %d steps skipped", skipped, m->n_steps);
  const char *line = fmt("\nGradScaler: final scale %g, %d of %d steps skipped for inf/NaN gradients\n", scale,
                         skipped, m->n_steps);
  cr_expect(strstr(out, line) != NULL, "stdout lacks '%s':\n%s", line + 1, tail(out));
}

/* --- MNIST on synthetic data ----------------------------------------------- */

Test(mnist, mlp_learns_synthetic_data) {
  skip_training_under_valgrind();
  int samples = quick() ? 200 : 600, batch = 32, epochs = 2, batches = (samples + batch - 1) / batch;
  const char *csv = tmp_path("F.csv");
  child_run r = RUN(MNIST, "--synthetic", fmt("%d", samples), "--model", "mlp", "--epochs", fmt("%d", epochs),
                     "--batch", fmt("%d", batch), "--metrics", csv);
  expect_status(&r, 0, "mnist --model mlp");
  expect_summary(r.out, "synthetic mlp", csv);
  metrics m = read_metrics(csv);
  expect_steps(&m, epochs * batches, batches);
  expect_loss_falls(&m);
  expect_learned(&m, epochs);
  free_metrics(&m);
  child_run_free(&r);
}

/* --- data parallelism: scripts/launch ------------------------------------------ */

#define LAUNCH demo("MX_LAUNCH")

/* Two and three ranks under scripts/launch (mpirun), each on its share of
 * every batch, train as one process on the whole: the same steps and lr,
 * float32 losses within rounding of each other's, the same test accuracy;
 * rank 0 alone prints. */
Test(mnist, two_and_three_ranks_train_as_one_process) {
  skip_training_under_valgrind();
  if (!getenv("MX_MPI_BUILT")) skip("built without MPI: one process only");
  int epochs = 2, batches = 20;
  char one[1024];
  snprintf(one, sizeof one, "%s", tmp_path("one.csv"));
  child_run a = RUN(MNIST, "--synthetic", "480", "--model", "mlp", "--epochs", "2", "--batch", "24", "--amp", "off",
                     "--metrics", one);
  expect_status(&a, 0, "mnist");
  metrics ma = read_metrics(one);
  for (int ranks = 2; ranks <= 3; ranks++) {
    char many[1024];
    snprintf(many, sizeof many, "%s", tmp_path(fmt("ranks%d.csv", ranks)));
    child_run b = RUN(LAUNCH, fmt("%d", ranks), MNIST, "--synthetic", "480", "--model", "mlp", "--epochs", "2",
                       "--batch", "24", "--amp", "off", "--metrics", many);
    expect_status(&b, 0, fmt("scripts/launch %d mnist", ranks));
    cr_expect(strstr(b.out, fmt("40 steps of 24, amp off, adam, lr 0.003, %d ranks of %d\n", ranks, 24 / ranks)),
              "%s", tail(b.out));
    const char *summary = strstr(b.out, "synthetic mlp: test accuracy ");
    cr_expect(summary && !strstr(summary + 1, "synthetic mlp: test accuracy "), "not one summary:\n%s", tail(b.out));
    metrics mb = read_metrics(many);
    expect_steps(&mb, epochs * batches, batches);
    for (int i = 0; i < ma.n_steps && i < mb.n_steps; i++) {
      cr_expect_str_eq(mb.steps[i].field[LR], ma.steps[i].field[LR], "%d ranks: step %d's lr", ranks, i + 1);
      cr_expect(fabs(number(&mb.steps[i], LOSS) - number(&ma.steps[i], LOSS)) <= 0.01,
                "%d ranks: step %d: loss %s, alone %s", ranks, i + 1, mb.steps[i].field[LOSS], ma.steps[i].field[LOSS]);
    }
    cr_assert_eq(mb.n_epochs, epochs);
    for (int e = 0; e < epochs; e++)
      cr_expect(fabs(number(&mb.epochs[e], TEST_ACCURACY) - number(&ma.epochs[e], TEST_ACCURACY)) <= 0.02,
                "%d ranks: epoch %d: test accuracy %s, alone %s", ranks, e + 1, mb.epochs[e].field[TEST_ACCURACY],
                ma.epochs[e].field[TEST_ACCURACY]);
    free_metrics(&mb);
    child_run_free(&b);
  }
  free_metrics(&ma);
  child_run_free(&a);
}

Test(mnist, ranks_need_a_batch_that_splits_evenly) {
  if (!getenv("MX_MPI_BUILT")) skip("built without MPI: one process only");
  child_run r = RUN(LAUNCH, "3", MNIST, "--synthetic", "100", "--batch", "20");
  expect_status(&r, 1, "scripts/launch 3 mnist --batch 20");
  cr_expect(strstr(r.err, "--batch 20 does not split evenly over 3 ranks\n"), "stderr:\n%s", tail(r.err));
  child_run_free(&r);
}

/* OneCycleLR needs a step in each phase: a run of a few steps warms up for
 * half of it, and one under 3 steps keeps the peak lr. */
Test(mnist, runs_of_one_to_eight_steps) {
  skip_training_under_valgrind();
  for (int steps = 1; steps <= 8; steps++) {
    const char *csv = tmp_path(fmt("s%d.csv", steps));
    child_run r = RUN(MNIST, "--synthetic", fmt("%d", 10 * steps), "--batch", "10", "--epochs", "1", "--model",
                       "mlp", "--metrics", csv);
    expect_status(&r, 0, fmt("mnist for %d steps", steps));
    metrics m = read_metrics(csv);
    expect_steps(&m, steps, steps);
    double peak = 3e-3, first = number(&m.steps[0], LR);
    cr_expect(steps < 3 ? first == peak : first < peak / 10, "%d steps: lr %g at step 1", steps, first);
    free_metrics(&m);
    child_run_free(&r);
  }
}

Test(mnist, cnn_learns_with_f16_and_a_grad_scaler) {
  skip_training_under_valgrind();
  int samples = quick() ? 160 : 256, batch = quick() ? 16 : 32, batches = (samples + batch - 1) / batch;
  const char *csv = tmp_path("G.csv");
  child_run r = RUN(MNIST, "--synthetic", fmt("%d", samples), "--model", "cnn", "--epochs", "2", "--batch",
                     fmt("%d", batch), "--amp", "f16", "--metrics", csv);
  expect_status(&r, 0, "mnist --model cnn --amp f16");
  expect_summary(r.out, "synthetic cnn", csv);
  metrics m = read_metrics(csv);
  expect_steps(&m, 2 * batches, batches);
  expect_loss_falls(&m);
  expect_scaler_trajectory(&m, r.out);
  free_metrics(&m);
  child_run_free(&r);
}

/* --- MNIST from IDX files ---------------------------------------------------- */

enum { SIDE = 28, PIXELS = SIDE * SIDE };

/* n learnable images and their labels: image i's label k lights rows 2k + 4
 * and 2k + 5 (255) over dim noise (0..63) that depends on i and seed. */
static void make_images(uint32_t n, uint32_t seed, uint8_t *pixels, uint8_t *labels) {
  uint32_t state = seed * 2654435761u + 1;
  for (uint32_t i = 0; i < n; i++) {
    state = state * 1664525u + 1013904223u;
    int k = (int)(state >> 24) % 10;
    labels[i] = (uint8_t)k;
    for (int p = 0; p < PIXELS; p++) {
      state = state * 1664525u + 1013904223u;
      int row = p / SIDE;
      pixels[(size_t)i * PIXELS + p] = row / 2 == k + 2 ? 255 : (uint8_t)(state >> 26);
    }
  }
}

/* dir/<prefix>-images-idx3-ubyte and dir/<prefix>-labels-idx1-ubyte, each
 * gzipped (with .gz) when asked. */
static void write_idx_set(const char *dir, const char *prefix, uint32_t n, uint32_t seed, bool gz_images,
                          bool gz_labels) {
  uint8_t *pixels = malloc((size_t)n * PIXELS), *labels = malloc(n);
  cr_assert(pixels && labels);
  make_images(n, seed, pixels, labels);
  size_t len;
  uint32_t dims[3] = {n, SIDE, SIDE};
  uint8_t *bytes = idx_bytes(0x803, 3, dims, pixels, (size_t)n * PIXELS, &len);
  (gz_images ? write_gz : write_raw)(fmt("%s/%s-images-idx3-ubyte%s", dir, prefix, gz_images ? ".gz" : ""), bytes,
                                     len);
  free(bytes);
  bytes = idx_labels(n, labels, &len);
  (gz_labels ? write_gz : write_raw)(fmt("%s/%s-labels-idx1-ubyte%s", dir, prefix, gz_labels ? ".gz" : ""), bytes,
                                     len);
  free(bytes);
  free(pixels);
  free(labels);
}

static int idx_train_samples(void) { return quick() ? 160 : 200; }

/* Trains the MLP on the IDX files in dir for 2 epochs of batch 32; returns
 * the metrics after checking the run read the files and learned from them. */
static metrics train_on_idx(const char *dir, const char *csv) {
  int samples = idx_train_samples(), batches = (samples + 31) / 32;
  child_run r = RUN(MNIST, "--data", dir, "--model", "mlp", "--epochs", "2", "--batch", "32", "--metrics", csv);
  expect_status(&r, 0, "mnist --data");
  cr_expect(strstr(r.out, fmt("MNIST mlp: 669706 parameters, %d training samples", samples)),
            "the run does not say it read %d samples:\n%s", samples, tail(r.out));
  expect_summary(r.out, "MNIST mlp", csv);
  metrics m = read_metrics(csv);
  expect_steps(&m, 2 * batches, batches);
  expect_loss_falls(&m);
  expect_learned(&m, 2);
  child_run_free(&r);
  return m;
}

Test(mnist, learns_from_idx_files) {
  skip_training_under_valgrind();
  const char *dir = tmp_subdir("idx");
  write_idx_set(dir, "train", (uint32_t)idx_train_samples(), 1, false, false);
  write_idx_set(dir, "t10k", 50, 2, false, false);
  metrics m = train_on_idx(dir, tmp_path("idx.csv"));
  free_metrics(&m);
}

/* The same files, some gzipped, give the same run to the last digit. */
Test(mnist, gzipped_idx_files_train_alike) {
  skip_training_under_valgrind();
  const char *raw = tmp_subdir("raw"), *gz = tmp_subdir("gz");
  uint32_t n = (uint32_t)idx_train_samples();
  write_idx_set(raw, "train", n, 1, false, false);
  write_idx_set(raw, "t10k", 50, 2, false, false);
  write_idx_set(gz, "train", n, 1, true, false);
  write_idx_set(gz, "t10k", 50, 2, false, true);
  metrics a = train_on_idx(raw, tmp_path("raw.csv")), b = train_on_idx(gz, tmp_path("gz.csv"));
  cr_assert_eq(a.n_steps, b.n_steps);
  for (int i = 0; i < a.n_steps; i++) cr_expect_str_eq(b.steps[i].line, a.steps[i].line, "step row %d", i + 1);
  for (int i = 0; i < a.n_epochs; i++) cr_expect_str_eq(b.epochs[i].line, a.epochs[i].line, "epoch row %d", i + 1);
  free_metrics(&a);
  free_metrics(&b);
}

/* mnist --data dir fails with exit code 1, stdout empty and exactly this on stderr. */
static void expect_data_error(const char *dir, const char *message) {
  child_run r = RUN(MNIST, "--data", dir, "--model", "mlp");
  expect_status(&r, 1, "mnist --data with bad files");
  cr_expect_str_eq(r.err, fmt("mnist: mx_mnist_load: %s\n", message));
  cr_expect_str_eq(r.out, "");
  child_run_free(&r);
}

Test(mnist, truncated_image_file) {
  const char *dir = tmp_subdir("cut");
  write_idx_set(dir, "t10k", 20, 2, false, false);
  write_idx_set(dir, "train", 20, 1, false, false);
  const char *images = fmt("%s/train-images-idx3-ubyte", dir);
  cr_assert_eq(truncate(images, 16 + 10 * PIXELS), 0); /* 10 of the 20 images the header counts */
  expect_data_error(dir, fmt("%s: expected %d bytes (a 16-byte header and 20 images of 28x28), got %d", images,
                             16 + 20 * PIXELS, 16 + 10 * PIXELS));
}

Test(mnist, wrong_magic) {
  const char *dir = tmp_subdir("magic");
  write_idx_set(dir, "train", 20, 1, false, false);
  write_idx_set(dir, "t10k", 20, 2, false, false);
  /* a label file where the images should be */
  const char *images = fmt("%s/train-images-idx3-ubyte", dir);
  size_t len;
  uint8_t *labels = idx_labels(3, (const uint8_t[]){1, 2, 3}, &len);
  write_raw(images, labels, len);
  free(labels);
  expect_data_error(dir, fmt("%s: bad magic 0x00000801 (labels) where images (0x00000803) were expected", images));
}

Test(mnist, missing_folder) {
  const char *dir = tmp_path("nowhere");
  expect_data_error(dir, fmt("%s: no train-images-idx3-ubyte.gz or train-images-idx3-ubyte there", dir));
}

/* --- flags ---------------------------------------------------------------------- */

Test(mnist, help) {
  child_run r = RUN(MNIST, "--help");
  expect_status(&r, 0, "mnist --help");
  cr_expect(starts_with(r.out, "usage: mnist [flags]\n"), "stdout:\n%s", r.out);
  cr_expect(strstr(r.out, "  --synthetic N ") != NULL, "--synthetic is not listed:\n%s", r.out);
  cr_expect_str_eq(r.err, "");
  child_run_free(&r);
}

/* mnist <flag> <value> exits with 2 and exactly this on stderr. */
static void expect_flag_error(const char *flag, const char *value, const char *message) {
  child_run r = RUN(MNIST, "--synthetic", "100", flag, value);
  expect_status(&r, 2, fmt("mnist %s %s", flag, value));
  cr_expect_str_eq(r.err, fmt("mnist: %s (see --help)\n", message));
  cr_expect_str_eq(r.out, "");
  child_run_free(&r);
}

Test(mnist, unknown_flag) { expect_flag_error("--frobnicate", "3", "unknown flag --frobnicate"); }

Test(mnist, bad_amp) { expect_flag_error("--amp", "f8", "--amp 'f8': expected off, f16 or bf16"); }

Test(mnist, zero_epochs) {
  expect_flag_error("--epochs", "0", "--epochs '0': expected a whole number from 1 to 100000");
}

/* --- checkpoints ------------------------------------------------------------------ */

/* A resume test: samples, batch and epochs of the runs, and the step the checkpoint is taken at. */
typedef struct {
  const char *amp;
  int samples, batch, epochs, stop;
} resume_case;

/* Run A trains straight through; run B stops with a checkpoint after c.stop
 * steps and a second run goes on from it. B's step rows must be A's, field
 * for field, and so must the test results of its epochs. Returns A's metrics. */
static metrics expect_exact_resume(resume_case c) {
  int batches = (c.samples + c.batch - 1) / c.batch, steps = c.epochs * batches;
  const char *a_csv = tmp_path("a.csv"), *b_csv = tmp_path("b.csv"), *ck = tmp_path("ck.safetensors");
  const char *n = fmt("%d", c.samples), *b = fmt("%d", c.batch), *e = fmt("%d", c.epochs);
  child_run a = RUN(MNIST, "--synthetic", n, "--model", "mlp", "--batch", b, "--epochs", e, "--amp", c.amp,
                     "--metrics", a_csv);
  expect_status(&a, 0, "run A");
  child_run b1 = RUN(MNIST, "--synthetic", n, "--model", "mlp", "--batch", b, "--epochs", e, "--amp", c.amp,
                      "--steps", fmt("%d", c.stop), "--save", ck);
  expect_status(&b1, 0, "run B up to the checkpoint");
  child_run b2 = RUN(MNIST, "--synthetic", n, "--model", "mlp", "--batch", b, "--epochs", e, "--amp", c.amp,
                      "--resume", ck, "--metrics", b_csv);
  expect_status(&b2, 0, "run B from the checkpoint");
  cr_expect(starts_with(b2.out, fmt("resuming %s at step %d (epoch %d)\n", ck, c.stop, c.stop / batches + 1)),
            "stdout:\n%s", tail(b2.out));
  metrics ma = read_metrics(a_csv), mb = read_metrics(b_csv);
  expect_steps(&ma, steps, batches);
  cr_assert_eq(mb.n_steps, steps - c.stop, "the resumed run has %d steps, expected %d", mb.n_steps, steps - c.stop);
  for (int i = 0; i < mb.n_steps; i++)
    cr_expect_str_eq(mb.steps[i].line, ma.steps[c.stop + i].line, "step %d", c.stop + i + 1);
  cr_assert_eq(ma.n_epochs, c.epochs);
  cr_assert_eq(mb.n_epochs, c.epochs);
  for (int i = 0; i < c.epochs; i++) {
    cr_expect_str_eq(mb.epochs[i].field[TEST_LOSS], ma.epochs[i].field[TEST_LOSS], "epoch %d", i + 1);
    cr_expect_str_eq(mb.epochs[i].field[TEST_ACCURACY], ma.epochs[i].field[TEST_ACCURACY], "epoch %d", i + 1);
  }
  free_metrics(&mb);
  child_run_free(&a);
  child_run_free(&b1);
  child_run_free(&b2);
  return ma;
}

/* Mid-epoch, across the epoch boundary after it. */
Test(mnist, resume_is_exact) {
  skip_training_under_valgrind();
  resume_case c = quick() ? (resume_case){"bf16", 100, 20, 2, 3} : (resume_case){"bf16", 300, 50, 2, 5};
  metrics a = expect_exact_resume(c);
  free_metrics(&a);
}

/* f16 adds the GradScaler, which grows its scale after 100 clean steps:
 * from a checkpoint at step 50, B grows it at step 101 as A does only if
 * the checkpoint kept the scaler's count of clean steps. */
Test(mnist, resume_is_exact_with_f16) {
  skip_training_under_valgrind();
  metrics a = expect_exact_resume((resume_case){"f16", 1050, 10, 1, 50});
  cr_expect_str_eq(a.steps[99].field[LOSS_SCALE], "65536", "A's scale before step 101");
  cr_expect_str_eq(a.steps[104].field[LOSS_SCALE], "131072", "A's scale at step 105 (grown once)");
  free_metrics(&a);
}

/* --- the picture, the device ------------------------------------------------------- */

/* Whether an executable `name` lies in one of PATH's folders. */
static bool on_path(const char *name) {
  const char *path = getenv("PATH");
  if (!path) return false;
  char *dirs = strdup(path), *rest = dirs, *dir;
  bool found = false;
  while (!found && (dir = strsep(&rest, ":")) != NULL)
    found = access(fmt("%s/%s", *dir ? dir : ".", name), X_OK) == 0;
  free(dirs);
  return found;
}

Test(mnist, plot_png) {
  skip_training_under_valgrind();
  if (!on_path("gnuplot")) skip("gnuplot is not on PATH");
  const char *png = tmp_path("P.png");
  child_run r = RUN(MNIST, "--synthetic", "100", "--model", "mlp", "--epochs", "1", "--batch", "20", "--amp", "f16",
                     "--plot", png);
  expect_status(&r, 0, "mnist --plot");
  size_t n = strlen(r.out);
  const char *picture = fmt("\npicture: %s\n", png);
  cr_expect(n > strlen(picture) && !strcmp(r.out + n - strlen(picture), picture), "stdout:\n%s", tail(r.out));
  size_t size;
  char *bytes = read_file(png, &size);
  cr_expect(size >= 8 && !memcmp(bytes, "\x89PNG\r\n\x1a\n", 8), "%s is not a PNG file", png);
  cr_expect_gt(size, 5000, "%s holds only %zu bytes", png, size);
  free(bytes);
  child_run_free(&r);
}

/* --device cuda. Without a GPU: a clear error and no output. With one:
 * the MLP and the CNN train there in float32 (their first loss, before any
 * update, the CPU's within float32 rounding), the MLP under float16
 * autocast with the GradScaler (its loss falling), and the ResNet-9 under
 * bfloat16 (its batch norm through the composite ops: CUDA has no fused
 * batch norm kernels yet). */
static child_run mnist_run(const char *model, const char *csv, const char *amp, const char *epochs,
                            const char *steps, const char *device) {
  return RUN(MNIST, "--synthetic", "200", "--batch", "20", "--model", model, "--metrics", csv, "--amp", amp,
             "--epochs", epochs, "--steps", steps, "--device", device);
}

static void expect_first_loss_as_on_the_cpu(const char *model) {
  const char *csv = tmp_path("G.csv"), *cpu_csv = tmp_path("H.csv");
  child_run r = mnist_run(model, csv, "off", "1", "10", "cuda");
  expect_status(&r, 0, fmt("mnist --model %s --amp off --device cuda", model));
  child_run c = mnist_run(model, cpu_csv, "off", "1", "1", "cpu");
  expect_status(&c, 0, fmt("mnist --model %s --amp off on the CPU", model));
  metrics m = read_metrics(csv), cm = read_metrics(cpu_csv);
  expect_steps(&m, 10, 10);
  double gpu_loss = number(&m.steps[0], LOSS), cpu_loss = number(&cm.steps[0], LOSS);
  double diff = gpu_loss > cpu_loss ? gpu_loss - cpu_loss : cpu_loss - gpu_loss;
  cr_expect(diff <= 1e-5 * cpu_loss, "%s, first loss: CUDA %.9g, CPU %.9g", model, gpu_loss, cpu_loss);
  free_metrics(&cm);
  free_metrics(&m);
  child_run_free(&c);
  child_run_free(&r);
}

Test(mnist, device_cuda_trains_or_says_why_not) {
  const char *csv = tmp_path("G.csv");
  child_run r = mnist_run("mlp", csv, "off", "1", "10", "cuda");
  if (starts_with(r.err, "--device cuda: no CUDA device")) {
    expect_status(&r, 1, "mnist --device cuda without a GPU");
    cr_expect(strstr(r.err, "; use --device cpu\n") != NULL, "stderr:\n%s", r.err);
    cr_expect_str_eq(r.out, "");
    child_run_free(&r);
    return;
  }
  child_run_free(&r);
  skip_training_under_valgrind();
  expect_first_loss_as_on_the_cpu("mlp");
  expect_first_loss_as_on_the_cpu("cnn");

  r = mnist_run("mlp", csv, "f16", "2", "20", "cuda");
  expect_status(&r, 0, "mnist --model mlp --amp f16 --device cuda");
  expect_summary(r.out, "synthetic mlp", csv);
  metrics m = read_metrics(csv);
  expect_steps(&m, 20, 10);
  expect_loss_falls(&m);
  free_metrics(&m);
  child_run_free(&r);

  const char *cifar_csv = tmp_path("I.csv");
  r = RUN(CIFAR10, "--synthetic", "40", "--batch", "10", "--epochs", "1", "--device", "cuda", "--metrics", cifar_csv);
  expect_status(&r, 0, "cifar10 --device cuda");
  expect_summary(r.out, "synthetic ResNet-9", cifar_csv);
  m = read_metrics(cifar_csv);
  expect_steps(&m, 4, 4);
  free_metrics(&m);
  child_run_free(&r);
}

/* --- CIFAR-10 ---------------------------------------------------------------------- */

/* The default recipe, Nesterov SGD peaking at lr 0.1 on step 2 of 5: without
 * the ResNet-9's logit scale it diverged (the loss climbed past 100). */
Test(cifar10, resnet9_trains_on_synthetic_data) {
  skip_training_under_valgrind();
  if (quick()) skip("MX_TEST_QUICK: the ResNet-9 is slow under the sanitizers");
  const char *csv = tmp_path("c.csv");
  child_run r = RUN(CIFAR10, "--synthetic", "100", "--batch", "20", "--epochs", "1", "--amp", "bf16", "--metrics",
                     csv);
  expect_status(&r, 0, "cifar10 --synthetic 100");
  expect_summary(r.out, "synthetic ResNet-9", csv);
  metrics m = read_metrics(csv);
  expect_steps(&m, 5, 5);
  cr_assert_eq(m.n_epochs, 1);
  double first = number(&m.steps[0], LOSS), last = number(&m.steps[4], LOSS);
  cr_expect_lt(last, first, "the loss went from %g (step 1) to %g (step 5)", first, last);
  free_metrics(&m);
  child_run_free(&r);
}

Test(cifar10, empty_data_folder_says_where_to_get_the_data) {
  const char *dir = tmp_subdir("empty");
  child_run r = RUN(CIFAR10, "--data", dir);
  expect_status(&r, 1, "cifar10 --data <empty folder>");
  cr_expect(starts_with(r.err, fmt("cifar10: mx_cifar_load: %s/data_batch_1.bin: cannot open: ", dir)),
            "stderr:\n%s", r.err);
  cr_expect(strstr(r.err, "  wget https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz ") != NULL, "stderr:\n%s",
            r.err);
  cr_expect_str_eq(r.out, "");
  child_run_free(&r);
}
