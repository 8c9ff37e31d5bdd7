/* The character-level GPT demo's text: plain-text files read into tokens (one per printable ASCII character and
 * newline), split into training and validation text, and the windows a step trains on. */
#ifndef MX_EXAMPLES_GPT_TEXT_H
#define MX_EXAMPLES_GPT_TEXT_H

#include <stdint.h>

#include "mixgrad.h"

/* Tokens 0..94 are the characters ' '..'~', 95 is the newline. */
#define MX_GPT_VOCAB 96

typedef struct {
  uint8_t *train, *val; /* tokens */
  int64_t n_train, n_val;
  int files; /* read */
} mx_gpt_text;

/* The token of character c (a tab reads as a space), or -1 for characters the vocabulary lacks (backspaces of
 * overstruck text, bytes of UTF-8 sequences), which are dropped. */
int mx_gpt_token(int c);
/* The character of token t. */
char mx_gpt_char(int t);

/* Reads every plain-text file of dir (by name order; names with a '.', such as fortune's .dat indexes and .u8
 * links, are skipped) as fortunes separated by lines holding '%' alone, and puts every tenth fortune in the
 * validation text. 0, or -1 after a message on stderr naming the folder or file. */
int mx_gpt_text_load(const char *dir, mx_gpt_text *text);
/* n characters of generated text instead (sentences from a small grammar drawn by seed), split the same way. */
int mx_gpt_text_synthetic(int64_t n, uint64_t seed, mx_gpt_text *text);
void mx_gpt_text_free(mx_gpt_text *text);

/* A batch of the windows starting at start[0..batch): x (batch, ctx) their tokens and y (batch, ctx) the next
 * ones, int64 on the CPU; every start + ctx < n. */
void mx_gpt_windows(const uint8_t *tokens, const int64_t *start, int64_t batch, int64_t ctx, mx_tensor **x,
                    mx_tensor **y);
/* The start of window i of training step `step` of a run with seed: uniform in [0, n - ctx), a function of
 * (seed, step, i) alone, so a resumed run draws the very windows it would have. */
int64_t mx_gpt_window_start(uint64_t seed, int64_t step, int64_t i, int64_t n, int64_t ctx);

#endif
