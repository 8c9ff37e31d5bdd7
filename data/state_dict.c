/* State dicts: a module's parameters and buffers in a safetensors file, by
 * their dotted names; loading is strict and checks before it copies. */
#include "data/checkpoint_internal.h"

mx_status mx_module_save(const mx_module *m, const char *path) {
  const char *fn = "mx_module_save";
  if (!m || !path) return mx__null_input(fn, m ? "path" : "m");
  mx__ckpt_writer w = {0};
  mx_status status = mx__ckpt_add_module(fn, &w, m, "");
  if (status == MX_OK) status = mx__ckpt_write(fn, &w, path);
  mx__ckpt_writer_free(&w);
  return status;
}

mx_status mx_module_load(mx_module *m, const char *path) {
  const char *fn = "mx_module_load";
  if (!m || !path) return mx__null_input(fn, m ? "path" : "m");
  mx__ckpt_reader r;
  mx_status status = mx__ckpt_open(&r, fn, path);
  if (status != MX_OK) return status;
  status = mx__ckpt_check_module(&r, m, "");
  if (status == MX_OK) status = mx__ckpt_check_unused(&r, 0, NULL);
  if (status == MX_OK) status = mx__ckpt_copy_module(&r, m, "");
  mx__ckpt_close(&r);
  return status;
}
