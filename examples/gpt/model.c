/* The GPT demo's model and sampling. */
#include "examples/gpt/model.h"

#include <stdlib.h>
#include <string.h>

#include "examples/gpt/text.h"

/* small: about a minute of training on 2 cores for the demo's default run; tiny: for tests. */
static const mx_gpt_config configs[] = {
    {.name = "small", .vocab = MX_GPT_VOCAB, .ctx = 64, .d_model = 128, .heads = 4, .layers = 4,
     .dim_feedforward = 512, .dropout = 0.0},
    {.name = "tiny", .vocab = MX_GPT_VOCAB, .ctx = 32, .d_model = 32, .heads = 2, .layers = 2, .dim_feedforward = 64,
     .dropout = 0.0},
};

const mx_gpt_config *mx_gpt_config_named(const char *name) {
  for (size_t i = 0; i < sizeof configs / sizeof *configs; i++)
    if (!strcmp(configs[i].name, name)) return &configs[i];
  return NULL;
}

/* What a GPT module keeps besides its children. */
typedef struct {
  bool checkpoint_blocks; /* each block recomputed in backward instead of keeping its activations */
} gpt_self;

/* One causal block, as mx_activation_checkpoint calls it: user is the block. */
static mx_status run_block(void *user, int n_in, mx_tensor *const *in, int n_out, mx_tensor **out) {
  mx_attention_mask causal = {.is_causal = true};
  out[0] = mx_transformer_encoder_layer_forward(user, in[0], &causal);
  return out[0] ? MX_OK : mx_last_status();
}

static mx_tensor *gpt_forward(mx_module *m, const mx_tensor *idx) {
  const gpt_self *self = mx_module_self(m);
  mx_tensor *h = mx_module_forward(mx_module_get_child(m, "pos_emb"),
                                   mx_module_forward(mx_module_get_child(m, "tok_emb"), idx));
  mx_module *blocks = mx_module_get_child(m, "blocks");
  mx_attention_mask causal = {.is_causal = true};
  bool recompute = self->checkpoint_blocks && mx_is_grad_enabled();
  for (int i = 0; h && i < mx_module_num_children(blocks); i++) {
    mx_module *block = mx_module_child(blocks, i, NULL);
    if (!recompute) {
      h = mx_transformer_encoder_layer_forward(block, h, &causal);
    } else {
      mx_tensor *out = NULL;
      h = mx_activation_checkpoint(run_block, block, 1, &h, 1, &out, NULL) == MX_OK ? out : NULL;
    }
  }
  return mx_module_forward(mx_module_get_child(m, "head"), mx_module_forward(mx_module_get_child(m, "norm"), h));
}

static const mx_module_type gpt_type = {.name = "GPT", .forward = gpt_forward, .free_self = free};

void mx_gpt_checkpoint_blocks(mx_module *gpt, bool on) { ((gpt_self *)mx_module_self(gpt))->checkpoint_blocks = on; }

mx_module *mx_gpt_new(const mx_gpt_config *c) {
  gpt_self *self = calloc(1, sizeof *self);
  mx_module *m = self ? mx_module_new(&gpt_type, self) : NULL, *blocks = mx_sequential_new(0, NULL);
  mx_transformer_opts o = mx_transformer_defaults();
  o.dim_feedforward = c->dim_feedforward, o.dropout = c->dropout, o.activation = MX_TRANSFORMER_GELU;
  o.norm_first = true; /* GPT-2's pre-norm blocks */
  mx_module *tok = mx_embedding_new(c->vocab, c->d_model, MX_NO_PADDING_IDX, NULL);
  bool ok = m && blocks && tok && mx_init_normal_(mx_module_get_parameter(tok, "weight"), 0.0, 0.02, NULL) == MX_OK;
  if (ok) {
    ok = mx_module_add_child(m, "tok_emb", tok) == MX_OK; /* m takes tok, even on failure */
    tok = NULL;
  }
  ok = ok && mx_module_add_child(m, "pos_emb", mx_positional_embedding_new(c->ctx, c->d_model, NULL)) == MX_OK;
  for (int64_t i = 0; ok && i < c->layers; i++)
    ok = mx_sequential_append(blocks, mx_transformer_encoder_layer_new(c->d_model, c->heads, &o, NULL)) == MX_OK;
  if (ok) {
    ok = mx_module_add_child(m, "blocks", blocks) == MX_OK;
    blocks = NULL;
  }
  ok = ok && mx_module_add_child(m, "norm", mx_layer_norm_new(MX_SHAPE(c->d_model), 1e-5, true)) == MX_OK &&
       mx_module_add_child(m, "head", mx_linear_new(c->d_model, c->vocab, true, NULL)) == MX_OK;
  if (!ok) {
    mx_module_free(tok);
    mx_module_free(blocks);
    mx_module_free(m);
    return NULL;
  }
  return m;
}

/* One token after ctx tokens (1, len): from the last position's logits over the top k, at temperature. */
static int64_t next_token(mx_module *gpt, const mx_tensor *window, double temperature, int64_t top_k,
                          mx_generator *gen) {
  mx_tensor *logits = mx_module_forward(gpt, window); /* (1, len, vocab) */
  if (!logits) return -1;
  mx_tensor *last = mx_select(mx_select(logits, 0, 0), 0, mx_size(logits, 1) - 1); /* (vocab) */
  int64_t vocab = mx_size(logits, 2), k = top_k > 0 && top_k < vocab ? top_k : vocab;
  mx_tensor *values, *indices;
  if (mx_topk(mx_to_dtype(last, MX_F32), k, 0, true, true, &values, &indices) != MX_OK) return -1;
  mx_tensor *pick = mx_multinomial(mx_softmax(mx_div_scalar(values, temperature), 0), 1, false, gen);
  return pick ? (int64_t)mx_item(mx_index_select(indices, 0, pick)) : -1;
}

mx_status mx_gpt_sample(mx_module *gpt, const int64_t *prompt, int64_t n_prompt, int64_t n, double temperature,
                        int64_t top_k, mx_generator *gen, int64_t *out) {
  int64_t ctx = mx_size(mx_module_get_parameter(gpt, "pos_emb.weight"), 0);
  mx_device device = mx_device_of(mx_module_parameter(gpt, 0, NULL));
  int64_t *seq = malloc(sizeof *seq * (size_t)(n_prompt + n));
  if (!seq) return MX_OUT_OF_MEMORY;
  memcpy(seq, prompt, sizeof *seq * (size_t)n_prompt);
  bool training = mx_module_is_training(gpt);
  mx_module_train(gpt, false);
  mx_status status = MX_OK;
  for (int64_t i = 0; i < n && status == MX_OK; i++) {
    int64_t len = n_prompt + i < ctx ? n_prompt + i : ctx;
    mx_scope *s = mx_scope_begin();
    MX_NO_GRAD {
      mx_tensor *window = mx_to_device(mx_from_data(seq + n_prompt + i - len, MX_SHAPE(1, len), MX_I64, MX_CPU),
                                       device);
      int64_t t = window ? next_token(gpt, window, temperature, top_k, gen) : -1;
      if (t < 0) status = mx_last_status();
      else seq[n_prompt + i] = out[i] = t;
    }
    mx_scope_end(s);
  }
  mx_module_train(gpt, training);
  free(seq);
  return status;
}
