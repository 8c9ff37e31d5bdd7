/* The GPT demo's text: fortune files read into tokens, split into training and validation text, and windows. */
#include "examples/gpt/text.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A folder of text is at most this big (fortune's is 2.7 MB): a mistaken --data stops early. */
#define MAX_TEXT_BYTES (256ll << 20)

int mx_gpt_token(int c) {
  if (c == '\t') c = ' ';
  if (c >= ' ' && c <= '~') return c - ' ';
  return c == '\n' ? MX_GPT_VOCAB - 1 : -1;
}

char mx_gpt_char(int t) { return t == MX_GPT_VOCAB - 1 ? '\n' : (char)(' ' + t); }

/* A growing token buffer. */
typedef struct {
  uint8_t *v;
  int64_t n, cap;
} buffer;

static int push(buffer *b, const uint8_t *v, int64_t n) {
  if (b->n + n > b->cap) {
    int64_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->n + n) cap *= 2;
    uint8_t *p = realloc(b->v, (size_t)cap);
    if (!p) return -1;
    b->v = p, b->cap = cap;
  }
  memcpy(b->v + b->n, v, (size_t)n);
  b->n += n;
  return 0;
}

/* Splits the characters of one file into fortunes at the lines "%"; every tenth fortune, counted over all
 * files by *count, goes to val. Each fortune keeps its "%" line after it, so both texts read like fortune files. */
static int split(const char *s, size_t len, int64_t *count, buffer *train, buffer *val) {
  uint8_t *tokens = malloc(len ? len : 1);
  if (!tokens) return -1;
  size_t start = 0;
  while (start < len) {
    size_t end = start; /* just past the fortune's "%\n" line, or the end of the file */
    for (;;) {
      const char *nl = memchr(s + end, '\n', len - end);
      size_t line_end = nl ? (size_t)(nl - s) + 1 : len;
      bool sep = line_end - end == 2 && s[end] == '%';
      end = line_end;
      if (sep || end == len) break;
    }
    int64_t n = 0;
    for (size_t i = start; i < end; i++) {
      int t = mx_gpt_token((unsigned char)s[i]);
      if (t >= 0) tokens[n++] = (uint8_t)t;
    }
    if (n && push((*count)++ % 10 == 9 ? val : train, tokens, n)) {
      free(tokens);
      return -1;
    }
    start = end;
  }
  free(tokens);
  return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int mx_gpt_text_load(const char *dir, mx_gpt_text *text) {
  *text = (mx_gpt_text){0};
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "gpt: --data %s: %s\n", dir, strerror(errno));
    return -1;
  }
  char **names = NULL;
  size_t n_names = 0, cap = 0;
  int rc = 0;
  for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
    if (strchr(e->d_name, '.')) continue; /* ".", "..", fortune's .dat and .u8 */
    if (n_names == cap) {
      cap = cap ? 2 * cap : 64;
      char **p = realloc(names, cap * sizeof *names);
      if (!p) rc = -1;
      else names = p;
    }
    if (rc == 0 && !(names[n_names++] = strdup(e->d_name))) rc = -1;
  }
  closedir(d);
  if (rc == 0 && n_names) qsort(names, n_names, sizeof *names, by_name);
  buffer train = {0}, val = {0};
  int64_t fortunes = 0, total = 0;
  for (size_t i = 0; rc == 0 && i < n_names; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue; /* folders and the like */
    if ((total += st.st_size) > MAX_TEXT_BYTES) {
      fprintf(stderr, "gpt: --data %s: more than %lld MiB of text\n", dir, MAX_TEXT_BYTES >> 20);
      rc = -2;
      break;
    }
    FILE *f = fopen(path, "rb");
    char *s = f ? malloc((size_t)st.st_size + 1) : NULL;
    size_t got = s ? fread(s, 1, (size_t)st.st_size, f) : 0;
    if (!f || !s || got != (size_t)st.st_size) {
      fprintf(stderr, "gpt: %s: %s\n", path, !f ? strerror(errno) : !s ? "out of memory" : "could not be read whole");
      rc = -2;
    } else if (split(s, got, &fortunes, &train, &val)) {
      rc = -1;
    }
    if (f) fclose(f);
    free(s);
    text->files += rc == 0;
  }
  for (size_t i = 0; i < n_names; i++) free(names[i]);
  free(names);
  if (rc == -1) fprintf(stderr, "gpt: --data %s: out of memory\n", dir);
  else if (rc == 0 && (train.n < 1024 || val.n < 256)) {
    fprintf(stderr, "gpt: --data %s: too little text (%lld training and %lld validation characters in %d files; the "
            "demo needs 1024 and 256)\n", dir, (long long)train.n, (long long)val.n, text->files);
    rc = -2;
  }
  if (rc) {
    free(train.v);
    free(val.v);
    *text = (mx_gpt_text){0};
    return -1;
  }
  text->train = train.v, text->n_train = train.n, text->val = val.v, text->n_val = val.n;
  return 0;
}

/* splitmix64: a well-mixed 64-bit function of its input. */
static uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int mx_gpt_text_synthetic(int64_t n, uint64_t seed, mx_gpt_text *text) {
  static const char *const subjects[] = {"The cat", "A dog", "My friend", "The old man", "Nobody"};
  static const char *const verbs[] = {"sees", "likes", "finds", "remembers", "forgets"};
  static const char *const objects[] = {"the moon.", "a red ball.", "the sea.", "his hat.", "the answer."};
  char *s = malloc((size_t)n + 64);
  if (!s) {
    fprintf(stderr, "gpt: --synthetic %lld: out of memory\n", (long long)n);
    return -1;
  }
  int64_t len = 0;
  for (uint64_t k = 0; len < n; k++) {
    uint64_t r = mix(seed ^ mix(k));
    len += snprintf(s + len, 64, "%s %s %s\n%s", subjects[r % 5], verbs[(r >> 8) % 5], objects[(r >> 16) % 5],
                    (r >> 24) % 3 == 0 ? "%\n" : "");
  }
  *text = (mx_gpt_text){0};
  buffer train = {0}, val = {0};
  int64_t fortunes = 0;
  int rc = split(s, (size_t)len, &fortunes, &train, &val);
  free(s);
  if (rc || train.n < 1024 || val.n < 256) {
    fprintf(stderr, "gpt: --synthetic %lld: %s\n", (long long)n, rc ? "out of memory" : "too little text");
    free(train.v);
    free(val.v);
    return -1;
  }
  text->train = train.v, text->n_train = train.n, text->val = val.v, text->n_val = val.n;
  return 0;
}

void mx_gpt_text_free(mx_gpt_text *text) {
  free(text->train);
  free(text->val);
  *text = (mx_gpt_text){0};
}

void mx_gpt_windows(const uint8_t *tokens, const int64_t *start, int64_t batch, int64_t ctx, mx_tensor **x,
                    mx_tensor **y) {
  int64_t *xv = malloc(sizeof *xv * (size_t)(batch * ctx)), *yv = malloc(sizeof *yv * (size_t)(batch * ctx));
  *x = *y = NULL;
  if (xv && yv) {
    for (int64_t b = 0; b < batch; b++)
      for (int64_t t = 0; t < ctx; t++) {
        xv[b * ctx + t] = tokens[start[b] + t];
        yv[b * ctx + t] = tokens[start[b] + t + 1];
      }
    *x = mx_from_data(xv, MX_SHAPE(batch, ctx), MX_I64, MX_CPU);
    *y = mx_from_data(yv, MX_SHAPE(batch, ctx), MX_I64, MX_CPU);
  }
  free(xv);
  free(yv);
}

int64_t mx_gpt_window_start(uint64_t seed, int64_t step, int64_t i, int64_t n, int64_t ctx) {
  uint64_t r = mix(mix(seed) ^ mix(((uint64_t)step << 20) ^ (uint64_t)i));
  return (int64_t)(r % (uint64_t)(n - ctx));
}
