#!/bin/sh
# Kernel dataset of this CPU: the shipped dse/measure/datasets/cpu-amd-epyc-2c.parquet.
# Two `dse measure` runs (every configuration timed in 4 rounds, minutes apart; the trace's
# shapes, its vector ops, then adaptive sampling), one after another on an otherwise idle
# machine, then joined with the warm runs of measure_warm.sh (join_kernels.py) into one
# dataset whose .json keeps every run's provenance:
#   ConvNeXt-T   (linears, depthwise 7x7 convolutions, layer norms)       20 min
#   DeiT-S       (linears, attention matmuls, softmax, layer norms, GELU)  7 min
# results/host.toml is the probe every run's speed of light refers to.
# Run from the repository root with dse on the PATH: sh benchmarks/cpu/measure_kernels.sh
set -e
out=benchmarks/cpu/results/kernels
hw=benchmarks/cpu/results/host.toml
mkdir -p $out
run() {  # model, budget
    dse measure --model "$1" --hw $hw --format block4@87.5% --format unstructured@90% \
        --batch 1 --batch 8 --budget "$2" --rounds 4 --wait-idle 120 --out $out/$1.parquet
}
run convnext_tiny 20m
run deit_small_patch16_224 7m
python benchmarks/cpu/join_kernels.py
