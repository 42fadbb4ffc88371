# SPDX-License-Identifier: Apache-2.0
"""A collective champion answers only the node counts its rows of that kind spanned
(`predictors.domain.span_fields`); the engine chain prices the rest with the link model."""

from __future__ import annotations

import json

import numpy as np
import xgboost as xgb

from analytical.hardware import get_hardware
from analytical.ops import CollectiveKind, CollectiveSpec
from predictors.domain import outside_domain, training_domain
from predictors.features import feature_names
from predictors.loader import load_predictor_dir
from predictors.model import HyperParams, LatencyModel, Target
from simulate.engines import EngineChain

AR, SR = CollectiveKind.ALL_REDUCE, CollectiveKind.SEND_RECV
HW = get_hardware("h100-sxm")


def _op(kind: CollectiveKind, group: int, per_node: int, size: int = 2**20) -> CollectiveSpec:
    return CollectiveSpec(kind=kind, size_bytes=size, group_size=group, ranks_per_node=per_node)


# one node's all-reduce table (groups 2, 4, 8), as aiconfigurator's NCCL tables
ONE_NODE = [_op(AR, g, g, s) for g in (2, 4, 8) for s in (2**16, 2**20, 2**24)]
# Vidur's shape: all-reduce inside a node, send/recv also between two nodes (1 rank each)
VIDUR = [_op(AR, 4, 4), _op(SR, 2, 2), _op(SR, 2, 1)]


def test_the_domain_records_each_kinds_node_counts_in_json():
    domain = training_domain(VIDUR)
    assert domain["nodes.all_reduce"] == [1]
    assert domain["nodes.send_recv"] == [1, 2]
    assert json.loads(json.dumps(domain)) == domain


def test_a_node_count_the_kind_never_spanned_is_outside():
    domain = training_domain(ONE_NODE)
    assert outside_domain(domain, _op(AR, 16, 8)) == "all_reduce at nodes=2"
    assert outside_domain(domain, _op(AR, 64, 8, size=2**28)) == "all_reduce at nodes=8"
    # inside the span: another size, and a group size inside one node
    assert outside_domain(domain, _op(AR, 8, 8, size=2**30)) is None
    assert outside_domain(domain, _op(AR, 6, 6)) is None
    # per kind: two-node send/recv does not make a two-node all-reduce seen
    vidur = training_domain(VIDUR)
    assert outside_domain(vidur, _op(SR, 2, 1)) is None
    assert outside_domain(vidur, _op(AR, 2, 1)) == "all_reduce at nodes=2"
    # an unseen kind is named as such first
    assert outside_domain(domain, _op(SR, 2, 1)) == "kind=send_recv"


def test_a_domain_saved_before_node_spans_checks_no_node_count():
    old = {k: v for k, v in training_domain(ONE_NODE).items() if not k.startswith("nodes.")}
    assert outside_domain(old, _op(AR, 16, 8)) is None


def _saved(tmp_path, domain):
    """A collective model of the given domain, saved and loaded as simulate loads one."""
    x = np.random.default_rng(0).normal(size=(32, len(feature_names("collective"))))
    booster = xgb.train({"nthread": 1}, xgb.DMatrix(x, label=np.zeros(32)), num_boost_round=2)
    model = LatencyModel(booster=booster, family="collective", hardware=HW.name,
                         target=Target.LOG_ROOFLINE_RATIO, params=HyperParams(),
                         domain=domain)
    return load_predictor_dir(model.save(tmp_path / "m"), hw=HW)


def _chain(predictor) -> EngineChain:
    chain = EngineChain(HW, use_store=False, use_predictors=True, tracking_uri="sqlite:////nx")
    chain._predictors["collective"] = predictor
    return chain


def test_the_chain_prices_an_inter_node_collective_with_the_link_model(tmp_path):
    one_node = training_domain(ONE_NODE)
    inside, across = _op(AR, 8, 8), _op(AR, 16, 8)
    est = _chain(_saved(tmp_path, one_node)).estimate_many([inside, across])
    assert [e.engine for e in est] == ["xgboost", "roofline"]
    assert est[1].detail == ("link model (collective champion never trained on "
                             "all_reduce at nodes=2)")
    # the same champion without node spans (saved before them) is asked the 2-node one
    old = {k: v for k, v in one_node.items() if not k.startswith("nodes.")}
    est = _chain(_saved(tmp_path / "old", old)).estimate_many([inside, across])
    assert [e.engine for e in est] == ["xgboost", "xgboost"]
