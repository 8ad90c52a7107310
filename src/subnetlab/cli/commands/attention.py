"""`subnetlab attention`: what each head attends to on sentence pairs (Figures 7 and 9 of the Heuristic Core paper)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from subnetlab.cli.commands._options import DEVICE_HELP, check_max_length_option, data_flag_options


def attention(
    model: str = typer.Option(..., "--model", help="Model directory (e.g. runs/ft/model), minilm or a hub id."),
    data: str = typer.Option(..., "--data", help="Sentence pairs: a data file (see --format), task:NAME[:SPLIT], or your "
                       "own data task:file:PATH / task:hub:NAME[:CONFIG] (its held-out split; see the data flags)."),
    out: Path = typer.Option(..., "--out", help="Where metrics.json, report.md and maps/*.png go."),
    heads: str = typer.Option("all", "--heads", help="Heads for the table and the maps: L4.H0,L2.H5, core:DIR or all."),
    format: str = typer.Option("hans", "--format", help="Format of --data: hans, mnli, qqp or paws-qqp."),
    subcase: Optional[str] = typer.Option(None, "--subcase", help="Keep only the pairs of this subcase (e.g. ln_subject/object_swap)."),
    examples: int = typer.Option(200, "--examples", help="Sentence pairs to average over (the first N)."),
    maps: int = typer.Option(2, "--maps", help="Example pairs to draw attention maps for (per selected head)."),
    max_length: int = typer.Option(128, "--max-length"),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    data_flags: dict = None,
) -> None:
    """Per head: share of attention to the same word in the other sentence, the previous and next
    token, [CLS]/[SEP] and itself; the dominant pattern; attention-map PNGs for the selected heads."""
    from subnetlab.cli.commands._options import DATA_FLAGS, with_data_options
    from subnetlab.errors import SubnetlabError
    from subnetlab.experiments.heuristic_core.steps import attention_step, resolve_heads
    from subnetlab.models import load_model
    from subnetlab.runtime import resolve_device
    from subnetlab.tasks.registry import get_task, load_file

    if examples < 1:
        raise SubnetlabError(f"--examples {examples} must be at least 1")
    runs_on = resolve_device(device)  # an unknown or absent device is refused before anything loads
    check_max_length_option(model, max_length)
    given = {k: v for k, v in data_flags.items() if v is not None}
    options: dict = {}
    own = data.startswith(("task:file:", "task:hub:"))
    if own:  # your own data: the whole rest names it (paths may hold ':'), its held-out split gives the pairs
        name, split = data[5:], ""
        options = with_data_options(name, {}, **given)
    elif given:
        raise SubnetlabError(f"{DATA_FLAGS[next(iter(given))][0]}: only for your own data (--data task:file:PATH "
                             f"or task:hub:NAME[:CONFIG]), not {data}")
    if data.startswith("task:"):
        if not own:
            name, _, split = data[5:].partition(":")
        t = get_task(name, **options)
        pool = t.examples(split or next(iter(t.eval_splits)))
    else:
        if not Path(data).is_file():
            raise SubnetlabError(f"{data}: no such file")
        pool, _ = load_file(format, data)
    if subcase is not None:
        pool = [ex for ex in pool if ex.subcase == subcase]
        if not pool:
            raise SubnetlabError(f"--subcase {subcase}: no pair of {data} has it")
    pairs = [(ex.text_a, ex.text_b) for ex in pool if ex.text_b is not None][:examples]
    if not pairs:
        raise SubnetlabError(f"{data}: no sentence pairs")
    loaded = load_model(model, head="base", attn_implementation="eager")
    loaded.model.to(runs_on)
    if loaded.tokenizer is None:
        raise SubnetlabError(f"{model}: no tokenizer next to the model")
    listed = resolve_heads(heads, loaded.adapter.num_layers, loaded.adapter.num_heads)
    config = {"command": "attention", "model": model, "data": data, "format": format, "subcase": subcase,
              "examples": len(pairs), "heads": heads, "maps": maps, "max_length": max_length}
    if own:
        config["task_options"] = options
    from subnetlab.run_directory import absolute_inputs

    config = absolute_inputs(config)  # input files absolute: the same run from any working directory
    attention_step(loaded, pairs, listed, out, config=config, maps=maps if heads != "all" else 0, max_length=max_length)
    print((out / "report.md").read_text(encoding="utf-8"))


def register(app: typer.Typer) -> None:
    app.command("attention")(data_flag_options(attention))
