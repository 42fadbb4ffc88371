# SPDX-License-Identifier: Apache-2.0
"""Design-space search (training layouts, serving configurations), LoRA and dynamic SP."""

__all__ = ["answers", "batch_pipeline", "dynamic_sp", "evaluator", "executors", "pareto",
           "pipeline_trace", "prune", "serving_search", "space", "training_search", "worker_cache"]
