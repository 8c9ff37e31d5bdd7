/* The GPT demo's model, shared with the benchmark (bench/gpt_step.c): a decoder-only Transformer over characters
 * (token and learned position embeddings, pre-norm encoder layers under a causal mask, a final layer norm and a
 * linear head), and sampling from it with a temperature and top-k. */
#ifndef MX_EXAMPLES_GPT_MODEL_H
#define MX_EXAMPLES_GPT_MODEL_H

#include "mixgrad.h"

typedef struct {
  const char *name;
  int64_t vocab, ctx, d_model, heads, layers, dim_feedforward;
  double dropout;
} mx_gpt_config;

/* The configurations the demo offers by name ("small", "tiny"); NULL for another name. */
const mx_gpt_config *mx_gpt_config_named(const char *name);

/* The model: logits (N, L, vocab) from int64 tokens (N, L), L <= ctx. Parameters drawn from the default
 * generator; NULL with the error set. Children tok_emb, pos_emb, blocks (blocks.0, ...), norm, head. */
mx_module *mx_gpt_new(const mx_gpt_config *c);
/* on: training forwards keep no activations inside the blocks; backward
 * runs each block again (mx_activation_checkpoint), gradients unchanged. */
void mx_gpt_checkpoint_blocks(mx_module *gpt, bool on);

/* n tokens sampled after prompt[0..n_prompt) (at least 1), each from the softmax of the last position's logits
 * divided by temperature, over the top_k most likely tokens (0: all), drawn from gen. The model runs in eval mode
 * without gradients, on the device of its parameters. The tokens go to out[0..n). MX_OK or the error. */
mx_status mx_gpt_sample(mx_module *gpt, const int64_t *prompt, int64_t n_prompt, int64_t n, double temperature,
                        int64_t top_k, mx_generator *gen, int64_t *out);

#endif
