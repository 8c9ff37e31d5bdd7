/* State dicts and training checkpoints, each one safetensors file
 * (tensor/safetensors.h): written atomically, checked tensor by tensor when
 * read back.
 *
 *     mx_module_save(net, "net.safetensors");      // "fc1.weight", "bn.running_mean", ...
 *     if (mx_module_load(net, "net.safetensors") != MX_OK)
 *       fprintf(stderr, "%s\n", mx_last_error());
 *       // mx_module_load: net.safetensors: missing tensor 'fc2.bias'
 *
 *     mx_checkpoint ck = {net, opt, scaler, gen, schedule, step, epoch};
 *     mx_checkpoint_save("run.ckpt", &ck);          // every 1000 steps, say
 *     ...                                           // a new process:
 *     mx_checkpoint ck = {net, opt, scaler, gen, schedule};   // made as before
 *     mx_checkpoint_load("run.ckpt", &ck);          // ck.step, ck.epoch: where it stopped
 *
 * A state dict holds the module's parameters and buffers by their dotted
 * names. Loading checks all of them before it changes anything: every one
 * must be in the file with the module's shape and dtype, and the file may
 * hold nothing else.
 *
 * A training checkpoint holds what a run needs to go on exactly as if it
 * had never stopped: the model's tensors ("model.<name>"), the optimizer's
 * state per parameter ("optimizer.<i>.<state>", step counts included, by
 * PyTorch's names: mx_optimizer_state) and its hyper-parameters per group,
 * the GradScaler's scale and growth tracker, the generator's (seed,
 * offset), the LR schedule's state ("schedule.state") and the caller's step
 * and epoch; numbers that are not tensors are metadata, printed so that
 * they read back bit for bit. Loading restores them into objects made the
 * way the saved ones were (same model, optimizer kind and groups, schedule
 * kind). A part given as NULL is not saved, and not restored (what the file
 * holds of it is ignored), except the generator: NULL is the default one.
 * Everything is checked before anything changes; on a failure past the
 * checks (an invalid hyper-parameter in the file) what was changed is put
 * back.
 *
 * A checkpoint may also hold the settings that define its run, as text:
 * what the training program was told (model, optimizer, epochs, ...) and
 * what it read (its data's identity), each as metadata "run.<key>". A
 * program reads them back with mx_checkpoint_settings_read before it
 * resumes, to refuse a resume that would change the run; mx_checkpoint_load
 * itself ignores them.
 *
 *     const char *keys[] = {"model", "epochs"}, *values[] = {"cnn", "3"};
 *     mx_checkpoint_settings run = {2, keys, values};
 *     mx_checkpoint_save_with_settings("run.ckpt", &ck, &run);
 *     ...
 *     mx_checkpoint_settings saved;
 *     if (mx_checkpoint_settings_read("run.ckpt", &saved) == MX_OK) {
 *       ...                                       // saved.n == 0: none (an older file)
 *       mx_checkpoint_settings_free(&saved);
 *     }
 */
#ifndef MX_DATA_CHECKPOINT_H
#define MX_DATA_CHECKPOINT_H

#include "amp/scaler.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

MX_API_BEGIN

/* The module's parameters and buffers (torch.save(m.state_dict())). */
mx_status mx_module_save(const mx_module *m, const char *path);
/* Copies them back into m (load_state_dict, strict). */
mx_status mx_module_load(mx_module *m, const char *path);

/* Settings as text: n keys (non-empty, distinct) and their values. */
typedef struct {
  int n;
  const char **keys, **values;
} mx_checkpoint_settings;

typedef struct {
  mx_module *model;        /* required */
  mx_optimizer *optimizer; /* NULL: none */
  mx_scaler *scaler;       /* NULL: none */
  mx_generator *generator; /* NULL: the default generator */
  mx_schedule *schedule;   /* NULL: none */
  int64_t step, epoch;     /* the caller's counters, saved and restored */
} mx_checkpoint;

mx_status mx_checkpoint_save(const char *path, const mx_checkpoint *ckpt);
/* The same with the run's settings (NULL: none); loading ignores them. */
mx_status mx_checkpoint_save_with_settings(const char *path, const mx_checkpoint *ckpt,
                                           const mx_checkpoint_settings *settings);
mx_status mx_checkpoint_load(const char *path, mx_checkpoint *ckpt);

/* The run settings the training checkpoint at path was saved with, in
 * their order (out->n 0 when it holds none). The strings are copies the
 * caller frees with mx_checkpoint_settings_free. */
mx_status mx_checkpoint_settings_read(const char *path, mx_checkpoint_settings *out);
/* Frees what mx_checkpoint_settings_read gave (and zeroes *s). */
void mx_checkpoint_settings_free(mx_checkpoint_settings *s);

MX_API_END

#endif
