# SPDX-License-Identifier: Apache-2.0
"""Where llmsim finds its files: the checkout's shipped data (`DATASETS_DIR`) and the user's
state under ``$LLMSIM_HOME`` (default ``~/.llmsim``).

The home holds the DuckDB store, the SQLite MLflow tracking store, calibrated hardware files and
the MLflow artifact folder. Nothing here creates directories; the command that writes does.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent  # the checkout (pyproject.toml, datasets/)
DATASETS_DIR = REPO_ROOT / "datasets"  # shipped models, hardware, engines, corpora


def llmsim_home() -> Path:
    return Path(os.environ.get("LLMSIM_HOME", Path.home() / ".llmsim")).expanduser()


def default_db_path() -> Path:
    """The store: ``$LLMSIM_DB`` if set, else ``$LLMSIM_HOME/llmsim.duckdb``."""
    return Path(os.environ.get("LLMSIM_DB", llmsim_home() / "llmsim.duckdb")).expanduser()


def default_tracking_uri() -> str:
    """MLflow: ``$MLFLOW_TRACKING_URI`` if set, else SQLite under ``$LLMSIM_HOME``."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{(llmsim_home() / 'mlflow.db').resolve()}"


def default_artifact_root() -> Path:
    return llmsim_home() / "mlartifacts"


def user_hardware_dir() -> Path:
    """Calibrated hardware files land here and shadow the shipped catalog."""
    return llmsim_home() / "hardware"
