# SPDX-License-Identifier: Apache-2.0
"""Inference and serving predictions: per-step operator graphs, step-cost tables, single-batch
latency and the serving simulation of `simulate.serving`."""
