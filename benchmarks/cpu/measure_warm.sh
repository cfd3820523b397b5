#!/bin/sh
# The trace shapes and vector ops of every model in benchmarks/cpu/measure_models.sh, timed
# cold (cache flushed before each call, as the kernel dataset) and warm (no flush, as inside a
# model), 2 rounds, no sampling (--budget 1s: the trace's own shapes are always measured).
# join_kernels.py then joins these runs and measure_kernels.sh's into the shipped dataset.
# Run from the repository root with dse on the PATH: sh benchmarks/cpu/measure_warm.sh
set -e
out=benchmarks/cpu/results/warm
hw=benchmarks/cpu/results/host.toml
mkdir -p $out
run() {  # model, then --format/--batch options
    model=$1; shift
    dse measure --model "$model" --hw $hw --warm --rounds 2 --budget 1s --wait-idle 60 \
        "$@" --out $out/$model.parquet
}
for m in convnext_tiny deit_small_patch16_224 swin_tiny_patch4_window7_224 mixer_s16_224 \
         vit_base_patch16_224; do
    run $m --format block4@87.5% --batch 1 --batch 8
done
for m in resnet50 efficientnet_b4; do
    run $m --batch 1 --batch 8
done
python benchmarks/cpu/join_kernels.py
