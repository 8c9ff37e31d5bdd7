/* libFuzzer's entry point for one target, named by MX_FUZZ_TARGET at
 * compile time (fuzz/meson.build makes one executable per target). */
#include "fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  (void)MX_FUZZ_TARGET(data, size);
  return 0;
}
