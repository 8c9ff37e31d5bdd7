#!/usr/bin/env bash
# Regenerates the pictures of docs/AMP.md section 9 (docs/amp_report_*.png):
# trains the MNIST CNN for one epoch under float16 with --amp-report, then
# cuts parts of the report page out with docs/amp_report_figures.py
# (headless Chromium and python3-pil). One OpenMP thread unless OMP_NUM_THREADS
# says otherwise, so the run, and the numbers docs/AMP.md quotes, come out the same.
#
#   docs/make_amp_report_figures.sh [build-dir]      (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}

command -v chromium >/dev/null || { echo "make_amp_report_figures: chromium not found (apt-get install chromium)" >&2; exit 1; }
/usr/bin/python3 -c "import PIL" 2>/dev/null || { echo "make_amp_report_figures: Pillow not found (apt-get install python3-pil)" >&2; exit 1; }
ninja -C "$build" examples/mnist/mnist >/dev/null

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$build/examples/mnist/mnist" --model cnn --amp f16 --epochs 1 --amp-report "$out/report"
/usr/bin/python3 docs/amp_report_figures.py "$out/report/index.html" docs
