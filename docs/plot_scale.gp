# Draws the GradScaler's trajectory from examples/amp/scaler_trajectory's CSV
# (step,loss,scale,skipped): the loss scale on a log2 axis with the skipped
# steps marked, and the loss below it.
#
#   gnuplot -e "csv='scale.csv'; out='docs/amp_scale.png'" docs/plot_scale.gp
#
# docs/make_amp_figure.sh runs the program and this script.
if (!exists("csv")) csv = 'scale.csv'
if (!exists("out")) out = 'docs/amp_scale.png'

set terminal pngcairo size 900,620 font 'DejaVu Sans,10' noenhanced
set output out
set datafile separator ','
set key top right opaque box
set grid lc rgb '#dddddd'
set xrange [0:*]
set lmargin 10   # the same left margin in both panels, so their steps line up

set multiplot layout 2,1 title 'GradScaler on a float16-autocast MLP (growth_interval 20, init_scale 2^24)'

set ylabel 'loss scale'
set offsets 0, 0, graph 0.15, graph 0.05   # room above for the key
set logscale y 2
set format y '2^%L'
set xlabel ''
set format x ''
plot csv skip 1 using 1:3 with steps lw 2 lc rgb '#1f77b4' title 'scale used by the step', \
     csv skip 1 using 1:($4 == 1 ? $3 : 1/0) with points pt 7 ps 0.9 lc rgb '#d62728' \
       title 'skipped: inf/NaN gradients, scale x0.5'

set offsets 0, 0, 0, 0
set logscale y 10
set format y '%g'
set format x '%g'
set ylabel 'loss (log scale)'
set xlabel 'step'
plot csv skip 1 using 1:2 with lines lw 1 lc rgb '#444444' title 'cross-entropy loss (batch)', \
     csv skip 1 using 1:($4 == 1 ? $2 : 1/0) with points pt 7 ps 0.9 lc rgb '#d62728' notitle

unset multiplot
