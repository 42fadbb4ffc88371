# SPDX-License-Identifier: Apache-2.0
"""Design-space search (training layouts, serving configurations), LoRA and dynamic SP."""

__all__ = ["answers", "dynamic_sp", "evaluator", "executors", "fast_pipeline", "pareto", "prune",
           "serving_search", "space", "training_search", "worker_cache"]
