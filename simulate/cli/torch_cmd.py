# SPDX-License-Identifier: Apache-2.0
"""``llmsim simulate-torch``: predict a PyTorch module (or a Hugging Face config) from its trace."""

from __future__ import annotations

from pathlib import Path

import click

from simulate.cli.output import print_json, print_mapping, print_table


@click.command()
@click.argument("factory", required=False, metavar="MODULE:FACTORY")
@click.option("--hf-config", default=None,
              help="A Hugging Face config: a name in datasets/models/ or a config.json path.")
@click.option("--inputs", default=None, metavar="MODULE:FN",
              help="Callable returning the inputs (default: token ids [batch, seq-len]).")
@click.option("--mode", type=click.Choice(["forward", "train_step", "generate"]),
              default="forward", show_default=True)
@click.option("--batch", type=click.IntRange(1, 1_000_000), default=1, show_default=True)
@click.option("--seq-len", type=click.IntRange(1, 10_000_000), default=128, show_default=True)
@click.option("--new-tokens", type=click.IntRange(1, 1_000_000), default=8, show_default=True, help="generate mode.")
@click.option("--dtype", default="fp32", show_default=True, help="--hf-config parameter dtype.")
@click.option("--hardware", default="cpu", show_default=True, help="Hardware catalog name.")
@click.option("--dp", type=click.IntRange(1, 100_000), default=1, show_default=True, help="Data-parallel ranks.")
@click.option("--fsdp", "use_fsdp", is_flag=True, help="FSDP instead of DDP for --dp.")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Store (default: $LLMSIM_DB or ~/.llmsim/llmsim.duckdb).")
@click.option("--no-store", is_flag=True, help="Do not use measured latencies.")
@click.option("--tracking-uri", default=None, help="MLflow tracking URI for the predictors.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(factory: str | None, hf_config: str | None, inputs: str | None, mode: str,
            batch: int, seq_len: int, new_tokens: int, dtype: str, hardware: str, dp: int,
            use_fsdp: bool, db: Path | None, no_store: bool, tracking_uri: str | None,
            as_json: bool) -> None:
    """Trace a module weights-free and predict one step through the engine chain."""
    from simulate.engines import EngineOptions
    from simulate.frontend.torch_model import TorchTarget, predict_torch

    if hf_config is not None:  # the user's file is checked before the store note
        from simulate.frontend.hf import load_hf_config_dict

        load_hf_config_dict(hf_config)
    engines = EngineOptions(store_path=None if db is None else str(db), use_store=not no_store,
                            tracking_uri=tracking_uri).checked()  # a bad --db fails at once

    target = TorchTarget(factory=factory, hf_config=hf_config, inputs=inputs, mode=mode,
                         batch=batch, seq_len=seq_len, new_tokens=new_tokens, dtype=dtype)
    _, prediction = predict_torch(target, hardware=hardware, dp=dp, use_fsdp=use_fsdp,
                                  engines=engines)
    result = {"model": factory or hf_config, "mode": mode, "hardware": hardware, "dp": dp,
              "fsdp": use_fsdp, "step_time_s": prediction.overlap_s or prediction.serial_s,
              **prediction.to_dict()}
    if as_json:
        print_json(result)
        return
    shown = {k: v for k, v in result.items() if not isinstance(v, (dict, list))}
    shown.update({f"engine_{k}_pct": v * 100 for k, v in prediction.engine_share.items()})
    shown.update({f"{k}_s": v for k, v in prediction.per_category_s.items()})
    print_mapping(shown, title="simulate-torch (one device per rank, calls in order)")
    if prediction.unknown:
        print_table([{"aten": u.aten, "count": u.count, "bytes": u.bytes,
                      "roofline_ms": u.time_s * 1e3, "share_pct": u.share * 100}
                     for u in prediction.unknown], title="unknown aten ops (roofline)")
