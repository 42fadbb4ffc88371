# SPDX-License-Identifier: Apache-2.0
"""Pipeline split with the embedding and the loss counted as layers (Megatron-Core
account_for_embedding/loss_in_pipeline_split; Llama 3 section 3.3.2) and the interleaved
schedule's per-stage activation memory."""

from __future__ import annotations

import pytest

from analytical.memory import training_memory
from analytical.model import load_model
from analytical.parallel import ParallelConfig, PipelineSplit, Recompute, Schedule
from analytical.stage import chunk_layers, stage_layers

SPLIT = PipelineSplit.EMBEDDING_LOSS


def test_even_split_is_the_contiguous_ceil_layout():
    chunks = chunk_layers(10, 4)
    assert [list(c) for c in chunks] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert stage_layers(10, pp=2, vpp=2, stage=0) == [0, 1, 2, 6, 7, 8]


def test_llama3_405b_split_leaves_the_end_chunks_to_embedding_and_loss():
    # 126 layers + embedding + loss = 128 slots = pp 16 x vpp 8 one-slot chunks.
    chunks = chunk_layers(126, 128, SPLIT)
    assert len(chunks[0]) == 0 and len(chunks[-1]) == 0
    assert all(len(c) == 1 for c in chunks[1:-1])
    assert [i for c in chunks for i in c] == list(range(126))
    assert len(stage_layers(126, pp=16, vpp=8, stage=0, split=SPLIT)) == 7
    assert len(stage_layers(126, pp=16, vpp=8, stage=1, split=SPLIT)) == 8
    assert len(stage_layers(126, pp=16, vpp=8, stage=15, split=SPLIT)) == 7


def test_split_too_fine_for_the_model_is_rejected():
    from analytical.errors import SpecError
    with pytest.raises(SpecError, match="parallel.pp"):
        chunk_layers(4, 8, SPLIT)


def _memory(split: PipelineSplit) -> float:
    par = ParallelConfig(tp=8, pp=16, dp=4, vpp=4, sp=True, zero=1, pipeline_split=split)
    return training_memory(load_model("llama-3-405b"), par, micro_batch=1, seq_len=8192,
                           recompute=Recompute.NONE, schedule=Schedule.INTERLEAVED,
                           num_microbatches=32).activations_bytes


def test_split_memory_is_the_heavier_of_stage_0_and_stage_1():
    # vpp 4, 2 slots per chunk. Even: stage 0 holds 8 layers (and the embedding output) for
    # 16 + 15/4 micro-batches. Split: stage 0 holds 7 for as many, stage 1 8 for 16 + 13/4.
    even, split = _memory(PipelineSplit.EVEN), _memory(SPLIT)
    assert split < even
    assert split / even == pytest.approx(8 * (16 + 13 / 4) / (8 * (16 + 15 / 4)), rel=0.01)


def test_a_stage_left_with_only_the_embedding_is_rejected():
    from analytical.errors import SpecError
    from analytical.stage import stage_params
    # 32 layers + 2 slots over pp 34, one slot each: stage 0 would hold only the embedding.
    with pytest.raises(SpecError, match="holds no layer"):
        stage_params(load_model("llama-2-7b"), pp=34, stage=0, split=SPLIT)
