#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Set up .venv, then run the main job on the embedded defaults: the DuckDB store and the SQLite
# MLflow store under $LLMSIM_HOME (default ~/.llmsim), on this machine's CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
L=.venv/bin/llmsim
step() { printf '\n== %s\n' "$*"; }

step "1/4 load the curated GPU measurements (published, and our H100 and H200 sweeps) into the store"
$L db import-parquet datasets/measurements
step "2/4 profile this CPU (GEMM, attention, memory-bound ops)"
$L profile run datasets/sweeps/cpu-smoke.yaml --no-progress
$L db info
step "3/4 train, evaluate and register an XGBoost predictor per (GPU, family) of the curated set in MLflow"
# 22 models (A100 SXM/PCIe, H100 SXM/NVL, H200, B200, L40S, A40), each promoted to champion only if
# it beats its baselines on held-out shapes, or ties them within the noise of those shapes and
# beats them on the largest sizes (predictors/promote.py); bounded: 4 search draws, 3,000
# training rows per fit.
$L train all --configs 4 --max-train-rows 3000
$L train report
# The cross-GPU GEMM model: prices GEMMs on a GPU with a hardware YAML and no GEMM champion (A100
# 40GB, H100 PCIe, B300, GB200, ...); promoted only if it beats the roofline leave-one-GPU-out.
# GEMMs only: the chain takes no other family's transfer answer (predictors/README.md). ~40 s.
$L train transfer --op gemm --rows-per-gpu 3000 --loo
step "4/4 predict: Llama-3-70B training on 1,024 H100, Llama-2-7B serving on one A100"
$L simulate datasets/scenarios/llama3-70b-tp8-pp4-selective-h100.yaml
$L simulate datasets/scenarios/llama2-7b-continuous-qps8-a100.yaml
