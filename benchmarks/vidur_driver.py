# SPDX-License-Identifier: Apache-2.0
"""Runs one Vidur simulation offline; executed by Vidur's own venv python, never imported by llmsim.

``vidur_side_by_side.py`` starts it with Vidur's command-line flags. Vidur 0.0.26 fetches its
profiling data with ``huggingface_hub.snapshot_download``; here that name is bound to a lookup in
``$LLMSIM_VIDUR_LOCAL`` (JSON: dataset name -> local folder), and any other name (Vidur's try at
downloading published predictions) fails as it would offline, so Vidur trains its own. Prints
one line ``LLMSIM_VIDUR_TIMES {json}``: import, predictor-init and simulation wall seconds, CPU
seconds of init + simulation (children included), and Vidur's output folder.
"""

import json
import os
import time

t0 = time.perf_counter()
import vidur.execution_time_predictor.sklearn_execution_time_predictor as sk  # noqa: E402
from vidur.config import SimulationConfig  # noqa: E402
from vidur.simulator import Simulator  # noqa: E402
from vidur.utils.random import set_seeds  # noqa: E402

LOCAL = json.loads(os.environ["LLMSIM_VIDUR_LOCAL"])


def snapshot_download(repo_id: str, **_: object) -> str:
    """The local copy of a profiling dataset; other names are not available offline."""
    if repo_id in LOCAL:
        return LOCAL[repo_id]
    raise FileNotFoundError(f"offline: no local copy of {repo_id}")


def _cpu_s() -> float:
    """CPU seconds of this process and its waited-for children (user + system)."""
    return sum(os.times()[:4])


def main() -> None:
    t1, c1 = time.perf_counter(), _cpu_s()
    sk.snapshot_download = snapshot_download
    config = SimulationConfig.create_from_cli_args()
    set_seeds(config.seed)
    simulator = Simulator(config)
    t2 = time.perf_counter()
    simulator.run()
    t3, c3 = time.perf_counter(), _cpu_s()
    print("LLMSIM_VIDUR_TIMES " + json.dumps({
        "import_s": t1 - t0, "init_s": t2 - t1, "run_s": t3 - t2, "cpu_s": c3 - c1,
        "output_dir": config.metrics_config.output_dir}))


if __name__ == "__main__":
    main()
