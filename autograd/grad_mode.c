/* Grad mode: whether ops record a graph, per thread. */
#include "autograd/autograd.h"

static _Thread_local bool grad_disabled; /* zero-initialised: on by default */

bool mx_is_grad_enabled(void) { return !grad_disabled; }

bool mx_set_grad_enabled(bool enabled) {
  bool previous = !grad_disabled;
  grad_disabled = !enabled;
  return previous;
}

mx_grad_guard mx__grad_guard_begin(bool enabled) {
  return (mx_grad_guard){.previous = mx_set_grad_enabled(enabled), .once = true};
}

void mx__grad_guard_end(mx_grad_guard *guard) { mx_set_grad_enabled(guard->previous); }
