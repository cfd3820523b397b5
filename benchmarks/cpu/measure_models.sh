#!/bin/sh
# Whole timm models on this CPU, timed by `dse measure --whole-models-only` (eval mode, fp32,
# torch.inference_mode, the trace's input size, all cores, warm caches), one run per model
# and batch set, then joined into results/models_measurements.csv (model,variant,batch,
# median_s,...) for
#   dse calibrate --validate --whole-models cpu-amd-epyc-2c=benchmarks/cpu/results/models_measurements.csv
# results/host.toml is the probe the shipped cpu-amd-epyc-2c dataset and predictors refer to.
# Run from the repository root with dse on the PATH:
#   sh benchmarks/cpu/measure_models.sh RUN [ROUNDS]
# (RUN names the folder of this run's datasets under results/; the joined CSV holds every run;
# ROUNDS, default 2, times every model that many times, minutes apart: dse measure --rounds.
# run1 and run2 were made before --rounds existed: one round each.)
set -e
out=benchmarks/cpu/results
run_dir=$out/${1:-run1}
rounds=${2:-2}
hw=$out/host.toml
mkdir -p $run_dir
run() {  # file stem, model, then --batch/--format options
    stem=$1; model=$2; shift 2
    dse measure --model "$model" --hw $hw --whole-models-only --wait-idle 120 \
        --rounds $rounds "$@" \
        --out $run_dir/$stem.parquet
}
# linears dominate: dense and block4@87.5% (every linear it applies to as torch BSR), b 1, 8
for m in convnext_tiny deit_small_patch16_224 swin_tiny_patch4_window7_224 mixer_s16_224 \
         vit_base_patch16_224; do
    run $m $m --format block4@87.5% --batch 1 --batch 8
done
# convolutions only (torch has no CPU sparse convolution): dense, b 1, 8
for m in resnet50 efficientnet_b4; do
    run $m $m --batch 1 --batch 8
done
# batch 32, dense
for m in convnext_tiny resnet50 deit_small_patch16_224 swin_tiny_patch4_window7_224 \
         mixer_s16_224; do
    run ${m}_b32 $m --batch 32
done
python -c "import glob, pandas as pd; pd.concat([pd.read_csv(p) for p in sorted(glob.glob('$out/run*/*.models.csv'))]).to_csv('$out/models_measurements.csv', index=False)"
