/* The PyTorch fixture files of tests/fixtures: reading them (whole files, tensors, case counts, cases) and comparing
 * mixgrad's results with their tensors. */
#ifndef MX_TESTS_FIXTURE_IO_H
#define MX_TESTS_FIXTURE_IO_H

#include <stdbool.h>
#include <stddef.h>

#include <mixgrad.h>

/* A tensor of a fixture: its values as doubles, whatever its dtype. */
typedef struct {
  mx_dtype dtype;
  mx_shape shape;
  int64_t n;
  double *v;
} fx_tensor;

/* The dtypes fx_parse_tensor accepts, as a mask: FX_DTYPE(MX_F64) | FX_DTYPE(MX_F32). */
#define FX_DTYPE(dtype) (1u << (dtype))
#define FX_ANY_DTYPE (~0u)

/* The whole file at path, NUL-terminated (the caller frees it), or NULL. */
char *fx_read_file(const char *path);

/* "<dtype> <ndim> <dims...> <values...>" from the space-separated tokens after strtok_r's cursor save, the dtype
 * ("f64", "f32", "f16", "bf16", "i64", "i32", "u8" or "bool") one of dtypes. t->v is malloc'd (the caller frees it). */
bool fx_parse_tensor(char **save, fx_tensor *t, unsigned dtypes);

/* The number of cases (lines starting "case ") in the file at path, or -1 when it cannot be read. */
int fx_count_cases(const char *path);

/* Case k (0-based) of the file at path: header gets its "case <id> <op> ..." line, then body each line after it,
 * to tokenize in place, up to the line "end". True when "end" was reached and both accepted every line. */
bool fx_load_case(const char *path, int k, void *c, bool (*header)(void *c, const char *line),
                  bool (*body)(void *c, char *line));

/* The indices of the n cases of a fixture file (fx_count_cases: n <= 0 when it cannot be read), as a Criterion
 * parameterized test takes them: 0 .. n-1, or the one index -1 for a test that reports the missing file. The array is
 * cr_malloc'ed; *count gets its length. */
int *fx_case_ids(int n, size_t *count);

/* A tensor holding t's values in t's dtype. */
mx_tensor *fx_to_mx(const fx_tensor *t);

/* Expects got to match PyTorch's want: the dtype and shape exactly, then every value within rtol relative to it, with
 * a floor of rtol * 1e-3 * the largest finite |want| (a sum near zero of large terms is only as exact as the terms);
 * NaN matches NaN, infinities match exactly. id and what name the case and the tensor in the messages. */
void fx_expect_matches(const char *id, const char *what, const mx_tensor *got, const fx_tensor *want, double rtol);

/* Expects a float32 result to be PyTorch's float64 want within rtol of each value plus rtol times the largest |want|
 * (float32 against float64: an absolute floor on the scale of the result). */
void fx_expect_close_to_f64(const char *id, const char *what, const mx_tensor *got, const fx_tensor *want, double rtol);

/* The value of "key=..." among the space-separated arguments args, up to the next space, or NULL. */
const char *fx_arg(const char *args, const char *key);

/* The relative tolerance for comparing with PyTorch in dtype: float64 1e-10, float32 1e-5, the 16-bit ones half an
 * ulp of [1, 2); 0 (exact) for the others. */
double fx_rtol(mx_dtype dtype);

#endif
