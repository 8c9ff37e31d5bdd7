/* The optimizer object behind optim/optimizer.h, shared by its core and the
 * built-in types (not installed). */
#ifndef MX_OPTIM_OPTIMIZER_INTERNAL_H
#define MX_OPTIM_OPTIMIZER_INTERNAL_H

#include "optim/optimizer.h"
#include "tensor/tensor_impl.h"

#define MX__OPTIM_NAME_MAX 63 /* the longest hyper-parameter or state name */

/* One named state tensor of a parameter (the optimizer's reference). */
typedef struct {
  char *name;
  mx_tensor *tensor;
} mx__optim_state;

typedef struct {
  int n, capacity;
  mx__optim_state *states; /* in the order they were registered */
} mx__optim_slot;

typedef struct {
  int first, n;      /* the optimizer's parameters first .. first + n */
  double *h;         /* the hyper-parameters, in the type's order */
  double initial_lr; /* the lr before an LR schedule changed it (PyTorch's 'initial_lr'); NAN: none yet */
} mx__optim_group;

struct mx_optimizer {
  const mx_optimizer_type *type;
  void *self;
  mx_device device;
  int n_groups, n_params;
  mx__optim_group *groups;
  mx_tensor **params;    /* references of the optimizer's own, group after group */
  mx__optim_slot *slots; /* each parameter's state */
  double *defaults;      /* the hyper-parameters given at creation, for groups added with NULL */
  int lr, momentum;      /* their indices among the hyper-parameters (momentum -1: none) */
  bool stepping;         /* inside the type's step: no state may be registered */
};

/* mx_optimizer_new and mx_optimizer_add_group, naming fn in errors. */
mx_optimizer *mx__optimizer_new(const char *fn, const mx_optimizer_type *type, void *self, int n_params,
                                mx_tensor *const *params, const double *h);
mx_status mx__optimizer_add_group(const char *fn, mx_optimizer *opt, int n_params, mx_tensor *const *params,
                                  const double *h);
/* mx_optimizer_set_hparams, naming fn in errors. */
mx_status mx__optimizer_set_hparams(const char *fn, mx_optimizer *opt, int group, const double *h);
/* Group i (NULL with the error set, naming fn, when out of range). */
mx__optim_group *mx__optimizer_group(const char *fn, const mx_optimizer *opt, int group);
/* Parameter i's state `name` (borrowed), or NULL (no error set). */
mx_tensor *mx__optimizer_find_state(const mx_optimizer *opt, int i, const char *name);
/* Drops the states of parameters first .. first + n registered after the
 * first counts[j] (NULL counts: all). */
void mx__optimizer_drop_states(mx_optimizer *opt, int first, int n, const int *counts);

#endif
