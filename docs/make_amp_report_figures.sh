#!/usr/bin/env bash
# Regenerates the pictures of docs/AMP.md section 9 (docs/amp_report_*.png):
# trains the MNIST CNN for one epoch under float16 with --amp-report, then
# cuts parts of the report page out with docs/amp_report_figures.py
# (headless Chromium and python3-pil). One OpenMP thread unless OMP_NUM_THREADS
# says otherwise, so the run, and the numbers docs/AMP.md quotes, come out the same.
#
#   docs/make_amp_report_figures.sh [build-dir]        the CNN's (default build-dir: build)
#   docs/make_amp_report_figures.sh [build-dir] gpt    the GPT demo's: one epoch of --model small under float16
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}

command -v chromium >/dev/null || { echo "make_amp_report_figures: chromium not found (apt-get install chromium)" >&2; exit 1; }
/usr/bin/python3 -c "import PIL" 2>/dev/null || { echo "make_amp_report_figures: Pillow not found (apt-get install python3-pil)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if [ "${2:-}" = gpt ]; then
  ninja -C "$build" examples/gpt/gpt >/dev/null
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$build/examples/gpt/gpt" --model small --amp f16 --epochs 1 --sample 0 \
    --amp-report "$out/report"
  /usr/bin/python3 docs/amp_report_figures.py "$out/report/index.html" docs gpt
  exit
fi
ninja -C "$build" examples/mnist/mnist >/dev/null
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$build/examples/mnist/mnist" --model cnn --amp f16 --epochs 1 --amp-report "$out/report"
/usr/bin/python3 docs/amp_report_figures.py "$out/report/index.html" docs
