# SPDX-License-Identifier: Apache-2.0
"""Design-space search (training layouts, serving configurations), LoRA and dynamic SP."""

__all__ = ["dynamic_sp", "executors", "pareto", "serving_search", "space",
           "training_search"]
