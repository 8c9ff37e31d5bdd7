/* Grad mode (whether ops record a graph) and the end of an inference-mode
 * block, per thread. */
#include "autograd/autograd.h"

static _Thread_local bool grad_disabled; /* zero-initialised: on by default */

bool mx_is_grad_enabled(void) { return !grad_disabled; }

bool mx_set_grad_enabled(bool enabled) {
  bool previous = !grad_disabled;
  grad_disabled = !enabled;
  return previous;
}

void mx__grad_guard_end(mx_grad_guard *guard) { mx_set_grad_enabled(guard->previous); }

void mx__inference_guard_end(mx_inference_guard *guard) {
  mx__inference_mode_set(guard->previous_inference);
  mx_set_grad_enabled(guard->previous_grad);
}
