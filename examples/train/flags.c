#include "examples/train/flags.h"

#include <errno.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensor/output_file.h"

/* The settings that --allow-change may name: all that define a run but the
 * model and the optimizer, whose tensors the checkpoint holds. */
static const char *const changeable[] = {"amp", "batch", "data", "epochs", "lr", "ranks", "schedule", "seed"};
#define CHANGEABLE "amp, batch, data, epochs, lr, ranks, schedule, seed"

/* Whether the comma-separated list names the setting. */
static bool listed(const char *list, const char *setting, size_t len) {
  for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
    if (!strncmp(p, setting, len) && (p[len] == ',' || !p[len])) return true;
  return false;
}

bool mx_demo_change_allowed(const mx_demo_flags *f, const char *setting) {
  return f->allow_change && listed(f->allow_change, setting, strlen(setting));
}

/* Each item of the list is a changeable setting. */
static bool valid_changes(const char *list) {
  for (const char *p = list;; p++) {
    size_t len = strcspn(p, ",");
    bool known = false;
    for (size_t i = 0; i < sizeof changeable / sizeof *changeable && !known; i++)
      known = strlen(changeable[i]) == len && !strncmp(p, changeable[i], len);
    if (!known) return false;
    p += len;
    if (!*p) return true;
  }
}

const char *mx_demo_amp_name(mx_dtype amp) {
  return amp == MX_F16 ? "f16" : amp == MX_BF16 ? "bf16" : "off";
}

void mx_demo_print_usage(const mx_demo_usage *u, const mx_demo_flags *d, FILE *out) {
  fprintf(out, "usage: %s [flags]\n%s\n\n", u->program, u->summary);
  fprintf(out, "  --model NAME       ");
  for (int i = 0; i < u->n_models; i++) fprintf(out, "%s%s", i ? " | " : "", u->models[i]);
  fprintf(out, " (default %s)\n", d->model);
  fprintf(out, "  --amp MODE         off | f16 | bf16: autocast dtype; f16 adds a GradScaler (default %s)\n",
          mx_demo_amp_name(d->amp));
  fprintf(out, "  --device DEV       cpu | cuda (default cpu)\n");
  fprintf(out, "  --epochs N         passes over the training set (default %d)\n", d->epochs);
  fprintf(out, "  --batch N          samples per step (default %lld)\n", (long long)d->batch);
  fprintf(out, "  --lr X             peak learning rate of the one-cycle schedule (default %g)\n", d->lr);
  fprintf(out, "  --optimizer NAME   sgd (Nesterov momentum) | adam (AdamW) (default %s)\n", d->optimizer);
  fprintf(out, "  --seed N           initialisation, shuffling and augmentation (default %llu)\n",
          (unsigned long long)d->seed);
  fprintf(out, "  --steps N          stop after N training steps, for smoke runs (default: all)\n");
  fprintf(out, "  --save FILE        write a checkpoint after each epoch and at the end\n");
  fprintf(out, "  --resume FILE      go on from a checkpoint written by --save with the same settings\n");
  fprintf(out, "  --allow-change L   with --resume: let the settings in L differ from the checkpoint's, e.g.\n"
               "                     epochs,lr (any of " CHANGEABLE "); the schedule is rebuilt\n");
  fprintf(out, "  --metrics FILE     write the curves as CSV\n");
  fprintf(out, "  --plot FILE        draw the curves (.png or .svg) with gnuplot\n");
  fprintf(out, "  --amp-report DIR   write DIR/index.html: loss scale, gradient histograms, autocast per op\n");
  fprintf(out, "  --data DIR         %s\n", u->data_help);
  fprintf(out, "  --synthetic N      train on N generated samples (and test on N/5) instead of data\n");
  fprintf(out, "  --cuda-graph       with --device cuda: capture the training step once in a CUDA graph and\n"
               "                     replay it for each full batch (the lr stays at --lr: no schedule)\n");
  fprintf(out, "  --channels-last    lay the images out channels-last: the CNN's activations stay so, no reorders\n");
  fprintf(out, "  --help             this text\n");
}

static int bad(const char *program, const char *flag, const char *value, const char *want) {
  fprintf(stderr, "%s: %s '%s': expected %s (see --help)\n", program, flag, value, want);
  return 2;
}

static bool parse_i64(const char *s, int64_t lo, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo) return false;
  *out = v;
  return true;
}

static bool known(const char *flag) {
  static const char *const flags[] = {"--model", "--amp",   "--device",    "--epochs", "--batch",  "--lr",
                                      "--optimizer", "--seed", "--steps", "--synthetic", "--save", "--resume",
                                      "--metrics", "--plot", "--data", "--allow-change", "--amp-report"};
  for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
    if (!strcmp(flag, flags[i])) return true;
  return false;
}

/* Whether an executable named name lies in one of PATH's folders. */
static bool on_path(const char *name) {
  const char *path = getenv("PATH");
  char *dirs = path ? strdup(path) : NULL, *rest = dirs, *dir;
  bool found = false;
  while (!found && (dir = strsep(&rest, ":")) != NULL) {
    char file[4096];
    snprintf(file, sizeof file, "%s/%s", *dir ? dir : ".", name);
    found = access(file, X_OK) == 0;
  }
  free(dirs);
  return found;
}

/* The paths a run reads are free of control characters, and those it
 * writes can be written (their folders exist and take files, the targets
 * are no special files), checked before any data is loaded or any step
 * taken rather than after an epoch or the whole run. Under a launcher only
 * rank 0 writes, so only it checks the output paths. Returns 2 after a
 * message on stderr. */
static int check_paths(const char *program, const mx_demo_flags *f) {
  const char *rank = getenv("OMPI_COMM_WORLD_RANK"); /* the launcher's: Open MPI's, Hydra's, Slurm's */
  if (!rank) rank = getenv("PMI_RANK");
  if (!rank) rank = getenv("SLURM_PROCID");
  bool writes = !rank || !strcmp(rank, "0");
  const struct { const char *flag, *path; bool output; } paths[] = {
      {"--data", f->data, false},   {"--resume", f->resume, false}, {"--save", f->save, true},
      {"--metrics", f->metrics, true}, {"--plot", f->plot, true}};
  for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
    if (!paths[i].path) continue;
    mx_status status = paths[i].output && writes ? mx_output_path_check(paths[i].flag, paths[i].path)
                                                 : mx_path_check_characters(paths[i].flag, paths[i].path);
    if (status != MX_OK) {
      fprintf(stderr, "%s: %s\n", program, mx_last_error());
      return 2;
    }
  }
  if (f->amp_report && writes) { /* the folder is made here, so a bad one stops the run now */
    char page[4096];
    snprintf(page, sizeof page, "%s/index.html", f->amp_report);
    if (mx_path_check_characters("--amp-report", f->amp_report) != MX_OK) {
      fprintf(stderr, "%s: %s\n", program, mx_last_error());
      return 2;
    }
    if (mkdir(f->amp_report, 0777) != 0 && errno != EEXIST) {
      fprintf(stderr, "%s: --amp-report %s: %s\n", program, f->amp_report, strerror(errno));
      return 2;
    }
    if (mx_output_path_check("--amp-report", page) != MX_OK) {
      fprintf(stderr, "%s: %s\n", program, mx_last_error());
      return 2;
    }
  }
  if (f->plot && writes && !on_path("gnuplot")) {
    fprintf(stderr, "%s: --plot needs gnuplot, which is not on PATH (apt-get install gnuplot-nox)\n", program);
    return 2;
  }
  return 0;
}

int mx_demo_parse_flags(int argc, char **argv, const mx_demo_usage *u, mx_demo_flags *f) {
  const char *p = u->program;
  for (int i = 1; i < argc; i++) {
    const char *flag = argv[i];
    if (!strcmp(flag, "--help") || !strcmp(flag, "-h")) {
      mx_demo_print_usage(u, f, stdout);
      return 1;
    }
    if (strncmp(flag, "--", 2) != 0) return bad(p, "argument", flag, "a flag");
    if (!strcmp(flag, "--cuda-graph")) { /* a switch: no value */
      f->cuda_graph = true;
      continue;
    }
    if (!strcmp(flag, "--channels-last")) { /* a switch: no value */
      f->channels_last = true;
      continue;
    }
    if (!known(flag)) {
      fprintf(stderr, "%s: unknown flag %s (see --help)\n", p, flag);
      return 2;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "%s: %s needs a value (see --help)\n", p, flag);
      return 2;
    }
    const char *v = argv[++i];
    int64_t n;
    if (!strcmp(flag, "--model")) {
      int k = 0;
      while (k < u->n_models && strcmp(v, u->models[k])) k++;
      if (k == u->n_models) return bad(p, flag, v, "one of the models --help lists");
      f->model = u->models[k];
    } else if (!strcmp(flag, "--amp")) {
      if (!strcmp(v, "off")) f->amp = MX_F32;
      else if (!strcmp(v, "f16")) f->amp = MX_F16;
      else if (!strcmp(v, "bf16")) f->amp = MX_BF16;
      else return bad(p, flag, v, "off, f16 or bf16");
    } else if (!strcmp(flag, "--device")) {
      if (!strcmp(v, "cpu")) f->device = MX_CPU;
      else if (!strcmp(v, "cuda")) f->device = MX_CUDA;
      else return bad(p, flag, v, "cpu or cuda");
    } else if (!strcmp(flag, "--epochs")) {
      if (!parse_i64(v, 1, &n) || n > 100000) return bad(p, flag, v, "a whole number from 1 to 100000");
      f->epochs = (int)n;
    } else if (!strcmp(flag, "--batch")) {
      if (!parse_i64(v, 1, &n)) return bad(p, flag, v, "a whole number >= 1");
      f->batch = n;
    } else if (!strcmp(flag, "--lr")) {
      char *end;
      double x = strtod(v, &end);
      if (end == v || *end || !(x > 0) || x > 1e3) return bad(p, flag, v, "a number in (0, 1000]");
      f->lr = x;
    } else if (!strcmp(flag, "--optimizer")) {
      if (strcmp(v, "sgd") && strcmp(v, "adam")) return bad(p, flag, v, "sgd or adam");
      f->optimizer = !strcmp(v, "sgd") ? "sgd" : "adam";
    } else if (!strcmp(flag, "--seed")) {
      if (!parse_i64(v, 0, &n)) return bad(p, flag, v, "a whole number >= 0");
      f->seed = (uint64_t)n;
    } else if (!strcmp(flag, "--steps")) {
      if (!parse_i64(v, 1, &n)) return bad(p, flag, v, "a whole number >= 1");
      f->steps = n;
    } else if (!strcmp(flag, "--synthetic")) {
      if (!parse_i64(v, 10, &n) || n > 10000000) return bad(p, flag, v, "a whole number from 10 to 10000000");
      f->synthetic = n;
    } else if (!strcmp(flag, "--save")) f->save = v;
    else if (!strcmp(flag, "--resume")) f->resume = v;
    else if (!strcmp(flag, "--allow-change")) {
      if (!valid_changes(v)) return bad(p, flag, v, "a comma-separated list of " CHANGEABLE);
      f->allow_change = v;
    }
    else if (!strcmp(flag, "--metrics")) f->metrics = v;
    else if (!strcmp(flag, "--plot")) f->plot = v;
    else if (!strcmp(flag, "--amp-report")) f->amp_report = v;
    else f->data = v; /* --data, the last known flag */
  }
  if (f->cuda_graph && (f->device != MX_CUDA || f->amp_report)) {
    fprintf(stderr, "%s: --cuda-graph needs --device cuda%s (see --help)\n", p,
            f->amp_report ? " and no --amp-report (its statistics are read on the host each step)" : "");
    return 2;
  }
  if (f->allow_change && !f->resume) {
    fprintf(stderr, "%s: --allow-change applies to a --resume only (see --help)\n", p);
    return 2;
  }
  return check_paths(p, f);
}
