"""`subnetlab models` and `subnetlab inspect`: what subnetlab supports, and a model's components."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table


def models() -> None:
    """List the supported architecture families (each with an example), the builtin model aliases and the
    model kinds each command accepts."""
    from subnetlab.models import BUILTIN_ALIASES, FAMILIES
    from subnetlab.models.accepts import COMMAND_MODELS, KIND_NAMES, accepted_models

    table = Table(title="Architecture families")
    for col in ("family", "kind", "model types", "components", "examples"):
        table.add_column(col)
    for spec in FAMILIES.values():
        components = "heads, MLPs" if spec.has_components else "weights only"
        table.add_row(spec.family, KIND_NAMES[spec.kind], ", ".join(spec.model_types), components, spec.example)
    commands = Table(title="Models each command accepts")
    commands.add_column("command")
    commands.add_column("models")
    for name in COMMAND_MODELS:
        commands.add_row(name, accepted_models(name).removeprefix("Models: "))
    aliases = Table(title="Builtin aliases")
    aliases.add_column("alias")
    aliases.add_column("model")
    for name, (description, _) in BUILTIN_ALIASES.items():
        aliases.add_row(name, description)
    console = Console()
    console.print(table)
    console.print(aliases)
    console.print(commands)


def inspect(
    model: str = typer.Option(..., "--model", help="Alias (minilm), local directory or hub id."),
    edges: bool = typer.Option(False, "--edges", help="Print the computation graph instead: writers, readers and "
                               "the number of edges between them (edge-level circuits)."),
    embedding_nodes: int = typer.Option(None, "--embedding-nodes", help="With --edges: 1 joins the token and "
                                        "position embeddings into one writer (default: as many as the family has)."),
) -> None:
    """Print the component table: layers x heads, head dimension, parameters per head and per MLP.

    For a model written by `subnetlab export`: the heads and MLP kept in each layer and its parameter count.
    With --edges: the model's computation graph (writers, readers, edges).
    """
    from pathlib import Path

    from subnetlab.errors import SubnetlabError
    from subnetlab.export import is_exported
    from subnetlab.models import load_model, resolve

    if embedding_nodes is not None and not edges:
        raise SubnetlabError("--embedding-nodes: only with --edges (it shapes the computation graph --edges prints)")
    if is_exported(Path(resolve(model)).expanduser()):
        _inspect_exported(model, Path(resolve(model)).expanduser())
        return
    loaded = load_model(model)
    a = loaded.adapter
    if edges:
        _inspect_edges(model, a, embedding_nodes)
        return
    per_head, per_mlp = a.params_per_head(), a.params_per_mlp()
    console = Console()
    console.print(
        f"{model}: family {a.family}, {a.num_layers} layers x {a.num_heads} heads "
        f"({a.num_kv_heads} key/value heads), head dim {a.head_dim}, hidden {a.hidden_size}, "
        f"fingerprint {a.fingerprint()}"
    )
    table = Table()
    for col in ("layer", "heads", "params / head", "params / MLP", "attention output", "MLP output"):
        table.add_column(col)
    for layer in range(a.num_layers):
        table.add_row(
            str(layer), str(a.num_heads), f"{per_head[layer].mean():,.0f}", f"{per_mlp[layer]:,.0f}",
            a.module_name(a.head_output_module(layer)), a.module_name(a.mlp_output_module(layer)),
        )
    console.print(table)
    total = per_head.sum() + per_mlp.sum()
    console.print(
        f"components: {a.num_layers * a.num_heads} heads + {a.num_layers} MLPs; "
        f"their parameters: {total:,.0f} (heads {per_head.sum() / total:.1%})"
    )


def _inspect_edges(model: str, adapter, embedding_nodes: int | None) -> None:
    """Writers, readers (Q/K/V of each head, each MLP, the logits) and the edge count of the model's graph."""
    from subnetlab.errors import SubnetlabError
    from subnetlab.intervene.edges import check_edge_family
    from subnetlab.models.graph import Graph

    try:
        check_edge_family(adapter)  # the models whose graph the circuit commands can cut, as they refuse the others
    except SubnetlabError as e:
        raise SubnetlabError(f"--edges: {e}") from None
    graph = Graph.from_adapter(adapter, embedding_nodes)
    print(f"{model}: family {graph.family}, {graph.num_layers} layers x {graph.num_heads} heads "
          f"({graph.num_kv_heads} key/value heads), {graph.num_embeddings} embedding node(s)")
    print(f"writers ({len(graph.writers)}): {' '.join(graph.writers)}")
    print(f"readers ({len(graph.readers)}): {' '.join(graph.readers)}")
    for block in graph.reader_blocks:
        print(f"  {block.name}: {len(block.readers)} reader(s) x {block.writers} writers = "
              f"{len(block.readers) * block.writers} edges")
    print(f"edges: {graph.num_edges}")


def _inspect_exported(model: str, directory) -> None:
    """Heads per layer (which, and their key/value heads), MLPs kept, and parameters of an exported model."""
    from subnetlab.export import parameter_count, read_plan, read_record
    from subnetlab.export.api import head_for
    from subnetlab.models import load_model

    record, plan = read_record(directory), read_plan(directory)
    loaded = load_model(model, head=head_for([record.get("architecture", "")]))
    count, p = parameter_count(loaded.model), record.get("parameters", {})
    console = Console()
    console.print(
        f"{model}: exported {plan.family} model ({type(loaded.model).__name__}) from {record['source']['model']}, "
        f"{len(plan.layers)} layers of up to {plan.num_heads} heads ({plan.num_kv_heads} key/value heads), "
        f"head dim {plan.head_dim}, hidden {plan.hidden_size}; ablation folded: {record['ablation']['kind']}"
    )
    table = Table()
    for col in ("layer", "heads", "kept heads", "key/value heads", "MLP"):
        table.add_column(col)
    for i, layer in enumerate(plan.layers):
        table.add_row(str(i), f"{len(layer.heads)} / {plan.num_heads}", " ".join(map(str, layer.heads)) or "-",
                      " ".join(map(str, layer.kv_heads)) or "-",
                      "kept" if layer.mlp else ("constant" if layer.mlp_constant else "removed (zero)"))
    console.print(table)
    before = p.get("before")
    change = f" ({count / before - 1:+.1%} from the source's {before:,})" if before else ""
    console.print(f"heads: {sum(len(l.heads) for l in plan.layers)} of {plan.num_heads * len(plan.layers)}; "
                  f"MLPs: {sum(l.mlp for l in plan.layers)} of {len(plan.layers)}; parameters: {count:,}{change}")
    for note in record.get("notes", []):
        console.print(f"note: {note}")


def register(app: typer.Typer) -> None:
    app.command("models")(models)
    app.command("inspect")(inspect)
