#!/usr/bin/env bash
# Regenerates docs/amp_scale.png (the picture in docs/AMP.md): runs
# examples/amp/scaler_trajectory and draws its CSV with docs/plot_scale.gp.
#
#   docs/make_amp_figure.sh [build-dir]      (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}

command -v gnuplot >/dev/null || { echo "make_amp_figure: gnuplot not found (apt-get install gnuplot-nox; scripts/setup installs it)" >&2; exit 1; }
ninja -C "$build" examples/amp/scaler_trajectory >/dev/null

csv=$(mktemp --suffix=.csv)
trap 'rm -f "$csv"' EXIT
"$build/examples/amp/scaler_trajectory" "$csv"
gnuplot -e "csv='$csv'; out='docs/amp_scale.png'" docs/plot_scale.gp
echo "make_amp_figure: wrote docs/amp_scale.png"
