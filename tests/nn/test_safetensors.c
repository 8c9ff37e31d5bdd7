/* safetensors files: round trips of every dtype, the files of an independent
 * writer and reader (tests/fixtures/make_safetensors_fixture.py), and every
 * way a file can be broken — each an exact error, with nothing leaked. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <mixgrad.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "tests/common/tmp_files.h"

/* --- helpers ------------------------------------------------------------------------ */

/* A file of the 8-byte length, the header (padded with spaces to 8 bytes
 * unless pad is false) and data_len bytes of data. */
static void write_raw(const char *path, const char *header, bool pad, const void *data, size_t data_len) {
  size_t len = strlen(header), padded = pad ? (len + 7) / 8 * 8 : len;
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  for (int i = 0; i < 8; i++) fputc((int)((uint64_t)padded >> (8 * i) & 0xff), f);
  fwrite(header, 1, len, f);
  for (size_t i = len; i < padded; i++) fputc(' ', f);
  if (data_len) fwrite(data, 1, data_len, f);
  fclose(f);
}

/* Loading path fails with exactly msg (after "mx_safetensors_load: <path>: ")
 * and leaves no tensor or byte behind. */
static void expect_load_error(const char *path, mx_status status, const char *msg) {
  mx_memory_stats before = mx_memory_stats_get(MX_CPU);
  mx_clear_error();
  mx_safetensors *f = mx_safetensors_load(path);
  cr_assert_null(f, "loading %s succeeded; expected: %s", path, msg);
  char full[2048];
  snprintf(full, sizeof full, "mx_safetensors_load: %s: %s", path, msg);
  cr_assert_str_eq(mx_last_error(), full);
  cr_assert_eq(mx_last_status(), status, "status %s", mx_status_str(mx_last_status()));
  mx_memory_stats after = mx_memory_stats_get(MX_CPU);
  cr_assert_eq(after.live_tensors, before.live_tensors);
  cr_assert_eq(after.bytes_in_use, before.bytes_in_use);
  mx_clear_error();
}

/* A header with one float32 tensor 'a' of shape [2] at [0, 8], plus extra. */
static void expect_header_error(const char *header, const void *data, size_t len, const char *msg) {
  const char *path = tmp_path("bad.safetensors");
  write_raw(path, header, true, data, len);
  expect_load_error(path, MX_CORRUPT_DATA, msg);
}

static const float eight_bytes[2] = {1, 2};

/* The fixture's tensors (tests/fixtures/make_safetensors_fixture.py, TENSORS). */
typedef struct {
  const char *name;
  mx_dtype dtype;
  mx_shape shape;
  const void *data;
} fixture_tensor;

static const float fx_f32[] = {1.5f, -2.25f, 0.0f, 1e-30f, 3.4e38f, -7.0f};
static const double fx_f64[] = {3.141592653589793, -1e300, 5e-324};
static const uint16_t fx_f16[] = {0x3c00, 0x8000, 0x7bff, 0x0001};
static const uint16_t fx_f16_inf[] = {0x7c00, 0xfc00};
static const uint16_t fx_bf16[] = {0x3fc0, 0xc000, 0x4049};
static const int64_t fx_i64[] = {-(INT64_C(1) << 40) - 3, (INT64_C(1) << 62) + 1};
static const int32_t fx_i32[] = {INT32_MIN, INT32_MAX, 0, -5};
static const uint8_t fx_u8[] = {0, 1, 128, 255};
static const bool fx_bool[] = {true, false, true};
static const double fx_scalar[] = {0.1};
static const float fx_layer[] = {0.5f, 0.25f};

#define N_FIXTURE 12
static const fixture_tensor fixture[N_FIXTURE] = {
    {"f32", MX_F32, {2, {2, 3}}, fx_f32},
    {"f64", MX_F64, {1, {3}}, fx_f64},
    {"f16", MX_F16, {2, {2, 2}}, fx_f16},
    {"f16_inf", MX_F16, {1, {2}}, fx_f16_inf},
    {"bf16", MX_BF16, {1, {3}}, fx_bf16},
    {"i64", MX_I64, {1, {2}}, fx_i64},
    {"i32", MX_I32, {2, {2, 2}}, fx_i32},
    {"u8", MX_U8, {1, {4}}, fx_u8},
    {"bool", MX_BOOL, {1, {3}}, fx_bool},
    {"empty", MX_F32, {2, {0, 3}}, NULL},
    {"scalar", MX_F64, {0, {0}}, fx_scalar},
    {"layer.0.weight", MX_F32, {4, {1, 1, 1, 2}}, fx_layer},
};
static const char *const fixture_keys[] = {"format", "note"};
static const char *const fixture_values[] = {"pt", "mixed dtypes, some edge values"};

/* t has exactly the dtype, shape and bytes of x. */
static void expect_tensor(const mx_tensor *t, const fixture_tensor *x) {
  cr_assert_not_null(t, "tensor '%s' is missing", x->name);
  cr_assert_eq(mx_dtype_of(t), x->dtype, "tensor '%s' is %s", x->name, mx_dtype_name(mx_dtype_of(t)));
  cr_assert_eq(mx_device_of(t), MX_CPU);
  mx_shape s = mx_shape_get(t);
  cr_assert_eq(s.ndim, x->shape.ndim, "tensor '%s'", x->name);
  for (int d = 0; d < s.ndim; d++) cr_assert_eq(s.d[d], x->shape.d[d], "tensor '%s' dim %d", x->name, d);
  size_t bytes = (size_t)mx_numel(t) * mx_dtype_size(x->dtype);
  if (bytes == 0) return;
  void *got = malloc(bytes);
  cr_assert_eq(mx_to_host(t, got, bytes), MX_OK, "%s", mx_last_error());
  cr_assert(!memcmp(got, x->data, bytes), "the bytes of tensor '%s' differ", x->name);
  free(got);
}

static void save_fixture(const char *path) {
  const char *names[N_FIXTURE];
  mx_tensor *ts[N_FIXTURE];
  for (int i = 0; i < N_FIXTURE; i++) {
    names[i] = fixture[i].name;
    ts[i] = fixture[i].data ? mx_from_data(fixture[i].data, fixture[i].shape, fixture[i].dtype, MX_CPU)
                            : mx_zeros(fixture[i].shape, fixture[i].dtype, MX_CPU);
    cr_assert_not_null(ts[i], "%s", mx_last_error());
  }
  cr_assert_eq(mx_safetensors_save(path, N_FIXTURE, names, (const mx_tensor *const *)ts, 2, fixture_keys,
                                   fixture_values),
               MX_OK, "%s", mx_last_error());
  for (int i = 0; i < N_FIXTURE; i++) mx_release(ts[i]);
}

TestSuite(safetensors, .init = make_tmp_dir, .fini = remove_tmp_dir);

/* --- round trips --------------------------------------------------------------------- */

Test(safetensors, every_dtype_round_trips_bit_for_bit) {
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(3);
  const char *names[MX_DTYPE_COUNT + 3];
  mx_tensor *ts[MX_DTYPE_COUNT + 3];
  char name_buf[MX_DTYPE_COUNT][32];
  for (int d = 0; d < MX_DTYPE_COUNT; d++) { /* random values, scaled to fill the integer types */
    mx_tensor *r = mx_randn(MX_SHAPE(3, 5), MX_F64, MX_CPU, gen);
    ts[d] = d == MX_BOOL ? mx_gt_scalar(r, 0)
            : d == MX_U8 ? mx_to_dtype(mx_abs(mx_mul_scalar(r, 80)), MX_U8)
                         : mx_to_dtype(mx_mul_scalar(r, mx_dtype_is_floating((mx_dtype)d) ? 1 : 1e6), (mx_dtype)d);
    cr_assert_not_null(ts[d], "%s", mx_last_error());
    snprintf(name_buf[d], sizeof name_buf[d], "t.%s", mx_dtype_name((mx_dtype)d));
    names[d] = name_buf[d];
  }
  /* a strided view, a 0-d tensor, an empty one */
  ts[MX_DTYPE_COUNT] = mx_transpose(ts[MX_F16], 0, 1);
  ts[MX_DTYPE_COUNT + 1] = mx_scalar(-0.0, MX_F64, MX_CPU);
  ts[MX_DTYPE_COUNT + 2] = mx_zeros(MX_SHAPE(4, 0, 2), MX_I32, MX_CPU);
  names[MX_DTYPE_COUNT] = "view", names[MX_DTYPE_COUNT + 1] = "zero_d", names[MX_DTYPE_COUNT + 2] = "empty";
  int n = MX_DTYPE_COUNT + 3;
  const char *keys[] = {"epoch", "note \"quoted\" \u00e9"}, *values[] = {"3", "line\nbreak"};
  const char *path = tmp_path("all.safetensors");
  cr_assert_eq(mx_safetensors_save(path, n, names, (const mx_tensor *const *)ts, 2, keys, values), MX_OK, "%s",
               mx_last_error());

  mx_safetensors *f = mx_safetensors_load(path);
  cr_assert_not_null(f, "%s", mx_last_error());
  cr_assert_eq(mx_safetensors_count(f), n);
  for (int i = 0; i < n; i++) {
    cr_assert_str_eq(mx_safetensors_name(f, i), names[i]); /* our files keep the order given */
    mx_tensor *c = mx_contiguous(ts[i]);
    fixture_tensor x = {names[i], mx_dtype_of(c), mx_shape_get(c), mx_data_ptr(c)};
    expect_tensor(mx_safetensors_get(f, names[i]), &x);
    cr_assert_eq(mx_safetensors_tensor(f, i), mx_safetensors_get(f, names[i]));
  }
  cr_assert_eq(mx_safetensors_metadata_count(f), 2);
  cr_assert_str_eq(mx_safetensors_metadata(f, "epoch"), "3");
  cr_assert_str_eq(mx_safetensors_metadata(f, keys[1]), "line\nbreak");
  cr_assert_str_eq(mx_safetensors_metadata_key(f, 1), keys[1]);
  cr_assert_str_eq(mx_safetensors_metadata_value(f, 0), "3");
  cr_assert_null(mx_safetensors_metadata(f, "missing"));
  cr_assert_null(mx_safetensors_get(f, "missing"));
  cr_assert_eq(mx_safetensors_find(f, "missing"), -1);
  cr_assert_eq(mx_last_status(), MX_OK, "absent names are no error: %s", mx_last_error());
  /* the loaded tensors belong to the file, not to the open scope */
  mx_scope_end(s);
  s = mx_scope_begin();
  cr_assert_eq(mx_item(mx_safetensors_get(f, "zero_d")), 0.0);
  cr_assert(signbit(mx_item(mx_safetensors_get(f, "zero_d"))));
  mx_safetensors_free(f);
  mx_generator_free(gen);
  mx_scope_end(s);
}

Test(safetensors, an_empty_file_list_round_trips) {
  const char *path = tmp_path("none.safetensors");
  cr_assert_eq(mx_safetensors_save(path, 0, NULL, NULL, 0, NULL, NULL), MX_OK, "%s", mx_last_error());
  char *bytes = read_file(path, NULL);
  cr_assert(!memcmp(bytes, "\x08\0\0\0\0\0\0\0{}      ", 16));
  free(bytes);
  mx_safetensors *f = mx_safetensors_load(path);
  cr_assert_not_null(f, "%s", mx_last_error());
  cr_assert_eq(mx_safetensors_count(f), 0);
  cr_assert_eq(mx_safetensors_metadata_count(f), 0);
  mx_safetensors_free(f);
}

Test(safetensors, the_header_is_padded_json_and_the_data_follows_in_order) {
  const char *path = tmp_path("layout.safetensors");
  mx_tensor *a = mx_arange(0, 3, 1, MX_F32, MX_CPU), *b = mx_full(MX_SHAPE(2, 1), 7, MX_I64, MX_CPU);
  const char *names[] = {"b_first", "a"};
  cr_assert_eq(mx_safetensors_save(path, 2, names, (const mx_tensor *[]){b, a}, 1, (const char *[]){"k"},
                                   (const char *[]){"v"}),
               MX_OK, "%s", mx_last_error());
  size_t size;
  char *bytes = read_file(path, &size);
  /* the checksums follow the caller's metadata: each tensor's bytes hashed here by xxHash itself */
  const int64_t b_bytes[2] = {7, 7};
  const float a_bytes[3] = {0, 1, 2};
  const char *json = fmt("{\"__metadata__\":{\"k\":\"v\",\"xxh3_64:b_first\":\"%016llx\",\"xxh3_64:a\":\"%016llx\"},"
                         "\"b_first\":{\"dtype\":\"I64\",\"shape\":[2,1],\"data_offsets\":[0,16]},"
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[16,28]}}",
                         (unsigned long long)XXH3_64bits(b_bytes, 16), (unsigned long long)XXH3_64bits(a_bytes, 12));
  size_t len = strlen(json), padded = (len + 7) / 8 * 8;
  cr_assert_eq(size, 8 + padded + 28);
  cr_assert_eq(bytes[0], (char)padded);
  cr_assert(!memcmp(bytes + 8, json, len), "header: %.*s", (int)padded, bytes + 8);
  for (size_t i = len; i < padded; i++) cr_assert_eq(bytes[8 + i], ' ');
  int64_t b_data[2];
  memcpy(b_data, bytes + 8 + padded, 16);
  cr_assert(b_data[0] == 7 && b_data[1] == 7);
  float a_data[3];
  memcpy(a_data, bytes + 8 + padded + 16, 12);
  cr_assert(a_data[0] == 0 && a_data[1] == 1 && a_data[2] == 2);
  free(bytes);
  /* read back, the checksums are checked and kept out of the metadata */
  mx_safetensors *f = mx_safetensors_load(path);
  cr_assert_not_null(f, "%s", mx_last_error());
  cr_assert_null(mx_safetensors_last_note());
  cr_assert_eq(mx_safetensors_metadata_count(f), 1);
  cr_assert_str_eq(mx_safetensors_metadata_key(f, 0), "k");
  cr_assert_null(mx_safetensors_metadata(f, "xxh3_64:a"));
  mx_safetensors_free(f);
  mx_release(a);
  mx_release(b);
}

/* --- the independent writer and reader ------------------------------------------------- */

Test(safetensors, reads_the_python_writers_file_exactly) {
  mx_safetensors *f = mx_safetensors_load(MX_FIXTURES_DIR "/safetensors_python.safetensors");
  cr_assert_not_null(f, "%s", mx_last_error());
  cr_assert_eq(mx_safetensors_count(f), N_FIXTURE);
  for (int i = 0; i < N_FIXTURE; i++) expect_tensor(mx_safetensors_get(f, fixture[i].name), &fixture[i]);
  cr_assert_eq(mx_safetensors_metadata_count(f), 2);
  for (int i = 0; i < 2; i++) cr_assert_str_eq(mx_safetensors_metadata(f, fixture_keys[i]), fixture_values[i]);
  /* the python file stores the bytes in reverse name order: the list follows the bytes */
  cr_assert_str_eq(mx_safetensors_name(f, 0), "u8");
  cr_assert_str_eq(mx_safetensors_name(f, N_FIXTURE - 1), "bf16");
  /* a file without checksums loads, with a note saying so */
  cr_assert_str_eq(mx_safetensors_last_note(), MX_FIXTURES_DIR "/safetensors_python.safetensors: the file has no "
                   "checksums (an older mixgrad's, or another tool's): its tensors were loaded unchecked");
  mx_safetensors_free(f);
}

/* The committed file was checked by the script's reader; writing the same
 * tensors again must give the same bytes. The new file is left in the build
 * directory (see the script's docstring). */
Test(safetensors, writes_the_file_the_python_reader_checked) {
  const char *path = MX_TEST_BUILD_DIR "/safetensors_mixgrad.safetensors";
  save_fixture(path);
  size_t size, expected_size;
  char *got = read_file(path, &size);
  char *expected = read_file(MX_FIXTURES_DIR "/safetensors_mixgrad.safetensors", &expected_size);
  cr_assert_eq(size, expected_size, "%s has %zu bytes, the committed file %zu", path, size, expected_size);
  cr_assert(!memcmp(got, expected, size), "%s differs from tests/fixtures/safetensors_mixgrad.safetensors", path);
  free(got);
  free(expected);
}

/* --- broken files ----------------------------------------------------------------------- */

Test(safetensors, a_file_cut_anywhere_is_an_error) {
  const char *path = tmp_path("whole.safetensors"), *cut = tmp_path("cut.safetensors");
  save_fixture(path);
  size_t size;
  char *bytes = read_file(path, &size);
  uint64_t header = 0;
  memcpy(&header, bytes, 8);
  for (size_t n = 0; n < size; n++) {
    FILE *f = fopen(cut, "wb");
    fwrite(bytes, 1, n, f);
    fclose(f);
    char msg[512];
    if (n < 8)
      snprintf(msg, sizeof msg, "the file has %zu bytes; a safetensors file starts with 8 giving the header's length",
               n);
    else if (n < 8 + header)
      snprintf(msg, sizeof msg, "the header length %llu runs past the end of the file (%zu bytes)",
               (unsigned long long)header, n);
    else /* the tensor whose bytes come last ('layer.0.weight', [320, 328]) runs past the end first */
      snprintf(msg, sizeof msg, "tensor '%s': data_offsets [%llu, %llu] run past the end of the data (%llu bytes "
               "follow the header)", "layer.0.weight", (unsigned long long)(size - 8 - header - 8),
               (unsigned long long)(size - 8 - header), (unsigned long long)(n - 8 - header));
    if (n < 8 + header || n >= size - 8)
      expect_load_error(cut, MX_CORRUPT_DATA, msg);
    else { /* further in, whichever tensor is listed first among those cut off */
      mx_clear_error();
      cr_assert_null(mx_safetensors_load(cut), "a file cut at %zu bytes loaded", n);
      cr_assert_eq(mx_last_status(), MX_CORRUPT_DATA, "cut at %zu: %s", n, mx_last_error());
      cr_assert(strstr(mx_last_error(), "run past the end of the data"), "cut at %zu: %s", n, mx_last_error());
    }
  }
  free(bytes);
}

Test(safetensors, the_header_length_is_checked_against_the_file_and_the_limit) {
  const char *path = tmp_path("h.safetensors");
  FILE *f = fopen(path, "wb");
  uint64_t n = 1000;
  fwrite(&n, 8, 1, f);
  fputs("{}", f);
  fclose(f);
  expect_load_error(path, MX_CORRUPT_DATA, "the header length 1000 runs past the end of the file (10 bytes)");
  /* a sparse file big enough to hold a header over the limit */
  f = fopen(path, "wb");
  n = MX_SAFETENSORS_MAX_HEADER + 8;
  fwrite(&n, 8, 1, f);
  fclose(f);
  cr_assert_eq(truncate(path, MX_SAFETENSORS_MAX_HEADER + 64), 0);
  expect_load_error(path, MX_CORRUPT_DATA, "the header length 100000008 is over the limit of 100000000 bytes");
  f = fopen(path, "wb");
  n = UINT64_MAX;
  fwrite(&n, 8, 1, f);
  fclose(f);
  expect_load_error(path, MX_CORRUPT_DATA,
                    "the header length 18446744073709551615 runs past the end of the file (8 bytes)");
  write_raw(path, "", false, NULL, 0);
  expect_load_error(path, MX_CORRUPT_DATA, "the header is not valid JSON (at byte 0 of 0)");
}

Test(safetensors, the_header_must_be_one_json_object) {
  expect_header_error("{\"a\": {\"dtype\": \"F32\", ", NULL, 0, "the header is not valid JSON (at byte 23 of 24)");
  expect_header_error("{} {}", NULL, 0, "the header has bytes after its JSON (at byte 3 of 8)");
  expect_header_error("[1, 2]", NULL, 0, "the header is not a JSON object");
  const char *path = tmp_path("nul.safetensors");
  write_raw(path, "{}\0   ", false, NULL, 0);
  FILE *f = fopen(path, "r+b");
  uint64_t n = 6;
  fwrite(&n, 8, 1, f);
  fseek(f, 10, SEEK_SET);
  fwrite("\0   ", 1, 4, f);
  fclose(f);
  expect_load_error(path, MX_CORRUPT_DATA, "the header has bytes after its JSON (at byte 2 of 6)");
  expect_header_error("{\"a\": [1]}", NULL, 0, "tensor 'a': the entry is not a JSON object but [1]");
  expect_header_error("{\"a\": {\"shape\": [], \"data_offsets\": [0, 0]}}", NULL, 0,
                      "tensor 'a': \"dtype\" is missing or not a string");
  expect_header_error("{\"__metadata__\": [], \"a\": 1}", NULL, 0,
                      "\"__metadata__\" is not a JSON object but []");
  expect_header_error("{\"__metadata__\": {\"k\": 1}}", NULL, 0, "metadata 'k' is not a string but 1");
  expect_header_error("{\"__metadata__\": {\"k\": \"1\", \"k\": \"2\"}}", NULL, 0, "metadata key 'k' appears twice");
  expect_header_error("{\"__metadata__\": {}, \"__metadata__\": {}}", NULL, 0,
                      "\"__metadata__\" appears twice");
}

Test(safetensors, every_entry_is_checked) {
  expect_header_error("{\"w\": {\"dtype\": \"F8_E4M3\", \"shape\": [2], \"data_offsets\": [0, 2]}}", NULL, 0,
                      "tensor 'w': unknown dtype 'F8_E4M3' (mixgrad reads F32, F64, F16, BF16, I64, I32, U8, BOOL)");
  expect_header_error("{\"w\": {\"dtype\": \"F32\", \"shape\": 2, \"data_offsets\": [0, 8]}}", NULL, 0,
                      "tensor 'w': \"shape\" is missing or not a list");
  expect_header_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [2, -1], \"data_offsets\": [0, 8]}}", NULL, 0,
                      "tensor 'w': shape holds a size that is not an integer >= 0: -1");
  expect_header_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [2.5], \"data_offsets\": [0, 8]}}", NULL, 0,
                      "tensor 'w': shape holds a size that is not an integer >= 0: 2.5");
  expect_header_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [\"2\"], \"data_offsets\": [0, 8]}}", NULL, 0,
                      "tensor 'w': shape holds a size that is not an integer >= 0: \"2\"");
  expect_header_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [1e300], \"data_offsets\": [0, 8]}}", NULL, 0,
                      "tensor 'w': shape holds a size that is not an integer >= 0: 1e+300");
  expect_header_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}",
                      NULL, 0, "tensor 'w': shape has 9 dims; mixgrad tensors have at most 8");
  expect_header_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296], \"data_offsets\": [0, 4]}}",
                      NULL, 0, "tensor 'w': shape has too many elements: [4294967296,4294967296]");
  expect_header_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0]}}", NULL, 0,
                      "tensor 'w': \"data_offsets\" is not a list of two integers >= 0: [0]");
  expect_header_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [-8, 0]}}", NULL, 0,
                      "tensor 'w': \"data_offsets\" is not a list of two integers >= 0: [-8,0]");
  expect_header_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [2]}}", NULL, 0,
                      "tensor 'w': \"data_offsets\" is missing");
  expect_header_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 0]}}", eight_bytes, 8,
                      "tensor 'w': data_offsets [8, 0] end before they begin");
  expect_header_error("{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}", eight_bytes, 8,
                      "tensor 'w': data_offsets [8, 16] run past the end of the data (8 bytes follow the header)");
  const bool bad_bool[2] = {0};
  unsigned char two[2];
  memcpy(two, bad_bool, 2);
  two[1] = 2;
  expect_header_error("{\"m\": {\"dtype\": \"BOOL\", \"shape\": [2], \"data_offsets\": [0, 2]}}", two, 2,
                      "tensor 'm': bool element 1 is 2; bools are 0 or 1");
}

Test(safetensors, sizes_must_match_the_shape_exactly) {
  const char *path = tmp_path("model.ckpt");
  float data[100] = {0};
  write_raw(path, "{\"fc1.weight\": {\"dtype\": \"F32\", \"shape\": [10, 10], \"data_offsets\": [0, 100]}}", true,
            data, 100);
  expect_load_error(path, MX_CORRUPT_DATA,
                    "tensor 'fc1.weight': data_offsets [0, 100] hold 100 bytes but shape [10,10] float32 needs 400");
  expect_header_error("{\"h\": {\"dtype\": \"BF16\", \"shape\": [], \"data_offsets\": [0, 4]}}", eight_bytes, 4,
                      "tensor 'h': data_offsets [0, 4] hold 4 bytes but shape [] bfloat16 needs 2");
  expect_header_error("{\"e\": {\"dtype\": \"I64\", \"shape\": [0, 5], \"data_offsets\": [0, 8]}}", eight_bytes, 8,
                      "tensor 'e': data_offsets [0, 8] hold 8 bytes but shape [0,5] int64 needs 0");
}

Test(safetensors, the_tensors_must_tile_the_data) {
  float data[5] = {0};
  expect_header_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                      " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
                      data, 12, "tensor 'b': data_offsets [4, 12] overlap those of tensor 'a' [0, 8]");
  expect_header_error("{\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                      " \"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
                      data, 8, "tensor 'a': data_offsets [0, 8] overlap those of tensor 'b' [0, 8]");
  expect_header_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                      " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [12, 20]}}",
                      data, 20, "the bytes [8, 12) of the data belong to no tensor (tensor 'b' begins at 12)");
  expect_header_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", data, 12,
                      "the bytes [0, 4) of the data belong to no tensor (tensor 'a' begins at 4)");
  expect_header_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", data, 12,
                      "the bytes [8, 12) of the data belong to no tensor");
  expect_header_error("{}", data, 4, "the bytes [0, 4) of the data belong to no tensor");
  expect_header_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                      " \"a\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [8, 8]}}",
                      data, 8, "tensor 'a' appears twice");
  /* empty tensors may sit anywhere in the tiling, even at the same offset */
  const char *path = tmp_path("empties.safetensors");
  write_raw(path, "{\"z1\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [8, 8]},"
                  " \"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                  " \"z0\": {\"dtype\": \"F64\", \"shape\": [3, 0], \"data_offsets\": [0, 0]}}",
            true, eight_bytes, 8);
  mx_safetensors *f = mx_safetensors_load(path);
  cr_assert_not_null(f, "%s", mx_last_error());
  cr_assert_eq(mx_safetensors_count(f), 3);
  cr_assert_str_eq(mx_safetensors_name(f, 0), "z0");
  cr_assert_str_eq(mx_safetensors_name(f, 1), "a");
  cr_assert_eq(mx_at(mx_safetensors_get(f, "a"), MX_SHAPE(1)), 2.0);
  mx_safetensors_free(f);
}

Test(safetensors, files_that_cannot_be_read) {
  const char *path = tmp_path("absent.safetensors");
  expect_load_error(path, MX_IO_ERROR, "cannot open (No such file or directory)");
  mx_clear_error();
  cr_assert_null(mx_safetensors_load(tmp_dir));
  cr_assert_str_eq(mx_last_error(), fmt("mx_safetensors_load: %s is a folder, not a regular file", tmp_dir));
  cr_assert_null(mx_safetensors_load("/dev/zero"));
  cr_assert_str_eq(mx_last_error(), "mx_safetensors_load: /dev/zero is a character device, not a regular file");
  mx_clear_error();
  cr_assert_null(mx_safetensors_load(NULL));
  cr_assert_str_eq(mx_last_error(), "mx_safetensors_load: argument 'path' is NULL");
}

/* --- saving ------------------------------------------------------------------------------ */

/* Saving fails with exactly msg and creates no file. */
static void expect_save_error(int n, const char *const *names, const mx_tensor *const *ts, int n_meta,
                              const char *const *keys, const char *const *values, mx_status status, const char *msg) {
  const char *path = tmp_path("never.safetensors");
  mx_clear_error();
  cr_assert_eq(mx_safetensors_save(path, n, names, ts, n_meta, keys, values), status, "%s", mx_last_error());
  cr_assert_str_eq(mx_last_error(), msg);
  cr_assert_eq(access(path, F_OK), -1, "a file was written");
  mx_clear_error();
}

Test(safetensors, save_checks_its_arguments) {
  mx_tensor *a = mx_zeros(MX_SHAPE(2), MX_F32, MX_CPU);
  const mx_tensor *two[] = {a, a}, *with_null[] = {a, NULL};
  const char *ab[] = {"a", "b"}, *aa[] = {"a", "a"}, *a_null[] = {"a", NULL}, *a_empty[] = {"a", ""};
  const char *meta[] = {"__metadata__", "b"};
  expect_save_error(2, ab, with_null, 0, NULL, NULL, MX_NULL_INPUT,
                    "mx_safetensors_save: argument 'tensors[1]' is NULL");
  expect_save_error(2, a_null, two, 0, NULL, NULL, MX_NULL_INPUT, "mx_safetensors_save: argument 'names[1]' is NULL");
  expect_save_error(2, a_empty, two, 0, NULL, NULL, MX_INVALID_ARGUMENT, "mx_safetensors_save: names[1] is empty");
  expect_save_error(2, aa, two, 0, NULL, NULL, MX_INVALID_ARGUMENT, "mx_safetensors_save: names 'a' appears twice");
  expect_save_error(2, meta, two, 0, NULL, NULL, MX_INVALID_ARGUMENT,
                    "mx_safetensors_save: names[0] is \"__metadata__\", the format's name for the metadata");
  expect_save_error(-1, ab, two, 0, NULL, NULL, MX_INVALID_ARGUMENT, "mx_safetensors_save: n is -1; it must be >= 0");
  expect_save_error(2, NULL, two, 0, NULL, NULL, MX_NULL_INPUT, "mx_safetensors_save: argument 'names' is NULL");
  expect_save_error(1, ab, two, 2, aa, ab, MX_INVALID_ARGUMENT, "mx_safetensors_save: meta_keys 'a' appears twice");
  expect_save_error(1, ab, two, 2, ab, a_null, MX_NULL_INPUT,
                    "mx_safetensors_save: argument 'meta_values[1]' is NULL");
  expect_save_error(1, ab, two, 1, NULL, ab, MX_NULL_INPUT, "mx_safetensors_save: argument 'meta_keys' is NULL");
  const char *reserved[] = {"k", "xxh3_64:a"};
  expect_save_error(1, ab, two, 2, reserved, ab, MX_INVALID_ARGUMENT,
                    "mx_safetensors_save: meta_keys[1] 'xxh3_64:a' begins with 'xxh3_64:', which names the tensors' "
                    "checksums");
  mx_clear_error();
  cr_assert_eq(mx_safetensors_save(NULL, 1, ab, two, 0, NULL, NULL), MX_NULL_INPUT);
  cr_assert_str_eq(mx_last_error(), "mx_safetensors_save: argument 'path' is NULL");
  mx_release(a);
}

Test(safetensors, a_failed_save_leaves_the_old_file_intact) {
  mx_tensor *a = mx_arange(0, 4, 1, MX_F32, MX_CPU), *b = mx_ones(MX_SHAPE(8), MX_F64, MX_CPU);
  const char *path = tmp_path("keep.safetensors"), *names[] = {"a"};
  cr_assert_eq(mx_safetensors_save(path, 1, names, (const mx_tensor *[]){a}, 0, NULL, NULL), MX_OK);
  size_t old_size;
  char *old = read_file(path, &old_size);

  /* path is a folder: refused before anything is written */
  const char *dir = tmp_path("a_directory");
  cr_assert_eq(mkdir(dir, 0700), 0);
  char msg[2048];
  mx_clear_error();
  cr_assert_eq(mx_safetensors_save(dir, 1, names, (const mx_tensor *[]){b}, 0, NULL, NULL), MX_INVALID_ARGUMENT);
  snprintf(msg, sizeof msg, "mx_safetensors_save: %s is a folder, not a regular file; nothing was written", dir);
  cr_assert_str_eq(mx_last_error(), msg);

  /* a folder that does not exist */
  const char *nowhere = tmp_path("no/such/dir/x.safetensors");
  mx_clear_error();
  cr_assert_eq(mx_safetensors_save(nowhere, 1, names, (const mx_tensor *[]){b}, 0, NULL, NULL), MX_IO_ERROR);
  snprintf(msg, sizeof msg, "mx_safetensors_save: %s: the folder %s/no/such/dir does not exist", nowhere, tmp_dir);
  cr_assert_str_eq(mx_last_error(), msg);
  size_t size;
  char *now = read_file(path, &size);
  cr_assert(size == old_size && !memcmp(now, old, size), "the old file changed");
  free(now);

  /* a good save replaces the file and leaves no temporary file behind
   * (tests/reliability/test_output_files.c tries the temporary files) */
  cr_assert_eq(mx_safetensors_save(path, 1, names, (const mx_tensor *[]){b}, 0, NULL, NULL), MX_OK);
  DIR *d = opendir(tmp_dir);
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    cr_assert_null(strstr(e->d_name, ".mx-tmp."), "%s was left behind", e->d_name);
  closedir(d);
  mx_safetensors *f = mx_safetensors_load(path);
  cr_assert_eq(mx_dtype_of(mx_safetensors_get(f, "a")), MX_F64);
  mx_safetensors_free(f);
  free(old);
  mx_release(a);
  mx_release(b);
}

Test(safetensors, the_accessors_check_their_arguments) {
  const char *path = tmp_path("one.safetensors"), *names[] = {"x"};
  mx_tensor *x = mx_zeros(MX_SHAPE(1), MX_F32, MX_CPU);
  cr_assert_eq(mx_safetensors_save(path, 1, names, (const mx_tensor *[]){x}, 0, NULL, NULL), MX_OK);
  mx_safetensors *f = mx_safetensors_load(path);
  mx_clear_error();
  cr_assert_null(mx_safetensors_tensor(f, 1));
  cr_assert_str_eq(mx_last_error(), "mx_safetensors_tensor: tensor 1 is out of range (the file has 1)");
  cr_assert_null(mx_safetensors_metadata_key(f, 0));
  cr_assert_str_eq(mx_last_error(), "mx_safetensors_metadata_key: metadata entry 0 is out of range (the file has 0)");
  mx_clear_error();
  cr_assert_null(mx_safetensors_get(NULL, "x"));
  cr_assert_str_eq(mx_last_error(), "mx_safetensors_get: argument 'f' is NULL");
  mx_clear_error();
  cr_assert_eq(mx_safetensors_count(NULL), 0);
  mx_safetensors_free(NULL);
  mx_safetensors_free(f);
  mx_release(x);
}

Test(safetensors, cuda_tensors_are_saved_from_the_device) {
  if (mx_cuda_device_count() == 0) cr_skip_test("no CUDA device");
  mx_scope *s = mx_scope_begin();
  mx_tensor *h = mx_randn(MX_SHAPE(33, 7), MX_F32, MX_CPU, NULL);
  mx_tensor *d16 = mx_to_device(mx_to_dtype(h, MX_F16), MX_CUDA);
  mx_tensor *dt = mx_transpose(mx_to_device(h, MX_CUDA), 0, 1);
  cr_assert_not_null(dt, "%s", mx_last_error());
  const char *path = tmp_path("cuda.safetensors"), *names[] = {"h16", "t"};
  cr_assert_eq(mx_safetensors_save(path, 2, names, (const mx_tensor *[]){d16, dt}, 0, NULL, NULL), MX_OK, "%s",
               mx_last_error());
  mx_safetensors *f = mx_safetensors_load(path);
  cr_assert_not_null(f, "%s", mx_last_error());
  mx_tensor *want16 = mx_contiguous(mx_to_dtype(h, MX_F16)), *want_t = mx_contiguous(mx_transpose(h, 0, 1));
  fixture_tensor x16 = {"h16", MX_F16, MX_SHAPE(33, 7), mx_data_ptr(want16)};
  fixture_tensor xt = {"t", MX_F32, MX_SHAPE(7, 33), mx_data_ptr(want_t)};
  expect_tensor(mx_safetensors_get(f, "h16"), &x16);
  expect_tensor(mx_safetensors_get(f, "t"), &xt);
  mx_safetensors_free(f);
  mx_scope_end(s);
}
