/* Internal: what the dataset readers share. */
#ifndef MX_DATA_DATA_INTERNAL_H
#define MX_DATA_DATA_INTERNAL_H

#include "data/data.h"

/* mx_dataset_new with errors named after op. */
mx_dataset *mx__dataset_new(const char *op, int64_t n, int c, int h, int w, int classes);

/* mx_idx_load with errors named after op. */
mx_dataset *mx__idx_load(const char *op, const char *images_path, const char *labels_path);

/* Checks that the n labels lie in 0..classes-1: "<op>: <path>: label 12 of
 * <item> 5 is outside 0..9". */
mx_status mx__labels_check(const char *op, const char *path, const uint8_t *labels, int64_t n,
                           int classes, const char *item);

/* Whether ds holds samples (bytes, floats or a get callback) of a valid
 * shape: MX_OK or "<op>: the dataset is empty (...)". */
mx_status mx__dataset_check(const char *op, const mx_dataset *ds);

#endif
