/* Autocast: per-thread regions and the dispatcher's autocast layer, which
 * applies each op's policy to its inputs (PyTorch's torch.autocast). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp_internal.h"

/* --- regions ------------------------------------------------------------------------ */

enum { N_DEVICE_TYPES = MX_DEVICE_COUNT, MAX_DEPTH = 64 };

typedef struct {
  bool enabled[N_DEVICE_TYPES];
  mx_dtype dtype[N_DEVICE_TYPES];
  bool cache_enabled;
  int backward_depth; /* regions reach only the backward level they opened at */
  mx_status failed;   /* MX_OK, or why an MX_AUTOCAST block's region could not begin */
} autocast_state;

#define OUTSIDE {{false, false}, {MX_BF16, MX_F16}, true, 0, MX_OK}
static const autocast_state outside = OUTSIDE;

/* This thread's regions, and the op between the layer's before and after. */
typedef struct {
  autocast_state current;
  autocast_state saved[MAX_DEPTH + 1]; /* + 1: a failed region opened at the limit */
  int depth;
  char failed_message[512]; /* the error of the innermost failed region */
  mx__trace_record pending;
  bool tracing_pending;
} thread_state;

static _Thread_local thread_state thread = {.current = OUTSIDE};

/* Out of line so that each function computes the address once (see
 * tensor/object_cache.c: each computation is a call to __tls_get_addr). */
__attribute__((noinline)) static thread_state *this_thread(void) { return &thread; }

static autocast_state *state(void) { return &this_thread()->current; }

static bool valid_device(mx_device device) { return device == MX_CPU || device == MX_CUDA; }

mx_status mx_autocast_begin(mx_device device_type, mx_dtype dtype, bool enabled, bool cache_enabled) {
  if (!valid_device(device_type))
    return mx__error(MX_INVALID_ARGUMENT, "mx_autocast_begin: device_type %d is not MX_CPU or MX_CUDA",
                     (int)device_type);
  if (dtype == MX_AUTOCAST_DEFAULT_DTYPE) dtype = outside.dtype[device_type];
  if (!enabled && dtype != MX_F16 && dtype != MX_BF16) dtype = state()->dtype[device_type]; /* unused: keep */
  if (dtype != MX_F16 && dtype != MX_BF16)
    return mx__error(MX_DTYPE_ERROR, "mx_autocast_begin: autocast dtype must be float16 or bfloat16, got %s",
                     mx_dtype_name(dtype));
  thread_state *t = this_thread();
  if (t->depth >= MAX_DEPTH)
    return mx__error(MX_STATE_ERROR, "mx_autocast_begin: more than %d nested autocast regions", MAX_DEPTH);
  autocast_state *s = &t->current;
  t->saved[t->depth++] = *s;
  s->enabled[device_type] = enabled;
  s->dtype[device_type] = dtype;
  s->cache_enabled = cache_enabled;
  s->backward_depth = mx__backward_depth();
  return MX_OK;
}

mx_status mx_autocast_end(void) {
  thread_state *t = this_thread();
  if (t->depth == 0) return mx__error(MX_STATE_ERROR, "mx_autocast_end: no autocast region is open");
  t->current = t->saved[--t->depth];
  if (t->depth == 0) mx__cast_cache_clear();
  return MX_OK;
}

mx_autocast_state mx_autocast_state_get(void) {
  const autocast_state *s = state();
  mx_autocast_state out = {.cache_enabled = s->cache_enabled};
  for (int d = 0; d < N_DEVICE_TYPES; d++) out.enabled[d] = s->enabled[d], out.dtype[d] = s->dtype[d];
  return out;
}

mx_status mx_autocast_begin_state(const mx_autocast_state *wanted) {
  if (!wanted) return mx__null_input("mx_autocast_begin_state", "state");
  for (int d = 0; d < N_DEVICE_TYPES; d++)
    if (wanted->dtype[d] != MX_F16 && wanted->dtype[d] != MX_BF16)
      return mx__error(MX_DTYPE_ERROR, "mx_autocast_begin_state: autocast dtype must be float16 or bfloat16, got "
                       "%s for device type %d", mx_dtype_name(wanted->dtype[d]), d);
  thread_state *t = this_thread();
  if (t->depth >= MAX_DEPTH)
    return mx__error(MX_STATE_ERROR, "mx_autocast_begin_state: more than %d nested autocast regions", MAX_DEPTH);
  t->saved[t->depth++] = t->current;
  autocast_state *s = &t->current;
  for (int d = 0; d < N_DEVICE_TYPES; d++) s->enabled[d] = wanted->enabled[d], s->dtype[d] = wanted->dtype[d];
  s->cache_enabled = wanted->cache_enabled;
  s->backward_depth = mx__backward_depth();
  return MX_OK;
}

/* MX_AUTOCAST's block runs exactly once, so that the compiler can see every
 * variable assigned in it is set (a block that may be skipped makes GCC
 * warn -Wmaybe-uninitialized in user code). When its region cannot begin,
 * a failed region opens instead, in which every op fails with that error:
 * the block's results are NULL, as after any failed op, and the error
 * names the cause. Inside a failed region at the nesting limit, the
 * enclosing failed region already makes every op fail. */
bool mx__autocast_guard_open(mx_device device_type, mx_dtype dtype, bool enabled, bool cache_enabled) {
  mx_status status = mx_autocast_begin(device_type, dtype, enabled, cache_enabled);
  if (status == MX_OK) return true;
  thread_state *t = this_thread();
  if (t->depth > MAX_DEPTH) return false;
  snprintf(t->failed_message, sizeof t->failed_message, "%s", mx_last_error());
  t->saved[t->depth++] = t->current;
  t->current.failed = status;
  return true;
}

void mx__autocast_guard_end(mx_autocast_guard *guard) {
  if (guard->begun) mx_autocast_end();
  guard->begun = false;
}

mx_status mx_autocast_run(mx_device device_type, mx_dtype dtype, bool enabled, bool cache_enabled,
                          mx_status (*fn)(void *ctx), void *ctx) {
  if (!fn) return mx__null_input("mx_autocast_run", "fn");
  mx_status status = mx_autocast_begin(device_type, dtype, enabled, cache_enabled);
  if (status != MX_OK) return status;
  status = fn(ctx);
  mx_autocast_end();
  return status;
}

bool mx_autocast_is_enabled(mx_device device_type) {
  return valid_device(device_type) && state()->enabled[device_type];
}

mx_dtype mx_autocast_dtype(mx_device device_type) {
  return valid_device(device_type) ? state()->dtype[device_type] : MX_DTYPE_COUNT;
}

bool mx_autocast_is_cache_enabled(void) { return state()->cache_enabled; }

int mx_autocast_depth(void) { return this_thread()->depth; }

/* --- the policy table: the op table's column, with run-time overrides ---------------- */

static _Atomic unsigned char overrides[MX_OP_COUNT]; /* policy + 1; 0: the default */

mx_cast_policy mx_autocast_policy(int op) {
  if (op < 0 || op >= MX_OP_COUNT) return MX_CAST_NONE;
  unsigned char o = atomic_load_explicit(&overrides[op], memory_order_relaxed);
  return o ? (mx_cast_policy)(o - 1) : mx__ops[op].policy;
}

mx_status mx_autocast_set_policy(const char *op_name, mx_cast_policy policy) {
  if (!op_name) return mx__null_input("mx_autocast_set_policy", "op_name");
  if ((unsigned)policy > MX_CAST_BANNED)
    return mx__error(MX_INVALID_ARGUMENT, "mx_autocast_set_policy: %d is not a policy", (int)policy);
  for (int op = 0; op < MX_OP_COUNT; op++) {
    if (strcmp(mx__ops[op].name, op_name) != 0) continue;
    atomic_store(&overrides[op], (unsigned char)(policy == mx__ops[op].policy ? 0 : policy + 1));
    return MX_OK;
  }
  return mx__error(MX_INVALID_ARGUMENT, "mx_autocast_set_policy: no op named \"%s\" (docs/ops.md lists them)",
                   op_name);
}

void mx_autocast_reset_policies(void) {
  for (int op = 0; op < MX_OP_COUNT; op++) atomic_store(&overrides[op], 0);
}

int mx_autocast_print_policy_changes(FILE *out) {
  int changes = 0;
  for (int op = 0; op < MX_OP_COUNT; op++) {
    mx_cast_policy now = mx_autocast_policy(op);
    if (now == mx__ops[op].policy) continue;
    changes++;
    if (out)
      fprintf(out, "%s: %s -> %s\n", mx__ops[op].name, mx_cast_policy_name(mx__ops[op].policy),
              mx_cast_policy_name(now));
  }
  return changes;
}

/* --- the layer ------------------------------------------------------------------------ */

/* The device type of a call: its inputs' (0-d CPU tensors join any). */
static mx_device call_device(int n_in, mx_tensor *const *in) {
  for (int i = 0; i < n_in; i++)
    if (in[i]->ndim > 0 || in[i]->device != MX_CPU) return in[i]->device;
  return MX_CPU;
}

/* Only floating, non-float64 tensors on the region's device are cast; C
 * scalars turned into tensors never are. */
static bool eligible(const mx_tensor *t, mx_device device) {
  return mx_dtype_is_floating(t->dtype) && t->dtype != MX_F64 && t->device == device && !t->wrapped_number;
}

/* The ops whose caller may name the dtype to compute in (mx_sum_dtype,
 * mx_softmax_dtype, mx_log_softmax_dtype): such calls are not autocast. */
static bool explicit_dtype(mx_op op, const mx__args *args) {
  bool takes_dtype = op == MX_OP_SUM || op == MX_OP_SOFTMAX || op == MX_OP_LOG_SOFTMAX;
  return takes_dtype && args && args->dtype != MX_DTYPE_COUNT;
}

/* The cache holds casts of weights (float32 leaves that require grad) to
 * the region's lower dtype, PyTorch's rule. */
static bool cacheable(const mx_tensor *t, mx_dtype to, const autocast_state *s, mx_device device) {
  return s->cache_enabled && to == s->dtype[device] && t->dtype == MX_F32 && mx_requires_grad(t) &&
         mx_is_leaf(t);
}

static atomic_llong prepared_casts_used;

int64_t mx__amp_prepared_casts_used(void) { return atomic_load(&prepared_casts_used); }

/* A weight's cast for the cache: the one the optimizer step wrote when it
 * is still of the weight's data (tensor_impl.h: prepared casts), else a
 * conversion; the same graph node and bits either way. The weight is
 * marked, so that the next step writes one. */
static mx_tensor *cast_weight(mx_tensor *t, mx_dtype to) {
  mx__prepared_cast_want(t, to);
  mx_tensor *ready = mx__prepared_cast_take(t, to);
  if (!ready) return mx_to_dtype(t, to);
  mx_tensor *c = mx__to_dtype_precomputed(t, ready);
  mx__decref(ready);
  if (c) atomic_fetch_add(&prepared_casts_used, 1);
  return c;
}

/* t cast to `to` for this call (in the call's scope), through the cache. */
static mx_tensor *cast(mx_tensor *t, mx_dtype to, const autocast_state *s, mx_device device, mx__cast_kind *kind) {
  int64_t bytes = mx_numel(t) * (int64_t)mx_dtype_size(to);
  if (!cacheable(t, to, s, device)) {
    *kind = MX__CAST_MADE;
    mx__amp_count_cast(bytes, false);
    return mx_to_dtype(t, to);
  }
  mx_tensor *hit = mx__cast_cache_find(t, to);
  if (hit) {
    *kind = MX__CAST_CACHE_HIT;
    mx__amp_count_cast(bytes, true);
    return hit;
  }
  /* recorded even under MX_NO_GRAD, so a later use with grad on still
   * reaches the weight (PyTorch issue 158232) */
  mx_tensor *c = NULL;
  MX_ENABLE_GRAD { c = cast_weight(t, to); }
  if (!c || mx__cast_cache_add(t, to, c) != MX_OK) return NULL;
  *kind = MX__CAST_CACHED;
  mx__amp_count_cast(bytes, false);
  return c;
}

/* PROMOTE: PyTorch's prioritize(), input by input from the region's dtype:
 * float32 wins over the region's dtype, the region's dtype with itself stays
 * (float64 is not eligible, so it is skipped). The other 16-bit dtype met
 * before any float32 is an error, as in PyTorch ("Unexpected floating
 * ScalarType in at::autocast::prioritize"): float16 and bfloat16 have no
 * common 16-bit type, and silently computing in float32 would hide a model
 * whose tensors disagree. MX_DTYPE_COUNT after the error. */
static mx_dtype widest(mx_op op, int n_in, mx_tensor *const *in, mx_dtype lower, mx_device device) {
  mx_dtype current = lower;
  for (int i = 0; i < n_in && current != MX_F32; i++) {
    if (!eligible(in[i], device)) continue;
    mx_dtype next = in[i]->dtype;
    if (next == MX_F32) {
      current = MX_F32;
    } else if (next != lower) {
      mx__error(MX_DTYPE_ERROR, "mx_%s: autocast cannot promote input %d, %s, with %s (the %s region's dtype): "
                "float16 and bfloat16 have no common type under the promote policy (PyTorch: \"Unexpected floating "
                "ScalarType in at::autocast::prioritize\"); cast the inputs to one dtype first",
                mx__ops[op].name, i, mx_dtype_name(next), mx_dtype_name(lower), mx_dtype_name(lower));
      return MX_DTYPE_COUNT;
    }
  }
  return current;
}

static mx_status banned(mx_op op) {
  return mx__error(MX_DTYPE_ERROR,
                   "mx_%s: unsafe to autocast. Models often apply a sigmoid right before binary cross "
                   "entropy, and in float16 that pair loses precision and can overflow. Combine the two "
                   "with mx_binary_cross_entropy_with_logits, which is safe to autocast, or call this op "
                   "outside the region (or in a region with enabled = false)",
                   mx__ops[op].name);
}

static mx_status before(mx_op op, int n_in, mx_tensor **in, const mx__args *args) {
  thread_state *t = this_thread();
  t->tracing_pending = false;
  if (t->depth == 0) return MX_OK;
  const autocast_state *s = &t->current;
  if (s->failed != MX_OK)
    return mx__error(s->failed, "mx_%s: not run: its MX_AUTOCAST region could not begin (%s)", mx__ops[op].name,
                     t->failed_message);
  if (n_in == 0) return MX_OK;
  mx_device device = call_device(n_in, in);
  if (!valid_device(device) || !s->enabled[device] || s->backward_depth != mx__backward_depth()) return MX_OK;

  mx__trace_record *r = &t->pending;
  *r = (mx__trace_record){.op = op, .policy = mx_autocast_policy(op), .explicit_dtype = explicit_dtype(op, args),
                          .n_in = n_in < MX__TRACE_MAX_INPUTS ? n_in : MX__TRACE_MAX_INPUTS};
  for (int i = 0; i < r->n_in; i++) r->in_dtype[i] = in[i]->dtype, r->in_scalar[i] = in[i]->wrapped_number;
  t->tracing_pending = true;
  if (r->explicit_dtype) return MX_OK;

  mx_dtype to;
  switch (r->policy) {
  case MX_CAST_LOWER: to = s->dtype[device]; break;
  case MX_CAST_FP32: to = MX_F32; break;
  case MX_CAST_PROMOTE:
    to = widest(op, n_in, in, s->dtype[device], device);
    if (to == MX_DTYPE_COUNT) return mx_last_status();
    break;
  case MX_CAST_BANNED: return banned(op);
  default: return MX_OK;
  }
  for (int i = 0; i < n_in; i++) {
    if (!eligible(in[i], device) || in[i]->dtype == to) continue;
    mx__cast_kind kind;
    mx_tensor *c = cast(in[i], to, s, device, &kind);
    if (!c) return mx_last_status();
    in[i] = c;
    if (i < MX__TRACE_MAX_INPUTS) r->cast_to[i] = to, r->cast[i] = kind;
  }
  return MX_OK;
}

static void after(mx_op op, int n_out, mx_tensor *const *out, mx_status status) {
  thread_state *t = this_thread();
  if (!t->tracing_pending || t->pending.op != op) return;
  t->tracing_pending = false;
  mx__amp_trace_op(&t->pending, n_out, out, status);
}

static const mx__autocast_hooks hooks = {before, after, mx__amp_note_via_f32};

/* The layer joins the dispatcher when the library loads. */
__attribute__((constructor)) static void install(void) { mx__autocast = &hooks; }
