# SPDX-License-Identifier: Apache-2.0
"""Serving simulation: request streams through a batching scheduler on a paged KV cache.

`workload` makes request streams, `kv_cache` allocates blocks, `schedulers` form each step's batch,
`loop` advances time with a step-cost model, `metrics` summarises. The step-cost model (how long
one batched forward takes) comes from `simulate.inference`, which asks the engine chain.
"""
