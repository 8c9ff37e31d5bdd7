/* Views: reshape/view, transpose, permute, squeeze/unsqueeze, slice, narrow,
 * select, expand, flatten; writes through views and version counters.
 *
 * Shapes, strides and offsets are PyTorch 1.13's for the same calls
 * (x.stride(), x.storage_offset()). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include <mixgrad.h>

static void expect_geometry(const mx_tensor *t, mx_shape shape, mx_shape strides, int64_t offset) {
  cr_assert_not_null(t, "%s", mx_last_error());
  mx_shape got = mx_shape_get(t), st = mx_strides_get(t);
  cr_assert_eq(got.ndim, shape.ndim, "ndim %d, expected %d", got.ndim, shape.ndim);
  for (int i = 0; i < shape.ndim; i++) {
    cr_expect_eq(got.d[i], shape.d[i], "size of dim %d: %lld, expected %lld", i, (long long)got.d[i],
                 (long long)shape.d[i]);
    if (strides.d[i] >= 0) /* -1: do not check (a size-1 dim's stride) */
      cr_expect_eq(st.d[i], strides.d[i], "stride of dim %d: %lld, expected %lld", i, (long long)st.d[i],
                   (long long)strides.d[i]);
  }
  cr_expect_eq(mx_offset(t), offset, "offset %lld, expected %lld", (long long)mx_offset(t), (long long)offset);
}

/* The elements in row-major order, as doubles. */
static void expect_elements(const mx_tensor *t, const double *want, int64_t n) {
  cr_assert_not_null(t, "%s", mx_last_error());
  cr_assert_eq(mx_numel(t), n, "numel %lld, expected %lld", (long long)mx_numel(t), (long long)n);
  double got[64];
  cr_assert(n <= 64);
  mx_tensor *d = mx_to_dtype(t, MX_F64);
  cr_assert_not_null(d);
  cr_assert_eq(mx_to_host(d, got, (size_t)n * sizeof(double)), MX_OK);
  mx_release(d);
  for (int64_t i = 0; i < n; i++)
    cr_expect_eq(got[i], want[i], "element %lld is %g, expected %g", (long long)i, got[i], want[i]);
}

static mx_tensor *arange_shaped(int64_t n, mx_shape shape) {
  mx_tensor *t = mx_reshape(mx_arange(0, (double)n, 1, MX_F32, MX_CPU), shape);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}

/* --- reshape / view ------------------------------------------------------------ */

Test(views, reshape_contiguous_is_a_view) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_arange(0, 24, 1, MX_F32, MX_CPU);
  mx_tensor *r = mx_reshape(a, MX_SHAPE(2, 3, 4));
  expect_geometry(r, MX_SHAPE(2, 3, 4), MX_SHAPE(12, 4, 1), 0);
  cr_expect(mx_shares_storage(a, r));
  cr_expect_eq(mx_data_ptr(a), mx_data_ptr(r));
  cr_expect_eq(mx_at(r, MX_SHAPE(1, 2, 3)), 23);
  cr_expect_eq(mx_at(r, MX_SHAPE(1, 0, 2)), 14);
  mx_tensor *v = mx_view(r, MX_SHAPE(4, 6));
  expect_geometry(v, MX_SHAPE(4, 6), MX_SHAPE(6, 1), 0);
  cr_expect(mx_shares_storage(a, v));
  /* to and from 0-d */
  mx_tensor *one = mx_reshape(mx_scalar(5, MX_F32, MX_CPU), MX_SHAPE(1, 1));
  expect_geometry(one, MX_SHAPE(1, 1), MX_SHAPE(-1, -1), 0);
  mx_tensor *back = mx_view(one, MX_SCALAR);
  cr_assert_not_null(back);
  cr_expect_eq(mx_ndim(back), 0);
  cr_expect_eq(mx_item(back), 5);
  mx_scope_end(s);
}

Test(views, reshape_infers_minus_one) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_arange(0, 24, 1, MX_F32, MX_CPU);
  expect_geometry(mx_reshape(a, MX_SHAPE(2, -1, 4)), MX_SHAPE(2, 3, 4), MX_SHAPE(12, 4, 1), 0);
  expect_geometry(mx_view(a, MX_SHAPE(-1, 8)), MX_SHAPE(3, 8), MX_SHAPE(8, 1), 0);
  expect_geometry(mx_reshape(a, MX_SHAPE(-1)), MX_SHAPE(24), MX_SHAPE(1), 0);
  /* a 0-element tensor: -1 next to a nonzero size */
  mx_tensor *e = mx_reshape(mx_zeros(MX_SHAPE(0, 4), MX_F32, MX_CPU), MX_SHAPE(2, -1, 2));
  expect_geometry(e, MX_SHAPE(2, 0, 2), MX_SHAPE(-1, -1, -1), 0);
  mx_clear_error();
  cr_expect_null(mx_reshape(a, MX_SHAPE(-1, -1)), "two inferred dims");
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  mx_clear_error();
  cr_expect_null(mx_reshape(a, MX_SHAPE(5, -1)), "24 is not a multiple of 5");
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  mx_clear_error();
  cr_expect_null(mx_view(a, MX_SHAPE(5, 5)));
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  mx_clear_error();
  cr_expect_null(mx_reshape(a, MX_SHAPE(-2, -12)));
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  mx_clear_error();
  mx_scope_end(s);
}

Test(views, view_of_transposed_fails_reshape_copies) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *m = arange_shaped(6, MX_SHAPE(2, 3));
  mx_tensor *t = mx_transpose(m, 0, 1); /* (3, 2), strides (1, 3) */
  mx_clear_error();
  cr_expect_null(mx_view(t, MX_SHAPE(6)));
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  cr_expect_neq(strlen(mx_last_error()), 0);
  mx_clear_error();
  mx_tensor *r = mx_reshape(t, MX_SHAPE(6));
  expect_geometry(r, MX_SHAPE(6), MX_SHAPE(1), 0);
  cr_expect_not(mx_shares_storage(r, m), "a reshape that cannot be a view copies");
  expect_elements(r, (double[]){0, 3, 1, 4, 2, 5}, 6);
  /* the copy is independent */
  cr_assert_eq(mx_set(r, MX_SHAPE(0), 100), MX_OK);
  cr_expect_eq(mx_at(m, MX_SHAPE(0, 0)), 0);
  /* views of the transposed tensor that keep its dims do work */
  mx_tensor *u = mx_view(t, MX_SHAPE(3, 1, 2));
  expect_geometry(u, MX_SHAPE(3, 1, 2), MX_SHAPE(1, -1, 3), 0);
  cr_expect(mx_shares_storage(u, m));
  mx_scope_end(s);
}

Test(views, view_of_noncontiguous_compatible_shares_storage) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = arange_shaped(24, MX_SHAPE(4, 6));
  mx_tensor *y = mx_slice(x, 1, 0, 3, 1); /* x[:, 0:3]: (4, 3), strides (6, 1) */
  cr_assert_not_null(y);
  cr_expect_not(mx_is_contiguous(y));
  /* torch: x[:, 0:3].view(2, 2, 3).stride() == (12, 6, 1) */
  mx_tensor *v = mx_view(y, MX_SHAPE(2, 2, 3));
  expect_geometry(v, MX_SHAPE(2, 2, 3), MX_SHAPE(12, 6, 1), 0);
  cr_expect(mx_shares_storage(v, x));
  cr_expect_eq(mx_at(v, MX_SHAPE(1, 1, 2)), 20);
  expect_elements(v, (double[]){0, 1, 2, 6, 7, 8, 12, 13, 14, 18, 19, 20}, 12);
  /* a write through the view reaches x */
  cr_assert_eq(mx_set(v, MX_SHAPE(1, 0, 1), -1), MX_OK);
  cr_expect_eq(mx_at(x, MX_SHAPE(2, 1)), -1);
  /* but the rows cannot merge */
  mx_clear_error();
  cr_expect_null(mx_view(y, MX_SHAPE(12)));
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  mx_clear_error();
  /* an offset view keeps its offset: x[1:3, 2:6:2] */
  mx_tensor *z = mx_slice(mx_slice(arange_shaped(15, MX_SHAPE(3, 5)), 0, 1, 3, 1), 1, 1, 5, 2);
  expect_geometry(z, MX_SHAPE(2, 2), MX_SHAPE(5, 2), 6);
  mx_tensor *zr = mx_reshape(z, MX_SHAPE(4));
  expect_geometry(zr, MX_SHAPE(4), MX_SHAPE(1), 0);
  expect_elements(zr, (double[]){6, 8, 11, 13}, 4);
  /* an expanded tensor can be viewed with its broadcast dims split */
  mx_tensor *e = mx_expand(mx_arange(0, 3, 1, MX_F32, MX_CPU), MX_SHAPE(4, 3));
  mx_tensor *ev = mx_view(e, MX_SHAPE(2, 2, 3));
  expect_geometry(ev, MX_SHAPE(2, 2, 3), MX_SHAPE(0, 0, 1), 0);
  cr_expect(mx_shares_storage(ev, e));
  cr_expect_null(mx_view(e, MX_SHAPE(12)));
  mx_clear_error();
  mx_scope_end(s);
}

/* --- transpose / permute -------------------------------------------------------- */

Test(views, transpose) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = arange_shaped(24, MX_SHAPE(2, 3, 4));
  mx_tensor *t = mx_transpose(x, 0, 2);
  expect_geometry(t, MX_SHAPE(4, 3, 2), MX_SHAPE(1, 4, 12), 0);
  cr_expect(mx_shares_storage(t, x));
  cr_expect_not(mx_is_contiguous(t));
  for (int64_t i = 0; i < 2; i++)
    for (int64_t j = 0; j < 3; j++)
      for (int64_t k = 0; k < 4; k++)
        cr_expect_eq(mx_at(t, MX_SHAPE(k, j, i)), mx_at(x, MX_SHAPE(i, j, k)));
  cr_expect_eq(mx_at(t, MX_SHAPE(3, 1, 0)), 7);
  /* negative dims; transposing back restores the geometry */
  mx_tensor *back = mx_transpose(t, -1, -3);
  expect_geometry(back, MX_SHAPE(2, 3, 4), MX_SHAPE(12, 4, 1), 0);
  cr_expect(mx_is_contiguous(back));
  expect_geometry(mx_transpose(x, 1, 1), MX_SHAPE(2, 3, 4), MX_SHAPE(12, 4, 1), 0);
  mx_clear_error();
  cr_expect_null(mx_transpose(x, 0, 3));
  cr_expect_eq(mx_last_status(), MX_INDEX_ERROR);
  mx_clear_error();
  mx_scope_end(s);
}

Test(views, permute) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = arange_shaped(24, MX_SHAPE(2, 3, 4));
  mx_tensor *p = mx_permute(x, MX_DIMS(2, 0, 1));
  expect_geometry(p, MX_SHAPE(4, 2, 3), MX_SHAPE(1, 12, 4), 0);
  cr_expect_eq(mx_at(p, MX_SHAPE(3, 1, 2)), 23);
  cr_expect_eq(mx_at(p, MX_SHAPE(1, 0, 2)), 9);
  cr_expect(mx_shares_storage(p, x));
  expect_geometry(mx_permute(x, MX_DIMS(-1, -2, -3)), MX_SHAPE(4, 3, 2), MX_SHAPE(1, 4, 12), 0);
  mx_tensor *c = mx_contiguous(p);
  expect_elements(mx_slice(mx_reshape(c, MX_SHAPE(-1)), 0, 0, 8, 1), (double[]){0, 4, 8, 12, 16, 20, 1, 5},
                  8);
  mx_clear_error();
  cr_expect_null(mx_permute(x, MX_DIMS(0, 0, 1)), "repeated dim");
  cr_expect_eq(mx_last_status(), MX_INVALID_ARGUMENT);
  mx_clear_error();
  cr_expect_null(mx_permute(x, MX_DIMS(0, 1)), "too few dims");
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  mx_clear_error();
  cr_expect_null(mx_permute(x, MX_DIMS(0, 1, 3)), "dim out of range");
  mx_clear_error();
  mx_scope_end(s);
}

/* --- squeeze / unsqueeze -------------------------------------------------------- */

Test(views, squeeze) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *z = arange_shaped(6, MX_SHAPE(1, 3, 1, 2));
  expect_geometry(mx_squeeze(z, 0), MX_SHAPE(3, 1, 2), MX_SHAPE(2, -1, 1), 0);
  expect_geometry(mx_squeeze(z, -2), MX_SHAPE(1, 3, 2), MX_SHAPE(-1, 2, 1), 0);
  expect_geometry(mx_squeeze(z, 1), MX_SHAPE(1, 3, 1, 2), MX_SHAPE(-1, 2, -1, 1), 0); /* size 3: no-op */
  mx_tensor *all = mx_squeeze_all(z);
  expect_geometry(all, MX_SHAPE(3, 2), MX_SHAPE(2, 1), 0);
  cr_expect(mx_shares_storage(all, z));
  cr_expect_eq(mx_at(all, MX_SHAPE(2, 1)), 5);
  mx_tensor *sc = mx_squeeze_all(mx_zeros(MX_SHAPE(1, 1), MX_F32, MX_CPU));
  cr_assert_not_null(sc);
  cr_expect_eq(mx_ndim(sc), 0);
  mx_clear_error();
  cr_expect_null(mx_squeeze(z, 4));
  cr_expect_eq(mx_last_status(), MX_INDEX_ERROR);
  mx_clear_error();
  cr_expect_null(mx_squeeze(z, -5));
  mx_clear_error();
  mx_scope_end(s);
}

Test(views, unsqueeze) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = arange_shaped(6, MX_SHAPE(2, 3));
  /* torch strides: unsqueeze(0) (6, 3, 1), unsqueeze(1) (3, 3, 1), unsqueeze(-1) (3, 1, 1) */
  expect_geometry(mx_unsqueeze(a, 0), MX_SHAPE(1, 2, 3), MX_SHAPE(6, 3, 1), 0);
  expect_geometry(mx_unsqueeze(a, 1), MX_SHAPE(2, 1, 3), MX_SHAPE(3, 3, 1), 0);
  expect_geometry(mx_unsqueeze(a, 2), MX_SHAPE(2, 3, 1), MX_SHAPE(3, 1, 1), 0);
  expect_geometry(mx_unsqueeze(a, -1), MX_SHAPE(2, 3, 1), MX_SHAPE(3, 1, 1), 0);
  expect_geometry(mx_unsqueeze(a, -3), MX_SHAPE(1, 2, 3), MX_SHAPE(6, 3, 1), 0);
  mx_tensor *u = mx_unsqueeze(a, -2);
  expect_geometry(u, MX_SHAPE(2, 1, 3), MX_SHAPE(3, 3, 1), 0);
  cr_expect(mx_is_contiguous(u));
  cr_expect_eq(mx_at(u, MX_SHAPE(1, 0, 2)), 5);
  expect_geometry(mx_unsqueeze(mx_scalar(1, MX_F32, MX_CPU), 0), MX_SHAPE(1), MX_SHAPE(1), 0);
  mx_clear_error();
  cr_expect_null(mx_unsqueeze(a, 3));
  cr_expect_eq(mx_last_status(), MX_INDEX_ERROR);
  mx_clear_error();
  cr_expect_null(mx_unsqueeze(a, -4));
  mx_clear_error();
  cr_expect_null(mx_unsqueeze(mx_zeros(MX_SHAPE(1, 1, 1, 1, 1, 1, 1, 1), MX_F32, MX_CPU), 0),
                 "a 9th dim is too many");
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  mx_clear_error();
  mx_scope_end(s);
}

/* --- slice / narrow / select ------------------------------------------------------ */

Test(views, slice_with_step) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_arange(0, 10, 1, MX_F32, MX_CPU);
  mx_tensor *t = mx_slice(a, 0, 1, 8, 3); /* a[1:8:3] */
  expect_geometry(t, MX_SHAPE(3), MX_SHAPE(3), 1);
  expect_elements(t, (double[]){1, 4, 7}, 3);
  cr_expect(mx_shares_storage(t, a));
  expect_elements(mx_slice(a, 0, 0, 10, 4), (double[]){0, 4, 8}, 3);
  expect_elements(mx_slice(a, 0, 9, 10, 5), (double[]){9}, 1);
  /* 2-D: x[:, ::2] of a (3, 5) */
  mx_tensor *x = arange_shaped(15, MX_SHAPE(3, 5));
  mx_tensor *c = mx_slice(x, 1, 0, 5, 2);
  expect_geometry(c, MX_SHAPE(3, 3), MX_SHAPE(5, 2), 0);
  expect_elements(c, (double[]){0, 2, 4, 5, 7, 9, 10, 12, 14}, 9);
  /* slices of slices compose: x[1:, 1::2][:, 1:] */
  mx_tensor *cc = mx_slice(mx_slice(mx_slice(x, 0, 1, 3, 1), 1, 1, 5, 2), -1, 1, 2, 1);
  expect_geometry(cc, MX_SHAPE(2, 1), MX_SHAPE(5, 2), 8);
  expect_elements(cc, (double[]){8, 13}, 2);
  /* the step must be positive */
  mx_clear_error();
  cr_expect_null(mx_slice(a, 0, 0, 10, 0));
  cr_expect_eq(mx_last_status(), MX_INVALID_ARGUMENT);
  mx_clear_error();
  cr_expect_null(mx_slice(a, 0, 10, 0, -1));
  mx_clear_error();
  cr_expect_null(mx_slice(a, 1, 0, 1, 1), "dim out of range");
  cr_expect_eq(mx_last_status(), MX_INDEX_ERROR);
  mx_clear_error();
  mx_scope_end(s);
}

Test(views, slice_clamps_like_python) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_arange(0, 10, 1, MX_F32, MX_CPU);
  expect_elements(mx_slice(a, 0, -3, 100, 1), (double[]){7, 8, 9}, 3);    /* a[-3:100] */
  expect_elements(mx_slice(a, 0, -100, 3, 1), (double[]){0, 1, 2}, 3);    /* a[-100:3] */
  expect_elements(mx_slice(a, 0, 2, -5, 1), (double[]){2, 3, 4}, 3);      /* a[2:-5] */
  expect_elements(mx_slice(a, 0, -4, -1, 2), (double[]){6, 8}, 2);        /* a[-4:-1:2] */
  expect_elements(mx_slice(a, 0, 0, INT64_MAX, 3), (double[]){0, 3, 6, 9}, 4);
  mx_tensor *e1 = mx_slice(a, 0, 8, 2, 1); /* a[8:2] is empty */
  cr_assert_not_null(e1);
  cr_expect_eq(mx_numel(e1), 0);
  cr_expect_eq(mx_ndim(e1), 1);
  mx_tensor *e2 = mx_slice(a, 0, 20, 30, 1); /* a[20:30] is empty */
  cr_assert_not_null(e2);
  cr_expect_eq(mx_numel(e2), 0);
  mx_tensor *e3 = mx_slice(a, 0, 5, 5, 1);
  cr_assert_not_null(e3);
  cr_expect_eq(mx_numel(e3), 0);
  mx_scope_end(s);
}

Test(views, narrow) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = arange_shaped(20, MX_SHAPE(4, 5));
  mx_tensor *rows = mx_narrow(x, 0, 1, 2);
  expect_geometry(rows, MX_SHAPE(2, 5), MX_SHAPE(5, 1), 5);
  cr_expect(mx_is_contiguous(rows));
  cr_expect_eq(mx_at(rows, MX_SHAPE(1, 4)), 14);
  mx_tensor *cols = mx_narrow(x, -1, -2, 2); /* the last two columns */
  expect_geometry(cols, MX_SHAPE(4, 2), MX_SHAPE(5, 1), 3);
  expect_elements(cols, (double[]){3, 4, 8, 9, 13, 14, 18, 19}, 8);
  mx_tensor *none = mx_narrow(x, 0, 4, 0);
  cr_assert_not_null(none, "narrow(start=size, length=0) is allowed: %s", mx_last_error());
  cr_expect_eq(mx_numel(none), 0);
  mx_clear_error();
  cr_expect_null(mx_narrow(x, 0, 3, 2), "3 + 2 > 4");
  cr_expect_eq(mx_last_status(), MX_INDEX_ERROR);
  mx_clear_error();
  cr_expect_null(mx_narrow(x, 1, 0, -1));
  cr_expect_eq(mx_last_status(), MX_INDEX_ERROR);
  mx_clear_error();
  cr_expect_null(mx_narrow(x, 0, -5, 1));
  cr_expect_eq(mx_last_status(), MX_INDEX_ERROR);
  mx_clear_error();
  mx_scope_end(s);
}

Test(views, select) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = arange_shaped(12, MX_SHAPE(3, 4));
  mx_tensor *row = mx_select(x, 0, 1);
  expect_geometry(row, MX_SHAPE(4), MX_SHAPE(1), 4);
  expect_elements(row, (double[]){4, 5, 6, 7}, 4);
  mx_tensor *col = mx_select(x, 1, -1);
  expect_geometry(col, MX_SHAPE(3), MX_SHAPE(4), 3);
  expect_elements(col, (double[]){3, 7, 11}, 3);
  mx_tensor *one = mx_select(col, 0, 2);
  cr_assert_not_null(one);
  cr_expect_eq(mx_ndim(one), 0);
  cr_expect_eq(mx_offset(one), 11);
  cr_expect_eq(mx_item(one), 11);
  cr_expect(mx_shares_storage(one, x));
  mx_clear_error();
  cr_expect_null(mx_select(x, 0, 3));
  cr_expect_eq(mx_last_status(), MX_INDEX_ERROR);
  mx_clear_error();
  cr_expect_null(mx_select(x, 1, -5));
  cr_expect_eq(mx_last_status(), MX_INDEX_ERROR);
  mx_clear_error();
  cr_expect_null(mx_select(one, 0, 0), "a 0-d tensor has nothing to select");
  mx_clear_error();
  mx_scope_end(s);
}

/* --- expand / broadcast_to ------------------------------------------------------------ */

Test(views, expand_and_broadcast_to) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *col = arange_shaped(3, MX_SHAPE(3, 1));
  mx_tensor *e = mx_expand(col, MX_SHAPE(3, 4));
  expect_geometry(e, MX_SHAPE(3, 4), MX_SHAPE(1, 0), 0);
  cr_expect(mx_shares_storage(e, col));
  expect_elements(e, (double[]){0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}, 12);
  /* new leading dims get stride 0; torch: (0, 1, 0) */
  mx_tensor *e3 = mx_expand(col, MX_SHAPE(2, 3, 4));
  expect_geometry(e3, MX_SHAPE(2, 3, 4), MX_SHAPE(0, 1, 0), 0);
  cr_expect_eq(mx_at(e3, MX_SHAPE(1, 2, 3)), 2);
  /* -1 keeps a size */
  expect_geometry(mx_expand(col, MX_SHAPE(-1, 5)), MX_SHAPE(3, 5), MX_SHAPE(1, 0), 0);
  mx_tensor *b = mx_broadcast_to(mx_arange(0, 4, 1, MX_F32, MX_CPU), MX_SHAPE(2, 4));
  expect_geometry(b, MX_SHAPE(2, 4), MX_SHAPE(0, 1), 0);
  expect_elements(b, (double[]){0, 1, 2, 3, 0, 1, 2, 3}, 8);
  mx_tensor *sc = mx_broadcast_to(mx_scalar(2.5, MX_F32, MX_CPU), MX_SHAPE(2, 2));
  expect_geometry(sc, MX_SHAPE(2, 2), MX_SHAPE(0, 0), 0);
  expect_elements(sc, (double[]){2.5, 2.5, 2.5, 2.5}, 4);
  mx_clear_error();
  cr_expect_null(mx_expand(col, MX_SHAPE(4, 4)), "3 cannot become 4");
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  mx_clear_error();
  cr_expect_null(mx_expand(col, MX_SHAPE(4)), "fewer dims");
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  mx_clear_error();
  cr_expect_null(mx_broadcast_to(mx_arange(0, 4, 1, MX_F32, MX_CPU), MX_SHAPE(4, 3)));
  cr_expect_eq(mx_last_status(), MX_SHAPE_ERROR);
  mx_clear_error();
  mx_scope_end(s);
}

/* --- flatten ---------------------------------------------------------------------------- */

Test(views, flatten) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = arange_shaped(24, MX_SHAPE(2, 3, 4));
  mx_tensor *all = mx_flatten(x, 0, -1);
  expect_geometry(all, MX_SHAPE(24), MX_SHAPE(1), 0);
  cr_expect(mx_shares_storage(all, x));
  expect_geometry(mx_flatten(x, 1, 2), MX_SHAPE(2, 12), MX_SHAPE(12, 1), 0);
  expect_geometry(mx_flatten(x, 0, 1), MX_SHAPE(6, 4), MX_SHAPE(4, 1), 0);
  expect_geometry(mx_flatten(x, 1, 1), MX_SHAPE(2, 3, 4), MX_SHAPE(12, 4, 1), 0);
  /* flattening transposed dims must copy: torch x.transpose(1, 2).flatten(1)[1] */
  mx_tensor *f = mx_flatten(mx_transpose(x, 1, 2), 1, -1);
  expect_geometry(f, MX_SHAPE(2, 12), MX_SHAPE(12, 1), 0);
  cr_expect_not(mx_shares_storage(f, x));
  expect_elements(mx_select(f, 0, 1), (double[]){12, 16, 20, 13, 17, 21, 14, 18, 22, 15, 19, 23}, 12);
  /* flattening the untouched leading dims of a transposed tensor is a view */
  mx_tensor *g = mx_flatten(mx_transpose(x, 1, 2), 0, 0);
  cr_assert_not_null(g);
  cr_expect(mx_shares_storage(g, x));
  mx_tensor *s0 = mx_flatten(mx_scalar(3, MX_F32, MX_CPU), 0, -1);
  expect_geometry(s0, MX_SHAPE(1), MX_SHAPE(1), 0);
  cr_expect_eq(mx_item(s0), 3);
  mx_clear_error();
  cr_expect_null(mx_flatten(x, 2, 1));
  cr_expect_eq(mx_last_status(), MX_INVALID_ARGUMENT);
  mx_clear_error();
  mx_scope_end(s);
}

/* --- writes through views --------------------------------------------------------------- */

Test(views, set_through_views_reaches_base) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_zeros(MX_SHAPE(3, 4), MX_F32, MX_CPU);
  mx_tensor *t = mx_transpose(x, 0, 1);
  cr_assert_eq(mx_set(t, MX_SHAPE(3, 1), 5), MX_OK);
  cr_expect_eq(mx_at(x, MX_SHAPE(1, 3)), 5);
  mx_tensor *row = mx_select(x, 0, 2);
  cr_assert_eq(mx_set(row, MX_SHAPE(-1), 7), MX_OK);
  cr_expect_eq(mx_at(x, MX_SHAPE(2, 3)), 7);
  mx_tensor *sl = mx_slice(mx_reshape(x, MX_SHAPE(12)), 0, 1, 12, 5); /* flat 1, 6, 11 */
  cr_assert_eq(mx_set(sl, MX_SHAPE(1), -2), MX_OK);
  cr_expect_eq(mx_at(x, MX_SHAPE(1, 2)), -2);
  /* nothing else changed */
  double sum = 0;
  for (int64_t i = 0; i < 3; i++)
    for (int64_t j = 0; j < 4; j++) sum += mx_at(x, MX_SHAPE(i, j));
  cr_expect_eq(sum, 10);
  mx_scope_end(s);
}

Test(views, fill_through_views_reaches_base) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_zeros(MX_SHAPE(4, 5), MX_I32, MX_CPU);
  cr_assert_eq(mx_fill_(mx_slice(x, 1, 0, 5, 2), 1), MX_OK); /* columns 0, 2, 4 */
  cr_assert_eq(mx_fill_(mx_narrow(x, 0, 3, 1), 9), MX_OK);   /* last row */
  cr_assert_eq(mx_fill_(mx_select(mx_transpose(x, 0, 1), 0, 3), 4), MX_OK); /* column 3 */
  int32_t host[20];
  cr_assert_eq(mx_to_host(x, host, sizeof host), MX_OK);
  const int32_t want[20] = {1, 0, 1, 4, 1, /**/ 1, 0, 1, 4, 1, /**/ 1, 0, 1, 4, 1, /**/ 9, 9, 9, 4, 9};
  cr_expect_arr_eq(host, want, sizeof host);
  /* fill of an expanded view writes the one element they share */
  mx_tensor *one = mx_zeros(MX_SHAPE(1), MX_F32, MX_CPU);
  cr_assert_eq(mx_fill_(mx_expand(one, MX_SHAPE(6)), 3), MX_OK);
  cr_expect_eq(mx_item(one), 3);
  mx_scope_end(s);
}

Test(views, copy_through_views_reaches_base) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_zeros(MX_SHAPE(3, 3), MX_F64, MX_CPU);
  mx_tensor *src = mx_from_data((double[]){1, 2, 3}, MX_SHAPE(3), MX_F64, MX_CPU);
  cr_assert_eq(mx_copy_(mx_select(x, 1, 1), src), MX_OK); /* column 1 */
  cr_assert_eq(mx_copy_(mx_slice(mx_select(x, 0, 0), 0, 0, 3, 2), mx_scalar(-1, MX_F64, MX_CPU)), MX_OK);
  double host[9];
  cr_assert_eq(mx_to_host(x, host, sizeof host), MX_OK);
  const double want[9] = {-1, 1, -1, 0, 2, 0, 0, 3, 0};
  cr_expect_arr_eq(host, want, sizeof host);
  mx_scope_end(s);
}

Test(views, version_counts_in_place_writes_for_all_views) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  mx_tensor *t = mx_transpose(x, 0, 1);
  mx_tensor *r = mx_select(x, 0, 1);
  mx_tensor *other = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  cr_expect_eq(mx_version(x), 0);
  cr_expect_eq(mx_version(t), 0);
  uint64_t v0 = mx_version(x);
  cr_assert_eq(mx_fill_(r, 1), MX_OK);
  uint64_t v1 = mx_version(x);
  cr_expect_gt(v1, v0, "fill_ bumps the version");
  cr_expect_eq(mx_version(t), v1);
  cr_expect_eq(mx_version(r), v1);
  cr_assert_eq(mx_set(t, MX_SHAPE(0, 0), 2), MX_OK);
  uint64_t v2 = mx_version(r);
  cr_expect_gt(v2, v1, "mx_set through a view bumps the shared version");
  cr_expect_eq(mx_version(x), v2);
  cr_assert_eq(mx_copy_(x, mx_ones(MX_SHAPE(3), MX_F32, MX_CPU)), MX_OK);
  uint64_t v3 = mx_version(t);
  cr_expect_gt(v3, v2, "copy_ bumps the version");
  /* new views see the same counter */
  cr_expect_eq(mx_version(mx_reshape(x, MX_SHAPE(6))), v3);
  /* reads and new views do not bump it */
  (void)mx_at(x, MX_SHAPE(1, 1));
  (void)mx_item(mx_select(r, 0, 0));
  (void)mx_contiguous(t);
  float host[6];
  cr_assert_eq(mx_to_host(t, host, sizeof host), MX_OK);
  cr_expect_eq(mx_version(x), v3);
  /* another storage is untouched, and writing it leaves x alone */
  cr_expect_eq(mx_version(other), 0);
  cr_assert_eq(mx_fill_(other, 5), MX_OK);
  cr_expect_eq(mx_version(x), v3);
  /* a clone has its own counter */
  mx_tensor *c = mx_clone(x);
  uint64_t cv = mx_version(c);
  cr_assert_eq(mx_fill_(x, 0), MX_OK);
  cr_expect_eq(mx_version(c), cv);
  /* a failed write does not count */
  uint64_t before = mx_version(x);
  mx_clear_error();
  cr_expect_neq(mx_copy_(x, mx_ones(MX_SHAPE(4), MX_F32, MX_CPU)), MX_OK);
  cr_expect_neq(mx_set(x, MX_SHAPE(5, 0), 1), MX_OK);
  mx_clear_error();
  cr_expect_eq(mx_version(x), before);
  mx_scope_end(s);
}
