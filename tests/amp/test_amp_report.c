/* The AMP report page as a person would see it: a small float16 run under a
 * GradScaler started too high (so steps are skipped), written by
 * mx_amp_report_write_html, then read by tests/amp/check_report.py: with an
 * XML parser and html5lib (well-formed, the sections, nothing fetched, every
 * number of the verdict shown elsewhere), and rendered by headless Chromium
 * (no console message, the sections in its DOM, a screenshot). Those two
 * skip when python3's html5lib or chromium is missing, and under valgrind,
 * which would trace them too. */
#include <criterion/criterion.h>
#include <mixgrad.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/child_run.h"
#include "tests/common/expect_error.h"
#include "tests/common/tmp_files.h"

#ifdef MX_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#define OK(expr) cr_assert_eq((expr), MX_OK, "%s", mx_last_error())

TestSuite(amp_report, .init = make_tmp_dir, .fini = remove_tmp_dir);

/* Skips the test, first removing its directory: Criterion runs no .fini after a skip. */
static void skip(const char *why) {
  remove_tmp_dir();
  cr_skip_test("%s", why);
}

/* What the last step's gradients were, counted without the watcher: the share of values below 2^-14 (zero or
 * subnormal in float16), scaled (the scaler's own count) and true (read back from the gradients). */
typedef struct {
  double scaled, truth;
} underflow;

/* 21 steps of a 4-16-3 MLP on fixed data, f16 autocast, the scale starting at 2^24 and growing every 6 clean
 * steps, sampled every 4 steps; the report written to path. Input column 0 is zero (its weights get exact zero
 * gradients) and column 1 tiny (their true gradients fall below 2^-14, their scaled ones do not). */
static underflow write_report(const char *path) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(7);
  mx_module *net = mx_sequential_new(3, (mx_module *[]){mx_linear_new(4, 16, true, gen), mx_relu_new(),
                                                        mx_linear_new(16, 3, true, gen)});
  cr_assert_not_null(net, "%s", mx_last_error());
  int n = mx_module_num_parameters(net);
  mx_tensor *params[4];
  const char *names[4];
  for (int i = 0; i < n; i++) params[i] = mx_module_parameter(net, i, &names[i]);
  mx_sgd_opts o = mx_sgd_defaults();
  o.lr = 0.05;
  mx_optimizer *opt = mx_sgd_new(n, params, &o);
  mx_scaler_opts so = mx_scaler_defaults();
  so.init_scale = 0x1p24, so.growth_interval = 6;
  mx_scaler *scaler = mx_scaler_new(&so);
  mx_amp_stats *st = mx_amp_stats_new(scaler, 4);
  OK(mx_amp_stats_name_params(st, n, params, names));
  mx_module_set_output_hook(net, mx_amp_stats_output_hook, st);
  mx_amp_report_reset();
  float data[32][4];
  uint32_t lcg = 12345;
  for (int i = 0; i < 32; i++)
    for (int j = 0; j < 4; j++) {
      lcg = lcg * 1664525u + 1013904223u;
      data[i][j] = ((float)(lcg >> 8) / 16777216.0f - 0.5f) * (j == 0 ? 0.0f : j == 1 ? 1e-5f : 4.0f);
    }
  mx_tensor *x = mx_from_data(data, MX_SHAPE(32, 4), MX_F32, MX_CPU);
  int64_t labels[32];
  for (int i = 0; i < 32; i++) labels[i] = i % 3;
  mx_tensor *y = mx_from_data(labels, MX_SHAPE(32), MX_I64, MX_CPU);
  for (int step = 0; step < 21; step++) {
    mx_scope *s = mx_scope_begin();
    mx_amp_stats_step_begin(st);
    OK(mx_optimizer_zero_grad(opt, true));
    mx_tensor *loss = NULL;
    MX_AUTOCAST(MX_CPU, MX_F16, true, true) {
      loss = mx_cross_entropy(mx_module_forward(net, x), y, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, 0.0);
    }
    cr_assert_not_null(loss, "%s", mx_last_error());
    OK(mx_backward(mx_scaler_scale(scaler, loss), NULL, false));
    OK(mx_scaler_step(scaler, opt, NULL));
    OK(mx_scaler_update(scaler));
    OK(mx_amp_stats_step_end(st, loss));
    mx_scope_end(s);
  }
  OK(mx_amp_report_write_html(path, st, &(mx_amp_report_opts){.title = "test <run> & co", .amp = MX_F16,
                                                                .command = "test_amp_report"}));
  cr_assert_eq(mx_amp_stats_num_samples(st), 6);
  underflow u = {mx_scaler_underflow_fraction(scaler, opt), 0};
  int64_t values = 0, below = 0;
  for (int i = 0; i < n; i++) {
    mx_tensor *g = mx_grad_of(params[i]);
    float v[64];
    OK(mx_to_host(g, v, sizeof *v * (size_t)mx_numel(g)));
    for (int64_t k = 0; k < mx_numel(g); k++) below += fabsf(v[k]) < 0x1p-14f;
    values += mx_numel(g);
  }
  u.truth = (double)below / (double)values;
  mx_amp_stats_free(st);
  mx_scaler_free(scaler);
  mx_optimizer_free(opt);
  mx_module_free(net);
  mx_generator_free(gen);
  mx_scope_end(scope);
  return u;
}

Test(amp_report, page_holds_the_runs_numbers) {
  const char *path = tmp_path("report.html");
  write_report(path);
  char *page = read_file(path, NULL);
  cr_expect(strstr(page, "<title>test &lt;run&gt; &amp; co</title>"), "the title is escaped");
  static const char *const ids[] = {"summary", "verdict", "trajectory", "guide", "histograms-start",
                                    "histograms-settled", "histograms-end", "ops"};
  for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
    cr_expect(strstr(page, fmt("id=\"%s\"", ids[i])), "no section %s", ids[i]);
  /* 2^24 overflows this MLP's float16 gradients: skipped steps halve it; the verdict says how many */
  cr_expect(strstr(page, "Autocast float16 with a GradScaler; 21 steps, 6 sampled."));
  cr_expect(strstr(page, "<li>The GradScaler skipped "), "the verdict speaks of the skipped steps");
  cr_expect(strstr(page, "<circle "), "skipped steps are marked on the trajectory");
  cr_expect(strstr(page, "<td class=\"l\">linear</td><td class=\"l\">lower</td>"), "the per-op table lists linear");
  free(page);
}

Test(amp_report, the_end_table_matches_the_scaler_and_the_gradients) {
  const char *path = tmp_path("report.html");
  underflow u = write_report(path);
  cr_assert(u.truth > u.scaled && u.scaled > 0, "the run is made for true %g > scaled %g > 0", u.truth, u.scaled);
  char *page = read_file(path, NULL);
  /* the end sample is the last step's: its 'all parameters' row shows the scaler's own fraction (after label,
   * dtype, values, zeros: without scaling, flushed, bfloat16's, then at the scale) and the true gradients' */
  const char *row = strstr(page, "<tr id=\"underflow-total-5\">");
  cr_assert(row, "no total row for the last sample");
  const char *cell[8] = {row};
  for (int k = 1; k < 8; k++) cell[k] = strstr(cell[k - 1] + 1, "<td>");
  cr_assert(cell[7], "the total row is short");
  struct { int column; double fraction; const char *what; } checks[] = {{7, u.scaled, "scaled"}, {4, u.truth, "true"}};
  for (int c = 0; c < 2; c++) {
    char want[64];
    double percent = 100 * checks[c].fraction;
    snprintf(want, sizeof want, percent == 0 || percent >= 0.005 ? "<td>%.2f%%</td>" : "<td>%.3g%%</td>", percent);
    cr_expect_eq(strncmp(cell[checks[c].column], want, strlen(want)), 0, "the %s share: page %.40s, counted %s",
                 checks[c].what, cell[checks[c].column], want);
  }
  free(page);
}

/* python3 tests/amp/check_report.py MODE args...: passes, or skips when a tool is missing (exit 77). */
static void check(const char *mode, const char *page, const char *png) {
  if (RUNNING_ON_VALGRIND) skip("under valgrind: it would trace python3 and chromium too");
  const char *python = getenv("MX_PYTHON3"), *script = getenv("MX_CHECK_REPORT");
  cr_assert(python && script, "MX_PYTHON3 and MX_CHECK_REPORT are not set (tests/amp/meson.build sets them)");
  const char *argv[] = {python, script, mode, page, png, NULL};
  child_run r = child_run_argv(argv, 300);
  if (r.status == 77) {
    char why[512];
    snprintf(why, sizeof why, "%s", r.err);
    child_run_free(&r);
    skip(why);
  }
  cr_expect_eq(r.status, 0, "check_report.py %s: %s", mode, r.err);
  child_run_free(&r);
}

Test(amp_report, page_is_well_formed_and_self_contained) {
  const char *path = tmp_path("report.html");
  write_report(path);
  check("html", path, NULL);
}

Test(amp_report, chromium_renders_it_without_errors) {
  const char *path = tmp_path("report.html");
  write_report(path);
  check("chromium", path, tmp_path("report.png"));
}

Test(amp_report, errors) {
  EXPECT_STATUS_ERROR(mx_amp_report_write_html(NULL, NULL, NULL), "mx_amp_report_write_html: argument 'path' is NULL");
  mx_amp_stats *st = mx_amp_stats_new(NULL, 1);
  EXPECT_STATUS_ERROR(mx_amp_report_write_html(tmp_path("no/such/folder.html"), st, NULL),
                      fmt("mx_amp_report_write_html: %s: the folder %s does not exist", tmp_path("no/such/folder.html"),
                          tmp_path("no/such")));
  mx_amp_stats_free(st);
}
