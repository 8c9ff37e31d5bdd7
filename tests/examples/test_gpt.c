/* The character-level GPT demo (examples/gpt) end to end, run as a child process: a tiny model trained for a few
 * dozen steps on the fortune files (on generated text where the fortunes package is missing) lowers its loss and
 * samples printable text; a resumed run goes on bit for bit; bad flags and a changed run are refused.
 * tests/examples/meson.build passes the demo's path in MX_GPT_DEMO.
 *
 * MX_TEST_QUICK (set, non-empty and not "0") shortens the training run. Under valgrind the runs that train are
 * skipped, as test_demos.c's (oneDNN's JIT kernels); the runs that fail early are checked there. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/common/child_run.h"
#include "tests/common/tmp_files.h"

#ifdef MX_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#define FORTUNES "/usr/share/games/fortunes"

TestSuite(gpt, .init = make_tmp_dir, .fini = remove_tmp_dir);

static bool quick(void) {
  const char *q = getenv("MX_TEST_QUICK");
  return q && *q && strcmp(q, "0") != 0;
}

static void skip_training_under_valgrind(void) {
  if (RUNNING_ON_VALGRIND) {
    remove_tmp_dir(); /* Criterion runs no .fini after a skip */
    cr_skip_test("under valgrind: oneDNN's JIT kernels make a traced demo fail");
  }
}

static const char *gpt(void) {
  const char *path = getenv("MX_GPT_DEMO");
  cr_assert(path && *path, "MX_GPT_DEMO is not set (tests/examples/meson.build sets it)");
  return path;
}

/* The fortune files, or generated text where they are missing: the flags that pick the text. */
static const char *text_flag(void) {
  struct stat st;
  return stat(FORTUNES, &st) == 0 && S_ISDIR(st.st_mode) ? "--data" : "--synthetic";
}
static const char *text_value(void) { return !strcmp(text_flag(), "--data") ? FORTUNES : "30000"; }

static const char *tail(const char *s) {
  size_t n = strlen(s);
  return n > 3000 ? s + n - 3000 : s;
}

#define RUN(...) child_run_argv((const char *const[]){gpt(), __VA_ARGS__, NULL}, 0)

static void expect_status(const child_run *r, int status, const char *what) {
  cr_assert_eq(r->status, status, "%s exited with %d, expected %d\n--- stdout:\n%s\n--- stderr:\n%s", what, r->status,
               status, tail(r->out), tail(r->err));
}

/* The loss column of the step rows of the CSV --metrics wrote, and its epoch rows' validation losses. */
typedef struct {
  double loss[256], val[16];
  char row[256][160];
  int n, n_val;
} curves;

static curves read_curves(const char *path) {
  char *text = read_file(path, NULL), *rest = text, *line;
  curves c = {0};
  line = strsep(&rest, "\n");
  cr_assert_str_eq(line, "kind,step,epoch,loss,accuracy,lr,loss_scale,skipped,test_loss,test_accuracy");
  while ((line = strsep(&rest, "\n")) != NULL && *line) {
    char kind[8];
    long long step;
    int epoch;
    double loss;
    cr_assert_eq(sscanf(line, "%7[^,],%lld,%d,%lf", kind, &step, &epoch, &loss), 4, "row '%s'", line);
    if (!strcmp(kind, "step")) {
      cr_assert_lt(c.n, 256);
      snprintf(c.row[c.n], sizeof c.row[c.n], "%s", line);
      c.loss[c.n++] = loss;
    } else {
      const char *val = line;
      for (int commas = 0; commas < 8; val++) commas += *val == ',';
      cr_assert_lt(c.n_val, 16);
      c.val[c.n_val++] = strtod(val, NULL);
    }
  }
  free(text);
  return c;
}

static double mean(const double *v, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += v[i];
  return s / n;
}

/* The text between the two "----" lines after "sampled at": n characters, each printable ASCII or a newline. */
static void expect_printable_sample(const char *out, int n) {
  const char *start = strstr(out, "\n----\n");
  cr_assert(start, "no sample in:\n%s", tail(out));
  start += 6;
  const char *end = strstr(start, "\n----\n");
  cr_assert(end, "the sample does not end:\n%s", tail(out));
  cr_expect_eq(end - start, n, "the sample has %d characters, expected %d", (int)(end - start), n);
  for (const char *p = start; p < end; p++)
    cr_expect(*p == '\n' || (*p >= ' ' && *p <= '~'), "the sample holds character %d at %d", *p, (int)(p - start));
}

Test(gpt, trains_lowers_the_loss_and_samples_text) {
  skip_training_under_valgrind();
  int steps = quick() ? 30 : 40;
  const char *csv = tmp_path("curves.csv");
  child_run r = RUN("--model", "tiny", "--epochs", "1", "--steps", fmt("%d", steps), text_flag(), text_value(),
                    "--metrics", csv, "--sample", "120", "--temperature", "0.7", "--top-k", "5");
  expect_status(&r, 0, "gpt --model tiny");
  curves c = read_curves(csv);
  cr_assert_eq(c.n, steps, "%d step rows, expected %d", c.n, steps);
  double first = mean(c.loss, 5), last = mean(c.loss + steps - 5, 5);
  cr_expect_lt(last, 0.8 * first, "the loss went from %g (first 5 steps) to %g (last 5)", first, last);
  cr_expect_gt(first, 4.0, "a fresh model's loss is near log(96) = 4.56, not %g", first);
  cr_assert_eq(c.n_val, 1, "%d validation rows", c.n_val);
  cr_expect(c.val[0] < 0.8 * first, "validation loss %g after the loss started at %g", c.val[0], first);
  expect_printable_sample(r.out, 120);
  cr_expect(strstr(r.out, "sampled at temperature 0.7, top-k 5:"), "%s", tail(r.out));
  cr_expect(strstr(r.out, fmt("character-level GPT (tiny): validation loss %.4f after %d steps", c.val[0], steps)),
            "no summary line in:\n%s", tail(r.out));
  child_run_free(&r);
}

/* --amp-report on this demo too: the page is written where the flag says, with its sections, and the run says so. */
Test(gpt, amp_report_writes_the_page) {
  skip_training_under_valgrind();
  const char *dir = tmp_path("report");
  char page[600];
  snprintf(page, sizeof page, "%s/index.html", dir);
  child_run r = RUN("--model", "tiny", "--epochs", "1", "--steps", "10", "--amp", "f16", text_flag(), text_value(),
                    "--sample", "0", "--amp-report", dir);
  expect_status(&r, 0, "gpt --amp-report");
  cr_expect(strstr(r.out, fmt("AMP report: %s\n", page)), "%s", tail(r.out));
  FILE *f = fopen(page, "r");
  cr_assert(f, "no page at %s", page);
  static char html[1 << 22];
  size_t n = fread(html, 1, sizeof html - 1, f);
  fclose(f);
  html[n] = 0;
  const char *sections[] = {"id=\"verdict\"", "id=\"trajectory\"", "id=\"histograms-start\"", "id=\"ops\"",
                            "blocks.0.self_attn.in_proj_weight"};
  for (size_t i = 0; i < sizeof sections / sizeof *sections; i++)
    cr_expect(strstr(html, sections[i]), "the page lacks %s", sections[i]);
  child_run_free(&r);
}

/* --checkpoint-activations recomputes each block in backward: the same steps, validation loss and sample, bit for
 * bit, under f16 autocast and the GradScaler. */
Test(gpt, checkpointed_blocks_train_bit_for_bit) {
  skip_training_under_valgrind();
  char plain[512], checkpointed[512];
  snprintf(plain, sizeof plain, "%s", tmp_path("plain.csv"));
  snprintf(checkpointed, sizeof checkpointed, "%s", tmp_path("checkpointed.csv"));
  child_run a = RUN("--model", "tiny", "--epochs", "1", "--steps", "4", "--amp", "f16", text_flag(), text_value(),
                    "--metrics", plain, "--sample", "40");
  child_run b = RUN("--model", "tiny", "--epochs", "1", "--steps", "4", "--amp", "f16", text_flag(), text_value(),
                    "--metrics", checkpointed, "--sample", "40", "--checkpoint-activations");
  expect_status(&a, 0, "gpt");
  expect_status(&b, 0, "gpt --checkpoint-activations");
  curves p = read_curves(plain), c = read_curves(checkpointed);
  cr_assert_eq(c.n, 4, "the checkpointed run took %d steps", c.n);
  for (int i = 0; i < 4; i++) cr_expect_str_eq(c.row[i], p.row[i], "step %d", i + 1);
  cr_expect_eq(c.val[0], p.val[0], "validation loss %.17g checkpointed, %.17g without", c.val[0], p.val[0]);
  const char *sa = strstr(a.out, "\n----\n"), *sb = strstr(b.out, "\n----\n");
  cr_assert(sa && sb);
  cr_expect_eq(strncmp(sa, sb, 6 + 40 + 6), 0, "the samples differ");
  child_run_free(&a);
  child_run_free(&b);
}

/* Three steps, a checkpoint, three more from it: the steps, the validation loss and the sample of the run that
 * never stopped, bit for bit, under f16 autocast and the GradScaler. */
Test(gpt, resume_goes_on_bit_for_bit) {
  skip_training_under_valgrind();
  const char *ck = tmp_path("run.ckpt");
  char whole[512], resumed[512];
  snprintf(whole, sizeof whole, "%s", tmp_path("whole.csv"));
  snprintf(resumed, sizeof resumed, "%s", tmp_path("resumed.csv"));
  child_run a = RUN("--model", "tiny", "--epochs", "1", "--steps", "6", "--amp", "f16", text_flag(), text_value(),
                    "--metrics", whole, "--sample", "60");
  child_run b = RUN("--model", "tiny", "--epochs", "1", "--steps", "3", "--amp", "f16", text_flag(), text_value(),
                    "--save", ck, "--sample", "0");
  expect_status(&a, 0, "gpt (6 steps)");
  expect_status(&b, 0, "gpt (3 steps, saved)");
  child_run c = RUN("--model", "tiny", "--epochs", "1", "--steps", "6", "--amp", "f16", text_flag(), text_value(),
                    "--resume", ck, "--metrics", resumed, "--sample", "60");
  expect_status(&c, 0, "gpt --resume");
  cr_expect(strstr(c.out, fmt("resuming %s at step 3 (epoch 1)\n", ck)), "%s", tail(c.out));
  curves w = read_curves(whole), r = read_curves(resumed);
  cr_assert_eq(r.n, 3, "the resumed run took %d steps", r.n);
  for (int i = 0; i < 3; i++) cr_expect_str_eq(r.row[i], w.row[i + 3], "step %d", i + 4);
  cr_expect_eq(r.val[0], w.val[0], "validation loss %.17g after the resume, %.17g without", r.val[0], w.val[0]);
  const char *sa = strstr(a.out, "\n----\n"), *sc = strstr(c.out, "\n----\n");
  cr_assert(sa && sc);
  cr_expect_eq(strncmp(sa, sc, 6 + 60 + 6), 0, "the samples differ");
  /* the checkpoint's run is not this one: refused, naming the difference */
  child_run d = RUN("--model", "tiny", "--epochs", "1", "--steps", "6", "--amp", "bf16", text_flag(), text_value(),
                    "--resume", ck);
  expect_status(&d, 2, "gpt --resume with another --amp");
  cr_expect(strstr(d.err, "  amp: saved f16, given bf16\n"), "%s", d.err);
  child_run e = RUN("--model", "tiny", "--epochs", "1", "--steps", "4", "--amp", "bf16", text_flag(), text_value(),
                    "--resume", ck, "--allow-change", "amp", "--sample", "0");
  expect_status(&e, 0, "gpt --resume --allow-change amp");
  cr_expect(strstr(e.out, "--allow-change: amp f16 -> bf16 from step 3\n"), "%s", tail(e.out));
  child_run_free(&a);
  child_run_free(&b);
  child_run_free(&c);
  child_run_free(&d);
  child_run_free(&e);
}

Test(gpt, bad_flags_and_data) {
  struct {
    const char *flag, *value, *message;
  } cases[] = {
      {"--temperature", "0", "gpt: --temperature '0': expected a number in (0, 100] (see --help)\n"},
      {"--top-k", "x", "gpt: --top-k 'x': expected a whole number from 0 to 100000 (see --help)\n"},
      {"--sample", "-1", "gpt: --sample '-1': expected a whole number from 0 to 100000 (see --help)\n"},
      {"--model", "huge", "gpt: --model 'huge': expected one of the models --help lists (see --help)\n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    child_run r = RUN(cases[i].flag, cases[i].value);
    expect_status(&r, 2, cases[i].flag);
    cr_expect_str_eq(r.err, cases[i].message);
    child_run_free(&r);
  }
  child_run h = RUN("--help");
  expect_status(&h, 0, "gpt --help");
  cr_expect(strstr(h.out, "  --model NAME       small | tiny (default small)\n"), "%s", h.out);
  cr_expect(strstr(h.out, "  --top-k N          draws from the N most likely characters only, 0 for all (default 10)\n"),
            "%s", h.out);
  child_run_free(&h);
  const char *missing = tmp_path("no-such-folder");
  child_run m = RUN("--data", missing);
  expect_status(&m, 1, "gpt --data (missing)");
  cr_expect_str_eq(m.err, fmt("gpt: --data %s: No such file or directory\n", missing));
  child_run_free(&m);
  FILE *f = fopen(tmp_path("short"), "w");
  cr_assert(f);
  fputs("Too short.\n%\nFar too short.\n", f);
  fclose(f);
  child_run s = RUN("--data", tmp_dir);
  expect_status(&s, 1, "gpt --data (too little text)");
  cr_expect_str_eq(s.err, fmt("gpt: --data %s: too little text (28 training and 0 validation characters in 1 files; the "
                              "demo needs 1024 and 256)\n", tmp_dir));
  child_run_free(&s);
}
