"""`subnetlab export`: a structured subnetwork (or an edge circuit that is one) as a physically smaller model directory."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def export(
    model: str = typer.Option(..., "--model", help="The model the subnetwork was found in: directory, minilm or hub id."),
    subnetwork: Path = typer.Option(..., "--subnetwork", help="A structured subnetwork, or an edge circuit, .safetensors file."),
    out: Path = typer.Option(..., "--out", help="New (or empty) directory for the small model."),
    ablation: Optional[str] = typer.Option(
        None, "--ablation",
        help="Mean activations (.safetensors) to fold into biases, or 'zero' (default: the subnetwork's own "
             "ablation when that is zero)."),
    onnx: bool = typer.Option(False, "--onnx", help="Also write model.onnx (needs subnetlab[export])."),
    edges_as_nodes: bool = typer.Option(
        False, "--edges-as-nodes",
        help="An edge circuit that removes some but not all edges of a node it keeps: export its node-level closure "
             "(every edge among the kept nodes; the model then differs from the circuit)."),
) -> None:
    """Remove the subnetwork's closed heads and MLPs, fold their ablation values into biases, and save
    a model that `subnetlab.load_model(DIR)` (and every --model DIR) loads with the smaller shapes."""
    from subnetlab.export import ExportSettings, export_files

    settings = ExportSettings(model=model, subnetwork=str(subnetwork), out=str(out), ablation=ablation, onnx=onnx,
                              edges_as_nodes=edges_as_nodes)
    result = export_files(settings)
    p = result.parameters
    heads = [len(layer.heads) for layer in result.plan.layers]
    mlps = sum(layer.mlp for layer in result.plan.layers)
    print(f"written: {result.directory} (load it with subnetlab.load_model; plain transformers from_pretrained "
          "refuses it: its per-layer shapes are not a transformers config)")
    print(f"parameters: {p['before']:,} -> {p['after']:,} ({p['after'] / p['before'] - 1:+.1%}); "
          f"removed heads {p['removed_heads']:,}, MLPs {p['removed_mlps']:,}; "
          f"kept shared key/value {p['kept_shared_kv']:,}; added biases {p['added_biases']:,}")
    print(f"heads per layer: {' '.join(map(str, heads))} (of {result.plan.num_heads}); "
          f"MLPs kept: {mlps} of {len(result.plan.layers)}")
    for note in result.notes:
        print(f"note: {note}")
    if result.onnx is not None:
        print(f"onnx: {result.onnx}")


def register(app: typer.Typer) -> None:
    app.command("export")(export)
