/* Autocast's policy table, and one op of each policy at work in a bfloat16
 * region, traced: which inputs were cast to what, and the output's dtype.
 *
 *     build/examples/amp/policies
 */
#include <mixgrad.h>
#include <stdio.h>
#include <string.h>

/* The table as data: every op's policy, grouped by policy. */
static void print_table(void) {
  const mx_cast_policy order[] = {MX_CAST_LOWER, MX_CAST_FP32, MX_CAST_PROMOTE, MX_CAST_BANNED, MX_CAST_NONE};
  for (int p = 0; p < 5; p++) {
    int n = 0, col = 0;
    for (int op = 0; op < mx_op_count(); op++) n += mx_autocast_policy(op) == order[p];
    printf("%s (%d):", mx_cast_policy_name(order[p]), n);
    col = 80; /* start a new line */
    for (int op = 0; op < mx_op_count(); op++) {
      if (mx_autocast_policy(op) != order[p]) continue;
      const char *name = mx_op_name(op);
      if (col + (int)strlen(name) + 1 > 78) col = printf("\n   ") - 1;
      col += printf(" %s", name);
    }
    printf("\n");
  }
}

int main(void) {
  mx_manual_seed(0);
  mx_scope *scope = mx_scope_begin();
  printf("The autocast policy of every op (%d ops):\n", mx_op_count());
  print_table();

  mx_tensor *a = mx_randn(MX_SHAPE(4, 4), MX_F32, MX_CPU, NULL);
  mx_tensor *b = mx_randn(MX_SHAPE(4, 4), MX_F32, MX_CPU, NULL);
  mx_tensor *h = mx_to_dtype(a, MX_BF16); /* made outside the region */
  mx_tensor *d = mx_to_dtype(a, MX_F64);
  mx_tensor *t = mx_rand(MX_SHAPE(4, 4), MX_F32, MX_CPU, NULL);

  printf("\nOne op per policy in a bfloat16 region (mx_amp_trace(stdout)):\n");
  mx_amp_trace(stdout); /* one line per op dispatched in an enabled region */
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    mx_matmul(a, b);        /* lower:   float32 inputs cast to bfloat16 */
    mx_softmax(h, 1);       /* float32: a bfloat16 input cast up */
    mx_atan2(h, b);         /* promote: the widest of bfloat16 and float32 */
    mx_atan2(h, h);         /*          all bfloat16 stays bfloat16 */
    mx_relu(a);             /* none:    runs in whatever it is given */
    mx_relu(h);
    mx_matmul(d, d);        /* float64 is never cast */
    mx_sum_dtype(h, MX_ALL_DIMS, false, MX_F64); /* an explicit dtype: not autocast */

    /* banned: binary_cross_entropy refuses to run in a region */
    mx_tensor *p = mx_sigmoid(a);
    mx_tensor *loss = mx_binary_cross_entropy(p, t, NULL, MX_REDUCTION_MEAN);
    printf("binary_cross_entropy -> %s\n  %s\n", loss ? "ran" : "NULL", mx_last_error());
    mx_clear_error();

    /* the policy can be changed at run time, for every thread */
    mx_autocast_set_policy("binary_cross_entropy", MX_CAST_FP32);
    printf("after mx_autocast_set_policy(\"binary_cross_entropy\", MX_CAST_FP32):\n");
    loss = mx_binary_cross_entropy(p, t, NULL, MX_REDUCTION_MEAN);
    printf("binary_cross_entropy -> %s, loss %.4f\n", loss ? "ran" : "NULL", loss ? mx_item(loss) : 0.0);
  }
  mx_amp_trace(NULL);

  printf("\nmx_autocast_print_policy_changes:\n");
  int n = mx_autocast_print_policy_changes(stdout);
  mx_autocast_reset_policies();
  printf("%d change(s); after mx_autocast_reset_policies: %d\n", n, mx_autocast_print_policy_changes(NULL));

  printf("\nOutside any region nothing is cast: matmul(float32, float32) -> %s\n",
         mx_dtype_name(mx_dtype_of(mx_matmul(a, b))));
  mx_scope_end(scope);
  return 0;
}
