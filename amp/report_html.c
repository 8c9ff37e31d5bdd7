/* The AMP report: one self-contained HTML page (XHTML syntax, inline SVG,
 * no script, nothing fetched) drawn from an mx_amp_stats watcher and this
 * thread's autocast counts (amp/stats.h, docs/AMP.md section 9). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp_internal.h"
#include "amp/stats_internal.h"
#include "tensor/output_file.h"

/* --- reading a histogram -------------------------------------------------------------- */

#define BIN_OF(e) ((e)-MX_AMP_HIST_EXP_MIN)

/* A 16-bit format's zones by binary exponent: values with exponent below
 * flush_below round to zero, below normal_from are subnormal, from
 * overflow_from on overflow to inf. */
typedef struct {
  const char *name;
  int flush_below, normal_from, overflow_from;
  int view_min, view_max; /* the exponents a chart shows */
  int ticks[4];           /* the exponents its axis labels */
} format_zones;

/* float16: 2^-24 is the smallest subnormal (|v| < 2^-25 rounds to zero), 2^-14
 * the smallest normal, 65504 the largest (|v| >= 2^16 is inf). bfloat16: 2^-133,
 * 2^-126, and float32's top (only float32's inf overflows). */
static const format_zones f16_zones = {"float16", -25, -14, 16, -44, 20, {-25, -14, 0, 16}};
static const format_zones bf16_zones = {"bfloat16", -134, -126, 128, -149, 127, {-126, -64, 0, 64}};

static int64_t total_of(const int64_t *h) {
  int64_t n = 0;
  for (int b = 0; b < MX_AMP_HIST_BINS; b++) n += h[b];
  return n;
}

/* Values with |v| < 2^e (zeros included). */
static int64_t count_below(const int64_t *h, int e) {
  int64_t n = h[MX_AMP_HIST_ZERO];
  for (int x = MX_AMP_HIST_EXP_MIN; x < e && x <= MX_AMP_HIST_EXP_MAX; x++) n += h[BIN_OF(x)];
  return n;
}

/* Values with |v| >= 2^e, inf and NaN included. */
static int64_t count_from(const int64_t *h, int e) {
  int64_t n = h[MX_AMP_HIST_INF] + h[MX_AMP_HIST_NAN];
  for (int x = e < MX_AMP_HIST_EXP_MIN ? MX_AMP_HIST_EXP_MIN : e; x <= MX_AMP_HIST_EXP_MAX; x++) n += h[BIN_OF(x)];
  return n;
}

static double share(int64_t part, int64_t whole) { return whole ? 100.0 * (double)part / (double)whole : 0.0; }

/* A share as the page prints it everywhere: "12.34%", and a tiny nonzero one in full ("0.00153%"), never as 0.00%. */
typedef struct {
  char s[32];
} pct_text;

static pct_text pct(double v) {
  pct_text t;
  snprintf(t.s, sizeof t.s, v == 0 || v >= 0.005 ? "%.2f%%" : "%.3g%%", v);
  return t;
}

/* The histogram of v / 2^shift: exponents move down by shift (zero, inf and NaN stay). */
static void shifted(const int64_t *h, int shift, int64_t *out) {
  memset(out, 0, sizeof *out * MX_AMP_HIST_BINS);
  for (int e = MX_AMP_HIST_EXP_MIN; e <= MX_AMP_HIST_EXP_MAX; e++) {
    int to = e - shift;
    if (to < MX_AMP_HIST_EXP_MIN)
      out[MX_AMP_HIST_ZERO] += h[BIN_OF(e)]; /* below float32: zero */
    else if (to > MX_AMP_HIST_EXP_MAX)
      out[MX_AMP_HIST_INF] += h[BIN_OF(e)];
    else
      out[BIN_OF(to)] += h[BIN_OF(e)];
  }
  for (int b = MX_AMP_HIST_ZERO; b < MX_AMP_HIST_BINS; b++) out[b] += h[b];
}

/* log2 of the scale, rounded (exact for the powers of two the GradScaler keeps by default). */
static int scale_exponent(double scale) { return scale > 0 ? (int)lround(log2(scale)) : 0; }

/* --- output ---------------------------------------------------------------------------- */

static void esc(FILE *f, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    case '\'': fputs("&#39;", f); break;
    default:
      if ((unsigned char)*s >= 0x20 || *s == '\n' || *s == '\t') fputc(*s, f);
    }
  }
}

static const char *const css =
    "body{font-family:sans-serif;margin:1.5em auto;max-width:1180px;color:#222}"
    "h1{font-size:1.5em}h2{font-size:1.25em;border-bottom:1px solid #ccc;margin-top:1.6em}h3{font-size:1.05em}"
    "table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;"
    "text-align:right}td.l,th.l{text-align:left}.charts{display:flex;flex-wrap:wrap;gap:4px 18px}"
    "figure{margin:4px 0}figcaption{font-size:.78em;max-width:400px}.legend span{display:inline-block;"
    "width:12px;height:12px;margin:0 4px 0 10px;vertical-align:middle}ul.verdict li{margin:.3em 0}"
    "code{background:#f3f3f3;padding:0 3px}";

/* zone colours: flushed to zero, subnormal, normal, overflow */
static const char *const zone_fill[4] = {"#f4c7c3", "#fce8b2", "#d9ead3", "#e6b8d7"};
#define SCALED_COLOUR "#3b6fb6"
#define TRUE_COLOUR "#e07b00"

#define CHART_W 380
#define CHART_H 130
#define PAD_L 34
#define PAD_B 26

/* One histogram chart over fmt's view: the zones, then the bars of a
 * (and of b, when given) as shares of their values, with zero at the
 * left and inf/NaN at the right. */
static void chart(FILE *f, const format_zones *z, const int64_t *a, const int64_t *b) {
  int n_exp = z->view_max - z->view_min + 1, slots = n_exp + 3; /* zero | exponents | inf | NaN */
  double plot_w = CHART_W - PAD_L - 6, slot = plot_w / slots, top = 8, base = CHART_H - PAD_B;
  int64_t ta = total_of(a), tb = b ? total_of(b) : 0;
  double peak = 1e-9;
  const int64_t *series[2] = {a, b};
  int64_t totals[2] = {ta, tb};
  for (int s = 0; s < 2; s++)
    for (int k = 0; series[s] && k < slots; k++) {
      int bin = k == 0           ? MX_AMP_HIST_ZERO
                : k == slots - 2 ? MX_AMP_HIST_INF
                : k == slots - 1 ? MX_AMP_HIST_NAN
                                 : BIN_OF(z->view_min + k - 1);
      int64_t c = series[s][bin];
      if (k == 1) c += count_below(series[s], z->view_min) - series[s][MX_AMP_HIST_ZERO]; /* clipped below */
      if (k == slots - 3)
        c += count_from(series[s], z->view_max + 1) - series[s][MX_AMP_HIST_INF] - series[s][MX_AMP_HIST_NAN];
      double v = totals[s] ? (double)c / (double)totals[s] : 0;
      if (v > peak && k > 0) peak = v; /* zeros (a ReLU's, say) would flatten the rest: their bar is capped */
    }
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">",
          CHART_W, CHART_H, CHART_W, CHART_H);
  /* zones: [view_min, flush_below), [flush_below, normal_from), [normal_from, overflow_from), [overflow_from, max] */
  int edges[5] = {z->view_min, z->flush_below, z->normal_from, z->overflow_from, z->view_max + 1};
  for (int k = 0; k < 4; k++) {
    int lo = edges[k] < z->view_min ? z->view_min : edges[k],
        hi = edges[k + 1] > z->view_max + 1 ? z->view_max + 1 : edges[k + 1];
    if (hi <= lo) continue;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>",
            PAD_L + slot * (lo - z->view_min + 1), top, slot * (hi - lo), base - top, zone_fill[k]);
  }
  fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>", PAD_L + slot * (slots - 2),
          top, slot * 2, base - top, zone_fill[3]); /* inf and NaN */
  for (int s = 0; s < 2; s++) {
    if (!series[s]) continue;
    fprintf(f, "<g fill=\"%s\" fill-opacity=\"%s\">", s ? TRUE_COLOUR : SCALED_COLOUR, b ? "0.7" : "0.9");
    for (int k = 0; k < slots; k++) {
      int bin = k == 0           ? MX_AMP_HIST_ZERO
                : k == slots - 2 ? MX_AMP_HIST_INF
                : k == slots - 1 ? MX_AMP_HIST_NAN
                                 : BIN_OF(z->view_min + k - 1);
      int64_t c = series[s][bin];
      if (k == 1) c += count_below(series[s], z->view_min) - series[s][MX_AMP_HIST_ZERO];
      if (k == slots - 3)
        c += count_from(series[s], z->view_max + 1) - series[s][MX_AMP_HIST_INF] - series[s][MX_AMP_HIST_NAN];
      if (!c) continue;
      double h = (base - top) * ((double)c / (double)totals[s]) / peak;
      if (h > base - top) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"8\">%.0f%%</text>", PAD_L + slot * k + 2, top + 8 + 9 * s,
                100.0 * (double)c / (double)totals[s]);
        h = base - top;
      }
      fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>", PAD_L + slot * k, base - h,
              slot > 1.5 ? slot - 0.5 : slot, h < 0.6 ? 0.6 : h);
    }
    fputs("</g>", f);
  }
  /* axes and labels: 2^e ticks at the zone edges */
  fprintf(f,
          "<g stroke=\"#555\" stroke-width=\"0.8\"><line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
          "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/></g>",
          PAD_L, base, PAD_L + plot_w, base, PAD_L, top, PAD_L, base);
  fprintf(f, "<g font-size=\"9\" fill=\"#333\" text-anchor=\"middle\">");
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">0</text>", PAD_L + slot * 0.5, base + 10);
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">inf NaN</text>", PAD_L + slot * (slots - 1), base + 10);
  const int *ticks = z->ticks;
  double last_label = PAD_L + slot * 0.5;
  for (int k = 0; k < 4; k++) {
    double x = PAD_L + slot * (ticks[k] - z->view_min + 1);
    if (x - last_label < 30) continue;
    last_label = x;
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">2^%d</text>", PAD_L + slot * (ticks[k] - z->view_min + 1), base + 10,
            ticks[k]);
  }
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">|value|, %s zones</text>", PAD_L + plot_w / 2, base + 21, z->name);
  fprintf(f, "</g><text x=\"2\" y=\"14\" font-size=\"9\" fill=\"#333\">%.0f%%</text>", 100 * peak);
  fputs("</svg>", f);
}

/* "a: 12.34% below 2^-14, 0.01% flushed, 0.00% overflow" for fmt. */
static void zone_caption(FILE *f, const char *label, const int64_t *h, const format_zones *z) {
  int64_t t = total_of(h);
  fprintf(f, "%s: %s zero or subnormal, %s flushed to zero, %s overflow in %s", label,
          pct(share(count_below(h, z->normal_from), t)).s, pct(share(count_below(h, z->flush_below), t)).s,
          pct(share(count_from(h, z->overflow_from), t)).s, z->name);
}

/* The pair of charts (float16 view, bfloat16 view) of one site. */
static void chart_pair(FILE *f, const char *title, const int64_t *a, const char *a_label, const int64_t *b,
                       const char *b_label) {
  const format_zones *views[2] = {&f16_zones, &bf16_zones};
  for (int v = 0; v < 2; v++) {
    fputs("<figure>", f);
    chart(f, views[v], a, b);
    fputs("<figcaption><b>", f);
    esc(f, title);
    fputs("</b>: ", f);
    zone_caption(f, a_label, a, views[v]);
    if (b) {
      fputs("; ", f);
      zone_caption(f, b_label, b, views[v]);
    }
    fputs("</figcaption></figure>", f);
  }
}

/* --- the page's parts --------------------------------------------------------------------- */

typedef struct {
  const mx__amp_snapshot *s;
  int moment[3]; /* sample indices: start, settled, end (-1: none) */
  const char *moment_name[3];
  int64_t settle_step; /* the first step after the opening run of skipped steps */
} page;

static void pick_moments(page *p) {
  const mx__amp_snapshot *s = p->s;
  p->moment_name[0] = "start", p->moment_name[1] = "after the scale settled", p->moment_name[2] = "end";
  p->moment[0] = p->moment[1] = p->moment[2] = -1;
  p->settle_step = 0;
  while (p->settle_step < s->steps && s->skipped[p->settle_step]) p->settle_step++;
  if (!s->n_samples) return;
  p->moment[0] = 0;
  p->moment[2] = s->n_samples > 1 ? s->n_samples - 1 : -1;
  for (int i = 1; i < s->n_samples - 1 && p->moment[1] < 0; i++)
    if (s->samples[i].step > p->settle_step) p->moment[1] = i;
}

static void trajectory(FILE *f, const page *p) {
  const mx__amp_snapshot *s = p->s;
  fputs("<section id=\"trajectory\"><h2>Loss scale and loss</h2>", f);
  if (!s->steps) {
    fputs("<p>No steps were recorded.</p></section>", f);
    return;
  }
  int W = 1100, H = 190, L = 50, R = 12, T = 10, B = 24;
  double lo = 1e300, hi = -1e300, loss_hi = 0;
  int64_t skipped = 0;
  for (int64_t t = 0; t < s->steps; t++) {
    double e = log2(s->scale[t] > 0 ? s->scale[t] : 1);
    lo = e < lo ? e : lo, hi = e > hi ? e : hi;
    if (isfinite(s->loss[t]) && s->loss[t] > loss_hi) loss_hi = s->loss[t];
    skipped += s->skipped[t];
  }
  lo = floor(lo) - 1, hi = ceil(hi) + 1;
  double xs = (double)(W - L - R) / (double)(s->steps > 1 ? s->steps - 1 : 1);
#define X(t) (L + xs * (double)(t))
#define Y_SCALE(e) (T + (H - T - B) * (hi - (e)) / (hi - lo))
  fprintf(f, "<p>%lld steps; %lld skipped for inf/NaN gradients (red); the scale the step used, log2 axis.</p>",
          (long long)s->steps, (long long)skipped);
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">"
          "<g font-size=\"10\" fill=\"#333\">",
          W, H, W, H);
  for (int e = (int)lo; e <= (int)hi; e += (hi - lo) > 12 ? 4 : 1)
    fprintf(f,
            "<text x=\"4\" y=\"%.1f\">2^%d</text><line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eee\"/>",
            Y_SCALE(e) + 3, e, L, Y_SCALE(e), W - R, Y_SCALE(e));
  fputs("</g><polyline fill=\"none\" stroke=\"" SCALED_COLOUR "\" stroke-width=\"1.5\" points=\"", f);
  for (int64_t t = 0; t < s->steps; t++) /* a step line: a point where the value changes */
    if (t == 0 || t == s->steps - 1 || s->scale[t] != s->scale[t - 1]) {
      if (t) fprintf(f, "%.1f,%.1f ", X(t), Y_SCALE(log2(s->scale[t - 1])));
      fprintf(f, "%.1f,%.1f ", X(t), Y_SCALE(log2(s->scale[t])));
    }
  fputs("\"/><g fill=\"#d62728\">", f);
  for (int64_t t = 0; t < s->steps; t++)
    if (s->skipped[t]) fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\"/>", X(t), Y_SCALE(log2(s->scale[t])));
  fputs("</g><g stroke=\"#777\" stroke-dasharray=\"3,3\" font-size=\"10\">", f);
  for (int m = 0; m < 3; m++)
    if (p->moment[m] >= 0) {
      int64_t at = s->samples[p->moment[m]].step;
      fprintf(f,
              "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/><text x=\"%.1f\" y=\"%d\" stroke=\"none\" "
              "fill=\"#555\">%s</text>",
              X(at), T, X(at), H - B, X(at) + 3, H - B - 4, p->moment_name[m]);
    }
  fprintf(f, "</g><text x=\"%d\" y=\"%d\" font-size=\"10\">step</text></svg>", W / 2, H - 6);
  /* the loss, averaged over buckets of steps so the line stays light */
  int64_t bucket = (s->steps + 599) / 600;
  double ly = loss_hi > 0 ? loss_hi * 1.05 : 1;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">"
          "<g font-size=\"10\" fill=\"#333\"><text x=\"4\" y=\"%d\">%.3g</text><text x=\"4\" y=\"%d\">0</text>"
          "<text x=\"%d\" y=\"%d\">loss (mean over %lld step%s)</text></g><polyline fill=\"none\" stroke=\"#2ca02c\" "
          "stroke-width=\"1.2\" points=\"",
          W, 140, W, 140, T + 4, ly, 140 - B, W / 2, 140 - 6, (long long)bucket, bucket > 1 ? "s" : "");
  for (int64_t t0 = 0; t0 < s->steps; t0 += bucket) {
    double sum = 0;
    int64_t n = 0;
    for (int64_t t = t0; t < t0 + bucket && t < s->steps; t++)
      if (isfinite(s->loss[t])) sum += s->loss[t], n++;
    if (n) fprintf(f, "%.1f,%.1f ", X(t0), T + (140 - T - B) * (1 - sum / (double)n / ly));
  }
  fputs("\"/></svg></section>", f);
#undef X
#undef Y_SCALE
}

/* The underflow shares of one parameter gradient (scaled, true). */
typedef struct {
  double zeros, true_sub, true_flush, true_bf16, scaled_sub, scaled_flush, scaled_over;
} shares;

static shares shares_of(const int64_t *scaled, const int64_t *truth) {
  int64_t ts = total_of(scaled), tt = total_of(truth);
  return (shares){share(scaled[MX_AMP_HIST_ZERO], ts),
                  share(count_below(truth, f16_zones.normal_from), tt),
                  share(count_below(truth, f16_zones.flush_below), tt),
                  share(count_below(truth, bf16_zones.normal_from) - truth[MX_AMP_HIST_ZERO], tt),
                  share(count_below(scaled, f16_zones.normal_from), ts),
                  share(count_below(scaled, f16_zones.flush_below), ts),
                  share(count_from(scaled, f16_zones.overflow_from), ts)};
}

/* One row of the underflow table. */
static void shares_row(FILE *f, shares sh, int64_t values) {
  fprintf(f, "<td>%lld</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>",
          (long long)values, pct(sh.zeros).s, pct(sh.true_sub).s, pct(sh.true_flush).s, pct(sh.true_bf16).s,
          pct(sh.scaled_sub).s, pct(sh.scaled_flush).s, pct(sh.scaled_over).s);
}

/* The underflow table at sample i: per parameter and per layer's gradient. */
static void underflow_table(FILE *f, const page *p, int i, int64_t totals[2][MX_AMP_HIST_BINS]) {
  const mx__amp_sample *sm = &p->s->samples[i];
  int shift = scale_exponent(sm->scale);
  memset(totals, 0, sizeof(int64_t) * 2 * MX_AMP_HIST_BINS);
  fprintf(f,
          "<table><tr><th class=\"l\">gradient of</th><th class=\"l\">dtype</th><th>values</th><th>exact zeros</th>"
          "<th>zero or subnormal in f16 without scaling</th><th>flushed to zero in f16 without scaling</th>"
          "<th>nonzero below bf16's normals (2^-126)</th><th>zero or subnormal in f16 at scale 2^%d</th>"
          "<th>flushed at 2^%d</th><th>overflow at 2^%d</th></tr>",
          shift, shift, shift);
  for (int j = 0; j < sm->n_params; j++) {
    const mx__amp_site *site = &sm->params[j];
    shares sh = shares_of(site->hist[0], site->hist[1]);
    for (int b = 0; b < MX_AMP_HIST_BINS; b++) totals[0][b] += site->hist[0][b], totals[1][b] += site->hist[1][b];
    fputs("<tr><td class=\"l\">", f);
    esc(f, site->name);
    fprintf(f, "</td><td class=\"l\">%s</td>", mx_dtype_name(site->dtype));
    shares_row(f, sh, total_of(site->hist[0]));
  }
  shares all = shares_of(totals[0], totals[1]);
  fprintf(f, "<tr id=\"underflow-total-%d\"><th class=\"l\">all parameters</th><td></td>", i);
  shares_row(f, all, total_of(totals[0]));
  for (int j = 0; j < sm->n_layers; j++) {
    const mx__amp_site *site = &sm->layers[j];
    if (!site->has_grad || !total_of(site->hist[1])) continue;
    int64_t truth[MX_AMP_HIST_BINS];
    shifted(site->hist[1], shift, truth);
    shares sh = shares_of(site->hist[1], truth);
    fputs("<tr><td class=\"l\">output of layer ", f);
    esc(f, site->name);
    fputs(" (", f);
    esc(f, site->type);
    fprintf(f, ")</td><td class=\"l\">%s</td>", mx_dtype_name(site->dtype));
    shares_row(f, sh, total_of(site->hist[1]));
  }
  fputs("</table>", f);
}

static void histograms(FILE *f, const page *p, int m) {
  const mx__amp_sample *sm = &p->s->samples[p->moment[m]];
  int shift = scale_exponent(sm->scale);
  fprintf(f, "<section id=\"histograms-%s\"><h2>Histograms at the %s: step %lld, loss scale 2^%d</h2>",
          m == 0   ? "start"
          : m == 1 ? "settled"
                   : "end",
          p->moment_name[m], (long long)sm->step, shift);
  fputs("<h3>Share of gradient values per zone</h3>", f);
  int64_t totals[2][MX_AMP_HIST_BINS];
  underflow_table(f, p, p->moment[m], totals);
  fputs("<h3>Activation gradients (the mixed-precision paper's picture)</h3><div class=\"charts\">", f);
  char title[512];
  for (int j = 0; j < sm->n_layers; j++) {
    const mx__amp_site *site = &sm->layers[j];
    if (!site->has_grad || !total_of(site->hist[1])) continue;
    int64_t truth[MX_AMP_HIST_BINS];
    shifted(site->hist[1], shift, truth);
    snprintf(title, sizeof title, "layer %s (%s), %s", site->name, site->type, mx_dtype_name(site->dtype));
    chart_pair(f, title, site->hist[1], "scaled", truth, "true");
  }
  fputs("</div><h3>Parameter gradients</h3><div class=\"charts\">", f);
  for (int j = 0; j < sm->n_params; j++) {
    snprintf(title, sizeof title, "%s, %s", sm->params[j].name, mx_dtype_name(sm->params[j].dtype));
    chart_pair(f, title, sm->params[j].hist[0], "scaled", sm->params[j].hist[1], "true");
  }
  fputs("</div><h3>Activations (layer outputs)</h3><div class=\"charts\">", f);
  for (int j = 0; j < sm->n_layers; j++) {
    snprintf(title, sizeof title, "layer %s (%s), %s", sm->layers[j].name, sm->layers[j].type,
             mx_dtype_name(sm->layers[j].dtype));
    chart_pair(f, title, sm->layers[j].hist[0], "output", NULL, NULL);
  }
  fputs("</div></section>", f);
}

static void dtype_counts(FILE *f, const int64_t *counts) {
  bool any = false;
  for (int t = 0; t < MX_DTYPE_COUNT; t++)
    if (counts[t])
      fprintf(f, "%s%s &#215;%lld", any ? ", " : "", mx_dtype_name((mx_dtype)t), (long long)counts[t]), any = true;
  if (!any) fputs("-", f);
}

static void op_table(FILE *f) {
  fputs(
      "<section id=\"ops\"><h2>Autocast, op by op</h2><p>This thread's counts since the last "
      "<code>mx_amp_report_reset</code> (training and evaluation passes): what <code>mx_amp_report</code> prints, with "
      "each op's policy and input dtypes.</p><table><tr><th class=\"l\">op</th><th "
      "class=\"l\">policy</th><th>calls</th>"
      "<th class=\"l\">inputs</th><th class=\"l\">outputs</th><th>casts made</th><th>MB cast</th><th>cache "
      "hits</th></tr>",
      f);
  int rows = 0;
  for (int op = 0; op < mx_op_count(); op++) {
    mx__amp_op_row r;
    if (!mx__amp_op_row_get(op, &r)) continue;
    rows++;
    fprintf(f, "<tr><td class=\"l\">%s</td><td class=\"l\">%s</td><td>%lld</td><td class=\"l\">", mx_op_name(op),
            mx_cast_policy_name(mx_autocast_policy(op)), (long long)r.calls);
    dtype_counts(f, r.in_dtype);
    fputs("</td><td class=\"l\">", f);
    dtype_counts(f, r.out_dtype);
    fprintf(f, "</td><td>%lld</td><td>%.2f</td><td>%lld</td></tr>", (long long)r.casts, (double)r.bytes / 1e6,
            (long long)r.hits);
  }
  fputs("</table>", f);
  if (!rows) fputs("<p>No op ran in an enabled autocast region on this thread.</p>", f);
  fputs("</section>", f);
}

/* The verdict: each sentence quotes a number shown elsewhere on the page. */
static void verdict(FILE *f, const page *p, mx_dtype amp) {
  const mx__amp_snapshot *s = p->s;
  fputs("<section id=\"verdict\"><h2>Verdict</h2><ul class=\"verdict\">", f);
  int64_t skipped = 0, opening = p->settle_step;
  for (int64_t t = 0; t < s->steps; t++) skipped += s->skipped[t];
  if (s->scaler_enabled && s->steps && opening)
    fprintf(f,
            "<li>The GradScaler skipped %lld of %lld steps; the first %lld, in a row, brought the scale from 2^%d "
            "to 2^%d, and the run ended at 2^%d (see <a href=\"#trajectory\">the trajectory</a>).</li>",
            (long long)skipped, (long long)s->steps, (long long)opening, scale_exponent(s->scale[0]),
            scale_exponent(s->scale[opening < s->steps ? opening : s->steps - 1]),
            scale_exponent(s->scale[s->steps - 1]));
  else if (s->scaler_enabled && s->steps)
    fprintf(f,
            "<li>The GradScaler skipped %lld of %lld steps; the scale started at 2^%d and ended at 2^%d (see "
            "<a href=\"#trajectory\">the trajectory</a>).</li>",
            (long long)skipped, (long long)s->steps, scale_exponent(s->scale[0]),
            scale_exponent(s->scale[s->steps - 1]));
  int last = s->n_samples - 1;
  if (last >= 0) {
    const mx__amp_sample *sm = &s->samples[last];
    int64_t totals[2][MX_AMP_HIST_BINS] = {{0}};
    for (int j = 0; j < sm->n_params; j++)
      for (int b = 0; b < MX_AMP_HIST_BINS; b++)
        totals[0][b] += sm->params[j].hist[0][b], totals[1][b] += sm->params[j].hist[1][b];
    shares all = shares_of(totals[0], totals[1]);
    int shift = scale_exponent(sm->scale);
    if (sm->n_params && s->scaler_enabled)
      fprintf(f,
              "<li>At the end (step %lld), %s of the parameter-gradient values would be zero or subnormal in "
              "float16 without scaling; at the scale 2^%d, %s are (the <a href=\"#histograms-end\">end table</a>'s "
              "'all parameters' row).</li>",
              (long long)sm->step, pct(all.true_sub).s, shift, pct(all.scaled_sub).s);
    else if (sm->n_params)
      fprintf(f,
              "<li>At the end (step %lld), %s of the parameter-gradient values would be zero or subnormal in "
              "float16 and %s flushed to zero (the <a href=\"#histograms-end\">end table</a>'s 'all parameters' "
              "row): %s.</li>",
              (long long)sm->step, pct(all.true_sub).s, pct(all.true_flush).s,
              all.true_flush > 1 ? "float16 training would need a loss scale"
                                 : "few enough that float16 would lose little");
    /* bfloat16: the true gradients below its smallest normal */
    if (sm->n_params)
      fprintf(f,
              "<li>%s: at the end %s of the true parameter-gradient values are nonzero and below bfloat16's "
              "smallest normal 2^-126 (the end table's bf16 column; the bfloat16 charts' red and yellow zones).</li>",
              all.true_bf16 > 0 ? "bf16 would lose some gradients even with float32's range"
                                : "bf16 would need no scaler here",
              pct(all.true_bf16).s);
    /* overflow: the worst parameter over the samples */
    double worst = 0;
    const char *who = NULL;
    int64_t at = 0;
    int at_scale = 0;
    for (int m = 0; m < 3; m++) /* the samples whose tables the page shows */
      for (int i = p->moment[m], j = 0; i >= 0 && j < s->samples[i].n_params; j++) {
        const mx__amp_site *site = &s->samples[i].params[j];
        double over = share(count_from(site->hist[0], f16_zones.overflow_from), total_of(site->hist[0]));
        if (over > worst)
          worst = over, who = site->name, at = s->samples[i].step, at_scale = scale_exponent(s->samples[i].scale);
      }
    if (who) {
      fputs("<li>The gradient of ", f);
      esc(f, who);
      fprintf(f,
              " overflows at scale 2^%d: %s of its scaled values are inf, NaN or beyond float16's range at step "
              "%lld (its row in that step's table).</li>",
              at_scale, pct(worst).s, (long long)at);
    } else if (s->n_samples) {
      fprintf(f, "<li>No parameter gradient overflowed float16 in the samples shown (0.00%% in every 'overflow' "
                 "column).</li>");
    }
    /* the activation gradient most in need of the scale */
    double worst_sub = -1;
    const char *layer = NULL;
    for (int j = 0; j < sm->n_layers; j++) {
      const mx__amp_site *site = &sm->layers[j];
      if (!site->has_grad || !total_of(site->hist[1])) continue;
      int64_t truth[MX_AMP_HIST_BINS];
      shifted(site->hist[1], shift, truth);
      double sub = share(count_below(truth, f16_zones.normal_from), total_of(truth));
      if (sub > worst_sub) worst_sub = sub, layer = site->name;
    }
    if (layer && s->scaler_enabled) {
      fputs("<li>Of the gradients reaching layer ", f);
      esc(f, layer);
      fprintf(f,
              "'s output at the end, %s would be zero or subnormal in float16 without scaling, the most of any "
              "layer (its row in the <a href=\"#histograms-end\">end table</a>).</li>",
              pct(worst_sub).s);
    }
  }
  if (!s->n_samples) fputs("<li>No step was sampled: there is nothing to judge.</li>", f);
  if (amp == MX_F32)
    fputs("<li>This run did not autocast: the histograms show where its float32 values would fall.</li>", f);
  fputs("</ul></section>", f);
}

static void reading_guide(FILE *f) {
  fputs(
      "<section id=\"guide\"><h2>Reading the charts</h2><p class=\"legend\">Bars: share of the values per binary "
      "exponent (|v| in [2^e, 2^(e+1))), zeros at the left, inf and NaN at the right.<span "
      "style=\"background:" SCALED_COLOUR "\"></span>scaled (what backward holds)<span style=\"background:" TRUE_COLOUR
      "\"></span>true "
      "(unscaled)</p><p class=\"legend\">Zones:<span style=\"background:#f4c7c3\"></span>flushed to zero"
      "<span style=\"background:#fce8b2\"></span>subnormal (precision lost)<span style=\"background:#d9ead3\"></span>"
      "normal<span style=\"background:#e6b8d7\"></span>overflow (inf)</p><p>Parameter gradients are binned inside the "
      "GradScaler's unscale pass, before and after it divides by the scale. Layer outputs are binned as the forward "
      "made them, their gradients as backward made them (scaled); their true values are that histogram moved down by "
      "log2 of the scale (exact for a power-of-two scale). 'Zero or subnormal' is |v| &lt; 2^-14 (the GradScaler's "
      "underflow fraction counts the same for the scaled gradients); 'flushed to zero' is |v| &lt; 2^-25; 'overflow' "
      "is |v| &gt;= 2^16, inf or NaN.</p></section>",
      f);
}

mx_status mx_amp_report_write_html(const char *path, const mx_amp_stats *st, const mx_amp_report_opts *opts) {
  static const char *const fn = "mx_amp_report_write_html";
  if (!path || !st) return mx__null_input(fn, !path ? "path" : "st");
  mx_amp_report_opts o = opts ? *opts : (mx_amp_report_opts){.amp = MX_F32};
  mx__amp_snapshot s;
  mx_status status = mx__amp_stats_snapshot(st, &s);
  mx_output_file *file = status == MX_OK ? mx_output_file_begin(fn, path) : NULL;
  if (!file) {
    mx__amp_snapshot_free(&s);
    return mx_last_status();
  }
  FILE *f = mx_output_file_stream(file);
  page p = {.s = &s};
  pick_moments(&p);
  const char *title = o.title ? o.title : "AMP report";
  fputs("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\"><head><meta "
        "charset=\"utf-8\"/><title>",
        f);
  esc(f, title);
  fprintf(f, "</title><style>%s</style></head><body><h1>", css);
  esc(f, title);
  fprintf(f, "</h1><p id=\"summary\">Autocast %s%s; %lld steps, %d sampled.",
          o.amp == MX_F32 ? "off" : mx_dtype_name(o.amp), s.scaler_enabled ? " with a GradScaler" : ", no loss scaling",
          (long long)s.steps, s.n_samples);
  if (o.command) {
    fputs(" Reproduce with <code>", f);
    esc(f, o.command);
    fputs("</code>.", f);
  }
  fputs("</p>", f);
  verdict(f, &p, o.amp);
  trajectory(f, &p);
  reading_guide(f);
  for (int m = 0; m < 3; m++)
    if (p.moment[m] >= 0) histograms(f, &p, m);
  op_table(f);
  fputs("</body></html>\n", f);
  mx__amp_snapshot_free(&s);
  if (ferror(f)) {
    mx__error(MX_IO_ERROR, "%s: %s: writing failed", fn, path);
    mx_output_file_abort(file);
    return mx_last_status();
  }
  return mx_output_file_commit(file);
}
