/* The module tree: registration, lookup, dotted names, train/eval and forward dispatch. */
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "nn/nn_internal.h"
#include "tensor/tensor_impl.h"

/* One registered member: a tensor (parameter, buffer) or a child module. */
typedef struct {
  char *name;
  void *p;
} member;

typedef struct {
  member *at;
  int n, capacity;
} member_list;

/* A flattened view of the tree (every parameter, buffer or module with its dotted name), rebuilt after a
 * registration anywhere below. The names live in the module's pool, so they outlive a rebuild. */
typedef struct {
  void **item;
  const char **name;
  int n;
  bool valid;
} flat_list;

enum { PARAMS, BUFFERS, MODULES, N_FLAT };

struct mx_module {
  const mx_module_type *type;
  void *self;
  bool training;
  mx_module *parent;
  member_list params, buffers, children;
  flat_list flat[N_FLAT];
  char **pool; /* every dotted name handed out, freed with the module */
  int n_pool, pool_capacity;
  mx_module_output_hook output_hook; /* called after each forward in this module's tree */
  void *output_hook_ctx;
};

static _Thread_local mx__module_observer observer;
static _Thread_local void *observer_ctx;
static _Thread_local bool forward_error_named; /* a failing forward below already named its layer */

/* --- construction and destruction ------------------------------------------------------------------------------ */

mx_module *mx_module_new(const mx_module_type *type, void *self) {
  if (!type || !type->name || (!type->forward && !type->forward_n)) {
    if (type && type->free_self && self) type->free_self(self);
    mx__error(MX_INVALID_ARGUMENT, "mx_module_new: the type %s",
              !type ? "is NULL" : "needs a name and a forward (or forward_n)");
    return NULL;
  }
  mx_module *m = calloc(1, sizeof *m);
  if (!m) {
    if (type->free_self && self) type->free_self(self);
    mx__error(MX_OUT_OF_MEMORY, "mx_module_new: out of memory for a %s", type->name);
    return NULL;
  }
  m->type = type;
  m->self = self;
  m->training = true;
  return m;
}

mx_module *mx__module_alloc(const mx_module_type *type, size_t size) {
  void *self = calloc(1, size);
  if (!self) {
    mx__error(MX_OUT_OF_MEMORY, "mx_module_new: out of memory for a %s", type->name);
    return NULL;
  }
  return mx_module_new(type, self);
}

static void free_tree(mx_module *m) {
  for (int i = 0; i < m->params.n; i++) mx__decref(m->params.at[i].p), free(m->params.at[i].name);
  for (int i = 0; i < m->buffers.n; i++) mx__decref(m->buffers.at[i].p), free(m->buffers.at[i].name);
  for (int i = 0; i < m->children.n; i++) free_tree(m->children.at[i].p), free(m->children.at[i].name);
  free(m->params.at);
  free(m->buffers.at);
  free(m->children.at);
  for (int k = 0; k < N_FLAT; k++) free(m->flat[k].item), free(m->flat[k].name);
  for (int i = 0; i < m->n_pool; i++) free(m->pool[i]);
  free(m->pool);
  if (m->type->free_self && m->self) m->type->free_self(m->self);
  free(m);
}

void mx_module_free(mx_module *m) {
  if (!m) return;
  if (m->parent) {
    mx__error(MX_STATE_ERROR, "mx_module_free: this %s is a child of a %s; free the root module instead",
              m->type->name, m->parent->type->name);
    return;
  }
  free_tree(m);
}

void mx__module_free_orphan(mx_module *m) {
  if (m && !m->parent) free_tree(m);
}

void *mx_module_self(const mx_module *m) { return m ? m->self : NULL; }
const mx_module_type *mx_module_type_of(const mx_module *m) { return m ? m->type : NULL; }

/* --- registration ------------------------------------------------------------------------------------------------ */

static void *find(const member_list *l, const char *name) {
  for (int i = 0; i < l->n; i++)
    if (!strcmp(l->at[i].name, name)) return l->at[i].p;
  return NULL;
}

static mx_status check_name(const char *fn, const mx_module *m, const char *name) {
  if (!name) return mx__error(MX_NULL_INPUT, "%s: argument 'name' is NULL", fn);
  if (!*name) return mx__error(MX_INVALID_ARGUMENT, "%s: a name cannot be empty", fn);
  if (strchr(name, '.')) return mx__error(MX_INVALID_ARGUMENT, "%s: name '%s' cannot contain '.'", fn, name);
  const char *kind = find(&m->params, name) ? "parameter" : find(&m->buffers, name) ? "buffer"
                     : find(&m->children, name) ? "child" : NULL;
  if (kind)
    return mx__error(MX_INVALID_ARGUMENT, "%s: this %s already has a %s named '%s'", fn, m->type->name, kind, name);
  return MX_OK;
}

static mx_status push(const char *fn, member_list *l, const char *name, void *p) {
  if (l->n == l->capacity) {
    int capacity = l->capacity ? 2 * l->capacity : 4;
    member *grown = realloc(l->at, (size_t)capacity * sizeof *grown);
    if (!grown) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory registering '%s'", fn, name);
    l->at = grown;
    l->capacity = capacity;
  }
  char *copy = strdup(name);
  if (!copy) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory registering '%s'", fn, name);
  l->at[l->n++] = (member){copy, p};
  return MX_OK;
}

/* The flattened lists of m and of every module above it are stale. */
static void invalidate(mx_module *m) {
  for (; m; m = m->parent)
    for (int k = 0; k < N_FLAT; k++) m->flat[k].valid = false;
}

/* Whether t is a parameter or buffer of m or of a module below it. */
static bool holds(const mx_module *m, const mx_tensor *t) {
  for (int i = 0; i < m->params.n; i++)
    if (m->params.at[i].p == t) return true;
  for (int i = 0; i < m->buffers.n; i++)
    if (m->buffers.at[i].p == t) return true;
  for (int i = 0; i < m->children.n; i++)
    if (holds(m->children.at[i].p, t)) return true;
  return false;
}

static mx_status add_tensor(const char *fn, mx_module *m, const char *name, mx_tensor *t, bool parameter) {
  mx_status status = MX_OK;
  const mx_module *root = m;
  while (root && root->parent) root = root->parent;
  if (m && t && holds(root, t)) /* the tree owns it already: the caller has no handle to give */
    return mx__error(MX_INVALID_ARGUMENT, "%s: the tensor for '%s' is already registered in this module tree",
                     fn, name ? name : "(null)");
  if (!m || !t) {
    status = mx__null_input(fn, !m ? "m" : "t");
  } else if ((status = check_name(fn, m, name)) != MX_OK) {
  } else if (parameter && !mx_dtype_is_floating(mx_dtype_of(t))) {
    status = mx__error(MX_DTYPE_ERROR, "%s: parameter '%s' of %s must be floating point, got %s", fn, name,
                       m->type->name, mx_dtype_name(mx_dtype_of(t)));
  } else if (parameter && !mx_is_leaf(t)) {
    status = mx__error(MX_INVALID_ARGUMENT, "%s: parameter '%s' of %s is not a leaf (made by %s); register "
                       "mx_detach(t)", fn, name, m->type->name, mx_grad_fn_name(t));
  } else if (parameter && (status = mx_set_requires_grad(t, true)) != MX_OK) {
    mx__error_prefix(fn);
  } else if ((status = push(fn, parameter ? &m->params : &m->buffers, name, t)) == MX_OK) {
    mx__retain(t); /* the module's reference replaces the caller's handle */
    invalidate(m);
  }
  mx_release(t);
  return status;
}

mx_status mx_module_add_parameter(mx_module *m, const char *name, mx_tensor *t) {
  return add_tensor("mx_module_add_parameter", m, name, t, true);
}

mx_status mx_module_add_buffer(mx_module *m, const char *name, mx_tensor *t) {
  return add_tensor("mx_module_add_buffer", m, name, t, false);
}

mx_status mx_module_add_child(mx_module *m, const char *name, mx_module *child) {
  const char *fn = "mx_module_add_child";
  if (!m || !child) {
    mx_status status = mx__null_input(fn, !m ? "m" : "child");
    mx__module_free_orphan(child);
    return status;
  }
  if (child->parent)
    return mx__error(MX_STATE_ERROR, "%s: the %s to add as '%s' already belongs to a %s", fn, child->type->name,
                     name ? name : "(null)", child->parent->type->name);
  for (const mx_module *a = m; a; a = a->parent)
    if (a == child)
      return mx__error(MX_INVALID_ARGUMENT, "%s: adding this %s under itself would make a cycle", fn,
                       child->type->name);
  mx_status status = check_name(fn, m, name);
  if (status == MX_OK) status = push(fn, &m->children, name, child);
  if (status != MX_OK) {
    mx_module_free(child);
    return status;
  }
  child->parent = m;
  invalidate(m);
  return MX_OK;
}

/* --- lookup ---------------------------------------------------------------------------------------------------- */

/* The module that holds the last component of a dotted name, and that component; NULL when a child is missing. */
static const mx_module *holder(const mx_module *m, const char *name, const char **last) {
  const char *dot;
  while ((dot = strchr(name, '.'))) {
    const mx_module *next = NULL;
    size_t len = (size_t)(dot - name);
    for (int i = 0; i < m->children.n && !next; i++)
      if (strlen(m->children.at[i].name) == len && !strncmp(m->children.at[i].name, name, len))
        next = m->children.at[i].p;
    if (!next) return NULL;
    m = next;
    name = dot + 1;
  }
  *last = name;
  return m;
}

static void *lookup(const char *fn, const mx_module *m, const char *name, int kind) {
  if (!m || !name) {
    mx__null_input(fn, !m ? "m" : "name");
    return NULL;
  }
  const char *last;
  const mx_module *h = holder(m, name, &last);
  if (!h) return NULL;
  return find(kind == PARAMS ? &h->params : kind == BUFFERS ? &h->buffers : &h->children, last);
}

mx_tensor *mx_module_get_parameter(const mx_module *m, const char *name) {
  return lookup("mx_module_get_parameter", m, name, PARAMS);
}
mx_tensor *mx_module_get_buffer(const mx_module *m, const char *name) {
  return lookup("mx_module_get_buffer", m, name, BUFFERS);
}
mx_module *mx_module_get_child(const mx_module *m, const char *name) {
  return lookup("mx_module_get_child", m, name, MODULES);
}

int mx_module_num_children(const mx_module *m) { return m ? m->children.n : 0; }

mx_module *mx_module_child(const mx_module *m, int i, const char **name) {
  if (!m) {
    mx__null_input("mx_module_child", "m");
    return NULL;
  }
  if (i < 0 || i >= m->children.n) {
    mx__error(MX_INDEX_ERROR, "mx_module_child: index %d is out of range for a %s with %d children", i,
              m->type->name, m->children.n);
    return NULL;
  }
  if (name) *name = m->children.at[i].name;
  return m->children.at[i].p;
}

/* --- the flattened tree ---------------------------------------------------------------------------------------- */

/* The pooled copy of name (one per distinct name, kept until the module is freed), or NULL. */
static const char *pooled(mx_module *root, const char *name) {
  for (int i = 0; i < root->n_pool; i++)
    if (!strcmp(root->pool[i], name)) return root->pool[i];
  if (root->n_pool == root->pool_capacity) {
    int capacity = root->pool_capacity ? 2 * root->pool_capacity : 16;
    char **grown = realloc(root->pool, (size_t)capacity * sizeof *grown);
    if (!grown) return NULL;
    root->pool = grown;
    root->pool_capacity = capacity;
  }
  char *copy = strdup(name);
  if (copy) root->pool[root->n_pool++] = copy;
  return copy;
}

typedef struct {
  mx_module *root;
  flat_list *out;
  int kind, capacity;
  bool failed;
} flattener;

static void emit(flattener *f, void *item, const char *prefix, const char *name) {
  if (f->failed) return;
  if (f->out->n == f->capacity) {
    int capacity = f->capacity ? 2 * f->capacity : 16;
    void **items = realloc(f->out->item, (size_t)capacity * sizeof *items);
    if (items) f->out->item = items;
    const char **names = realloc(f->out->name, (size_t)capacity * sizeof *names);
    if (names) f->out->name = names;
    if (!items || !names) {
      f->failed = true;
      return;
    }
    f->capacity = capacity;
  }
  size_t len = strlen(prefix) + strlen(name) + 2;
  char *dotted = malloc(len);
  if (!dotted) {
    f->failed = true;
    return;
  }
  snprintf(dotted, len, "%s%s%s", prefix, *prefix && *name ? "." : "", name);
  const char *kept = pooled(f->root, dotted);
  free(dotted);
  if (!kept) {
    f->failed = true;
    return;
  }
  f->out->item[f->out->n] = item;
  f->out->name[f->out->n++] = kept;
}

/* Parameters and buffers: the module's own, then each child's in turn (named_parameters' order). Modules: the
 * module, then its children's trees (named_modules' order). */
static void walk(flattener *f, mx_module *m, const char *prefix) {
  if (f->kind == MODULES) emit(f, m, prefix, "");
  const member_list *own = f->kind == PARAMS ? &m->params : f->kind == BUFFERS ? &m->buffers : NULL;
  for (int i = 0; own && i < own->n; i++) emit(f, own->at[i].p, prefix, own->at[i].name);
  for (int i = 0; i < m->children.n && !f->failed; i++) {
    size_t len = strlen(prefix) + strlen(m->children.at[i].name) + 2;
    char *child_prefix = malloc(len);
    if (!child_prefix) {
      f->failed = true;
      return;
    }
    snprintf(child_prefix, len, "%s%s%s", prefix, *prefix ? "." : "", m->children.at[i].name);
    walk(f, m->children.at[i].p, child_prefix);
    free(child_prefix);
  }
}

static const flat_list *flat(const char *fn, const mx_module *cm, int kind) {
  if (!cm) {
    mx__null_input(fn, "m");
    return NULL;
  }
  mx_module *m = (mx_module *)cm; /* the cache is not part of the module's value */
  flat_list *l = &m->flat[kind];
  if (l->valid) return l;
  free(l->item), free(l->name);
  *l = (flat_list){0};
  flattener f = {.root = m, .out = l, .kind = kind};
  walk(&f, m, "");
  if (f.failed) {
    l->n = 0;
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory listing the members of a %s", fn, m->type->name);
    return NULL;
  }
  l->valid = true;
  return l;
}

static void *flat_at(const char *fn, const mx_module *m, int kind, int i, const char **name) {
  const flat_list *l = flat(fn, m, kind);
  if (!l) return NULL;
  if (i < 0 || i >= l->n) {
    mx__error(MX_INDEX_ERROR, "%s: index %d is out of range for a %s with %d %s", fn, i, m->type->name, l->n,
              kind == PARAMS ? "parameters" : kind == BUFFERS ? "buffers" : "modules");
    return NULL;
  }
  if (name) *name = l->name[i];
  return l->item[i];
}

int mx_module_num_parameters(const mx_module *m) {
  const flat_list *l = flat("mx_module_num_parameters", m, PARAMS);
  return l ? l->n : 0;
}
mx_tensor *mx_module_parameter(const mx_module *m, int i, const char **name) {
  return flat_at("mx_module_parameter", m, PARAMS, i, name);
}
int mx_module_num_buffers(const mx_module *m) {
  const flat_list *l = flat("mx_module_num_buffers", m, BUFFERS);
  return l ? l->n : 0;
}
mx_tensor *mx_module_buffer(const mx_module *m, int i, const char **name) {
  return flat_at("mx_module_buffer", m, BUFFERS, i, name);
}
int mx_module_num_modules(const mx_module *m) {
  const flat_list *l = flat("mx_module_num_modules", m, MODULES);
  return l ? l->n : 0;
}
mx_module *mx_module_module(const mx_module *m, int i, const char **name) {
  return flat_at("mx_module_module", m, MODULES, i, name);
}

int64_t mx_module_parameter_count(const mx_module *m) {
  const flat_list *l = flat("mx_module_parameter_count", m, PARAMS);
  int64_t count = 0;
  for (int i = 0; l && i < l->n; i++) count += mx_numel(l->item[i]);
  return count;
}

int64_t mx__module_own_parameter_count(const mx_module *m, int64_t *trainable) {
  int64_t count = 0, grad = 0;
  for (int i = 0; i < m->params.n; i++) {
    count += mx_numel(m->params.at[i].p);
    if (mx_requires_grad(m->params.at[i].p)) grad += mx_numel(m->params.at[i].p);
  }
  if (trainable) *trainable = grad;
  return count;
}

/* --- modes and forward ------------------------------------------------------------------------------------------ */

void mx_module_train(mx_module *m, bool training) {
  if (!m) return;
  m->training = training;
  for (int i = 0; i < m->children.n; i++) mx_module_train(m->children.at[i].p, training);
}

bool mx_module_is_training(const mx_module *m) { return m && m->training; }

void mx__module_observe(mx__module_observer fn, void *ctx, mx__module_observer *prev, void **prev_ctx) {
  if (prev) *prev = observer;
  if (prev_ctx) *prev_ctx = observer_ctx;
  observer = fn;
  observer_ctx = ctx;
}

/* Writes m's dotted name below its root into buf ("" for a root). */
static void path_of(const mx_module *m, char *buf, size_t size) {
  buf[0] = '\0';
  for (; m->parent; m = m->parent) {
    const char *name = "?";
    for (int i = 0; i < m->parent->children.n; i++)
      if (m->parent->children.at[i].p == m) name = m->parent->children.at[i].name;
    size_t len = strlen(buf), nlen = strlen(name);
    if (len + nlen + 2 > size) return;
    memmove(buf + nlen + (len ? 1 : 0), buf, len + 1);
    memcpy(buf, name, nlen);
    if (len) buf[nlen] = '.';
  }
}

void mx_module_set_output_hook(mx_module *m, mx_module_output_hook hook, void *ctx) {
  if (!m) return;
  m->output_hook = hook;
  m->output_hook_ctx = ctx;
}

/* Calls the output hooks of m and of its ancestors, each with m's dotted name below the hook's module. */
static void call_output_hooks(mx_module *m, const mx_tensor *out) {
  char path[256], below[256];
  for (mx_module *a = m; a; a = a->parent) {
    if (!a->output_hook) continue;
    path_of(m, path, sizeof path);
    path_of(a, below, sizeof below);
    size_t skip = strlen(below) + (*below && strlen(path) > strlen(below));
    a->output_hook(path + skip, m->type->name, out, a->output_hook_ctx);
  }
}

bool mx__module_observed(const mx_module *m) {
  if (observer) return true;
  for (const mx_module *a = m; a; a = a->parent)
    if (a->output_hook) return true;
  return false;
}

/* One call of m's forward (or forward_n) in a scope of its own: the outputs
 * are kept into the caller's scope, and a failure is named after the layer
 * once, by the innermost module that failed. */
static mx_status call_forward(mx_module *m, const char *fn, int n_in, const mx_tensor *const *in, int n_out,
                              mx_tensor **out) {
  for (int i = 0; i < n_out; i++) out[i] = NULL;
  mx_scope *scope = mx_scope_begin();
  if (!scope) return mx_last_status();
  forward_error_named = false;
  mx_status status;
  if (m->type->forward_n) {
    status = m->type->forward_n(m, n_in, in, n_out, out);
  } else {
    out[0] = m->type->forward(m, in[0]);
    status = out[0] ? MX_OK : mx_last_status();
  }
  for (int i = 0; i < n_out && status == MX_OK; i++)
    if (!out[i]) status = mx_last_status() != MX_OK ? mx_last_status() : MX_STATE_ERROR;
  if (status == MX_OK)
    for (int i = 0; i < n_out; i++) mx_keep(out[i]);
  mx_scope_end(scope); /* frees the outputs too when they were not kept */
  if (status != MX_OK) {
    for (int i = 0; i < n_out; i++) out[i] = NULL;
    if (!forward_error_named) {
      if (mx_last_status() == MX_OK)
        mx__error(MX_STATE_ERROR, "the forward of %s returned NULL without an error", m->type->name);
      char path[256], where[320];
      path_of(m, path, sizeof path);
      if (*path) snprintf(where, sizeof where, "%s: layer %s (%s)", fn, path, m->type->name);
      else snprintf(where, sizeof where, "%s: %s", fn, m->type->name);
      mx__error_prefix(where);
      forward_error_named = true;
    }
    return mx_last_status();
  }
  if (observer) observer(m, out[0], observer_ctx);
  call_output_hooks(m, out[0]);
  return MX_OK;
}

mx_tensor *mx_module_forward(mx_module *m, const mx_tensor *x) {
  if (!m || !x) {
    mx__null_input("mx_module_forward", !m ? "m" : "x");
    return NULL;
  }
  mx_tensor *y;
  return call_forward(m, "mx_module_forward", 1, &x, 1, &y) == MX_OK ? y : NULL;
}

mx_status mx_module_forward_n(mx_module *m, int n_in, const mx_tensor *const *in, int n_out, mx_tensor **out) {
  static const char *const fn = "mx_module_forward_n";
  if (!m || !in || !out) return mx__null_input(fn, !m ? "m" : !in ? "in" : "out");
  for (int i = 0; i < n_out; i++) out[i] = NULL;
  if (n_in < 1 || n_out < 1)
    return mx__error(MX_INVALID_ARGUMENT, "%s: %s takes at least one input and one output, got %d and %d", fn,
                     m->type->name, n_in, n_out);
  if (!m->type->forward_n && (n_in != 1 || n_out != 1))
    return mx__error(MX_INVALID_ARGUMENT, "%s: %s has a forward of one tensor to one (no forward_n), called with "
                     "%d inputs and %d outputs", fn, m->type->name, n_in, n_out);
  if (!m->type->forward_n && !in[0]) return mx__null_input(fn, "in[0]");
  return call_forward(m, fn, n_in, in, n_out, out);
}
