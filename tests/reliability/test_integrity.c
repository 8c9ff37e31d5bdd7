/* Issue #33's integrity probes as tests: bytes flipped in a checkpoint's
 * tensor data or header, an old checkpoint without checksums, gzipped
 * dataset files with cut trailers or flipped bits, and FIFOs, folders and
 * devices handed to every reader (which must refuse them without blocking).
 *
 * The MNIST demo's --resume gets the same: a FIFO, an old checkpoint (it
 * says that it has no checksums), a flipped byte.
 *
 * MX_TEST_QUICK (set, non-empty and not "0"; CI sets it for the sanitizer
 * and valgrind runs) flips fewer bytes. Under valgrind, which would trace
 * the demo too, the demo's runs are skipped (the readers' own tests above
 * still run there). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <mixgrad.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "data/data.h"
#include "tests/common/tmp_files.h"
#include "tests/data/data_files.h"

#ifdef MX_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#define OK(expr) cr_assert_eq((expr), MX_OK, "%s", mx_last_error())
/* char var[] holding tmp_path(name): fmt's buffers are reused after 16 calls */
#define TMP_PATH(var, name)       \
  char var[1024];                 \
  snprintf(var, sizeof var, "%s", tmp_path(name))

static bool quick(void) {
  const char *q = getenv("MX_TEST_QUICK");
  return q && *q && strcmp(q, "0") != 0;
}

/* splitmix64: the seeded positions and values of the flips. */
static uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* --- a checkpoint: a small net and Adam after one step ---------------------------------- */

typedef struct {
  mx_module *model;
  mx_optimizer *opt;
} run;

static run run_new(uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  run r = {.model = mx_sequential_new(3, (mx_module *[]){mx_linear_new(6, 8, true, gen),
                                                         mx_batch_norm1d_new(8, 1e-5, 0.1, true, true),
                                                         mx_linear_new(8, 3, true, gen)})};
  cr_assert_not_null(r.model, "%s", mx_last_error());
  int np = mx_module_num_parameters(r.model);
  mx_tensor *params[8];
  for (int i = 0; i < np; i++) params[i] = mx_module_parameter(r.model, i, NULL);
  r.opt = mx_adam_new(np, params, NULL);
  cr_assert_not_null(r.opt, "%s", mx_last_error());
  mx_scope *s = mx_scope_begin(); /* one step, so Adam has its moments and the norm its statistics */
  mx_tensor *x = mx_randn(MX_SHAPE(5, 6), MX_F32, MX_CPU, gen);
  OK(mx_backward(mx_sum(mx_module_forward(r.model, x), MX_ALL_DIMS, false), NULL, false));
  OK(mx_optimizer_step(r.opt));
  mx_scope_end(s);
  mx_generator_free(gen);
  return r;
}

static void run_free(run *r) {
  mx_optimizer_free(r->opt);
  mx_module_free(r->model);
}

static mx_checkpoint ckpt_of(run *r) { return (mx_checkpoint){r->model, r->opt, NULL, NULL, NULL, 3, 1}; }

/* The model's parameters and buffers, byte for byte (malloc'ed). */
static uint8_t *model_bytes(const mx_module *m, size_t *len) {
  int np = mx_module_num_parameters(m), nb = mx_module_num_buffers(m);
  uint8_t *all = NULL;
  *len = 0;
  for (int i = 0; i < np + nb; i++) {
    mx_tensor *t = i < np ? mx_module_parameter(m, i, NULL) : mx_module_buffer(m, i - np, NULL);
    size_t bytes = (size_t)mx_numel(t) * mx_dtype_size(mx_dtype_of(t));
    all = realloc(all, *len + bytes + 1);
    OK(mx_to_host(t, all + *len, bytes));
    *len += bytes;
  }
  return all;
}

/* A tensor's bytes in the file: [begin, end) counted from the file's start. */
typedef struct {
  char name[128];
  size_t begin, end;
} span;

/* The tensors of the safetensors file at path, in the order of their bytes. */
static span *tensor_spans(const char *path, int *n) {
  size_t size;
  uint8_t *bytes = (uint8_t *)read_file(path, &size);
  uint64_t header = 0;
  for (int i = 7; i >= 0; i--) header = header << 8 | bytes[i];
  free(bytes);
  mx_safetensors *f = mx_safetensors_load(path);
  cr_assert_not_null(f, "%s", mx_last_error());
  *n = mx_safetensors_count(f);
  span *spans = calloc((size_t)*n, sizeof *spans);
  size_t at = 8 + (size_t)header;
  for (int i = 0; i < *n; i++) {
    mx_tensor *t = mx_safetensors_tensor(f, i);
    snprintf(spans[i].name, sizeof spans[i].name, "%s", mx_safetensors_name(f, i));
    spans[i].begin = at;
    at = spans[i].end = at + (size_t)mx_numel(t) * mx_dtype_size(mx_dtype_of(t));
  }
  cr_assert_eq(at, size, "the tensors tile the data");
  mx_safetensors_free(f);
  return spans;
}

TestSuite(integrity, .init = make_tmp_dir, .fini = remove_tmp_dir);

/* 100 of 100 such flips used to resume without a word (issue #33). */
Test(integrity, byte_flips_in_tensor_data_are_refused_naming_the_tensor) {
  run saved = run_new(1);
  TMP_PATH(path, "run.ckpt");
  TMP_PATH(bad, "flipped.ckpt");
  OK(mx_checkpoint_save(path, &(mx_checkpoint){saved.model, saved.opt, NULL, NULL, NULL, 3, 1}));
  int n;
  span *spans = tensor_spans(path, &n);
  size_t size;
  uint8_t *good = (uint8_t *)read_file(path, &size), *copy = malloc(size);
  run target = run_new(2);
  size_t before_len;
  uint8_t *before = model_bytes(target.model, &before_len);
  uint64_t seed = 33;
  int flips = quick() ? 12 : 100;
  for (int k = 0; k < flips; k++) {
    size_t at = spans[0].begin + next_random(&seed) % (size - spans[0].begin);
    uint8_t xor = (uint8_t)(1 + next_random(&seed) % 255);
    const span *s = spans;
    while (at >= s->end) s++;
    memcpy(copy, good, size);
    copy[at] ^= xor;
    write_raw(bad, copy, size);
    size_t len = s->end - s->begin;
    const char *want = fmt("mx_checkpoint_load: mx_safetensors_load: %s: tensor '%s': its %zu bytes hash to %016llx "
                           "but the file records %016llx (XXH3-64): the data is corrupt", bad, s->name, len,
                           (unsigned long long)XXH3_64bits(copy + s->begin, len),
                           (unsigned long long)XXH3_64bits(good + s->begin, len));
    mx_checkpoint ck = ckpt_of(&target);
    mx_clear_error();
    cr_assert_eq(mx_checkpoint_load(bad, &ck), MX_CORRUPT_DATA, "flip %d at byte %zu: %s", k, at, mx_last_error());
    cr_assert_str_eq(mx_last_error(), want);
  }
  size_t after_len;
  uint8_t *after = model_bytes(target.model, &after_len);
  cr_assert(after_len == before_len && !memcmp(before, after, after_len), "a refused load changed the model");
  mx_checkpoint ck = ckpt_of(&target); /* the file itself still loads, checked */
  OK(mx_checkpoint_load(path, &ck));
  cr_assert_null(mx_safetensors_last_note(), "%s", mx_safetensors_last_note());
  mx_clear_error();
  free(after);
  free(before);
  free(copy);
  free(good);
  free(spans);
  run_free(&saved);
  run_free(&target);
}

/* The header's text with byte `at` replaced, written to bad; the load must fail naming bad (and, given, say want). */
static void expect_header_flip_refused(const uint8_t *good, size_t size, size_t at, uint8_t value, const char *bad,
                                       const char *want) {
  uint8_t *copy = malloc(size);
  memcpy(copy, good, size);
  copy[at] = value;
  write_raw(bad, copy, size);
  free(copy);
  run target = run_new(2);
  mx_checkpoint ck = ckpt_of(&target);
  mx_clear_error();
  cr_assert_neq(mx_checkpoint_load(bad, &ck), MX_OK, "byte %zu set to '%c' was accepted", at, value);
  const char *prefix = fmt("mx_checkpoint_load: mx_safetensors_load: %s: ", bad);
  cr_assert_eq(strncmp(mx_last_error(), prefix, strlen(prefix)), 0, "%s", mx_last_error());
  if (want) cr_assert_str_eq(mx_last_error(), want);
  mx_clear_error();
  run_free(&target);
}

Test(integrity, flips_in_the_header_are_refused) {
  run saved = run_new(1);
  TMP_PATH(path, "run.ckpt");
  TMP_PATH(bad, "flipped.ckpt");
  OK(mx_checkpoint_save(path, &(mx_checkpoint){saved.model, saved.opt, NULL, NULL, NULL, 3, 1}));
  int n;
  span *spans = tensor_spans(path, &n);
  size_t size;
  uint8_t *good = (uint8_t *)read_file(path, &size);
  const char *text = (const char *)good + 8, *weight = "\"model.0.weight\":{";
  const char *sum = strstr(text, "\"xxh3_64:model.0.weight\":\""), *entry = strstr(text, weight);
  cr_assert(sum && entry, "%.*s", (int)(spans[0].begin - 8), text);
  size_t digit = (size_t)(sum - (const char *)good) + strlen("\"xxh3_64:model.0.weight\":\"");
  const span *w = spans;
  while (strcmp(w->name, "model.0.weight")) w++;
  /* a checksum digit changed: the tensor's bytes no longer match it */
  char other = good[digit] == '0' ? '1' : '0';
  char recorded[17];
  memcpy(recorded, good + digit, 16);
  recorded[16] = '\0';
  recorded[0] = other;
  expect_header_flip_refused(good, size, digit, (uint8_t)other, bad,
                             fmt("mx_checkpoint_load: mx_safetensors_load: %s: tensor 'model.0.weight': its %zu "
                                 "bytes hash to %016llx but the file records %s (XXH3-64): the data is corrupt",
                                 bad, w->end - w->begin,
                                 (unsigned long long)XXH3_64bits(good + w->begin, w->end - w->begin), recorded));
  /* a checksum that is not hex */
  expect_header_flip_refused(good, size, digit, 'g', bad, NULL);
  /* the tensor's name in its entry: it has no checksum, and its checksum no tensor */
  expect_header_flip_refused(good, size, (size_t)(entry - (const char *)good) + 2, 'n', bad,
                             fmt("mx_checkpoint_load: mx_safetensors_load: %s: metadata 'xxh3_64:model.0.weight' "
                                 "is the checksum of a tensor the file does not have", bad));
  /* its shape, its dtype, the JSON's first brace */
  const char *shape = strstr(entry, "\"shape\":[") + strlen("\"shape\":["), *dtype = strstr(entry, "F32");
  expect_header_flip_refused(good, size, (size_t)(shape - (const char *)good), '9', bad, NULL);
  expect_header_flip_refused(good, size, (size_t)(dtype - (const char *)good), 'X', bad, NULL);
  expect_header_flip_refused(good, size, 8, '[', bad, NULL);
  free(good);
  free(spans);
  run_free(&saved);
}

/* The file at path without its checksums, as an older mixgrad wrote it: the
 * header rebuilt by hand (cJSON), the data as it was. */
static void strip_checksums(const char *path, const char *out) {
  size_t size;
  uint8_t *bytes = (uint8_t *)read_file(path, &size);
  uint64_t header = 0;
  for (int i = 7; i >= 0; i--) header = header << 8 | bytes[i];
  cJSON *root = cJSON_ParseWithLength((const char *)bytes + 8, (size_t)header);
  cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
  cr_assert_not_null(meta);
  for (cJSON *item = meta->child, *next; item; item = next) {
    next = item->next;
    if (!strncmp(item->string, "xxh3_64:", 8)) cJSON_Delete(cJSON_DetachItemViaPointer(meta, item));
  }
  char *text = cJSON_PrintUnformatted(root);
  cr_assert(!strstr(text, "xxh3_64"));
  size_t len = strlen(text), padded = (len + 7) / 8 * 8;
  FILE *f = fopen(out, "wb");
  cr_assert_not_null(f);
  for (int i = 0; i < 8; i++) fputc((int)((uint64_t)padded >> (8 * i) & 0xff), f);
  fwrite(text, 1, len, f);
  for (size_t i = len; i < padded; i++) fputc(' ', f);
  fwrite(bytes + 8 + header, 1, size - 8 - (size_t)header, f);
  fclose(f);
  free(text);
  cJSON_Delete(root);
  free(bytes);
}

Test(integrity, an_old_checkpoint_without_checksums_loads_with_a_note) {
  run saved = run_new(1), target = run_new(2);
  TMP_PATH(path, "run.ckpt");
  TMP_PATH(old, "old.ckpt");
  OK(mx_checkpoint_save(path, &(mx_checkpoint){saved.model, saved.opt, NULL, NULL, NULL, 3, 1}));
  strip_checksums(path, old);
  mx_checkpoint ck = ckpt_of(&target);
  ck.step = ck.epoch = 0;
  OK(mx_checkpoint_load(old, &ck));
  cr_assert_str_eq(mx_safetensors_last_note(), fmt("%s: the file has no checksums (an older mixgrad's, or another "
                                                   "tool's): its tensors were loaded unchecked", old));
  cr_assert(ck.step == 3 && ck.epoch == 1);
  size_t a_len, b_len;
  uint8_t *a = model_bytes(saved.model, &a_len), *b = model_bytes(target.model, &b_len);
  cr_assert(a_len == b_len && !memcmp(a, b, a_len), "the old file's weights were not restored");
  free(a);
  free(b);
  /* the next load replaces the note */
  OK(mx_checkpoint_load(path, &ck));
  cr_assert_null(mx_safetensors_last_note());
  run_free(&saved);
  run_free(&target);
}

/* --- gzipped datasets --------------------------------------------------------------------- */

/* 1000 test images of 28x28: large enough that zlib's gzread inflated the
 * last of them straight into the caller's buffer, where a missing trailer
 * went unnoticed (issue #33). */
#define IMAGES 1000

static void write_labels(const char *path) {
  uint8_t labels[IMAGES];
  for (int i = 0; i < IMAGES; i++) labels[i] = (uint8_t)(i % 10);
  size_t len;
  uint8_t *bytes = idx_labels(IMAGES, labels, &len);
  write_raw(path, bytes, len);
  free(bytes);
}

/* mx_idx_load(images, labels) fails with an error naming images: exactly want when given. */
static void expect_idx_refused(const char *images, const char *labels, const char *want, const char *what) {
  mx_clear_error();
  mx_dataset *ds = mx_idx_load(images, labels);
  cr_assert_null(ds, "%s: accepted", what);
  const char *prefix = fmt("mx_idx_load: %s", images);
  cr_assert_eq(strncmp(mx_last_error(), prefix, strlen(prefix)), 0, "%s: %s", what, mx_last_error());
  if (want) cr_assert_str_eq(mx_last_error(), want, "%s", what);
  mx_clear_error();
}

Test(integrity, gzip_trailers_cut_are_refused) {
  TMP_PATH(images, "images.gz");
  TMP_PATH(labels, "labels");
  write_labels(labels);
  size_t len, gz_len;
  uint8_t *bytes = idx_images(IMAGES, 28, 28, &len), *gz = gzip_bytes(bytes, len, &gz_len);
  write_raw(images, gz, gz_len);
  mx_dataset *ds = mx_idx_load(images, labels);
  cr_assert_not_null(ds, "%s", mx_last_error());
  mx_dataset_free(ds);
  for (size_t cut = 1; cut <= 8; cut++) {
    write_raw(images, gz, gz_len - cut);
    expect_idx_refused(images, labels, fmt("mx_idx_load: %s: the gzip stream ends early, after %zu bytes", images, len),
                       fmt("%zu bytes of the trailer cut", cut));
  }
  /* the trailer cut and a bit of the data flipped: nothing is left to catch it but the missing trailer */
  uint64_t seed = 8;
  for (int k = 0; k < (quick() ? 4 : 16); k++) {
    size_t at = 10 + next_random(&seed) % (gz_len - 8 - 11);
    uint8_t bit = (uint8_t)(1u << next_random(&seed) % 8);
    gz[at] ^= bit;
    write_raw(images, gz, gz_len - 8);
    gz[at] ^= bit;
    expect_idx_refused(images, labels, NULL, fmt("bit 0x%02x flipped at byte %zu, trailer cut", bit, at));
  }
  /* a CIFAR-10 batch, read to its end rather than to a length its header gives */
  TMP_PATH(batch_path, "data_batch_1.bin.gz");
  const char *batch = batch_path;
  uint8_t cifar_labels[40];
  for (int i = 0; i < 40; i++) cifar_labels[i] = (uint8_t)(i % 10);
  free(bytes);
  free(gz);
  bytes = cifar_bytes(40, cifar_labels, 0, &len);
  gz = gzip_bytes(bytes, len, &gz_len);
  for (size_t cut = 1; cut <= 8; cut++) {
    write_raw(batch, gz, gz_len - cut);
    mx_clear_error();
    cr_assert_null(mx_cifar_load_files(&batch, 1), "%zu bytes of the trailer cut: accepted", cut);
    cr_assert_str_eq(mx_last_error(),
                     fmt("mx_cifar_load: %s: the gzip stream ends early, after %zu bytes", batch, len));
  }
  free(bytes);
  free(gz);
}

Test(integrity, flipped_bits_in_gzipped_data_are_refused) {
  TMP_PATH(images, "images.gz");
  TMP_PATH(labels, "labels");
  write_labels(labels);
  size_t len, gz_len;
  uint8_t *bytes = idx_images(IMAGES, 28, 28, &len), *gz = gzip_bytes(bytes, len, &gz_len);
  /* the deflate data and the trailer (not the last data byte, whose unused high bits zlib ignores, nor
   * the header's time stamp and OS byte, which nothing checks) */
  uint64_t seed = 9;
  for (int k = 0; k < (quick() ? 12 : 64); k++) {
    size_t at = 10 + next_random(&seed) % (gz_len - 10);
    if (at == gz_len - 9) continue;
    uint8_t bit = (uint8_t)(1u << next_random(&seed) % 8);
    gz[at] ^= bit;
    write_raw(images, gz, gz_len);
    gz[at] ^= bit;
    expect_idx_refused(images, labels, NULL, fmt("bit 0x%02x flipped at byte %zu of %zu", bit, at, gz_len));
  }
  /* bytes after the gzip data are refused; a second gzip member is read on */
  uint8_t *longer = malloc(2 * gz_len);
  memcpy(longer, gz, gz_len);
  memcpy(longer + gz_len, "junk", 4);
  write_raw(images, longer, gz_len + 4);
  expect_idx_refused(images, labels,
                     fmt("mx_idx_load: %s: the file goes on after its gzip data ends (at byte %zu of %zu)", images,
                         gz_len, gz_len + 4),
                     "junk after the data");
  size_t half_len, rest_len;
  uint8_t *half = gzip_bytes(bytes, len / 2, &half_len), *rest = gzip_bytes(bytes + len / 2, len - len / 2, &rest_len);
  longer = realloc(longer, half_len + rest_len);
  memcpy(longer, half, half_len);
  memcpy(longer + half_len, rest, rest_len);
  write_raw(images, longer, half_len + rest_len);
  mx_dataset *ds = mx_idx_load(images, labels);
  cr_assert_not_null(ds, "two members: %s", mx_last_error());
  cr_assert_eq(ds->n, IMAGES);
  cr_assert(!memcmp(ds->images, bytes + 16, len - 16));
  mx_dataset_free(ds);
  free(half);
  free(rest);
  free(longer);
  free(bytes);
  free(gz);
}

/* --- special files ------------------------------------------------------------------------ */

/* Each reader handed path refuses it as `what` ("a FIFO"), naming the path, and returns at once. */
static void expect_every_reader_refuses(const char *path, const char *what) {
  TMP_PATH(labels, "labels");
  TMP_PATH(images, "images");
  size_t len;
  uint8_t *bytes = idx_images(3, 2, 2, &len);
  write_raw(images, bytes, len);
  free(bytes);
  uint8_t three[3] = {1, 2, 3};
  bytes = idx_labels(3, three, &len);
  write_raw(labels, bytes, len);
  free(bytes);
  char is[1200];
  snprintf(is, sizeof is, "%s is %s, not a regular file", path, what);
  run r = run_new(1);
  mx_checkpoint ck = ckpt_of(&r);
  time_t start = time(NULL);
  mx_clear_error();
  cr_assert_null(mx_safetensors_load(path));
  cr_assert_str_eq(mx_last_error(), fmt("mx_safetensors_load: %s", is));
  cr_assert_neq(mx_checkpoint_load(path, &ck), MX_OK);
  cr_assert_str_eq(mx_last_error(), fmt("mx_checkpoint_load: mx_safetensors_load: %s", is));
  cr_assert_neq(mx_module_load(r.model, path), MX_OK);
  cr_assert_str_eq(mx_last_error(), fmt("mx_module_load: mx_safetensors_load: %s", is));
  cr_assert_null(mx_idx_load(path, labels));
  cr_assert_str_eq(mx_last_error(), fmt("mx_idx_load: %s", is));
  cr_assert_null(mx_idx_load(images, path));
  cr_assert_str_eq(mx_last_error(), fmt("mx_idx_load: %s", is));
  cr_assert_null(mx_cifar_load_files(&path, 1));
  cr_assert_str_eq(mx_last_error(), fmt("mx_cifar_load: %s", is));
  mx_clear_error();
  cr_assert_leq(time(NULL) - start, 5, "the readers took %lld s", (long long)(time(NULL) - start));
  run_free(&r);
}

Test(integrity, fifos_folders_and_devices_are_refused_without_blocking, .timeout = 60) {
  TMP_PATH(fifo, "fifo");
  TMP_PATH(link, "link");
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  expect_every_reader_refuses(fifo, "a FIFO"); /* nobody writes it: an open for reading would wait forever */
  cr_assert_eq(symlink(fifo, link), 0);
  expect_every_reader_refuses(link, "a FIFO");
  char folder[1024];
  snprintf(folder, sizeof folder, "%s", tmp_subdir("folder"));
  expect_every_reader_refuses(folder, "a folder");
  expect_every_reader_refuses("/dev/zero", "a character device");
  /* an MNIST folder whose image file is a FIFO: named as such, not "missing" */
  char dir[1024], images[1100];
  snprintf(dir, sizeof dir, "%s", tmp_subdir("mnist"));
  snprintf(images, sizeof images, "%s/train-images-idx3-ubyte.gz", dir);
  cr_assert_eq(mkfifo(images, 0600), 0);
  uint8_t three[3] = {1, 2, 3};
  size_t len;
  uint8_t *labels = idx_labels(3, three, &len);
  write_raw(fmt("%s/train-labels-idx1-ubyte", dir), labels, len);
  free(labels);
  mx_clear_error();
  cr_assert_null(mx_mnist_load(dir, true));
  cr_assert_str_eq(mx_last_error(), fmt("mx_mnist_load: %s is a FIFO, not a regular file", images));
}

/* --- the demo's --resume ------------------------------------------------------------------ */

typedef struct {
  int status; /* the exit code; 124 when it ran past 60 s */
  char out[16384]; /* stdout and stderr together, cut to fit */
} demo_run;

/* The MNIST demo (MX_MNIST_DEMO, from meson) on 64 synthetic samples, one epoch of 2 steps, with more flags. */
static demo_run run_demo(const char *flags) {
  const char *mnist = getenv("MX_MNIST_DEMO");
  cr_assert_not_null(mnist, "MX_MNIST_DEMO is not set (tests/reliability/meson.build sets it)");
  char command[4096];
  snprintf(command, sizeof command, "timeout 60 '%s' --synthetic 64 --model mlp --batch 32 --epochs 1 %s 2>&1",
           mnist, flags);
  demo_run r = {0};
  FILE *p = popen(command, "r");
  cr_assert_not_null(p);
  size_t n = fread(r.out, 1, sizeof r.out - 1, p);
  while (fgetc(p) != EOF) continue; /* the rest, unread */
  r.out[n] = '\0';
  int status = pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return r;
}

/* As tests/examples/test_demos.c: oneDNN's JIT kernels make a traced demo fail, and its start is slow there. */
static void skip_demo_under_valgrind(void) {
  if (!RUNNING_ON_VALGRIND) return;
  remove_tmp_dir(); /* Criterion runs no .fini after a skip */
  cr_skip_test("under valgrind: the demo runs traced by it");
}

Test(integrity, resume_refuses_a_fifo_at_once) { /* each demo run is bounded by timeout(1) */
  skip_demo_under_valgrind();
  TMP_PATH(fifo, "fifo.ckpt");
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  time_t start = time(NULL);
  demo_run r = run_demo(fmt("--resume %s", fifo));
  cr_assert_eq(r.status, 1, "exit %d:\n%s", r.status, r.out);
  cr_assert(strstr(r.out, fmt("--resume: mx_checkpoint_settings_read: mx_safetensors_load: %s is a FIFO, not a "
                              "regular file\n", fifo)), "%s", r.out);
  cr_assert_leq(time(NULL) - start, 30, "the demo took %lld s", (long long)(time(NULL) - start));
}

Test(integrity, resume_notes_an_old_checkpoint_and_refuses_a_flipped_one) {
  skip_demo_under_valgrind();
  TMP_PATH(ck, "ck.safetensors");
  TMP_PATH(old, "old.safetensors");
  TMP_PATH(bad, "bad.safetensors");
  demo_run r = run_demo(fmt("--steps 1 --save %s", ck));
  cr_assert_eq(r.status, 0, "exit %d:\n%s", r.status, r.out);
  r = run_demo(fmt("--resume %s", ck));
  cr_assert_eq(r.status, 0, "exit %d:\n%s", r.status, r.out);
  cr_assert(!strstr(r.out, "no checksums"), "%s", r.out);
  strip_checksums(ck, old);
  r = run_demo(fmt("--resume %s", old));
  cr_assert_eq(r.status, 0, "exit %d:\n%s", r.status, r.out);
  cr_assert(strstr(r.out, fmt("--resume: %s: the file has no checksums (an older mixgrad's, or another tool's): its "
                              "tensors were loaded unchecked\n", old)), "%s", r.out);
  int n;
  span *spans = tensor_spans(ck, &n);
  size_t size;
  uint8_t *bytes = (uint8_t *)read_file(ck, &size);
  bytes[spans[0].begin] ^= 0x40;
  write_raw(bad, bytes, size);
  r = run_demo(fmt("--resume %s", bad));
  cr_assert_eq(r.status, 1, "exit %d:\n%s", r.status, r.out);
  cr_assert(strstr(r.out, fmt("--resume: mx_checkpoint_settings_read: mx_safetensors_load: %s: tensor '%s': its ", bad,
                              spans[0].name)), "%s", r.out);
  free(bytes);
  free(spans);
}
