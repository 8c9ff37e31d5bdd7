#include "amp_suite.h"

static mx_scope *scope;

void amp_suite_open(void) {
  scope = mx_scope_begin();
  mx_amp_report_reset();
}

void amp_suite_close(void) {
  while (mx_autocast_depth() > 0) mx_autocast_end();
  mx_autocast_reset_policies();
  mx_scope_end(scope);
}
