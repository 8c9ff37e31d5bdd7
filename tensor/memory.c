/* Allocation statistics per device, and emptying the allocators' caches. */
#include "tensor/tensor_impl.h"

typedef struct {
  atomic_llong bytes_in_use, peak_bytes, live_tensors, live_storages, allocations;
} device_stats;

static device_stats stats[MX_DEVICE_COUNT];

void mx__stats_storage(mx_device device, int64_t bytes_delta, int storages_delta) {
  device_stats *s = &stats[device];
  long long now = atomic_fetch_add(&s->bytes_in_use, bytes_delta) + bytes_delta;
  long long peak = atomic_load(&s->peak_bytes);
  while (now > peak && !atomic_compare_exchange_weak(&s->peak_bytes, &peak, now)) {
  }
  atomic_fetch_add(&s->live_storages, storages_delta);
  if (storages_delta > 0) atomic_fetch_add(&s->allocations, storages_delta);
}

void mx__stats_tensor(mx_device device, int delta) { atomic_fetch_add(&stats[device].live_tensors, delta); }

mx_memory_stats mx_memory_stats_get(mx_device device) {
  if ((unsigned)device >= MX_DEVICE_COUNT) return (mx_memory_stats){0};
  device_stats *s = &stats[device];
  return (mx_memory_stats){
      .bytes_in_use = atomic_load(&s->bytes_in_use),
      .peak_bytes = atomic_load(&s->peak_bytes),
      .live_tensors = atomic_load(&s->live_tensors),
      .live_storages = atomic_load(&s->live_storages),
      .allocations = atomic_load(&s->allocations),
  };
}

void mx_memory_reset_peak(mx_device device) {
  if ((unsigned)device >= MX_DEVICE_COUNT) return;
  atomic_store(&stats[device].peak_bytes, atomic_load(&stats[device].bytes_in_use));
}

mx_status mx_memory_empty_cache(mx_device device) {
  const mx_backend *backend = mx__backend(device);
  if (!backend) return mx__error_prefix("mx_memory_empty_cache");
  return backend->empty_cache ? backend->empty_cache() : MX_OK;
}
