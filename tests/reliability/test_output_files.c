/* Reliability (issue #33): the files mixgrad writes. Checkpoints killed
 * mid-save (kill -9 in a loop) are old or new, never torn, and leave no
 * temporary file behind the next save; threads saving over one path leave
 * one whole file; special files at the target (FIFO,
 * folder, /dev/null, links) are refused and left as they were; names with
 * control characters are refused; a name meant to run a command in gnuplot
 * runs none; and the MNIST demo (MX_MNIST_DEMO, set by meson) checks its
 * output paths before it loads data or trains.
 *
 * The kill loop is seeded and shorter under MX_TEST_QUICK (CI's sanitizer and
 * valgrind runs); the demo runs that train are skipped under valgrind, as in
 * tests/examples/test_demos.c (oneDNN's JIT code). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mixgrad.h"
#include "tests/common/child_run.h"
#include "tests/common/tmp_files.h"

#ifdef MX_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif


TestSuite(output_files, .init = make_tmp_dir, .fini = remove_tmp_dir);

static bool quick(void) {
  const char *q = getenv("MX_TEST_QUICK");
  return (q && *q && strcmp(q, "0") != 0) || RUNNING_ON_VALGRIND;
}

/* Skips the test, first removing its folder: Criterion runs no .fini after a skip. */
static void skip(const char *why) {
  remove_tmp_dir();
  cr_skip_test("%s", why);
}

/* The names in dir other than "." and "..", sorted, joined by spaces. */
static const char *listing(const char *dir) {
  struct dirent **names;
  int n = scandir(dir, &names, NULL, alphasort);
  cr_assert_geq(n, 0, "cannot list %s", dir);
  static char text[8192];
  size_t len = 0;
  text[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (strcmp(names[i]->d_name, ".") && strcmp(names[i]->d_name, ".."))
      len += (size_t)snprintf(text + len, sizeof text - len, "%s%s", len ? " " : "", names[i]->d_name);
    free(names[i]);
  }
  free(names);
  return text;
}

/* --- kill -9 during saves ---------------------------------------------------------- */

/* Element k of the tensor that save number i writes: the contents say which
 * save wrote them, so a file mixing two saves is caught. */
static float element(unsigned i, int64_t k) { return (float)i * 8 + (float)(k % 8); }

static mx_status save_iteration(const char *path, unsigned i, float *data, int64_t n) {
  for (int64_t k = 0; k < n; k++) data[k] = element(i, k);
  mx_tensor *t = mx_from_data(data, MX_SHAPE(n), MX_F32, MX_CPU);
  char iteration[16];
  snprintf(iteration, sizeof iteration, "%u", i);
  mx_status status = mx_safetensors_save(path, 1, (const char *[]){"w"}, (const mx_tensor *[]){t}, 1,
                                         (const char *[]){"iteration"}, (const char *[]){iteration});
  mx_release(t);
  return status;
}

/* The child: saves over path until it is killed. */
static void save_forever(const char *path, int64_t n) {
  float *data = malloc((size_t)n * sizeof *data);
  if (!data) _exit(3);
  for (unsigned i = 1;; i++)
    if (save_iteration(path, i, data, n) != MX_OK) {
      fprintf(stderr, "save %u: %s\n", i, mx_last_error());
      _exit(4);
    }
}

/* path is absent, or a checkpoint one save wrote whole. */
static void expect_absent_or_whole(const char *path, int64_t n, int round) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    cr_assert_eq(errno, ENOENT, "round %d: %s: %s", round, path, strerror(errno));
    return;
  }
  mx_safetensors *f = mx_safetensors_load(path);
  cr_assert_not_null(f, "round %d: the checkpoint does not load: %s", round, mx_last_error());
  const char *iteration = mx_safetensors_metadata(f, "iteration");
  cr_assert_not_null(iteration, "round %d: no iteration in the metadata", round);
  unsigned i = (unsigned)strtoul(iteration, NULL, 10);
  const mx_tensor *w = mx_safetensors_get(f, "w");
  cr_assert(w && mx_numel(w) == n, "round %d: tensor w is missing or short", round);
  const float *v = mx_data_ptr(w);
  for (int64_t k = 0; k < n; k++)
    cr_assert_eq(v[k], element(i, k), "round %d: element %lld is %g, save %u wrote %g", round, (long long)k,
                 (double)v[k], i, (double)element(i, k));
  mx_safetensors_free(f);
}

/* The temporary files in dir (any name but the checkpoint's). */
static int others_in(const char *dir, const char *keep) {
  DIR *d = opendir(dir);
  cr_assert_not_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, keep);
  closedir(d);
  return n;
}

Test(output_files, kill_9_during_saves_leaves_a_whole_checkpoint_and_no_stale_file) {
  int rounds = quick() ? 8 : 40;
  int64_t n = quick() ? 1 << 18 : 1 << 20; /* 1 MB or 4 MB of float32 */
  const char *dir = tmp_subdir("kills"), *path = fmt("%s/ck.safetensors", dir);
  unsigned seed = 33;
  int left_behind = 0; /* kills that caught a save between its temporary file and its rename */
  for (int round = 0; round < rounds; round++) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) save_forever(path, n);
    /* 1 to 40 ms: the first save or a later one, at any point in it */
    usleep(1000 + (useconds_t)(rand_r(&seed) % 39000) * (RUNNING_ON_VALGRIND ? 10 : 1));
    cr_assert_eq(kill(pid, SIGKILL), 0);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "round %d: the saver stopped by itself (%d)", round,
              status);
    expect_absent_or_whole(path, n, round);
    /* the next saver removes the last one's temporary file first: never more than one */
    int others = others_in(dir, "ck.safetensors");
    cr_assert_leq(others, 1, "round %d: %d temporary files: %s", round, others, listing(dir));
    left_behind += others;
  }
  cr_log_info("%d of %d kills left a temporary file", left_behind, rounds);
  float *data = malloc((size_t)n * sizeof *data);
  cr_assert_eq(save_iteration(path, 1000, data, n), MX_OK, "%s", mx_last_error());
  free(data);
  cr_assert_str_eq(listing(dir), "ck.safetensors", "the save after the kills left a temporary file behind");
  expect_absent_or_whole(path, n, rounds);
}

/* Threads saving over one path at once: each save succeeds (its own
 * temporary file), the file is one save's whole contents, nothing is left. */
typedef struct {
  const char *path;
  unsigned first;
  char error[1024];
} saver;

enum { THREAD_SAVES = 20, THREAD_ELEMS = 1 << 14 };

static void *save_many(void *arg) {
  saver *s = arg;
  float *data = malloc(THREAD_ELEMS * sizeof *data);
  for (unsigned i = 0; data && i < THREAD_SAVES && !s->error[0]; i++)
    if (save_iteration(s->path, s->first + i, data, THREAD_ELEMS) != MX_OK)
      snprintf(s->error, sizeof s->error, "%s", mx_last_error());
  if (!data) snprintf(s->error, sizeof s->error, "out of memory");
  free(data);
  return NULL;
}

Test(output_files, threads_saving_to_one_path_leave_one_whole_file) {
  const char *dir = tmp_subdir("threads"), *path = fmt("%s/ck", dir);
  enum { THREADS = 4 };
  saver savers[THREADS];
  pthread_t threads[THREADS];
  for (int t = 0; t < THREADS; t++) {
    savers[t] = (saver){.path = path, .first = 1000 * (unsigned)(t + 1)};
    cr_assert_eq(pthread_create(&threads[t], NULL, save_many, &savers[t]), 0);
  }
  for (int t = 0; t < THREADS; t++) {
    pthread_join(threads[t], NULL);
    cr_expect_str_eq(savers[t].error, "", "thread %d", t);
  }
  expect_absent_or_whole(path, THREAD_ELEMS, 0);
  cr_expect_str_eq(listing(dir), "ck", "the threads left temporary files behind");
}

/* A pid that no process has: a child's, after it exited and was reaped. */
static pid_t gone_pid(void) {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) _exit(0);
  cr_assert_eq(waitpid(pid, NULL, 0), pid);
  return pid;
}

static void touch(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
  cr_assert_geq(fd, 0, "cannot make %s: %s", path, strerror(errno));
  cr_assert_eq(write(fd, "x", 1), 1);
  close(fd);
}

static bool exists(const char *dir, const char *name) {
  struct stat st;
  return lstat(fmt("%s/%s", dir, name), &st) == 0;
}

Test(output_files, a_save_removes_only_stale_temporary_files_of_its_own_target) {
  char dir[512], path[600];
  snprintf(dir, sizeof dir, "%s", tmp_subdir("stale"));
  snprintf(path, sizeof path, "%s/ck", dir);
  long gone = (long)gone_pid(), me = (long)getpid(), alive = (long)getppid();
  enum { N_STALE = 2, N_KEPT = 9 };
  char stale[N_STALE][64], kept[N_KEPT][64];
  /* stale: the writer is gone, or is this process and holds no lock */
  snprintf(stale[0], 64, "ck.mx-tmp.%ld.0", gone);
  snprintf(stale[1], 64, "ck.mx-tmp.%ld.5", me);
  /* left alone: in use (locked, as a save in another thread holds it), a
   * live writer's, another target's, other patterns, not regular files */
  snprintf(kept[0], 64, "ck.mx-tmp.%ld.6", me);
  snprintf(kept[1], 64, "ck.mx-tmp.%ld.0", alive);
  snprintf(kept[2], 64, "ckpt.mx-tmp.%ld.0", gone);
  snprintf(kept[3], 64, "ck.mx-tmp.%ld.0x", gone);
  snprintf(kept[4], 64, "ck.mx-tmp.%ld", gone);
  snprintf(kept[5], 64, "ck.tmp.%ld", gone);
  snprintf(kept[6], 64, "ck.mx-tmp..%ld", gone);
  snprintf(kept[7], 64, "ck.mx-tmp.%ld.1", gone); /* a FIFO */
  snprintf(kept[8], 64, "ck.mx-tmp.%ld.2", gone); /* a link */
  for (int i = 0; i < N_STALE; i++) touch(fmt("%s/%s", dir, stale[i]));
  for (int i = 0; i < 7; i++) touch(fmt("%s/%s", dir, kept[i]));
  cr_assert_eq(mkfifo(fmt("%s/%s", dir, kept[7]), 0600), 0);
  cr_assert_eq(symlink("ck", fmt("%s/%s", dir, kept[8])), 0);
  int lock_fd = open(fmt("%s/%s", dir, kept[0]), O_RDONLY);
  cr_assert_eq(flock(lock_fd, LOCK_EX), 0);

  float data[4];
  cr_assert_eq(save_iteration(path, 1, data, 4), MX_OK, "%s", mx_last_error());
  close(lock_fd);
  for (int i = 0; i < N_STALE; i++) cr_expect_not(exists(dir, stale[i]), "%s is still there", stale[i]);
  for (int i = 0; i < N_KEPT; i++) cr_expect(exists(dir, kept[i]), "%s was removed", kept[i]);
  cr_expect_eq(others_in(dir, "ck"), N_KEPT, "the folder: %s", listing(dir));
}

/* --- special files at the target --------------------------------------------------- */

static mx_status save_four(const char *path, unsigned i) {
  float data[4];
  mx_clear_error();
  return save_iteration(path, i, data, 4);
}

#define EXPECT_REFUSED(path, status, ...)                                   \
  do {                                                                      \
    cr_expect_eq(save_four(path, 9), status, "saving to %s", path);         \
    cr_expect_str_eq(mx_last_error(), fmt(__VA_ARGS__), "saving to %s", path); \
  } while (0)

/* A null character device to write to. Run as root, the old writer
 * replaced /dev/null with a file: root gets a device node of its own in the
 * test's folder, so a regression cannot break the machine's (NULL, with a
 * warning, where it may not make one); others get /dev/null, which they
 * could not replace anyway. */
static const char *null_device(void) {
  if (geteuid() != 0) return "/dev/null";
  const char *node = tmp_path("null");
  if (mknod(node, S_IFCHR | 0666, makedev(1, 3)) == 0) return node;
  cr_log_warn("cannot make a device node as root (%s): the device case is not tried", strerror(errno));
  return NULL;
}

Test(output_files, special_files_at_the_target_are_refused_and_left_as_they_were) {
  struct stat st;
  const char *fifo = tmp_path("fifo");
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  EXPECT_REFUSED(fifo, MX_INVALID_ARGUMENT,
                 "mx_safetensors_save: %s is a FIFO, not a regular file; nothing was written", fifo);
  cr_expect(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO was replaced");

  const char *folder = tmp_subdir("folder");
  EXPECT_REFUSED(folder, MX_INVALID_ARGUMENT,
                 "mx_safetensors_save: %s is a folder, not a regular file; nothing was written", folder);
  cr_expect(lstat(folder, &st) == 0 && S_ISDIR(st.st_mode));

  const char *null = null_device();
  if (null) {
    EXPECT_REFUSED(null, MX_INVALID_ARGUMENT,
                   "mx_safetensors_save: %s is a character device, not a regular file; nothing was written", null);
    cr_expect(lstat(null, &st) == 0 && S_ISCHR(st.st_mode), "%s is no longer a character device", null);
    if (strcmp(null, "/dev/null")) unlink(null);
  }
  const char *to_null = tmp_path("to_null");
  cr_assert_eq(symlink("/dev/null", to_null), 0);
  EXPECT_REFUSED(to_null, MX_INVALID_ARGUMENT,
                 "mx_safetensors_save: %s is a symbolic link to /dev/null, a character device, not a regular file; "
                 "nothing was written", to_null);
  const char *dangling = tmp_path("dangling");
  cr_assert_eq(symlink("nothing/here", dangling), 0);
  EXPECT_REFUSED(dangling, MX_IO_ERROR,
                 "mx_safetensors_save: %s is a symbolic link to nothing that can be written (No such file or "
                 "directory); nothing was written", dangling);
  cr_expect(lstat(to_null, &st) == 0 && S_ISLNK(st.st_mode) && lstat(dangling, &st) == 0 && S_ISLNK(st.st_mode));
  cr_expect_str_eq(listing(tmp_dir), "dangling fifo folder to_null", "a temporary file was left behind");
}

Test(output_files, a_link_to_a_file_is_written_through_and_the_file_keeps_its_mode) {
  const char *dir = tmp_subdir("real"), *real = fmt("%s/ck", dir), *link = tmp_path("latest");
  cr_assert_eq(save_four(real, 1), MX_OK, "%s", mx_last_error());
  cr_assert_eq(chmod(real, 0640), 0);
  cr_assert_eq(symlink("real/ck", link), 0);
  cr_assert_eq(save_four(link, 2), MX_OK, "%s", mx_last_error());
  struct stat st;
  char target[64] = "";
  cr_expect(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the link was replaced by a file");
  cr_expect_eq(readlink(link, target, sizeof target - 1), 7);
  cr_expect_str_eq(target, "real/ck");
  cr_assert_eq(stat(real, &st), 0);
  cr_expect_eq(st.st_mode & 07777, 0640, "the file's mode became %o", st.st_mode & 07777);
  mx_safetensors *f = mx_safetensors_load(real);
  cr_assert_not_null(f, "%s", mx_last_error());
  cr_expect_str_eq(mx_safetensors_metadata(f, "iteration"), "2", "the file behind the link holds the new save");
  mx_safetensors_free(f);
  cr_expect_str_eq(listing(dir), "ck");
}

Test(output_files, bad_names_and_folders_are_refused_before_anything_is_written) {
  const char *newline = tmp_path("a\nb.ck"), *del = tmp_path("a\x7f" "b.ck");
  EXPECT_REFUSED(newline, MX_INVALID_ARGUMENT,
                 "mx_safetensors_save: \"%s/a\\x0ab.ck\": the path holds control character 0x0a; such names are "
                 "refused", tmp_dir);
  EXPECT_REFUSED(del, MX_INVALID_ARGUMENT,
                 "mx_safetensors_save: \"%s/a\\x7fb.ck\": the path holds control character 0x7f; such names are "
                 "refused", tmp_dir);
  EXPECT_REFUSED("", MX_INVALID_ARGUMENT, "mx_safetensors_save: the path is empty");
  const char *nowhere = tmp_path("no/such/ck");
  EXPECT_REFUSED(nowhere, MX_IO_ERROR, "mx_safetensors_save: %s: the folder %s/no/such does not exist", nowhere,
                 tmp_dir);
  touch(tmp_path("file"));
  const char *under_file = tmp_path("file/ck");
  EXPECT_REFUSED(under_file, MX_IO_ERROR, "mx_safetensors_save: %s: cannot look at it (Not a directory)", under_file);
  const char *slash = tmp_path("new/");
  EXPECT_REFUSED(slash, MX_INVALID_ARGUMENT, "mx_safetensors_save: %s ends in '/': give a file's name", slash);
  if (geteuid() != 0) { /* root writes into any folder */
    const char *locked = tmp_subdir("locked"), *inside = fmt("%s/ck", locked);
    cr_assert_eq(chmod(locked, 0500), 0);
    EXPECT_REFUSED(inside, MX_IO_ERROR, "mx_safetensors_save: %s: the folder %s is not writable (Permission denied)",
                   inside, locked);
    chmod(locked, 0700);
  }
  cr_expect_str_eq(listing(tmp_dir), geteuid() != 0 ? "file locked" : "file", "something was written");
}

/* --- the demo ------------------------------------------------------------------------ */

static const char *mnist(void) {
  const char *path = getenv("MX_MNIST_DEMO");
  cr_assert(path && *path, "MX_MNIST_DEMO is not set (tests/reliability/meson.build sets it)");
  return path;
}

/* Runs the demo with args (NULL-terminated), killed (status 128 + 9) when
 * it runs past limit_seconds. */
static child_run run_mnist(double limit_seconds, const char *const *args) {
  const char *argv[32] = {mnist()};
  for (int i = 0; args[i]; i++) argv[i + 1] = args[i];
  return child_run_argv(argv, limit_seconds);
}

#define RUN_MNIST(limit_seconds, ...) run_mnist(limit_seconds, (const char *const[]){__VA_ARGS__, NULL})

/* A run that would load 200,000 generated images and train for 1000 epochs,
 * stopped by its bad path at once: exit 2, the message, nothing on stdout. */
static void expect_stopped_at_start(child_run r, const char *message) {
  cr_expect_eq(r.status, 2, "exit %d\n--- stdout:\n%.2000s\n--- stderr:\n%.2000s", r.status, r.out, r.err);
  cr_expect_str_eq(r.err, message);
  cr_expect_str_eq(r.out, "", "the run started");
  if (!RUNNING_ON_VALGRIND) cr_expect_lt(r.seconds, 1.0, "the run took %.2f s to stop", r.seconds);
  child_run_free(&r);
}

/* a short run that trains, draws and writes */
#define SHORT_RUN "--synthetic", "100", "--model", "mlp", "--epochs", "1", "--batch", "20"
#define LONG_RUN "--synthetic", "200000", "--epochs", "1000", "--model", "mlp"
/* seconds after which such a run is killed: it failed the test already */
#define STOP_LIMIT (RUNNING_ON_VALGRIND ? 120 : 10)

Test(output_files, the_demo_checks_its_output_paths_before_it_loads_or_trains) {
  const char *nowhere = tmp_path("nowhere/ck");
  expect_stopped_at_start(RUN_MNIST(STOP_LIMIT, LONG_RUN, "--save", nowhere),
                          fmt("mnist: --save: %s: the folder %s/nowhere does not exist\n", nowhere, tmp_dir));
  if (geteuid() != 0) {
    const char *locked = tmp_subdir("locked"), *inside = fmt("%s/ck", locked);
    cr_assert_eq(chmod(locked, 0500), 0);
    expect_stopped_at_start(RUN_MNIST(STOP_LIMIT, LONG_RUN, "--save", inside),
                            fmt("mnist: --save: %s: the folder %s is not writable (Permission denied)\n", inside,
                                locked));
    chmod(locked, 0700);
  }
  const char *null = null_device();
  if (null)
    expect_stopped_at_start(
        RUN_MNIST(STOP_LIMIT, LONG_RUN, "--metrics", null),
        fmt("mnist: --metrics: %s is a character device, not a regular file; nothing was written\n", null));
  const char *folder = tmp_subdir("pictures");
  expect_stopped_at_start(RUN_MNIST(STOP_LIMIT, LONG_RUN, "--plot", folder),
                          fmt("mnist: --plot: %s is a folder, not a regular file; nothing was written\n", folder));
  expect_stopped_at_start(RUN_MNIST(STOP_LIMIT, LONG_RUN, "--metrics", "curves\n.csv"),
                          "mnist: --metrics: \"curves\\x0a.csv\": the path holds control character 0x0a; such names "
                          "are refused\n");
  expect_stopped_at_start(RUN_MNIST(STOP_LIMIT, LONG_RUN, "--resume", "ck\x1b[2J"),
                          "mnist: --resume: \"ck\\x1b[2J\": the path holds control character 0x1b; such names are "
                          "refused\n");
}

/* The old --plot pasted the name into gnuplot's script: a newline ended the
 * "set output '...'" line and the next one ran system(). */
Test(output_files, a_plot_name_with_a_newline_is_refused_and_runs_nothing) {
  cr_assert_eq(chdir(tmp_dir), 0);
  expect_stopped_at_start(RUN_MNIST(STOP_LIMIT, LONG_RUN, "--plot", "p.png\nsystem(\"touch MARKER\")\n"),
                          "mnist: --plot: \"p.png\\x0asystem(\"touch MARKER\")\\x0a\": the path holds control "
                          "character 0x0a; such names are refused\n");
  cr_expect_eq(access("MARKER", F_OK), -1, "gnuplot ran the command in the name");
}

/* A quote in the name is fine now: the name never reaches the script, and
 * the picture lands at exactly that path. */
Test(output_files, a_plot_name_with_quotes_is_drawn_to_that_name_and_runs_nothing) {
  if (RUNNING_ON_VALGRIND) skip("under valgrind: oneDNN's JIT kernels make a traced demo fail");
  if (system("command -v gnuplot >/dev/null 2>&1") != 0) skip("gnuplot is not on PATH");
  cr_assert_eq(chdir(tmp_dir), 0);
  const char *name = "q'; system(\"touch MARKER\"); x='.png";
  child_run r = RUN_MNIST(300, SHORT_RUN, "--plot", name, "--metrics", "it's.csv");
  cr_assert_eq(r.status, 0, "exit %d\n--- stdout:\n%.2000s\n--- stderr:\n%.2000s", r.status, r.out, r.err);
  cr_expect_eq(access("MARKER", F_OK), -1, "gnuplot ran the command in the name");
  size_t size;
  char *png = read_file(name, &size);
  cr_expect(size > 5000 && !memcmp(png, "\x89PNG\r\n\x1a\n", 8), "%s is no picture (%zu bytes)", name, size);
  free(png);
  char *csv = read_file("it's.csv", NULL);
  cr_expect(!strncmp(csv, "kind,step,epoch,", 16), "it's.csv: %.80s", csv);
  free(csv);
  cr_expect_str_eq(listing("."), "it's.csv q'; system(\"touch MARKER\"); x='.png");
  child_run_free(&r);
}

/* A gnuplot that fails leaves the old picture as it was and no temporary
 * file; a run without gnuplot on PATH stops before it starts. */
static void fake_gnuplot(const char *script) {
  const char *bin = tmp_subdir("bin"), *gnuplot = fmt("%s/gnuplot", bin);
  FILE *f = fopen(gnuplot, "w");
  cr_assert_not_null(f);
  fprintf(f, "#!/bin/sh\n%s\n", script);
  fclose(f);
  cr_assert_eq(chmod(gnuplot, 0700), 0);
  cr_assert_eq(setenv("PATH", fmt("%s:%s", bin, getenv("PATH") ? getenv("PATH") : ""), 1), 0);
}

Test(output_files, a_failed_plot_leaves_the_old_picture) {
  if (RUNNING_ON_VALGRIND) skip("under valgrind: oneDNN's JIT kernels make a traced demo fail");
  fake_gnuplot("exit 3");
  const char *dir = tmp_subdir("pictures"), *png = fmt("%s/P.png", dir);
  FILE *f = fopen(png, "w");
  cr_assert_not_null(f);
  fputs("the old picture", f);
  fclose(f);
  child_run r = RUN_MNIST(300, SHORT_RUN, "--plot", png);
  cr_expect_eq(r.status, 1, "exit %d\n--- stderr:\n%.2000s", r.status, r.err);
  cr_expect_str_eq(r.err, fmt("--plot: gnuplot failed (exit 3); %s was left as it was\n", png));
  char *bytes = read_file(png, NULL);
  cr_expect_str_eq(bytes, "the old picture");
  free(bytes);
  cr_expect_str_eq(listing(dir), "P.png", "a temporary file was left behind");
  child_run_free(&r);
}

Test(output_files, a_plot_without_gnuplot_stops_before_it_starts) {
  cr_assert_eq(setenv("PATH", tmp_dir, 1), 0); /* nothing there */
  expect_stopped_at_start(RUN_MNIST(STOP_LIMIT, LONG_RUN, "--plot", tmp_path("P.png")),
                          "mnist: --plot needs gnuplot, which is not on PATH (apt-get install gnuplot-nox)\n");
}
