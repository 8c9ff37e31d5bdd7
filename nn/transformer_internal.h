/* What the Transformer layers share with MultiheadAttention (nn/attention.c, nn/transformer.c). */
#ifndef MX_NN_TRANSFORMER_INTERNAL_H
#define MX_NN_TRANSFORMER_INTERNAL_H

#include "nn/transformer.h"

/* The attention of the MultiheadAttention m (its type already checked) for query, key and value (key NULL:
 * the query; value NULL: the key) under mask (NULL: none); errors name no function, the caller prefixes it. */
mx_tensor *mx__multihead_attention(mx_module *m, const mx_tensor *query, const mx_tensor *key,
                                   const mx_tensor *value, const mx_attention_mask *mask);

/* Runs apply(m, ctx) in a scope of its own, keeping its result into the caller's scope; a failure is prefixed
 * with fn. For the typed forwards, which mx_module_forward does not reach. */
mx_tensor *mx__typed_forward(const char *fn, mx_module *m, mx_tensor *(*apply)(mx_module *m, void *ctx), void *ctx);

#endif
