# SPDX-License-Identifier: Apache-2.0
"""XGBoost latency predictors per (hardware, operator family), tracked in MLflow.

Import the modules you need (`predictors.loader.load_champion` is what simulate uses); the
package itself imports nothing heavy.
"""

__all__ = ["baselines", "dataset", "evaluate", "features", "loader", "model", "pipeline",
           "promote", "report", "splits", "tracking", "train"]
