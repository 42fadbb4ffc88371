# SPDX-License-Identifier: Apache-2.0
"""End-to-end prediction: scenario -> graph -> passes -> engines -> timeline -> report."""

from simulate.api import SimulationOutput, run

__all__ = ["SimulationOutput", "run"]
