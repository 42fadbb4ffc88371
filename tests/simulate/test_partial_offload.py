# SPDX-License-Identifier: Apache-2.0
"""Activation offload of some of a stage's layers (Megatron-Core's cpu_offloading_num_layers):
`analytical.offload` memory, `simulate.offload` pass stretch, the scenario key and the corpus
column."""

from __future__ import annotations

import pytest

from analytical.errors import SpecError
from analytical.memory import TrainingMemory
from analytical.offload import RESIDENT_LAYERS, LayerBytes, Offload, offloaded_memory
from simulate.costs import PassCost
from simulate.offload import _stretch
from simulate.scenario import parse_training
from simulate.validate.published import load_corpus, row_scenario

LAYER = LayerBytes(weights=1.0, gradients=1.0, optimizer=4.0, activations=10.0, working=3.0)
LAYERS = 8
MEM = TrainingMemory(weights_bytes=8.0, gradients_bytes=8.0, optimizer_bytes=32.0,
                     activations_bytes=LAYERS * 10.0 + 3.0, other_bytes=0.0)


def _act(offload: Offload) -> float:
    return offloaded_memory(MEM, LAYER, LAYERS, offload).activations_bytes


def test_offloading_n_layers_frees_all_but_the_in_flight_ones():
    assert _act(Offload()) == MEM.activations_bytes
    assert _act(Offload(activations=True, activation_layers=5)) == (
        MEM.activations_bytes - (5 - RESIDENT_LAYERS) * LAYER.activations)
    # as many layers as the stage holds (or more, or 0 = every layer): the full-offload floor
    full = _act(Offload(activations=True))
    assert full == RESIDENT_LAYERS * LAYER.activations + LAYER.working
    assert _act(Offload(activations=True, activation_layers=LAYERS)) == full
    assert _act(Offload(activations=True, activation_layers=99)) == full
    # fewer layers than stay in flight free nothing
    assert _act(Offload(activations=True, activation_layers=1)) == MEM.activations_bytes


def test_only_the_offloading_share_of_layers_pays_its_transfer():
    class Link:
        latency_s = 0.0
        bandwidth_bytes_per_s = 1.0

    p = PassCost(elapsed_s=2.0, compute_s=2.0, engine_s={"roofline": 2.0})
    # 6 bytes at 1 B/s: 4 s exposed on an offloading layer, none on the others
    assert _stretch(p, 6.0, 0.0, 1.0, Link()).elapsed_s == pytest.approx(6.0)
    assert _stretch(p, 6.0, 0.0, 0.25, Link()).elapsed_s == pytest.approx(3.0)
    assert _stretch(p, 0.0, 0.0, 0.25, Link()) is p


def test_the_scenario_key_needs_activation_offload_and_a_count():
    block = {"parallel": {"tp": 1, "pp": 1, "dp": 8}, "global_batch": 8, "micro_batch": 1,
             "seq_len": 4096}
    assert parse_training(block).offload.activation_layers == 0
    spec = parse_training({**block, "offload": {"activations": True, "activation_layers": 40}})
    assert spec.offload.activation_layers_of(80) == 40
    assert spec.offload.activation_layers_of(20) == 20
    with pytest.raises(SpecError, match="needs activations: true"):
        parse_training({**block, "offload": {"activation_layers": 40}})
    with pytest.raises(SpecError, match="activation_layers"):
        parse_training({**block, "offload": {"activations": True, "activation_layers": -1}})


def test_validate_offloads_only_the_rows_whose_preset_does():
    """The Megatron-FSDP presets that set cpu_offloading_num_layers: 70B GB200 / GB300 (25.09
    and 25.11 on) and, at 25.09 (Megatron-Bridge v0.1.0rc3 perf_matrix fp8_cs), 405B GB200."""
    offloaded = {}
    for i, row in enumerate(load_corpus()):
        training = row_scenario(row, f"r{i}")["training"]
        if "offload" in training:
            offloaded[(row["model"], row["gpu"])] = training["offload"]["activation_layers"]
    assert offloaded == {("llama-3-70b", "gb200"): 40, ("llama-3-70b", "gb300"): 20,
                         ("llama-3-405b", "gb200"): 95}
