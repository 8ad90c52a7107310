"""Bad input, across the commands: one `error:` line, exit status 2, no traceback, nothing under --out.

Every row runs the real command in this process (``subnetlab.cli.main``) on tiny models saved with
``save_pretrained`` in a temporary directory, so a row costs a fraction of a second. A row names the
command line (``{bert}``, ``{out}`` ... are filled in from the fixtures below) and a fragment of the
one error line it must print. ``{out}`` is a directory that does not exist: after the command it must
still not exist (the check and the lock of ``--out`` leave nothing behind either).
"""

from __future__ import annotations

import os
import re
import shutil
import struct
from pathlib import Path

import pytest
import torch

from subnetlab.cli import main

NLI = ["--task", "nli-synthetic", "--task-option", "n_train=20", "--task-option", "n_eval=10",
       "--task-option", "hans_per_subcase=1"]
ARITH = ["--task-option", "n_eval=10", "--task-option", "n_test=10"]
DISCOVER = ["discover", "--model", "{gpt2}", "--task", "arith:ab", "--samples", "100", *ARITH, "--epochs", "1"]
TRANSFER = ["transfer", "--model", "{gpt2}", "--task", "arith:a^2+ab", "--disambiguation", "0,10", *ARITH, "--epochs", "1"]
PRUNE = ["prune", "--model", "{bert}", *NLI, "--sparsity", "0.5", "--seeds", "0", "--preset", "demo"]
FINETUNE = ["finetune", "--model", "{bert}", *NLI, "--max-steps", "2"]
EVALUATE = ["evaluate", "--model", "{bert}", *NLI]
CIRCUIT_EVAL = ["circuit-eval", "--model", "{lm}", "--scores", "{nodescores}"]
CIRCUIT = ["circuit", "--model", "{lm}", "--task", "circuit:ioi", "--task-option", "n_train=4", "--task-option",
           "n_eval=2"]
EAP = [*CIRCUIT, "--method", "eap"]
PAIR_COLUMNS = ["--text-column", "clean", "--corrupted-column", "corrupted", "--answer-column", "answer",
                "--wrong-answer-column", "wrong"]
EAP_IG = [*CIRCUIT, "--method", "eap-ig"]
EFFECTIVE = ["effective-size", "--checkpoints", "{ft}", *NLI, "--preset", "demo", "--levels", "0.1:0.3:0.1"]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Tiny checkpoints, damaged files and subnetworks; name -> path."""
    from transformers import BertConfig, BertForSequenceClassification, GPT2LMHeadModel

    from subnetlab.intervene import ComponentValues
    from subnetlab.io import save_tensors
    from subnetlab.methods.finetune.model import arithmetic_gpt2_config
    from subnetlab.models import get_adapter
    from subnetlab.subnetwork import Subnetwork
    from subnetlab.tasks import NLI3
    from tests.unit.lottery_helpers import word_tokenizer

    root = tmp_path_factory.mktemp("bad-inputs")
    torch.manual_seed(0)
    paths: dict[str, str] = {}
    for name, positions in (("bert", 64), ("bert8", 8)):
        config = BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=32, max_position_embeddings=positions, num_labels=3,
                            id2label=dict(enumerate(NLI3)), label2id={k: i for i, k in enumerate(NLI3)})
        BertForSequenceClassification(config).save_pretrained(root / name)
        word_tokenizer().save_pretrained(root / name)
        paths[name] = str(root / name)
    bert = BertForSequenceClassification.from_pretrained(paths["bert"])
    gpt2 = GPT2LMHeadModel(arithmetic_gpt2_config(2, 23, 21))  # arithmetic up to 20 (+ 3 specials)
    gpt2.save_pretrained(root / "gpt2")
    paths["gpt2"] = str(root / "gpt2")

    corrupt = root / "corrupt"  # config and tokenizer fine, weights file garbage
    shutil.copytree(root / "bert", corrupt)
    (corrupt / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header!!}")
    noweights = root / "noweights"
    noweights.mkdir()
    shutil.copy(root / "bert" / "config.json", noweights / "config.json")
    paths.update(corrupt=str(corrupt), noweights=str(noweights))

    adapter = get_adapter(bert)
    good = Subnetwork.structured(adapter, torch.tensor([[1.0, 0.0], [1.0, 1.0]]), ablation="mean")
    good.save(root / "sub.safetensors")
    data = bytearray((root / "sub.safetensors").read_bytes())  # damaged bytes: the last MLP gate becomes NaN
    data[-4:] = struct.pack("<f", float("nan"))
    (root / "nan.safetensors").write_bytes(bytes(data))
    save_tensors(root / "half.safetensors", {"heads": torch.full((2, 2), 0.5), "mlps": torch.ones(2)}, good.metadata())
    save_tensors(root / "shape.safetensors", {"heads": torch.ones(3, 2), "mlps": torch.ones(3)}, good.metadata())
    Subnetwork.structured(get_adapter(gpt2), torch.ones(2, 4)).save(root / "gpt2-sub.safetensors")
    weights = get_adapter(gpt2).weight_matrices(("attention", "mlp"))  # weight masks keeping nothing / everything
    for name, fill in (("gpt2-empty", torch.zeros_like), ("gpt2-all", torch.ones_like)):
        Subnetwork.from_weight_masks(get_adapter(gpt2), {n: fill(gpt2.get_parameter(n)) for n in weights}).save(
            root / f"{name}.safetensors")
        paths[name] = str(root / f"{name}.safetensors")
    ComponentValues([torch.zeros(4, 4) for _ in range(2)], [torch.zeros(16) for _ in range(2)]).save(root / "other-means.safetensors")
    for name in ("sub", "nan", "half", "shape", "gpt2-sub", "other-means"):
        paths[name] = str(root / f"{name}.safetensors")
    paths["not-means"] = str(root / "bert" / "model.safetensors")
    (root / "a-file").write_text("not a directory\n")
    paths["afile"] = str(root / "a-file")
    (root / "not-a-config.json").write_text('{"format": "subnetlab.graph/1", "edges": []}')
    paths["notconfig"] = str(root / "not-a-config.json")
    (root / "full").mkdir()
    (root / "full" / "kept.txt").write_text("an earlier result\n")
    paths["full"] = str(root / "full")
    paths["missing"] = str(root / "no-such-file.safetensors")
    step = root / "ft" / "checkpoints" / "step-10"  # a fine-tuning run with one checkpoint
    shutil.copytree(root / "bert", step)
    (step / "trainer_state.json").write_text("{}")
    paths["ft"] = str(root / "ft")
    (root / "empty.csv").write_text("")  # your own data: an empty file, and two labels for a 3-output head
    (root / "two.csv").write_text("text,label\n" + "".join(f"the cat {i},{'ab'[i % 2]}\n" for i in range(20)))
    paths.update(emptycsv=str(root / "empty.csv"), twocsv=str(root / "two.csv"))
    # issue 30: damaged metadata, pickled weights, an exported model, other families' files, a malformed CSV
    for name, key, value in (("seed-text", "seed", "abc"), ("target-text", "target_sparsity", "abc"),
                             ("target-nan", "target_sparsity", "nan"), ("sparsity-text", "sparsity", "abc")):
        save_tensors(root / f"{name}.safetensors", {"heads": good.heads, "mlps": good.mlps}, {**good.metadata(), key: value})
        paths[name] = str(root / f"{name}.safetensors")
    pickled = root / "pickled"  # weights only as a pickle that would run a command if unpickled
    pickled.mkdir()
    for name in ("config.json", "vocab.txt", "tokenizer_config.json"):
        if (root / "bert" / name).is_file():
            shutil.copy(root / "bert" / name, pickled / name)
    command = f"touch {root / 'unpickled'}".encode()  # what the pickle runs if anything ever unpickles it
    (pickled / "pytorch_model.bin").write_bytes(b"cposix\nsystem\n(S'" + command + b"'\ntR.")
    paths["pickled"], paths["unpickled"] = str(pickled), str(root / "unpickled")
    from subnetlab.export import export_subnetwork
    from subnetlab.models import load_model

    export_subnetwork(load_model(paths["bert"], head="classification"), good, root / "exported")
    paths["exported"] = str(root / "exported")
    gpt2_weights = Subnetwork.from_weight_masks(get_adapter(gpt2), {"transformer.h.0.attn.c_attn.weight":
                                                                    torch.ones(128, 384)})
    gpt2_weights.save(root / "gpt2-weights.safetensors")
    ComponentValues([torch.zeros(2, 8, dtype=torch.int32) for _ in range(2)],
                    [torch.zeros(16, dtype=torch.int32) for _ in range(2)]).save(root / "int-means.safetensors")
    (root / "random.safetensors").write_bytes(bytes(range(256)) * 4)
    paths.update({name: str(root / f"{name}.safetensors") for name in ("gpt2-weights", "int-means", "random")})
    (root / "bad.csv").write_text('text,label\nthe cat sleeps,a\n"the dog runs,b\nthe bird sings,a\n')
    paths["badcsv"] = str(root / "bad.csv")
    # issue 37: a family whose edges are refused (OLMo-2: norms after each block and none before; Gemma-2's edges
    # are EAP-IG's since issue 47)
    from transformers import Olmo2Config, Olmo2ForCausalLM

    Olmo2ForCausalLM(Olmo2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1, pad_token_id=1, bos_token_id=0,
                                 eos_token_id=0)).save_pretrained(root / "olmo2")
    paths["olmo2"] = str(root / "olmo2")
    _circuit_files(root, paths)
    _mib_task_files(root, paths)
    _inconsistent_models(root, paths)
    (root / "a-dir.json").mkdir()  # issue 53, class 3: a directory where an output file belongs
    (root / "a-dir.json" / "kept.txt").write_text("an earlier result\n")
    paths["dirjson"] = str(root / "a-dir.json")
    (root / "tables" / "t.csv").mkdir(parents=True)  # results' STEM.csv taken by a directory
    paths["tables"] = str(root / "tables")
    for name in ("pipe.csv", "pipe.safetensors", "pipe.json"):  # class 4: named pipes, which block a reader
        os.mkfifo(root / name)
        paths[name.replace(".", "-")] = str(root / name)
    return paths


def _inconsistent_models(root: Path, paths: dict[str, str]) -> None:
    """Issue 53: model directories whose config.json and weights disagree, or whose config disagrees with itself;
    a directory where a data file belongs; JSON nested 200,000 deep."""
    import json

    from transformers import LlamaConfig, LlamaForCausalLM

    def edited(source: str, name: str, **changes) -> None:
        shutil.copytree(root / source, root / name)
        config = json.loads((root / name / "config.json").read_text())
        (root / name / "config.json").write_text(json.dumps({**config, **changes}))
        paths[name] = str(root / name)

    edited("lm", "lm-3-layers", n_layer=3)  # weights for 2: the third layer would be random
    edited("lm", "lm-1-layer", n_layer=1)  # the second layer's weights have no place
    edited("lm", "lm-wider-vocab", vocab_size=int(json.loads((root / "lm" / "config.json").read_text())["vocab_size"]) + 7)
    edited("bert", "bert-3-layers", num_hidden_layers=3)
    edited("lm", "lm-heads-not-dividing", n_head=3)  # 16 wide
    edited("lm", "lm-no-heads", n_head=0)
    edited("lm", "lm-layers-text", n_layer="two")
    edited("lm", "lm-negative-vocab", vocab_size=-5)
    LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1)).save_pretrained(root / "llama")
    edited("llama", "llama-no-kv-heads", num_key_value_heads=0)
    (root / "data-dir").mkdir()
    (root / "data-dir" / "rows.csv").write_text("text,label\nthe cat,a\n")
    (root / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    deep_run = root / "deep-run"
    deep_run.mkdir()
    (deep_run / "config.json").write_text('{"command": "evaluate"}')
    (deep_run / "metrics.json").write_text('{"eval": ' + "[" * 200_000 + "]" * 200_000 + "}")
    paths.update({"datadir": str(root / "data-dir"), "deep": str(root / "deep.json"), "deeprun": str(deep_run)})


def _mib_task_files(root: Path, paths: dict[str, str]) -> None:
    """Copies of MIB's datasets (issue 35) in JSON lines, each bad in one way (tests/unit/mib_helpers.py)."""
    import json

    from tests.unit.mib_helpers import arithmetic_rows, ioi_rows, mcqa_rows, save_jsonl

    ioi, mcqa = ioi_rows(4), mcqa_rows(3)
    counts = json.loads(json.dumps(ioi))
    counts[2]["metadata"]["random_c"] = "Frank"  # four tokens of the tiny BPE, the other names one
    mcqa[1]["answerKey"] = 7
    label = [dict(row, label=1.5) for row in arithmetic_rows("+", 2)]
    nometa = [{k: v for k, v in row.items() if k != "metadata"} for row in ioi]
    for name, rows in (("ioi", ioi), ("counts", counts), ("key", mcqa), ("label", label), ("nometa", nometa)):
        paths[f"mib-{name}"] = save_jsonl(root / f"mib-{name}.jsonl", rows)
    (root / "mib-latin1.jsonl").write_bytes(json.dumps(ioi[0]).encode() + b"\n" +
                                            json.dumps(ioi[1]).encode().replace(b" went ", b" caf\xe9 ") + b"\n")
    paths["mib-latin1"] = str(root / "mib-latin1.jsonl")


def _circuit_files(root: Path, paths: dict[str, str]) -> None:
    """Circuit tasks (issue 27): a tiny GPT-2 with a byte-level BPE tokenizer, prompt-pair files failing one check each."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from subnetlab.io import save_tensors
    from tests.unit.circuit_helpers import gpt2_style_tokenizer

    tok = gpt2_style_tokenizer()
    lm = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2, n_head=2))
    lm.save_pretrained(root / "lm")
    _edge_circuit_files(root, paths, lm)
    _mib_graph_files(root, paths, lm)
    _view_files(root, paths)
    tok.save_pretrained(root / "lm")
    paths["lm"] = str(root / "lm")
    clean, corrupted = "When Mary and John went to the store, John gave a drink to", "When Amy and Lisa went to the store, Kate gave a drink to"
    good = f'"{clean}","{corrupted}"," Mary"," John"'
    for name, row in (("pairs-length", f'"{clean}","When Amy went to the store, Kate gave a drink to"," Mary"," John"'),
                      ("pairs-answer", f'"{clean}","{corrupted}"," Frank"," John"'),
                      ("pairs-same", f'"{clean}","{corrupted}"," Mary"," Mary"'),
                      ("pairs-one-answer", good)):  # every pair the same answer: nothing to shuffle
        (root / f"{name}.csv").write_text(f"clean,corrupted,answer,wrong\n{good}\n{row}\n{good}\n")
        paths[name] = str(root / f"{name}.csv")
    save_tensors(root / "node-scores.safetensors", {"heads": torch.ones(3, 2), "mlps": torch.ones(3)},
                 {"format": "subnetlab.attribution/1"})
    paths["nodescores"] = str(root / "node-scores.safetensors")
    save_tensors(root / "node-scores-fit.safetensors", {"heads": torch.ones(2, 2), "mlps": torch.ones(2)},
                 {"format": "subnetlab.attribution/1"})
    paths["nodescores-fit"] = str(root / "node-scores-fit.safetensors")
    (root / "latin1.jsonl").write_bytes(b'{"clean": "When Mary and John went to the caf\xe9, John gave a drink to", '
                                        b'"corrupted": "When Amy and Lisa went to the caf\xe9, Kate gave a drink to", '
                                        b'"answer": " Mary", "wrong": " John"}\n')
    (root / "list-graph.json").write_text("[1, 2, 3]")
    junk = root / "junk-run"
    junk.mkdir()
    (junk / "config.json").write_text('{"command": "prune"}')
    (junk / "metrics.json").write_bytes(bytes(range(256)) * 4)
    paths.update({name: str(root / file) for name, file in (("latin1", "latin1.jsonl"), ("listgraph", "list-graph.json"),
                                                            ("junkrun", "junk-run"))})
    _hostile_score_files(root, paths, lm, tok)
    swapped = f'"{clean.replace("Mary", "X").replace("John", "Mary").replace("X", "John")}","{corrupted}"," John"," Mary"'
    _fine_tuned_on_pairs(root, paths, [good, swapped])


def _safetensors_bytes(header: str, data: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header)) + header.encode() + data


def _hostile_score_files(root: Path, paths: dict[str, str], lm, tok) -> None:
    """Issue 36's battery: scores, circuit and graph files that must be refused before any work, each by the one
    reader of such files (``models.circuit_files``)."""
    import json

    from transformers import GPT2Config, GPT2LMHeadModel

    from subnetlab.io import save_tensors
    from subnetlab.models import get_adapter
    from subnetlab.models.circuit import Circuit
    from subnetlab.models.graph import Graph

    adapter = get_adapter(lm)
    graph = Graph.from_adapter(adapter)
    good = torch.linspace(-1.0, 1.0, graph.num_edges)
    meta = {"format": "subnetlab.attribution/1", "method": "eap", **Circuit(graph, good).metadata()}
    files: dict[str, tuple[dict[str, torch.Tensor], dict[str, str]]] = {
        "scores-good": ({"edges": good}, meta),
        "scores-nan": ({"edges": torch.where(torch.arange(graph.num_edges) == 3, float("nan"), good)}, meta),
        "scores-inf": ({"edges": torch.where(torch.arange(graph.num_edges) == 3, float("inf"), good)}, meta),
        "scores-int8": ({"edges": torch.ones(graph.num_edges, dtype=torch.int8)}, meta),
        "scores-float16": ({"edges": good.half()}, meta),
        "scores-no-format": ({"edges": good}, {k: v for k, v in meta.items() if k != "format"}),
        "scores-wrong-format": ({"edges": good}, {**meta, "format": "subnetlab.sweep/1"}),
        "scores-short": ({"edges": good[:-5]}, {"format": "subnetlab.attribution/1"}),
        "scores-other-graph": ({"edges": torch.zeros(Graph.from_adapter(adapter, 1).num_edges)},
                               {**meta, **Circuit(Graph.from_adapter(adapter, 1),
                                                  torch.zeros(Graph.from_adapter(adapter, 1).num_edges)).metadata()}),
        "nodes-inf": ({"heads": torch.tensor([[1.0, float("inf")], [0.0, 1.0]]), "mlps": torch.ones(2)},
                      {"format": "subnetlab.attribution/1"}),
        "nodes-int8": ({"heads": torch.ones(2, 2, dtype=torch.int8), "mlps": torch.ones(2, dtype=torch.int8)},
                       {"format": "subnetlab.attribution/1"}),
        "nodes-no-format": ({"heads": torch.ones(2, 2), "mlps": torch.ones(2)}, {}),
        "nodes-good": ({"heads": torch.ones(2, 2), "mlps": torch.ones(2)}, {"format": "subnetlab.attribution/1"}),
    }
    for name, (tensors, metadata) in files.items():
        save_tensors(root / f"{name}.safetensors", tensors, metadata)
        paths[name] = str(root / f"{name}.safetensors")
    whole = (root / "scores-good.safetensors").read_bytes()
    (root / "scores-truncated.safetensors").write_bytes(whole[: len(whole) // 2])
    (root / "scores-huge-header.safetensors").write_bytes(struct.pack("<Q", 2 ** 40) + b"{}")
    (root / "scores-offsets.safetensors").write_bytes(_safetensors_bytes(
        '{"edges":{"dtype":"F32","shape":[4],"data_offsets":[0,4000]}}', bytes(16)))
    (root / "scores-giant-shape.safetensors").write_bytes(_safetensors_bytes(
        '{"edges":{"dtype":"F32","shape":[1099511627776],"data_offsets":[0,16]}}', bytes(16)))
    for name in ("scores-truncated", "scores-huge-header", "scores-offsets", "scores-giant-shape"):
        paths[name] = str(root / f"{name}.safetensors")
    sweep_graph = root / "sweep-graph.json"  # a sweep's graph.json: the graph, no scores
    graph.save(sweep_graph)
    circuit = Circuit(graph, good, torch.arange(graph.num_edges) % 2 == 0).to_dict()
    circuit["edges"][2]["in_graph"] = float("nan")
    (root / "graph-in-graph-nan.json").write_text(json.dumps(circuit))  # json writes NaN as the bare word NaN
    circuit = Circuit(graph, good, torch.arange(graph.num_edges) % 2 == 0).to_dict()
    circuit["edges"][2]["writer"] = "a9.h9"
    (root / "graph-no-writer.json").write_text(json.dumps(circuit))
    paths.update({"sweep-graph": str(sweep_graph), "graph-in-graph-nan": str(root / "graph-in-graph-nan.json"),
                  "graph-no-writer": str(root / "graph-no-writer.json"), "lm-weights": str(root / "lm" / "model.safetensors")})
    for name, value in (("infrun", '{"eval": {"accuracy": Infinity}}'), ("textrun", '{"accuracy": "high"}')):
        run = root / name  # a finished run whose metrics hold a NaN, or text where a number belongs
        run.mkdir()
        (run / "config.json").write_text('{"command": "evaluate"}')
        (run / "metrics.json").write_text(value)
        paths[name] = str(run)
    from subnetlab.intervene import ComponentValues

    ComponentValues([torch.zeros(2, 8) for _ in range(2)], [torch.zeros(16) for _ in range(2)], architecture="bert").save(
        root / "bert-means.safetensors")  # the tiny BERT's, whose shapes (2 layers, 2 heads of 8, hidden 16) are the lm's
    paths["bert-means"] = str(root / "bert-means.safetensors")
    _gpt2_without_pad(root, paths)
    short = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=8, n_embd=16, n_layer=2, n_head=2))
    short.save_pretrained(root / "lm8")  # prompts of IOI are longer than its 8 positions
    tok.save_pretrained(root / "lm8")
    paths["lm8"] = str(root / "lm8")
    clean, corrupted = "When Mary and John went to the store, John gave a drink to", "When Amy and Lisa went to the store, Kate gave a drink to"
    word = " store"
    good = f'"{clean}","{corrupted}"," Mary"," John"\n'
    (root / "long-line.csv").write_text("clean,corrupted,answer,wrong\n" + good * 3 +  # a 20 MB line among good ones
                                        f'"{clean}{word * 1_700_000}","{corrupted}{word * 1_700_000}"," Mary"," John"\n')
    paths["long-line"] = str(root / "long-line.csv")


def _gpt2_without_pad(root: Path, paths: dict[str, str]) -> None:
    """A GPT-2 language model whose tokenizer and config name no padding token (as GPT-2's own), and a structured
    subnetwork of it: re-fine-tuning it on a classification task batches padded rows."""
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from subnetlab.models import get_adapter
    from subnetlab.subnetwork import Subnetwork
    from tests.unit.lottery_helpers import word_tokenizer

    words = word_tokenizer()
    tok = PreTrainedTokenizerFast(tokenizer_object=words.backend_tokenizer, eos_token="[SEP]", unk_token="[UNK]")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(words), n_positions=64, n_embd=16, n_layer=2, n_head=2,
                                       bos_token_id=3, eos_token_id=3))
    model.save_pretrained(root / "gpt2-nopad")
    tok.save_pretrained(root / "gpt2-nopad")
    Subnetwork.structured(get_adapter(model), torch.tensor([[1.0, 0.0], [1.0, 1.0]])).save(root / "gpt2-nopad-sub.safetensors")
    paths.update({"gpt2-nopad": str(root / "gpt2-nopad"), "gpt2-nopad-sub": str(root / "gpt2-nopad-sub.safetensors")})


def _fine_tuned_on_pairs(root: Path, paths: dict[str, str], rows: list[str]) -> None:
    """What ``subnetlab finetune`` records of a run on prompt pairs (its config's task and ``splits.json``), beside a
    model: a split of the pairs with another ``split_seed`` measures on its training rows (issue 36; split_seed=2
    holds out rows 1 and 8 of the 20, both training rows of the default split)."""
    from subnetlab.io import write_json
    from subnetlab.tasks import get_task

    data = root / "ft-pairs.csv"
    data.write_text("clean,corrupted,answer,wrong\n" + "".join(f"{row}\n" for row in rows) * 10)
    options = {"text_column": "clean", "answer_column": "answer"}
    ft = root / "pairs-ft"
    shutil.copytree(root / "lm", ft / "model")
    write_json(ft / "config.json", {"finetune": {"task": f"file:{data}", "task_options": options}})
    write_json(ft / "splits.json", get_task(f"file:{data}", **options).manifest.to_json())
    paths.update(ftpairs=str(data), pairsft=str(ft / "model"))


def _view_files(root: Path, paths: dict[str, str]) -> None:
    """subnetlab view's inputs: scored graphs of two shapes, one cut short, one with a text score; a pruning run."""
    import json

    from subnetlab.models.circuit import Circuit
    from subnetlab.models.graph import Graph

    for name, layers in (("view-small", 2), ("view-large", 3)):
        graph = Graph("gpt2", layers, 2, 2, 2)
        Circuit(graph, torch.linspace(-1, 1, graph.num_edges)).save(root / f"{name}.json")
    text = (root / "view-small.json").read_text()
    (root / "view-truncated.json").write_text(text[: len(text) // 2])
    data = json.loads(text)
    data["edges"][3]["score"] = "high"
    (root / "view-text-score.json").write_text(json.dumps(data))
    nodes = root / "view-nodes"
    nodes.mkdir()
    shutil.copy(root / "sub.safetensors", nodes / "subnetwork.safetensors")
    (nodes / "metrics.json").write_text('{"seed": 0}')
    paths.update({name: str(root / f"{name}.json") for name in ("view-small", "view-large", "view-truncated",
                                                               "view-text-score")})
    paths["viewnodes"] = str(nodes)


def _edge_circuit_files(root: Path, paths: dict[str, str], lm) -> None:
    """Edge circuits on the tiny language model: one missing an edge between kept nodes, one found with
    corrupted-prompt ablation (nothing fixed to fold into a bias)."""
    from subnetlab.models import get_adapter
    from subnetlab.models.graph import Graph
    from subnetlab.subnetwork import Subnetwork

    adapter = get_adapter(lm)
    graph = Graph.from_adapter(adapter)
    partial = torch.ones(graph.num_edges)
    partial[graph.edge_index("a0.h0->a1.h0<k>")] = 0
    Subnetwork.from_edges(adapter, graph, partial, ablation="zero").save(root / "edges-partial.safetensors")
    Subnetwork.from_edges(adapter, graph, torch.ones(graph.num_edges), ablation="corrupted").save(
        root / "edges-corrupted.safetensors")
    paths.update({name: str(root / f"{name}.safetensors") for name in ("edges-partial", "edges-corrupted")})


def _mib_graph_files(root: Path, paths: dict[str, str], lm) -> None:
    """EAP-IG / MIB graph files of the tiny language model, each malformed in one field (issue 35)."""
    import json

    from subnetlab.models import get_adapter, mib_graph
    from subnetlab.models.circuit import Circuit
    from subnetlab.models.graph import Graph

    one = Graph.from_adapter(get_adapter(lm), embedding_nodes=1)
    two = Graph.from_adapter(get_adapter(lm))
    Circuit(two, torch.ones(two.num_edges)).save(root / "two-embeddings.json")
    # issue 47: what two embedding nodes cannot be joined into MIB's one from (exact patching; log-alphas)
    (root / "two-embeddings-exact.json").write_text(json.dumps({**Circuit(two, torch.ones(two.num_edges)).to_dict(),
                                                                "method": "exact"}))
    Circuit(two, torch.ones(two.num_edges), score_sign="signed").save(root / "two-embeddings-signed.json")
    good = mib_graph.to_dict(Circuit(one, torch.ones(one.num_edges)), 16)
    edges = dict(good["edges"])
    edges.pop("input->m0")
    bad = {"eap-missing-edge": {**good, "edges": edges},
           "eap-text-score": {**good, "edges": {**good["edges"], "a0.h1->m1": {"score": "high", "in_graph": True}}},
           "eap-other-model": {**good, "cfg": {**good["cfg"], "n_layers": 3}},
           "eap-no-cfg": {"nodes": good["nodes"], "edges": good["edges"]},
           "eap-parallel-text": {**good, "cfg": {**good["cfg"], "parallel_attn_mlp": "yes"}},
           "eap-parallel-on-sequential": {**good, "cfg": {**good["cfg"], "parallel_attn_mlp": True}}}
    for name, data in bad.items():
        (root / f"{name}.json").write_text(json.dumps(data))
    torch.save({"cfg": good["cfg"], "src_nodes": list(one.writers)}, root / "eap-short.pt")
    (root / "eap-pickle.pt").write_bytes(b"cposix\nsystem\n(S'true'\ntR.")
    (root / "mib-sub" / "ioi-gpt2").mkdir(parents=True)
    (root / "mib-sub-bad" / "ioi_gpt2").mkdir(parents=True)
    (root / "mib-sub-bad" / "ioi_gpt2" / "importances.json").write_text(json.dumps(
        {**good, "edges": {**good["edges"], "input->m0": {"score": 1.0, "in_graph": "yes"}}}))
    for name in ("two-embeddings", "two-embeddings-exact", "two-embeddings-signed", *bad):
        paths[name] = str(root / f"{name}.json")
    paths.update({"eap-short": str(root / "eap-short.pt"), "eap-pickle": str(root / "eap-pickle.pt"),
                  "mib-sub": str(root / "mib-sub"), "mib-sub-bad": str(root / "mib-sub-bad")})


MIB_EVAL = [*CIRCUIT_EVAL[:-2], "--task", "circuit:ioi", "--task-option", "n_train=2", "--task-option", "n_eval=2"]

CASES: list[tuple[str, list[str], str]] = [
    # --out: a file, under a file (every command that takes --out, checked before anything is loaded)
    ("prune-out-file", [*PRUNE, "--out", "{afile}"], "exists and is not a directory"),
    ("prune-out-under-file", [*PRUNE, "--out", "{afile}/run"], "cannot be created: "),
    ("finetune-out-file", [*FINETUNE, "--out", "{afile}"], "exists and is not a directory"),
    ("evaluate-out-file", [*EVALUATE, "--out", "{afile}"], "exists and is not a directory"),
    ("evaluate-out-under-file", [*EVALUATE, "--out", "{afile}/x/y"], "cannot be created: "),
    ("discover-out-file", [*DISCOVER, "--out", "{afile}"], "exists and is not a directory"),
    ("transfer-out-file", [*TRANSFER, "--condition", "scratch", "--out", "{afile}"], "exists and is not a directory"),
    ("lottery-prune-out-file", ["lottery-prune", "--model", "{bert}", *NLI, "--method", "magnitude", "--out", "{afile}"],
     "exists and is not a directory"),
    ("ablate-out-file", ["ablate", "--model", "{bert}", *NLI, "--heads", "L0.H0", "--out", "{afile}"],
     "exists and is not a directory"),
    ("core-out-file", ["core", "--runs", "{full}", "--out", "{afile}"], "exists and is not a directory"),
    ("reproduce-out-file", ["reproduce", "lottery", "--out", "{afile}"], "exists and is not a directory"),
    ("export-out-file", ["export", "--model", "{bert}", "--subnetwork", "{sub}", "--out", "{afile}"],
     "exists and is not a directory"),
    ("results-out-under-file", ["results", "{full}", "--out", "{afile}/table"],
     "--out: {afile}/table.csv cannot be created: {afile} is a file"),
    # damaged or missing models
    ("inspect-corrupt-weights", ["inspect", "--model", "{corrupt}"], "cannot load the model weights"),
    ("inspect-config-without-weights", ["inspect", "--model", "{noweights}"], "cannot load the model weights"),
    ("inspect-missing-dir", ["inspect", "--model", "./no/such/dir"], "no such model directory"),
    ("evaluate-corrupt-weights", ["evaluate", "--model", "{corrupt}", *NLI], "cannot load the model weights"),
    ("evaluate-config-without-weights", ["evaluate", "--model", "{noweights}", *NLI], "cannot load the model weights"),
    ("finetune-corrupt-weights", ["finetune", "--model", "{corrupt}", *NLI, "--max-steps", "2"],
     "cannot load the model weights"),
    ("prune-corrupt-weights", ["prune", "--model", "{corrupt}", *NLI, "--sparsity", "0.5", "--preset", "demo"],
     "model.safetensors: not a readable safetensors file"),
    ("prune-config-without-weights", ["prune", "--model", "{noweights}", *NLI, "--sparsity", "0.5", "--preset", "demo"],
     "no weights (model.safetensors"),
    ("prune-missing-model-dir", ["prune", "--model", "./no/such/dir", *NLI, "--sparsity", "0.5"],
     "no such model directory"),
    # typed values: KEY=VALUE options name the key and the expected type
    ("prune-set-batch-size-text", [*PRUNE, "--set", "batch_size=abc"],
     "pruning setting batch_size: expected an integer, got 'abc'"),
    ("prune-set-lr-text", [*PRUNE, "--set", "lr=fast"], "pruning setting lr: expected a number, got 'fast'"),
    ("prune-set-unknown-key", [*PRUNE, "--set", "nonsense=1"], "unknown pruning setting(s) nonsense"),
    ("prune-set-no-equals", [*PRUNE, "--set", "batch_size"], "--set: expected KEY=VALUE"),
    # a device map (models.device_map): checked against the model's modules and this machine's devices ({{ }}: braces)
    ("prune-device-map-unknown-module", [*PRUNE, "--device-map", '{{"bert.encoder.layer.9": "cpu"}}'],
     "--device-map: the model has no module 'bert.encoder.layer.9'"),
    ("prune-device-map-unknown-device", [*PRUNE, "--device-map", '{{"bert": "tpu", "classifier": "cpu"}}'],
     "--device-map: module 'bert': device 'tpu': expected"),
    ("prune-device-map-absent-cuda", [*PRUNE, "--device-map", '{{"bert": "cuda:7", "classifier": "cpu"}}'],
     "--device-map: module 'bert': device 'cuda:7'"),
    ("prune-device-map-not-json", [*PRUNE, "--device-map", "{{bert"], "not valid JSON"),
    ("prune-device-map-no-file", [*PRUNE, "--device-map", "no-such-map.json"], "a JSON file of MODULE: DEVICE"),
    ("prune-device-map-and-device", [*PRUNE, "--device-map", "auto", "--device", "cpu"],
     "a device map places the model itself"),
    ("prune-max-memory-without-map", [*PRUNE, "--max-memory", "cpu=1GiB"], "--max-memory is an option of a device map"),
    ("prune-max-memory-bad-size", [*PRUNE, "--device-map", "auto", "--max-memory", "cpu=lots"], "'lots' is not a size"),
    ("prune-task-option-text", ["prune", "--model", "{bert}", "--task", "nli-synthetic", "--task-option", "n_train=abc",
                                "--sparsity", "0.5"], "option n_train: expected an integer, got 'abc'"),
    ("prune-task-option-unknown", [*PRUNE, "--task-option", "bogus=1"], "unknown option(s) bogus"),
    ("finetune-task-option-float", [*FINETUNE, "--task-option", "n_eval=2.5"], "option n_eval: expected an integer"),
    ("evaluate-task-option-text", [*EVALUATE, "--task-option", "seed=abc"], "option seed: expected an integer"),
    ("reproduce-set-wrong-type", ["reproduce", "lottery", "--set", "seeds=abc"],
     "setting seeds of lottery: expected a list"),
    ("reproduce-set-unknown", ["reproduce", "lottery", "--set", "nonsense=1"], "unknown setting 'nonsense'"),
    ("reproduce-unknown-study", ["reproduce", "nonsense"], "unknown reproduction 'nonsense'"),
    ("reproduce-unknown-preset", ["reproduce", "lottery", "--preset", "huge"], "unknown preset 'huge'"),
    # a study's settings are all checked before it writes its config.json (nothing under --out on refusal)
    ("reproduce-subtask-base-train-below-max-number", ["reproduce", "subtask-induction", "--set", "base_train=64"],
     "base_train=64 must be at least max_number=100"),
    ("reproduce-subtask-size-too-large", ["reproduce", "subtask-induction", "--set", "sizes=[100000]"],
     "exceed the 9900 pairs with a != b"),
    ("reproduce-subtask-bad-operation", ["reproduce", "subtask-induction", "--set", "target_op=a**b"],
     "'*' multiplies two factors"),
    ("reproduce-subtask-patience-zero", ["reproduce", "subtask-induction", "--set", "transfer_patience=0"],
     "transfer_patience/transfer_min_delta: patience 0: expected a whole number of evaluations, at least 1"),
    ("reproduce-subtask-min-delta-negative", ["reproduce", "subtask-induction", "--set", "cs_min_delta=-0.1"],
     "cs_patience/cs_min_delta: min_delta -0.1: expected a non-negative number"),
    ("reproduce-subtask-control-nosuch", ["reproduce", "subtask-induction", "--set", "controls=[nosuch]"],
     "control 'nosuch': expected one of random-weights, shuffled-labels"),
    ("reproduce-subtask-control-seeds-without-seed", ["reproduce", "subtask-induction", "--set", "control_seeds=[1, 2]"],
     "control_seeds [1, 2]: distinct seeds that include seed 0"),
    ("reproduce-circuits-controls-without-edge-pruning", ["reproduce", "circuits", "--set", "edge_pruning=null"],
     "search_controls: they repeat the edge-pruning step"),
    ("reproduce-lottery-batch-size-zero", ["reproduce", "lottery", "--set", "batch_size=0"],
     "batch_size 0 must be at least 1"),
    ("reproduce-lottery-threshold", ["reproduce", "lottery", "--set", "threshold=2"], "threshold 2 is outside (0, 1]"),
    ("reproduce-heuristic-core-no-seeds", ["reproduce", "heuristic-core", "--set", "seeds=[]"],
     "seeds: at least one pruning seed is needed"),
    ("reproduce-heuristic-core-prune-preset", ["reproduce", "heuristic-core", "--set", "prune_preset=huge"],
     "prune_preset 'huge': expected one of"),
    ("reproduce-shape-bias-image-size", ["reproduce", "shape-bias", "--set", "image_size=8"],
     "image_size=8: must be at least 12 pixels"),
    ("reproduce-shape-bias-negative-seed", ["reproduce", "shape-bias", "--set", "seed=-1"],
     "seed -1: expected a non-negative integer"),
    # numbers out of range, choices, combinations
    ("prune-sparsity-range", ["prune", "--model", "{bert}", *NLI, "--sparsity", "1.5"], "--sparsity: 1.5 is outside (0, 1)"),
    ("prune-seeds-malformed", [*PRUNE, "--seeds", "3-1"], "--seeds: malformed value '3-1'"),
    ("prune-schedule", [*PRUNE, "--schedule", "cosine"], "--schedule 'cosine'"),
    ("prune-ablation", [*PRUNE, "--ablation", "gaussian"], "ablation 'gaussian'"),
    ("prune-unknown-split", [*PRUNE, "--splits", "id,nope"], "has no evaluation split 'nope'"),
    ("prune-batch-larger-than-data", [*PRUNE, "--set", "batch_size=64"],
     "batch_size 64 is larger than the 20 training examples"),
    ("prune-max-length-past-positions", ["prune", "--model", "{bert8}", *NLI, "--sparsity", "0.5", "--preset", "demo"],
     "exceeds the 8 positions"),
    ("prune-gpus-without-gpu", [*PRUNE, "--gpus-per-job", "1"], "--gpus-per-job 1: this machine has no GPU"),
    ("prune-jobs-zero", [*PRUNE, "--jobs", "0"], "--jobs 0: expected a positive integer"),
    ("prune-local-backend-jobs", [*PRUNE, "--backend", "local", "--jobs", "2"], "the local backend runs one job at a time"),
    ("prune-unknown-task", ["prune", "--model", "{bert}", "--task", "hanz", "--sparsity", "0.5"], "unknown task 'hanz'"),
    ("finetune-lr-negative", [*FINETUNE, "--lr", "-1"], "--lr -1.0 must be positive"),
    ("finetune-batch-size-zero", [*FINETUNE, "--batch-size", "0"], "--batch-size 0 must be at least 1"),
    ("finetune-warmup-steps-and-ratio", [*FINETUNE, "--warmup-steps", "1", "--warmup-ratio", "0.1"],
     "are both set; give one of the two"),
    ("finetune-warmup-past-max-steps", [*FINETUNE, "--warmup-steps", "10"], "is longer than the run (max_steps 2)"),
    ("finetune-warmup-past-epochs", ["finetune", "--model", "{bert}", *NLI, "--epochs", "1", "--warmup-steps", "50"],
     "--warmup-steps 50 is longer than the run (1 steps"),
    ("finetune-scheduler", [*FINETUNE, "--scheduler", "cosine"], "'cosine' is not linear or constant"),
    ("finetune-device", [*FINETUNE, "--device", "tpu"], "'tpu'"),
    ("finetune-preset", [*FINETUNE, "--preset", "huge"], "unknown preset 'huge'"),
    ("finetune-eval-data-malformed", [*FINETUNE, "--eval-data", "nonsense"], "expected FORMAT=FILE"),
    ("finetune-max-length-past-positions", ["finetune", "--model", "{bert8}", *NLI, "--max-steps", "2", "--max-length", "64"],
     "--max-length 64 exceeds the 8 positions"),
    ("finetune-arith-layers", ["finetune", "--model", "gpt2-arith:99", "--task", "arith:ab"], "1-48 layers"),
    ("evaluate-batch-size-zero", [*EVALUATE, "--batch-size", "0"], "batch_size 0 must be an integer of at least 1"),
    ("evaluate-limit-zero", [*EVALUATE, "--limit", "0"], "limit 0 must be an integer of at least 1"),
    ("evaluate-ablation", [*EVALUATE, "--ablation", "gaussian"], "ablation 'gaussian'"),
    ("evaluate-max-length-past-positions", ["evaluate", "--model", "{bert8}", *NLI, "--max-length", "64"],
     "--max-length 64 exceeds the 8 positions of model"),
    ("evaluate-unknown-split", [*EVALUATE, "--split", "nope"], "nope"),
    ("evaluate-fresh-arith-model", ["evaluate", "--model", "gpt2-arith:2", "--task", "arith:ab"],
     "evaluate a trained model directory"),
    # subnetwork and means files: readable, of this model, valid values
    ("evaluate-means-without-subnetwork", [*EVALUATE, "--means", "{other-means}"], "give the subnetwork too"),
    ("evaluate-subnetwork-missing", [*EVALUATE, "--subnetwork", "{missing}"], "no such file"),
    ("evaluate-subnetwork-nan", [*EVALUATE, "--subnetwork", "{nan}"], "value(s) other than 0 and 1 (e.g. nan)"),
    ("evaluate-subnetwork-not-binary", [*EVALUATE, "--subnetwork", "{half}"], "value(s) other than 0 and 1 (e.g. 0.5)"),
    ("evaluate-subnetwork-wrong-shape", [*EVALUATE, "--subnetwork", "{shape}"], "the model has [2, 2] heads"),
    ("evaluate-subnetwork-other-model", [*EVALUATE, "--subnetwork", "{gpt2-sub}"], "found on a different architecture"),
    ("evaluate-subnetwork-not-safetensors", [*EVALUATE, "--subnetwork", "{afile}"], "not a readable safetensors file"),
    ("evaluate-means-not-a-means-file", [*EVALUATE, "--subnetwork", "{sub}", "--means", "{not-means}"],
     "not a file of mean activations"),
    ("evaluate-means-of-another-model", [*EVALUATE, "--subnetwork", "{sub}", "--means", "{other-means}"],
     "they belong to another model"),
    # arithmetic operations: unknown characters are refused, not dropped
    ("evaluate-arith-double-star", ["evaluate", "--model", "{gpt2}", "--task", "arith:a**b"], "write powers as a^2"),
    ("evaluate-arith-division", ["evaluate", "--model", "{gpt2}", "--task", "arith:a/b"], "unexpected character(s) /"),
    ("discover-arith-double-star", [*DISCOVER[:3], "--task", "arith:a**b", *ARITH], "write powers as a^2"),
    # discover and transfer: each job's typed config before any model is loaded
    ("discover-threads-zero", [*DISCOVER, "--threads", "0"], "--threads: discovery: threads 0 must be"),
    ("discover-lambdas-malformed", [*DISCOVER, "--lambdas", "abc"], "--lambdas: malformed value 'abc'"),
    ("discover-include", [*DISCOVER, "--include", "embeddings"], "embeddings"),
    ("discover-gpus-without-gpu", [*DISCOVER, "--gpus-per-job", "1"], "this machine has no GPU"),
    ("discover-classification-task", ["discover", "--model", "{gpt2}", *NLI], "task nli-synthetic brings none"),
    ("transfer-subnetwork-condition-without-file", [*TRANSFER, "--condition", "subnetwork"],
     "--condition subnetwork needs --subnetwork FILE"),
    ("transfer-unknown-condition", [*TRANSFER, "--condition", "scratch,lottery"], "--condition 'lottery': unknown condition"),
    ("transfer-reinit", [*TRANSFER, "--condition", "scratch", "--reinit", "some"], "--reinit 'some'"),
    ("transfer-loss", [*TRANSFER, "--condition", "scratch", "--loss", "tokens"], "--loss 'tokens': choose from"),
    ("transfer-accuracy", [*TRANSFER, "--condition", "scratch", "--accuracy", "all"], "--accuracy 'all': choose from"),
    ("transfer-ties", [*TRANSFER, "--condition", "scratch", "--ties", "middle"], "--ties 'middle': choose from"),
    ("transfer-init-std", [*TRANSFER, "--condition", "scratch", "--init-std", "-0.02"], "--init-std -0.02: expected"),
    ("discover-loss", [*DISCOVER, "--loss", "tokens"], "--loss 'tokens': choose from"),
    ("transfer-threads-zero", [*TRANSFER, "--condition", "scratch", "--threads", "0"], "must be at least 1"),
    ("transfer-subnetwork-nan", [*TRANSFER, "--subnetwork", "{nan}"], "value(s) other than 0 and 1"),
    ("transfer-subnetwork-missing", [*TRANSFER, "--subnetwork", "{missing}"], "no such file"),
    ("transfer-disambiguation-malformed", [*TRANSFER, "--condition", "scratch", "--disambiguation", "x"],
     "--disambiguation: malformed value 'x'"),
    # the other commands
    ("lottery-prune-method", ["lottery-prune", "--model", "{bert}", *NLI, "--method", "magic"], "magic"),
    ("lottery-retrain-subnetwork-missing", ["lottery-retrain", "--model", "{bert}", *NLI, "--subnetwork", "{missing}"],
     "no such subnetwork file"),
    ("lottery-stability-subnetwork-nan", ["lottery-stability", "--subnetwork", "{nan}", "--subnetwork", "{sub}"],
     "value(s) other than 0 and 1"),
    ("ablate-unknown-head", ["ablate", "--model", "{bert}", *NLI, "--heads", "L9.H9"], "L9.H9"),
    ("ablate-non-listed", ["ablate", "--model", "{bert}", *NLI, "--heads", "L0.H0", "--non-listed", "zero"],
     "--non-listed: 'zero' is not all, none or a number"),
    ("attention-examples-zero", ["attention", "--model", "{bert}", "--data", "{missing}", "--examples", "0"],
     "--examples 0 must be at least 1"),
    ("attention-data-missing", ["attention", "--model", "{bert}", "--data", "{missing}"], "no such file"),
    ("core-runs-missing", ["core", "--runs", "{missing}"], "no-such-file"),
    ("effective-size-on", ["effective-size", "--checkpoints", "{full}", "--task", "nli-synthetic", "--on", "sideways"],
     "--on 'sideways'"),
    ("effective-size-seeds-zero", ["effective-size", "--checkpoints", "{full}", "--task", "nli-synthetic", "--seeds", "0"],
     "--seeds 0 must be at least 1"),
    # effective-size: options out of range or in conflict, refused before any checkpoint is pruned
    ("effective-size-every-zero", [*EFFECTIVE, "--every", "0"], "--every 0 must be at least 1"),
    ("effective-size-faithfulness", [*EFFECTIVE, "--faithfulness", "1.5"], "--faithfulness 1.5 is outside [0, 1)"),
    ("effective-size-levels-range", [*EFFECTIVE, "--levels", "0.5:1.5:0.5"], "--levels"),
    ("effective-size-levels-malformed", [*EFFECTIVE, "--levels", "a:b:c"], "malformed value 'a:b:c'"),
    ("effective-size-set-seed", [*EFFECTIVE, "--set", "seed=3"], "--set seed: set by --seeds"),
    ("effective-size-set-levels", [*EFFECTIVE, "--set", "levels=[0.2]"], "--set levels: set by --levels"),
    ("effective-size-set-schedule", [*EFFECTIVE, "--set", "schedule=linear"], "--set schedule: set by --levels"),
    ("effective-size-set-unknown", [*EFFECTIVE, "--set", "nonsense=1"], "unknown pruning setting(s) nonsense"),
    ("effective-size-set-typed", [*EFFECTIVE, "--set", "batch_size=abc"], "batch_size: expected an integer, got 'abc'"),
    ("effective-size-preset", [*EFFECTIVE, "--preset", "fast"], "preset 'fast'"),
    ("effective-size-no-checkpoints", ["effective-size", "--checkpoints", "{full}", "--task", "nli-synthetic"],
     "no checkpoints"),
    ("effective-size-id-split-unknown", [*EFFECTIVE, "--id-split", "nope"], "--id-split nope: task"),
    ("effective-size-no-ood-data", [*EFFECTIVE, "--id-split", "id", "--id-split", "hans-synthetic", "--on", "ood"],
     "there is no out-of-domain data"),
    ("effective-size-subcases-unknown", [*EFFECTIVE, "--subcases", "no_such_subcase"],
     "--subcases no_such_subcase: not a subcase"),
    ("effective-size-core-missing", [*EFFECTIVE, "--core", "{missing}"], "no such file"),
    ("export-subnetwork-nan", ["export", "--model", "{bert}", "--subnetwork", "{nan}"], "value(s) other than 0 and 1"),
    ("export-out-not-empty", ["export", "--model", "{bert}", "--subnetwork", "{sub}", "--out", "{full}"], "not an empty directory"),
    # your own data and hardware (issue 20)
    ("evaluate-float16-on-cpu", [*EVALUATE, "--device", "cpu", "--dtype", "float16"],
     "--dtype float16: half-precision forward passes run on CUDA or Apple mps only"),
    ("finetune-dtype-unknown", [*FINETUNE, "--dtype", "fp8"], "--dtype 'fp8' is not float32, bfloat16 or float16"),
    ("prune-data-flag-on-builtin-task", [*PRUNE, "--text-column", "premise"], "--text-column: only for your own data"),
    ("finetune-empty-data-file", ["finetune", "--model", "{bert}", "--task", "file:{emptycsv}", "--max-steps", "2"],
     "empty.csv: empty file"),
    ("evaluate-head-of-another-size", ["evaluate", "--model", "{bert}", "--task", "file:{twocsv}"],
     "has a classification head with 3 outputs, but task file:two.csv has 2 labels (a, b)"),
    ("prune-head-of-another-size", ["prune", "--model", "{bert}", "--task", "file:{twocsv}", "--sparsity", "0.5",
                                    "--seeds", "0", "--preset", "demo", "--set", "batch_size=4"],
     "has a classification head with 3 outputs, but task file:two.csv has 2 labels (a, b)"),
    ("prune-steps-below-the-presets-warm-up", [*PRUNE[:-2], "--preset", "paper", "--set", "total_steps=150"],
     "total_steps 150 is shorter than the warm-up, warmup_steps 9000: the target is reached at the warm-up's end, "
     "so lower warmup_steps to at most 150 too"),
    ("prune-float16-on-cpu", [*PRUNE, "--device", "cpu", "--dtype", "float16"],
     "--dtype float16: half-precision forward passes run on CUDA or Apple mps only"),
    ("prune-dtype-unknown", [*PRUNE, "--dtype", "fp8"], "--dtype 'fp8': expected one of float32, bfloat16, float16"),
    ("discover-float16-on-cpu", [*DISCOVER, "--device", "cpu", "--dtype", "float16"],
     "--dtype float16: half-precision forward passes run on CUDA or Apple mps only"),
    ("transfer-float16-on-cpu", [*TRANSFER, "--condition", "scratch", "--device", "cpu", "--dtype", "float16"],
     "--dtype float16: half-precision forward passes run on CUDA or Apple mps only"),
    ("lottery-prune-float16-on-cpu", ["lottery-prune", "--model", "{bert}", *NLI, "--method", "magnitude", "--device",
                                      "cpu", "--dtype", "float16"], "--dtype float16: half-precision forward passes"),
    ("discover-data-flag-on-builtin-task", [*DISCOVER, "--answer-column", "answer"], "--answer-column: only for your own data"),
    # health (subnetlab.runs.health): an empty subnetwork is refused before any training unless only the
    # empty-mask control uses it; under --strict a degenerate input (keeping every weight) is refused too
    ("transfer-empty-subnetwork", [*TRANSFER, "--subnetwork", "{gpt2-empty}", "--condition", "empty-mask,subnetwork"],
     "--subnetwork keeps nothing (0 of "),
    ("transfer-strict-full-subnetwork", ["--strict", *TRANSFER, "--subnetwork", "{gpt2-all}", "--condition", "subnetwork"],
     ": degenerate: keeps everything ("),
    ("transfer-disambiguation-on-own-data", ["transfer", "--model", "{gpt2}", "--task", "file:{twocsv}", "--answer-column",
                                             "label", "--condition", "scratch", "--disambiguation", "0,10"],
     "--disambiguation: task file:"),
    # issue 30: a battery of bad inputs and faults
    ("evaluate-subnetwork-seed-text", [*EVALUATE, "--subnetwork", "{seed-text}"], "metadata seed='abc' is not a non-negative integer"),
    ("evaluate-subnetwork-target-text", [*EVALUATE, "--subnetwork", "{target-text}"],
     "metadata target_sparsity='abc' is not a number in [0, 1]"),
    ("evaluate-subnetwork-target-nan", [*EVALUATE, "--subnetwork", "{target-nan}"],
     "metadata target_sparsity='nan' is not a number in [0, 1]"),
    ("export-subnetwork-seed-text", ["export", "--model", "{bert}", "--subnetwork", "{seed-text}"], "metadata seed='abc'"),
    ("evaluate-pickled-weights-only", [*EVALUATE[:2], "{pickled}", *EVALUATE[3:]],
     "only in pytorch_model.bin, a pickle, which subnetlab never loads"),
    ("prune-pickled-weights-only", ["prune", "--model", "{pickled}", *NLI, "--sparsity", "0.5", "--preset", "demo"],
     "save_pretrained(DIR, safe_serialization=True)"),
    ("finetune-pickled-weights-only", ["finetune", "--model", "{pickled}", *NLI, "--max-steps", "2"],
     "only in pytorch_model.bin, a pickle"),
    ("lottery-patterns-gpt2", ["lottery-patterns", "--model", "{gpt2}", *NLI, "--pairs", "2"],
     "--model: attention pattern types (Kovaleva et al.) are defined for encoder models"),
    ("reproduce-lottery-set-max-steps-text", ["reproduce", "lottery", "--dry-run", "--set", "max_steps=abc"],
     "setting max_steps of lottery: expected an integer or null, got 'abc'"),
    ("reproduce-heuristic-core-set-hold-text", ["reproduce", "heuristic-core", "--dry-run", "--set", "prune_hold_steps=x"],
     "setting prune_hold_steps of heuristic-core: expected an integer or null"),
    ("finetune-max-length-typed-past-positions", [*FINETUNE, "--max-length", "100000"],
     "--max-length 100000 exceeds the 64 positions of model"),
    ("evaluate-max-length-typed-past-positions", [*EVALUATE, "--max-length", "100000"], "--max-length 100000 exceeds the 64"),
    ("ablate-max-length-typed-past-positions", ["ablate", "--model", "{bert}", *NLI, "--heads", "L0.H0", "--max-length",
                                                "100000"], "--max-length 100000 exceeds the 64"),
    ("attention-max-length-typed-past-positions", ["attention", "--model", "{bert}", "--data", "task:nli-synthetic",
                                                   "--max-length", "100000"], "--max-length 100000 exceeds the 64"),
    ("lottery-prune-max-length-typed-past-positions", ["lottery-prune", "--model", "{bert}", *NLI, "--method", "magnitude",
                                                       "--max-length", "100000"], "--max-length 100000 exceeds the 64"),
    ("lottery-retrain-max-length-typed-past-positions", ["lottery-retrain", "--model", "{bert}", *NLI, "--subnetwork",
                                                         "{sub}", "--max-length", "100000"], "--max-length 100000 exceeds"),
    ("lottery-patterns-max-length-typed-past-positions", ["lottery-patterns", "--model", "{bert}", *NLI,
                                                          "--max-length", "100000"], "--max-length 100000 exceeds the 64"),
    ("lottery-retrain-random-file", ["lottery-retrain", "--model", "{bert}", *NLI, "--subnetwork", "{random}"],
     "random.safetensors: not a readable safetensors file"),
    ("lottery-retrain-other-architecture", ["lottery-retrain", "--model", "{bert}", *NLI, "--subnetwork", "{gpt2-sub}"],
     "found on a different architecture: a gpt2 model, and this model is a bert model"),
    ("lottery-retrain-weights-of-other-architecture", ["lottery-retrain", "--model", "{bert}", *NLI, "--subnetwork",
                                                      "{gpt2-weights}"], "a gpt2 model, and this model is a bert"),
    ("evaluate-hans-without-data", ["evaluate", "--model", "{bert}", "--task", "hans"],
     "--data: task hans reads its examples from data files and was given none"),
    ("finetune-mnli-without-data", ["finetune", "--model", "{bert}", "--task", "mnli"], "--data: task mnli reads its"),
    ("prune-hans-without-data", ["prune", "--model", "{bert}", "--task", "hans", "--sparsity", "0.5"],
     "--task-option: task hans reads its examples from data files"),
    ("prune-exported-model", ["prune", "--model", "{exported}", *NLI, "--sparsity", "0.5", "--preset", "demo"],
     "is a model exported by subnetlab"),
    ("lottery-prune-exported-model", ["lottery-prune", "--model", "{exported}", *NLI, "--method", "importance"],
     "is a model exported by subnetlab"),
    ("lottery-prune-magnitude-exported-model", ["lottery-prune", "--model", "{exported}", *NLI, "--method", "magnitude"],
     "is a model exported by subnetlab"),
    ("evaluate-subnetwork-on-exported-model", [*EVALUATE[:2], "{exported}", *EVALUATE[3:], "--subnetwork", "{sub}"],
     "applying a subnetwork needs the full model it came from"),
    ("lottery-retrain-exported-model", ["lottery-retrain", "--model", "{exported}", *NLI, "--subnetwork", "{sub}"],
     "is a model exported by subnetlab"),
    ("export-exported-model", ["export", "--model", "{exported}", "--subnetwork", "{sub}"], "is a model exported by subnetlab"),
    ("evaluate-weight-subnetwork-of-gpt2-on-bert", [*EVALUATE, "--subnetwork", "{gpt2-weights}"],
     "found on a different architecture: a gpt2 model, and this model is a bert model"),
    ("evaluate-means-int32", [*EVALUATE, "--subnetwork", "{sub}", "--means", "{int-means}"],
     "heads.0 has dtype int32; mean activations are floating-point numbers"),
    ("finetune-csv-unterminated-quote", ["finetune", "--model", "{bert}", "--task", "file:{badcsv}", "--max-steps", "2"],
     "bad.csv:3: unterminated quoted field"),
    ("evaluate-csv-unterminated-quote", ["evaluate", "--model", "{bert}", "--task", "file:{badcsv}"],
     "bad.csv:3: unterminated quoted field"),
    ("ablate-device", ["ablate", "--model", "{bert}", *NLI, "--heads", "L0.H0", "--device", "tpu"], "'tpu'"),
    ("attention-device", ["attention", "--model", "{bert}", "--data", "task:nli-synthetic", "--device", "tpu"], "'tpu'"),
    ("effective-size-device", [*EFFECTIVE, "--device", "tpu"], "'tpu'"),
    # one split per data file (issue 26)
    ("evaluate-test-fraction-out-of-range", ["evaluate", "--model", "{bert}", "--task", "file:{twocsv}", "--task-option",
                                             "test_fraction=1.5"], "--task-option: test_fraction 1.5 is outside [0, 1)"),
    ("evaluate-split-seed-not-integer", ["evaluate", "--model", "{bert}", "--task", "file:{twocsv}", "--task-option",
                                         "split_seed=abc"], "split_seed"),
    # circuit tasks and faithfulness (issue 27): every prompt pair checked before any work, named by file:line
    ("circuit-eval-pair-lengths", [*CIRCUIT_EVAL, "--task", "file:{pairs-length}", "--corrupted-column", "corrupted",
                                   "--eval-file", "{pairs-length}"],
     "pairs-length.csv:3: the clean prompt is 15 tokens and the corrupted prompt 13"),
    ("circuit-eval-answer-tokens", [*CIRCUIT_EVAL, "--task", "file:{pairs-answer}", "--corrupted-column", "corrupted",
                                    "--eval-file", "{pairs-answer}"],
     "pairs-answer.csv:3: answer ' Frank' is 4 tokens after the prompt, not 1"),
    ("circuit-eval-same-answers", [*CIRCUIT_EVAL, "--task", "file:{pairs-same}", "--corrupted-column", "corrupted",
                                   "--eval-file", "{pairs-same}"],
     "pairs-same.csv:3: the answer ' Mary' and the wrong answer ' Mary' are the same token"),
    ("circuit-eval-no-wrong-column", [*CIRCUIT_EVAL, "--task", "file:{pairs-same}", "--corrupted-column", "corrupted",
                                      "--wrong-answer-column", "incorrect"],
     "pairs-same.csv: no wrong answer column 'incorrect'"),
    # search controls (issue 39): only where there is a search; shuffled answers need two answers at least
    ("circuit-control-without-search", [*EAP, "--control", "random-weights"], "--control: not used by --method eap"),
    ("circuit-device-map-with-eap", [*EAP, "--device-map", "auto"], "--device-map: not used by --method eap"),
    ("circuit-device-map-with-warm-start", [*CIRCUIT, "--sparsity", "0.9", "--warm-start", "eap", "--device-map", "auto"],
     "--warm-start 'eap' scores the edges with the whole model on one device"),
    ("circuit-device-map-unknown-module", [*CIRCUIT, "--sparsity", "0.9", "--device-map", '{{"transformer.h.7": "cpu"}}'],
     "--device-map: the model has no module 'transformer.h.7'"),
    ("circuit-control-unknown", [*CIRCUIT, "--sparsity", "0.9", "--control", "random-labels"],
     "--control 'random-labels': expected one of random-weights, shuffled-labels"),
    ("circuit-shuffled-labels-one-answer", ["circuit", "--model", "{lm}", "--task", "file:{pairs-one-answer}",
                                            "--corrupted-column", "corrupted", "--sparsity", "0.9", "--control",
                                            "shuffled-labels"], "every example has the same answer"),
    ("prune-control-unknown", [*PRUNE, "--control", "shuffled-labels,none"], "--control 'none'"),
    ("discover-control-unknown", [*DISCOVER, "--control", "nosuch"],
     "--control 'nosuch': expected one of random-weights, shuffled-labels"),
    ("lottery-prune-control-unknown", ["lottery-prune", "--model", "{bert}", *NLI, "--method", "magnitude", "--control",
                                       "random-weights,nosuch"], "--control 'nosuch'"),
    ("circuit-eval-not-a-circuit-task", [*CIRCUIT_EVAL, "--task", "arith:ab"], "task arith:ab is not a circuit task"),
    ("circuit-eval-scores-and-circuit", [*CIRCUIT_EVAL, "--task", "circuit:ioi", "--circuit", "{sub}"],
     "give either a scores file or circuit files"),
    ("circuit-eval-node-scores-shape", [*CIRCUIT_EVAL, "--task", "circuit:ioi", "--task-option", "n_train=2",
                                        "--task-option", "n_eval=2"], "the model has [2, 2] heads and [2] MLPs"),
    ("circuit-eval-metric", [*CIRCUIT_EVAL, "--task", "circuit:ioi", "--metric", "accuracy"],
     "--metric 'accuracy': choose one of logit_diff, answer_prob, kl, prob_diff"),
    ("circuit-eval-metric-of-another-task", [*CIRCUIT_EVAL, "--task", "circuit:ioi", "--task-option", "n_train=2",
                                             "--task-option", "n_eval=2", "--metric", "prob_diff"],
     "--metric 'prob_diff': task circuit:ioi measures logit_diff, answer_prob, kl"),
    ("circuit-eval-task-option-unknown", [*CIRCUIT_EVAL, "--task", "circuit:greater-than", "--task-option",
                                          "corruption=abc"], "unknown option(s) corruption"),
    ("circuit-sparsity", [*CIRCUIT, "--sparsity", "1.5"], "--sparsity"),
    ("circuit-ablation", [*CIRCUIT, "--sparsity", "0.9", "--ablation", "resample"],
     "--ablation 'resample': expected one of corrupted, mean, zero"),
    ("circuit-setting-unknown", [*CIRCUIT, "--sparsity", "0.9", "--set", "colour=red"],
     "unknown edge pruning setting(s) colour"),
    ("circuit-clip-node-target-without-clipping", [*CIRCUIT, "--sparsity", "0.9", "--preset", "demo", "--set",
                                                   "clip_node_target=0.5"], "clip_node_target is for node masks"),
    ("circuit-dtype", [*CIRCUIT, "--sparsity", "0.9", "--dtype", "float64"], "dtype 'float64'"),
    ("circuit-dtype-float16-on-cpu", [*CIRCUIT, "--sparsity", "0.9", "--dtype", "float16", "--device", "cpu"],
     "float16"),
    ("circuit-selection", [*CIRCUIT, "--sparsity", "0.9", "--set", "selection=best"],
     "selection 'best': expected one of connected, topk, threshold, greedy"),
    ("circuit-not-a-circuit-task", ["circuit", "--model", "{lm}", "--task", "arith:ab", "--sparsity", "0.9"],
     "task arith:ab is not a circuit task"),
    ("circuit-encoder-model", ["circuit", "--model", "{bert}", "--task", "circuit:ioi", "--sparsity", "0.9"],
     "6 weight(s) of the model are not in the checkpoint"),  # issue 53: a BERT has no LM head (was: not a causal LM)
    # each circuit method refuses the options only another method reads (issue 34), naming the flag and the method
    ("circuit-eap-refuses-sparsity", [*EAP, "--sparsity", "0.9"],
     "--sparsity: under eap it sets the circuits compared across step counts or seeds"),
    ("circuit-eap-refuses-sparsity-argument", [*EAP, "0.9"],
     "--sparsity: under eap it sets the circuits compared across step counts or seeds"),
    ("circuit-eap-seeds-need-a-limit", [*EAP, "--seeds", "0-2"], "--seeds: seed 0: a seed draws which of the train pairs"),
    ("circuit-eap-refuses-preset", [*EAP, "--preset", "demo"],
     "--preset: not used by --method eap (used only by edge-pruning)"),
    ("circuit-eap-refuses-set", [*EAP, "--set", "total_steps=5"],
     "--set: not used by --method eap (used only by edge-pruning)"),
    ("circuit-eap-refuses-zero-ablation", [*EAP, "--ablation", "zero"],
     "--ablation 'zero': method eap takes corrupted, or mean under eap and nap"),
    ("circuit-eap-ig-refuses-ablation", [*EAP_IG, "--ablation", "mean"],
     "--ablation: not used by --method eap-ig (used only by edge-pruning, eap and nap)"),
    ("circuit-nap-ig-refuses-ablation", [*CIRCUIT, "--method", "nap-ig", "--ablation", "mean"],
     "--ablation: not used by --method nap-ig (used only by edge-pruning, eap and nap)"),
    ("circuit-nap-refuses-position-chunk", [*CIRCUIT, "--method", "nap", "--position-chunk", "64"],
     "--position-chunk: not used by --method nap"),
    ("circuit-nap-refuses-kv-readers", [*CIRCUIT, "--method", "nap", "--kv-readers", "kv"],
     "--kv-readers: not used by --method nap"),
    ("circuit-eap-refuses-split", [*EAP, "--split", "eval"], "--split: not used by --method eap (used only by edge-pruning)"),
    ("circuit-eap-refuses-init-from", [*EAP, "--init-from", "{nodescores}"],
     "--init-from: not used by --method eap (used only by edge-pruning)"),
    ("circuit-eap-refuses-jobs", [*EAP, "--jobs", "2"], "--jobs: not used by --method eap (used only by edge-pruning)"),
    ("circuit-eap-refuses-ig-steps", [*EAP, "--ig-steps", "5"], "--ig-steps: not used by --method eap (used only by eap-ig, eap-ig-activations and nap-ig)"),
    ("circuit-eap-ig-refuses-several", [*EAP_IG, "--preset", "quick", "--split", "eval", "--ig-steps", "3"],
     "--preset, --split: not used by --method eap-ig (used only by edge-pruning)"),
    ("circuit-edge-pruning-refuses-ig-steps", [*CIRCUIT, "--sparsity", "0.9", "--ig-steps", "3"],
     "--ig-steps: not used by --method edge-pruning (used only by eap-ig, eap-ig-activations and nap-ig)"),
    ("circuit-edge-pruning-refuses-metric", [*CIRCUIT, "--sparsity", "0.9", "--metric", "logit_diff"],
     "--metric: not used by --method edge-pruning (used only by eap, eap-ig, eap-ig-activations, clean-corrupted, "
     "exact, nap and nap-ig)"),
    ("circuit-edge-pruning-limit-counts-eval-pairs", [*CIRCUIT, "--sparsity", "0.9", "--limit", "0"],
     "--limit 0: the number of eval pairs each circuit is measured on (not the training pairs, which are all used)"),
    ("circuit-eap-limit-counts-train-pairs", [*EAP, "--limit", "0"],
     "--limit 0: the number of train pairs the edges are scored on"),
    # the attribution methods of issue 35: only the integrated ones read --ig-steps, and it is bounded there too
    ("circuit-clean-corrupted-refuses-ig-steps", [*CIRCUIT, "--method", "clean-corrupted", "--ig-steps", "3"],
     "--ig-steps: not used by --method clean-corrupted (used only by eap-ig, eap-ig-activations and nap-ig)"),
    ("circuit-exact-refuses-ig-steps", [*CIRCUIT, "--method", "exact", "--ig-steps", "3"],
     "--ig-steps: not used by --method exact (used only by eap-ig, eap-ig-activations and nap-ig)"),
    ("circuit-ig-activations-steps-zero", [*CIRCUIT, "--method", "eap-ig-activations", "--ig-steps", "0"],
     "steps 0 must be between 1 and 1000"),
    ("circuit-exact-limit-counts-train-pairs", [*CIRCUIT, "--method", "exact", "--limit", "0"],
     "--limit 0: the number of train pairs the edges are scored on"),
    ("circuit-ig-activations-refuses-sparsity", [*CIRCUIT, "--method", "eap-ig-activations", "--sparsity", "0.9"],
     "--sparsity: under eap-ig-activations it sets the circuits compared across step counts or seeds"),
    # EAP-IG over several step counts and seeds; MIB's bootstrap over the pairs (issue 39)
    ("circuit-ig-steps-list-zero", [*EAP_IG, "--ig-steps", "5,0"], "steps 0 must be between 1 and 1000"),
    ("circuit-ig-steps-list-negative", [*EAP_IG, "--ig-steps", "5,-2"], "steps -2 must be between 1 and 1000"),
    ("circuit-ig-steps-list-repeated", [*EAP_IG, "--ig-steps", "5,10,5"], "--ig-steps 5 given twice"),
    ("circuit-ig-steps-list-malformed", [*EAP_IG, "--ig-steps", "5,ten"], "--ig-steps '5,ten': whole numbers"),
    ("circuit-eap-ig-seeds-without-limit", [*EAP_IG, "--seeds", "0,1"], "a seed draws which of the train pairs"),
    ("circuit-eap-ig-seeds-draw-every-pair", [*EAP_IG, "--seeds", "0,1", "--limit", "4"],
     "drawing 4 of the 4 train pairs draws them all"),
    ("circuit-eval-bootstrap-zero", [*CIRCUIT_EVAL, "--task", "circuit:ioi", "--mib", "--bootstrap", "0"],
     "bootstrap resamples 0: a whole number of at least 1"),
    ("circuit-eval-bootstrap-negative", [*CIRCUIT_EVAL, "--task", "circuit:ioi", "--mib", "--bootstrap", "-5"],
     "bootstrap resamples -5"),
    ("circuit-eval-bootstrap-without-mib", [*CIRCUIT_EVAL, "--task", "circuit:ioi", "--bootstrap", "100"],
     "a bootstrap interval over the pairs is computed for MIB's CPR and CMD"),
    # issue 51: the nulls' counts, seeds and ablations
    ("circuit-eval-random-circuits-negative", [*CIRCUIT_EVAL, "--task", "circuit:ioi", "--random-circuits", "-1"],
     "--random-circuits -1: a whole number of random circuits, at least 0"),
    ("circuit-eval-random-circuits-past-the-bound", [*CIRCUIT_EVAL, "--task", "circuit:ioi", "--random-circuits",
                                                     "1000000"],
     "--random-circuits 1,000,000 is more than the bound of 10,000 random circuits"),
    ("circuit-eval-random-seed-negative", [*CIRCUIT_EVAL, "--task", "circuit:ioi", "--random-circuits", "5",
                                           "--random-seed", "-3"], "--random-seed -3: a seed is a whole number"),
    ("circuit-eval-permute-seed-negative", [*CIRCUIT_EVAL, "--task", "circuit:ioi", "--permute-pairs",
                                            "--permute-seed", "-1"], "--permute-seed -1: a seed is a whole number"),
    ("circuit-eval-ablations-unknown", [*CIRCUIT_EVAL, "--task", "circuit:ioi", "--ablations", "corrupted,resample"],
     "--ablations: 'resample' is not one of corrupted, mean, zero"),
    ("circuit-eval-ablations-repeated", [*CIRCUIT_EVAL, "--task", "circuit:ioi", "--ablations", "zero,zero"],
     "--ablations zero given twice"),
    ("circuit-eval-ablations-empty-name", [*CIRCUIT_EVAL, "--task", "circuit:ioi", "--ablations", "zero,"],
     "--ablations '': an empty name"),
    # hostile files and values the circuit commands met (issue 36)
    ("circuit-ig-steps-unbounded", [*EAP_IG, "--ig-steps", "1000000000"], "steps 1000000000 must be between 1 and 1000"),
    ("circuit-eval-leaking-split", ["circuit-eval", "--model", "{pairsft}", "--task", "file:{ftpairs}", *PAIR_COLUMNS,
                                    "--task-option", "split_seed=2", "--scores", "{nodescores}"],
     "2 of the 2 eval rows were training rows of fine-tuning run"),
    ("circuit-leaking-split", ["circuit", "--model", "{pairsft}", "--task", "file:{ftpairs}", *PAIR_COLUMNS, "--task-option",
                               "split_seed=2", "--sparsity", "0.9", "--preset", "demo"],
     "2 of the 2 eval rows were training rows of fine-tuning run"),
    ("circuit-missing-model-dir", ["circuit", "--model", "./no/such/dir", "--task", "circuit:ioi", "--sparsity", "0.9"],
     "no such model directory"),
    ("circuit-eval-missing-model-dir", ["circuit-eval", "--model", "./no/such/dir", "--task", "circuit:ioi", "--scores",
                                        "{nodescores}"], "no such model directory"),
    ("circuit-pairs-not-utf8", ["circuit", "--model", "{lm}", "--task", "file:{latin1}", "--method", "eap",
                                "--corrupted-column", "corrupted"], "latin1.jsonl:1: not UTF-8 text (byte 0xe9 at column 46)"),
    ("circuit-eval-graph-json-list", [*CIRCUIT_EVAL[:-2], "--scores", "{listgraph}", "--task", "circuit:ioi",
                                      "--task-option", "n_train=4", "--task-option", "n_eval=2"],
     "list-graph.json: a JSON list, not a graph"),
    ("results-metrics-random-bytes", ["results", "{junkrun}"], "metrics.json: not UTF-8 text"),
    # issue 36, item 5: --init-from read by the one reader of scores files before anything is written
    *[(f"circuit-init-from-{name}", [*CIRCUIT, "--sparsity", "0.9", "--preset", "demo", "--init-from", f"{{{file}}}"],
       fragment) for name, file, fragment in (
        ("random-bytes", "random", "random.safetensors: not a readable safetensors file"),
        ("truncated", "scores-truncated", "scores-truncated.safetensors: not a readable safetensors file"),
        ("huge-header", "scores-huge-header", "scores-huge-header.safetensors: not a readable safetensors file"),
        ("offsets-out-of-range", "scores-offsets", "scores-offsets.safetensors: not a readable safetensors file"),
        ("giant-shape", "scores-giant-shape", "scores-giant-shape.safetensors: not a readable safetensors file"),
        ("short", "scores-short", "scores-short.safetensors: 56 edge scores, the model's graph has 61"),
        ("other-graph", "scores-other-graph", "a warm start needs edge scores of this run's graph"),
        ("structured-subnetwork", "sub", "sub.safetensors: a subnetwork (kind structured), not scores"),
        ("edge-circuit", "edges-partial", "edges-partial.safetensors: a subnetwork (kind edges), not scores"),
        ("model-weights", "lm-weights", "model.safetensors: not a scores file (format metadata 'pt'"),
        ("nan", "scores-nan", "scores-nan.safetensors: edges holds 1 NaN or infinite value(s) (edge 3"),
        ("inf", "scores-inf", "scores-inf.safetensors: edges holds 1 NaN or infinite value(s) (edge 3"),
        ("int8", "scores-int8", "scores-int8.safetensors: edges has dtype int8; scores are float32 or float64"),
        ("float16", "scores-float16", "scores-float16.safetensors: edges has dtype float16; scores are float32 or"),
        ("no-format", "scores-no-format", "scores-no-format.safetensors: not a scores file (format metadata None"),
        ("wrong-format", "scores-wrong-format", "not a scores file (format metadata 'subnetlab.sweep/1'"),
        ("graph-without-scores", "sweep-graph", "sweep-graph.json: edge 0 has no 'score'"))],
    ("circuit-limit-zero", [*CIRCUIT, "--sparsity", "0.9", "--preset", "demo", "--limit", "0"], "--limit 0"),
    # circuit-eval: the same reader for --scores and --circuit, the same model check as circuit
    ("circuit-eval-post-ln-bert", ["circuit-eval", "--model", "{bert}", "--scores", "{nodescores}", "--task",
                                   "circuit:ioi"], "6 weight(s) of the model are not in the checkpoint"),  # issue 53: refused at load now
    *[(f"circuit-eval-scores-{name}", [*CIRCUIT_EVAL[:-2], "--scores", f"{{{file}}}", "--task", "circuit:ioi",
                                       "--task-option", "n_train=4", "--task-option", "n_eval=2"], fragment)
      for name, file, fragment in (
        ("bert-structured-subnetwork", "sub", "sub.safetensors: a subnetwork (kind structured), not scores"),
        ("inf", "scores-inf", "edges holds 1 NaN or infinite value(s) (edge 3"),
        ("int8", "scores-int8", "edges has dtype int8; scores are float32 or float64"),
        ("node-inf", "nodes-inf", "heads holds 1 NaN or infinite value(s)"),
        ("node-int8", "nodes-int8", "heads has dtype int8; scores are float32 or float64"),
        ("no-format", "nodes-no-format", "nodes-no-format.safetensors: not a scores file (format metadata None"),
        ("wrong-format", "scores-wrong-format", "not a scores file (format metadata 'subnetlab.sweep/1'"),
        ("edge-circuit", "edges-partial", "edges-partial.safetensors: a subnetwork (kind edges), not scores"))],
    *[(f"circuit-eval-circuit-{name}", [*CIRCUIT_EVAL[:-2], "--circuit", f"{{{file}}}", "--task", "circuit:ioi",
                                        "--task-option", "n_train=4", "--task-option", "n_eval=2"], fragment)
      for name, file, fragment in (
        ("graph-in-graph-nan", "graph-in-graph-nan", "graph-in-graph-nan.json: edge 2 has in_graph nan"),
        ("graph-writer-names-no-node", "graph-no-writer", "graph-no-writer.json: edge 2 names writer 'a9.h9'"),
        ("sparsity-text", "sparsity-text", "metadata sparsity='abc' is not a number in [0, 1]"))],
    # subnetwork metadata sparsity=abc, wherever a subnetwork is read
    ("evaluate-subnetwork-sparsity-text", [*EVALUATE, "--subnetwork", "{sparsity-text}"],
     "metadata sparsity='abc' is not a number in [0, 1]"),
    ("export-subnetwork-sparsity-text", ["export", "--model", "{bert}", "--subnetwork", "{sparsity-text}"],
     "metadata sparsity='abc'"),
    ("lottery-retrain-subnetwork-sparsity-text", ["lottery-retrain", "--model", "{bert}", *NLI, "--subnetwork",
                                                  "{sparsity-text}"], "metadata sparsity='abc'"),
    ("lottery-stability-subnetwork-sparsity-text", ["lottery-stability", "--subnetwork", "{sparsity-text}",
                                                    "--subnetwork", "{sub}"], "metadata sparsity='abc'"),
    ("lottery-patterns-subnetwork-sparsity-text", ["lottery-patterns", "--model", "{bert}", *NLI, "--pairs", "2",
                                                   "--subnetwork", "{sparsity-text}"], "metadata sparsity='abc'"),
    # inspect, results, export, lottery-retrain
    ("inspect-edges-bert", ["inspect", "--model", "{bert}", "--edges"], "--edges: bert models normalise the residual"),
    ("inspect-edges-olmo2", ["inspect", "--model", "{olmo2}", "--edges"],
     "--edges: olmo2 models normalise each attention block's output"),
    ("inspect-embedding-nodes-without-edges", ["inspect", "--model", "{lm}", "--embedding-nodes", "1"],
     "--embedding-nodes: only with --edges"),
    ("results-metrics-infinite", ["results", "{infrun}"], "metrics.json: eval.accuracy is inf; a measurement is"),
    ("results-metrics-string", ["results", "{textrun}"], "metrics.json: accuracy is 'high', not a number; the file is damaged"),
    ("export-edges-bert-means", ["export", "--model", "{lm}", "--subnetwork", "{edges-partial}", "--edges-as-nodes",
                                 "--ablation", "{bert-means}"], "they belong to another model"),
    # prompt pairs against the model's positions and a bound on a line's size, checked when the task is bound
    ("circuit-eap-pairs-past-positions", [*EAP[:2], "{lm8}", *EAP[3:]], "exceeds the 8 positions"),
    ("circuit-pairs-past-positions", ["circuit", "--model", "{lm8}", "--task", "circuit:ioi", "--task-option",
                                      "n_train=16", "--task-option", "n_eval=2", "--sparsity", "0.9", "--preset", "demo"],
     "exceeds the 8 positions"),
    ("circuit-eval-pairs-past-positions", ["circuit-eval", "--model", "{lm8}", "--scores", "{nodes-good}", "--task",
                                           "circuit:ioi", "--split", "train"], "exceeds the 8 positions"),
    ("circuit-pairs-line-too-long", ["circuit", "--model", "{lm}", "--task", "file:{long-line}", "--method", "eap",
                                     "--corrupted-column", "corrupted"], "long-line.csv:5: a line of"),
    # MIB's numbers and files (issue 35)
    # issue 47: two embedding nodes are joined into MIB's one where the scores add up; refused, before the model
    # loads, where they do not
    ("circuit-eval-mib-two-embedding-nodes-exact", [*MIB_EVAL, "--scores", "{two-embeddings-exact}", "--mib"],
     "this file's graph has 2 and holds exact-patching scores (method 'exact')"),
    ("circuit-eval-mib-circuits", [*MIB_EVAL, "--circuit", "{edges-partial}", "--mib"],
     "MIB's CPR and CMD are defined on edge scores"),
    ("circuit-eval-mib-sizes", [*MIB_EVAL, "--scores", "{eap-missing-edge}", "--mib", "--sizes", "1,10"],
     "--sizes: MIB's sizes are fixed"),
    ("circuit-eval-mib-export-suffix", [*MIB_EVAL, "--scores", "{two-embeddings}", "--mib-export", "{out}.txt"],
     "an EAP-IG graph file ends in .json or .pt"),
    ("circuit-kv-readers-unknown", [*EAP, "--kv-readers", "heads"], "--kv-readers 'heads': choose query"),
    ("circuit-kv-readers-edge-pruning", [*CIRCUIT, "--sparsity", "0.9", "--kv-readers", "kv"],
     "--kv-readers: not used by --method edge-pruning"),
    ("circuit-eval-mib-export-two-embeddings-signed", [*MIB_EVAL, "--scores", "{two-embeddings-signed}",
                                                       "--mib-export", "{out}.json"],
     "--mib-export: "),
    ("circuit-eval-eap-missing-edge", [*MIB_EVAL, "--scores", "{eap-missing-edge}"],
     "edges['input->m0']: missing"),
    ("circuit-eval-eap-text-score", [*MIB_EVAL, "--scores", "{eap-text-score}"],
     "edges['a0.h1->m1'].score: expected a finite number, got 'high'"),
    ("circuit-eval-eap-other-model", [*MIB_EVAL, "--scores", "{eap-other-model}"],
     "cfg: a graph of 3 layers x 2 heads, the model's has 2 x 2"),
    ("circuit-eval-eap-no-cfg", [*MIB_EVAL, "--scores", "{eap-no-cfg}"], "eap-no-cfg.json: cfg: missing"),
    ("circuit-eval-eap-parallel-text", [*MIB_EVAL, "--scores", "{eap-parallel-text}"],
     "cfg.parallel_attn_mlp: expected true or false, got 'yes' (not a bool)"),
    ("circuit-eval-eap-parallel-on-sequential", [*MIB_EVAL, "--scores", "{eap-parallel-on-sequential}"],
     "the file's graph runs attention and MLP in parallel (GPT-NeoX); the model's in sequence"),
    ("circuit-eval-eap-pt-missing-key", [*MIB_EVAL, "--scores", "{eap-short}"], "dst_nodes: missing"),
    ("circuit-eval-eap-pt-pickle", [*MIB_EVAL, "--scores", "{eap-pickle}"],
     "not a weights-only torch file, refused unread"),
    ("mib-check-folder-name", ["mib-check", "{mib-sub}"], "a folder name is <task>_<model>"),
    ("mib-check-field", ["mib-check", "{mib-sub-bad}"], "edges['input->m0'].in_graph: expected true or false"),
    ("mib-check-missing", ["mib-check", "{missing}"], "no such directory"),
    # export of an edge circuit (issue 27): no smaller standard model, or nothing fixed to fold
    ("export-edges-partial", ["export", "--model", "{lm}", "--subnetwork", "{edges-partial}"],
     "--edges-as-nodes is off and the edge circuit removes 1 edge(s) between nodes it keeps (a0.h0->a1.h0<k>)"),
    # edge-pruning repair and greedy selection (issue 35)
    ("circuit-repair-unknown", [*CIRCUIT, "--sparsity", "0.9", "--set", "repair=best"],
     "repair 'best': expected one of none, greedy"),
    ("circuit-repair-objective", [*CIRCUIT, "--sparsity", "0.9", "--set", "repair_objective=accuracy"],
     "repair_objective 'accuracy': expected one of logit_diff, kl"),
    ("circuit-restarts-zero", [*CIRCUIT, "--sparsity", "0.9", "--set", "restarts=0"], "restarts 0 must be at least 1"),
    ("circuit-repair-depth-zero", [*CIRCUIT, "--sparsity", "0.9", "--set", "repair_depth=0"],
     "repair_depth 0 must be at least 1"),
    ("circuit-eval-selection-unknown", [*CIRCUIT_EVAL, "--task", "circuit:ioi", "--selection", "best"],
     "selection 'best': choose one of topn, greedy"),
    ("circuit-eval-greedy-node-scores", [*CIRCUIT_EVAL[:-1], "{nodescores-fit}", "--task", "circuit:ioi", "--task-option", "n_train=2",
                                         "--task-option", "n_eval=2", "--selection", "greedy"],
     "node scores; greedy selection follows edges from the logits"),
    ("circuit-warm-start-unknown", [*CIRCUIT, "--sparsity", "0.9", "--warm-start", "acdc"],
     "--warm-start 'acdc': choose eap or eap-ig"),
    ("circuit-warm-start-and-init-from", [*CIRCUIT, "--sparsity", "0.9", "--warm-start", "eap", "--init-from",
                                          "{nodescores}"], "give one of the two"),
    ("circuit-eap-refuses-warm-start", [*EAP, "--warm-start", "eap"],
     "--warm-start: not used by --method eap (used only by edge-pruning)"),
    ("export-edges-corrupted", ["export", "--model", "{lm}", "--subnetwork", "{edges-corrupted}"],
     "--ablation: the edge circuit was found with corrupted-prompt ablation"),
    # MIB's datasets from a local copy (issue 35): a bad copy names its file, row and column
    ("mib-no-path", [*CIRCUIT_EVAL, "--task", "mib-ioi"], "task mib-ioi reads a local copy of mib-bench/ioi"),
    ("mib-missing-column", [*CIRCUIT_EVAL, "--task", "mib-ioi", "--task-option", "path={mib-nometa}"],
     "mib-nometa.jsonl: no column 'metadata', which mib-bench/ioi rows have"),
    ("mib-counterfactual-column", [*CIRCUIT_EVAL, "--task", "mib-ioi", "--task-option", "path={mib-ioi}",
                                   "--task-option", "counterfactual=abc"], "no column 'abc'"),
    ("mib-answerkey-out-of-range", [*CIRCUIT_EVAL, "--task", "mib-mcqa", "--task-option", "path={mib-key}"],
     "mib-key.jsonl:2: column 'answerKey' holds int 7, not an index into its 4 choices"),
    ("mib-label-type", [*CIRCUIT_EVAL, "--task", "mib-arithmetic-addition", "--task-option", "path={mib-label}"],
     "mib-label.jsonl:1: column 'label' holds float 1.5, not a number"),
    ("mib-answer-token-counts", [*CIRCUIT_EVAL, "--task", "mib-ioi", "--task-option", "path={mib-counts}",
                                 "--task-option", "eval_file={mib-ioi}"],
     "mib-counts.jsonl:3: the answers' token counts differ (' Tom' 1, ' James' 1, ' Frank' 4)"),
    ("mib-not-utf8", [*CIRCUIT_EVAL, "--task", "mib-ioi", "--task-option", "path={mib-latin1}"],
     "mib-latin1.jsonl:2: not UTF-8 text"),
    ("plan-not-a-model-config", ["plan", "prune", "--model", "{notconfig}"], "not-a-config.json: not a model config"),
    ("plan-memory-text", ["plan", "prune", "--model", "{bert}", "--memory", "abc"],
     "memory 'abc': expected a positive size such as 80GB"),
    ("plan-batch-zero", ["plan", "circuit", "--model", "{bert}", "--batch", "0"], "--batch 0 must be at least 1"),
    ("plan-unknown-method", ["plan", "circuit", "--model", "{bert}", "--method", "acdc"], "--method 'acdc'"),
    ("plan-micro-batch-not-dividing", ["plan", "prune", "--model", "{bert}", "--batch", "8", "--micro-batch", "3"],
     "micro-batch 3 does not divide the batch 8"),
    ("plan-layers-sampled-two", ["plan", "prune", "--model", "{bert}", "--length", "16", "--layers-sampled", "1,2"],
     "need three distinct layer counts"),
    ("plan-layers-sampled-deeper", ["plan", "prune", "--model", "{bert}", "--length", "16", "--layers-sampled",
                                    "1,2,9"],
     "each must be fewer than the model's"),
    ("plan-layers-sampled-text", ["plan", "prune", "--model", "{bert}", "--layers-sampled", "two"],
     "--layers-sampled 'two': expected auto, all or layer counts"),
    ("plan-discover-micro-batch", ["plan", "discover", "--model", "{gpt2}", "--micro-batch", "4"],
     "plan discover does not read --micro-batch"),
    ("plan-finetune-sparsity-and-method", ["plan", "finetune", "--model", "{bert}", "--sparsity", "0.5", "--method",
                                           "eap"], "plan finetune does not read --method, --sparsity"),
    ("plan-prune-examples", ["plan", "prune", "--model", "{bert}", "--examples", "10"],
     "plan prune does not read --examples"),
    ("plan-discover-encoder", ["plan", "discover", "--model", "{bert}"], "discover needs a causal language model"),
    ("plan-discover-unknown-preset", ["plan", "discover", "--model", "{gpt2}", "--preset", "demo"],
     "preset 'demo': discover's presets are paper, quick"),
    ("plan-finetune-unknown-preset", ["plan", "finetune", "--model", "{bert}", "--preset", "paper"],
     "unknown preset 'paper'"),
    ("plan-finetune-float16", ["plan", "finetune", "--model", "{bert}", "--dtype", "float16"],
     "float16 has no loss scaling in finetune"),
    ("plan-arithmetic-gpt2-layers", ["plan", "finetune", "--model", "gpt2-arith:x"],
     "gpt2-arith:x: expected gpt2-arith:<layers> with 1-48 layers"),
    ("plan-lottery-prune-decoder", ["plan", "lottery-prune", "--model", "{gpt2}", "--length", "16"],
     "lottery-prune is planned on a classifier"),
    # plan's bounds (issue 53): counts past a named bound refused before any work
    ("plan-batch-past-the-bound", ["plan", "circuit", "--model", "{gpt2}", "--batch", "1000000000000"],
     "--batch 1000000000000 is more than the plan's bound of 1,048,576 examples"),
    ("plan-length-past-the-positions", ["plan", "circuit", "--model", "{gpt2}", "--length", "100000"],
     "--length 100000 is more than the model's"),
    # plan's exact patching (issue 47): the edges patched, read by exact only, at least 1, at most the graph's
    ("plan-edges-not-exact", ["plan", "circuit", "--model", "{gpt2}", "--method", "eap", "--edges", "10"],
     "--edges: read by exact patching only, not eap"),
    ("plan-edges-zero", ["plan", "circuit", "--model", "{gpt2}", "--method", "exact", "--edges", "0"],
     "--edges 0 must be at least 1"),
    ("plan-edges-past-the-graph", ["plan", "circuit", "--model", "{gpt2}", "--method", "exact", "--edges", "100000000",
                                   "--batch", "2", "--length", "8"], "is more than the model's"),
    ("mib-unfit", [*CIRCUIT_EVAL, "--task", "mib-ioi", "--task-option", "path={mib-ioi}", "--task-option",
                   "unfit=skip"], "unfit"),
    # subnetlab view (issue 38): no run, damaged graph / scores files, runs of two graphs, --out a directory
    ("view-no-run", ["view", "{full}"], "holds no run"),
    ("view-damaged-graph", ["view", "{view-truncated}"], "view-truncated.json"),
    ("view-graph-json-list", ["view", "{listgraph}"], "list-graph.json: a JSON list, not a graph"),
    ("view-damaged-scores", ["view", "{view-text-score}"], "edge 3 has no 'score'"),
    ("view-different-graphs", ["view", "{view-small}", "{view-large}"], "the runs are of different graphs"),
    ("view-out-directory", ["view", "{view-small}", "--out", "{full}"], "is a directory"),
    ("view-tracer-json-nodes", ["view", "{viewnodes}", "--tracer-json", "{out}/tracer.json"],
     "circuit-tracer graph JSON is written for edge circuits"),
    # --preset nosuch on every command that trains (quick and paper are the names every one of them knows)
    ("prune-preset-nosuch", [*PRUNE[:-1], "nosuch"], "--preset 'nosuch': expected one of paper, demo, quick"),
    ("circuit-preset-nosuch", [*CIRCUIT, "--sparsity", "0.9", "--preset", "nosuch"], "--preset 'nosuch': expected one of"),
    ("discover-preset-nosuch", [*DISCOVER, "--preset", "nosuch"], "--preset 'nosuch': expected one of paper, quick"),
    ("transfer-preset-nosuch", [*TRANSFER, "--preset", "nosuch"], "--preset 'nosuch': expected one of paper, quick"),
    ("lottery-prune-preset-nosuch", ["lottery-prune", "--model", "{bert}", *NLI, "--method", "magnitude", "--preset",
                                     "nosuch"], "--preset 'nosuch': expected one of paper, quick"),
    # long contexts (issue 47, item 4): attribution's tokens per chunk; edge pruning's blocks recomputed
    ("circuit-eap-position-chunk-negative", [*EAP, "--position-chunk", "-1"], "--position-chunk -1: the tokens scored per chunk"),
    ("circuit-edge-pruning-refuses-position-chunk", [*CIRCUIT, "--sparsity", "0.9", "--position-chunk", "64"],
     "--position-chunk: not used by --method edge-pruning (used only by eap, eap-ig, eap-ig-activations and "
     "clean-corrupted)"),
    ("circuit-exact-refuses-position-chunk", [*CIRCUIT, "--method", "exact", "--position-chunk", "64"],
     "--position-chunk: not used by --method exact"),
    ("circuit-checkpoint-blocks-not-a-bool", [*CIRCUIT, "--sparsity", "0.9", "--set", "checkpoint_blocks=maybe"],
     "checkpoint_blocks"),
    # issue 53 (model loading): weights that do not fit the config, configs that disagree with themselves, a
    # directory given as a data file, JSON nested 200,000 deep, an edge circuit where masks are pinned
    ("circuit-config-more-layers-than-weights", [*CIRCUIT, "--sparsity", "0.9", "--model", "{lm-3-layers}"],
     "12 weight(s) of the model are not in the checkpoint and would be randomly initialised (transformer.h.2."),
    ("prune-config-more-layers-than-weights", [*PRUNE, "--model", "{bert-3-layers}"],
     "not in the checkpoint and would be randomly initialised (bert.encoder.layer.2."),
    ("inspect-config-more-layers-than-weights", ["inspect", "--model", "{lm-3-layers}"],
     "12 weight(s) of the model are not in the checkpoint and would be randomly initialised (h.2.attn.c_attn.bias"),
    ("inspect-weights-beyond-config", ["inspect", "--model", "{lm-1-layer}"],
     "weight(s) of the checkpoint have no place in the model (transformer.h.1."),
    ("inspect-weight-of-another-shape", ["inspect", "--model", "{lm-wider-vocab}"],
     "1 weight(s) have another shape in the checkpoint (wte.weight)"),
    ("circuit-weight-of-another-shape", [*CIRCUIT, "--sparsity", "0.9", "--model", "{lm-wider-vocab}"],
     "have another shape in the checkpoint (transformer.wte.weight)"),
    *[(f"{command}-config-{name}", args, fragment)
      for name, model, fragment in (
          ("heads-not-dividing-width", "lm-heads-not-dividing", "config.json describes no model that can be built "
                                                                "(ValueError: `embed_dim` must be divisible by num_heads"),
          ("no-key-value-heads", "llama-no-kv-heads", "config.json: num_key_value_heads is 0; it must be at least 1"),
          ("no-heads", "lm-no-heads", "config.json: num_attention_heads is 0; it must be at least 1"),
          ("layers-text", "lm-layers-text", "Field 'n_layer' expected int, got str (value: 'two')"),
          ("negative-vocab", "lm-negative-vocab", "config.json: vocab_size is -5; it must be at least 1"))
      for command, args in (("inspect", ["inspect", "--model", f"{{{model}}}"]),
                            ("circuit", [*CIRCUIT, "--sparsity", "0.9", "--model", f"{{{model}}}"]),
                            ("plan", ["plan", "circuit", "--model", f"{{{model}}}"]))],
    ("finetune-task-file-a-directory", [*FINETUNE[:3], "--task", "file:{datadir}", "--max-steps", "2"],
     "data-dir: a directory, but not a dataset saved with save_to_disk"),
    ("mib-path-a-directory", [*CIRCUIT_EVAL, "--task", "mib-ioi", "--task-option", "path={datadir}"],
     "data-dir: a directory, but not a dataset saved with save_to_disk"),
    ("view-json-nested-deep", ["view", "{deep}"], "deep.json: JSON nested too deep to read"),
    ("results-json-nested-deep", ["results", "{deeprun}"], "metrics.json: JSON nested too deep to read"),
    ("circuit-eval-circuit-json-nested-deep", [*CIRCUIT_EVAL[:-2], "--circuit", "{deep}", "--task", "circuit:ioi",
                                               "--task-option", "n_train=4", "--task-option", "n_eval=2"],
     "deep.json"),
    # issue 53, class 3: every side output checked before any work, and no two outputs the same file
    ("circuit-eval-mib-export-under-a-file", [*MIB_EVAL, "--scores", "{two-embeddings}", "--mib-export",
                                              "{afile}/graph.json"], "--mib-export: {afile}/graph.json cannot be "
                                                                     "created: {afile} is a file"),
    ("circuit-eval-mib-export-a-directory", [*MIB_EVAL, "--scores", "{two-embeddings}", "--mib-export", "{dirjson}"],
     "--mib-export: {dirjson} is a directory; name a file"),
    ("circuit-eval-mib-export-the-runs-own-file", [*MIB_EVAL, "--scores", "{two-embeddings}", "--mib-export",
                                                   "{out}/metrics.json"], "the run writes its own metrics.json there"),
    ("circuit-eval-mib-submission-a-file", [*MIB_EVAL, "--scores", "{two-embeddings}", "--mib-submission", "{afile}"],
     "--mib-submission: {afile} exists and is not a directory"),
    ("circuit-eval-mib-submission-under-a-file", [*MIB_EVAL, "--scores", "{two-embeddings}", "--mib-submission",
                                                  "{afile}/sub"], "{afile}/sub cannot be created: {afile} is a file"),
    ("circuit-eval-mib-submission-bad-folder", [*MIB_EVAL, "--scores", "{two-embeddings}", "--mib-submission",
                                                "{mib-sub-bad}"], "edges['input->m0'].in_graph: expected true or false"),
    ("circuit-eval-mib-submission-misnamed-folder", [*MIB_EVAL, "--scores", "{two-embeddings}", "--mib-submission",
                                                     "{mib-sub}"], "a folder name is <task>_<model>"),
    ("circuit-eval-mib-export-is-the-submission-file", [*MIB_EVAL, "--scores", "{two-embeddings}", "--mib-submission",
                                                        "{out}-sub", "--mib-export", "{out}-sub/ioi_lm/importances.json"],
     "mib_submission and mib_export name the same path"),
    ("view-tracer-json-is-the-page", ["view", "{view-small}", "--out", "{out}", "--tracer-json", "{out}"],
     "--tracer-json: {out}: tracer_json and out name the same path"),
    ("view-tracer-json-is-a-run", ["view", "{view-small}", "--tracer-json", "{view-small}"], "name the same path"),
    ("view-tracer-json-under-a-file", ["view", "{view-small}", "--tracer-json", "{afile}/tracer.json"],
     "--tracer-json: {afile}/tracer.json cannot be created: {afile} is a file"),
    ("view-tracer-json-a-directory", ["view", "{view-small}", "--tracer-json", "{dirjson}"],
     "--tracer-json: {dirjson} is a directory; name a file"),
    ("view-out-under-a-file", ["view", "{view-small}", "--out", "{afile}/page.html"],
     "--out: {afile}/page.html cannot be created: {afile} is a file"),
    ("results-out-a-directory", ["results", "{full}", "--out", "{tables}/t"], "--out: {tables}/t.csv is a directory"),
    ("prune-offload-folder-under-a-file", [*PRUNE, "--device-map", "auto", "--offload-folder", "{afile}/offload"],
     "--offload-folder: {afile}/offload cannot be created: {afile} is a file"),
    ("prune-offload-folder-is-out", [*PRUNE, "--device-map", "auto", "--offload-folder", "{out}"],
     "offload_folder and out name the same path"),
    ("circuit-offload-folder-is-out", [*CIRCUIT, "--sparsity", "0.9", "--device-map", "auto", "--offload-folder",
                                       "{out}"], "offload_folder and out name the same path"),
    # issue 53, class 4: counts past a bound no real study meets (errors.COUNT_BOUNDS), named; named pipes as inputs
    ("prune-total-steps-past-the-bound", [*PRUNE, "--set", "total_steps=1000000000000"],
     "total_steps 1,000,000,000,000 is more than the bound of 10,000,000 optimiser steps"),
    ("circuit-total-steps-past-the-bound", [*CIRCUIT, "--sparsity", "0.9", "--set", "total_steps=1000000000000"],
     "total_steps 1,000,000,000,000 is more than the bound of 10,000,000 optimiser steps"),
    ("finetune-max-steps-past-the-bound", [*FINETUNE[:-2], "--max-steps", "1000000000000"],
     "--max-steps 1,000,000,000,000 is more than the bound of 10,000,000 optimiser steps"),
    ("prune-seeds-past-the-bound", [*PRUNE[:-4], "--seeds", "0-1000000", "--preset", "demo"],
     "--seeds '0-1000000': 1,000,001 seeds, more than the bound of 1,000 seeds"),
    ("prune-seeds-range-of-a-trillion", [*PRUNE[:-4], "--seeds", "0-999999999999", "--preset", "demo"],
     "1,000,000,000,000 seeds, more than the bound of 1,000 seeds"),
    ("circuit-seeds-past-the-bound", [*CIRCUIT, "--sparsity", "0.9", "--seeds", "0-1000000"],
     "--seeds '0-1000000': 1,000,001 seeds, more than the bound of 1,000 seeds"),
    ("prune-500-sparsities", [*PRUNE[:-6], "--sparsity", ",".join(f"{i / 1000:g}" for i in range(1, 501)), "--seeds", "0", "--preset", "demo"],
     "--sparsity: 500 target sparsities given, more than the bound of 100 target sparsities"),
    ("circuit-500-sparsities", [*CIRCUIT, "--sparsity", ",".join(f"{i / 1000:g}" for i in range(1, 501))],
     "--sparsity: 500 target sparsities given, more than the bound of 100 target sparsities"),
    ("circuit-300-ig-step-counts", [*EAP_IG, "--ig-steps", ",".join(str(i) for i in range(1, 301))],
     "--ig-steps: 300 integrated-gradient step counts given, more than the bound of 64"),
    ("circuit-eval-bootstrap-past-the-bound", [*MIB_EVAL, "--scores", "{two-embeddings}", "--mib", "--bootstrap",
                                               "1000000000"],
     "--bootstrap 1,000,000,000 is more than the bound of 100,000 bootstrap resamples"),
    ("finetune-data-a-named-pipe", [*FINETUNE[:3], "--task", "file:{pipe-csv}", "--max-steps", "2"],
     "pipe.csv: not a regular file (a named pipe, device or socket)"),
    ("circuit-eval-scores-a-named-pipe", [*MIB_EVAL, "--scores", "{pipe-safetensors}"],
     "--scores: {pipe-safetensors}: not a regular file"),
    ("evaluate-subnetwork-a-named-pipe", [*EVALUATE, "--subnetwork", "{pipe-safetensors}"], "not a regular file"),
    ("view-a-named-pipe", ["view", "{pipe-json}"], "pipe.json: not a regular file"),
    # issue 53, class 6: a list option given a value twice, or an empty one
    ("prune-control-twice", [*PRUNE, "--control", "random-weights", "--control", "random-weights"],
     "--control random-weights given twice: each once"),
    ("prune-control-empty", [*PRUNE, "--control", ""], "--control '': an empty name"),
    ("prune-control-empty-in-a-list", [*PRUNE, "--control", "random-weights,"], "--control '': an empty name"),
    ("circuit-control-twice", [*CIRCUIT, "--sparsity", "0.9", "--control", "shuffled-labels,shuffled-labels"],
     "--control shuffled-labels given twice"),
    ("discover-control-empty", [*DISCOVER, "--control", ""], "--control '': an empty name"),
    ("lottery-prune-control-twice", ["lottery-prune", "--model", "{bert}", *NLI, "--method", "magnitude", "--control",
                                     "random-weights", "--control", "random-weights"], "given twice"),
    ("transfer-condition-twice", [*TRANSFER, "--condition", "scratch,scratch"], "--condition scratch given twice"),
    ("transfer-condition-empty", [*TRANSFER, "--condition", "scratch,"], "--condition '': an empty name"),
    ("prune-seeds-twice", [*PRUNE[:-4], "--seeds", "0,0", "--preset", "demo"], "--seeds '0,0': a value given twice"),
    ("prune-sparsity-twice", [*PRUNE[:-6], "--sparsity", "0.5,0.5", "--seeds", "0", "--preset", "demo"],
     "--sparsity 0.5 given twice"),
    ("evaluate-split-twice", [*EVALUATE, "--split", "id", "--split", "id"], "id given twice"),
    ("circuit-eval-circuit-twice", [*MIB_EVAL, "--circuit", "{edges-partial}", "--circuit", "{edges-partial}"],
     "given twice"),
    ("lottery-stability-subnetwork-twice", ["lottery-stability", "--subnetwork", "{sub}", "--subnetwork", "{sub}"],
     "--subnetwork"),
    ("lottery-retrain-edge-circuit", ["lottery-retrain", "--model", "{lm}", "--task", "circuit:ioi", "--task-option",
                                      "n_train=4", "--task-option", "n_eval=2", "--subnetwork", "{edges-partial}"],
     "a subnetwork of kind 'edges'"),
]


def _filled(args: list[str], paths: dict[str, str], out: str) -> list[str]:
    return [a.format(out=out, **paths) if "{" in a else a for a in args]


def _listing(path: str) -> list[tuple[str, int]] | None:
    root = Path(path)
    if not root.exists():
        return None
    if root.is_file():
        return [(root.name, root.stat().st_size)]
    return sorted((str(p.relative_to(root)), p.stat().st_size if p.is_file() else -1) for p in root.rglob("*"))


@pytest.mark.parametrize("name, args, fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line_before_any_work(name, args, fragment, files, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr("subnetlab.executor.run._has_gpu", lambda: False)  # the same answer on a GPU machine
    torch.set_num_threads(1)
    out = str(tmp_path / "out")
    argv = _filled(args, files, out)
    if "--out" not in argv and argv[0] not in ("inspect", "results", "mib-check", "plan"):
        argv += ["--out", out]
    given = argv[argv.index("--out") + 1] if "--out" in argv else out
    before = {p: _listing(p) for p in (given, out, files["afile"], files["full"])}
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert done.value.code == 2, err
    assert "Traceback" not in err
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    fragment = re.sub(r"\{([\w-]+)\}", lambda m: {**files, "out": out}.get(m.group(1), m.group(0)), fragment)
    assert fragment in lines[0], lines[0]
    assert {p: _listing(p) for p in before} == before, "the command wrote under --out"


# Under torchrun: rank 0's environment (no process group is joined: every refusal comes before any rank waits)
LAUNCHED = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
LAUNCHED_CASES: list[tuple[str, list[str], str, dict[str, str]]] = [
    ("torchrun-prune", PRUNE, "prune: runs in one process; under torchrun", {}),
    ("torchrun-edge-pruning-jobs", [*CIRCUIT, "--sparsity", "0.9", "--jobs", "2"],
     "--backend processes: under torchrun (2 processes) every rank runs the sweep's runs", {}),
    ("torchrun-edge-pruning-ray", [*CIRCUIT, "--sparsity", "0.9", "--backend", "ray"], "--backend ray: under torchrun",
     {}),
    ("torchrun-edge-pruning-batch", [*CIRCUIT, "--sparsity", "0.9", "--preset", "quick", "--set", "batch_size=1"],
     "batch_size 1 across 2 processes", {}),
    ("torchrun-device-map", [*CIRCUIT, "--device-map", "auto"], "--device-map: under torchrun", {}),
    ("torchrun-attribution-sweep", [*EAP, "--seeds", "0,1", "--limit", "2"], "--ig-steps / --seeds: under torchrun",
     {}),
    ("torchrun-cuda-index", [*EAP, "--device", "cuda:1"], "--device cuda:1: under torchrun", {}),
    ("torchrun-timeout", EAP, "SUBNETLAB_DIST_TIMEOUT_MINUTES='soon'", {"SUBNETLAB_DIST_TIMEOUT_MINUTES": "soon"}),
    ("torchrun-world-size", EAP, "WORLD_SIZE='two'", {"WORLD_SIZE": "two"}),
    ("torchrun-no-master", EAP, "MASTER_ADDR, MASTER_PORT not set", {"MASTER_ADDR": "", "MASTER_PORT": ""}),
]


@pytest.mark.parametrize("name, args, fragment, env", LAUNCHED_CASES, ids=[c[0] for c in LAUNCHED_CASES])
def test_bad_input_under_torchrun_is_one_error_line(name, args, fragment, env, files, tmp_path, capsys,
                                                    monkeypatch) -> None:
    for key, value in {**LAUNCHED, **env}.items():
        monkeypatch.setenv(key, value)
    test_bad_input_is_one_error_line_before_any_work(name, args, fragment, files, tmp_path, capsys, monkeypatch)


def test_pickled_weights_are_refused_without_being_unpickled(files, tmp_path, capsys) -> None:
    """Neither the refusal nor loading a directory that holds both formats runs the pickle's command."""
    from subnetlab.models import load_model

    line = _one_error_line(["inspect", "--model", files["pickled"]], capsys)
    assert "the weights are only in pytorch_model.bin" in line, line
    both = tmp_path / "both"
    shutil.copytree(files["bert"], both)
    shutil.copy(Path(files["pickled"]) / "pytorch_model.bin", both / "pytorch_model.bin")
    assert load_model(str(both), head="classification").adapter.num_layers == 2  # from model.safetensors
    assert not Path(files["unpickled"]).exists()


def test_the_table_covers_every_command_and_enough_cases() -> None:
    from subnetlab.cli import app

    commands = {c.name for c in app.registered_commands}
    covered = {args[0] for _, args, _ in CASES}
    assert len(CASES) >= 60
    assert commands - covered <= {"models", "demo", "lottery-patterns"}, commands - covered


def test_a_read_only_parent_is_refused_before_any_work(files, tmp_path, capsys, monkeypatch) -> None:
    """``--out`` under a directory this user cannot write (root may write anywhere: then the check is simulated)."""
    locked = tmp_path / "read-only"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        if os.access(locked, os.W_OK):  # root
            real = os.access
            monkeypatch.setattr("subnetlab.run_directory.os.access",
                                lambda p, mode: False if Path(p) == locked else real(p, mode))
        for args in (PRUNE, FINETUNE, EVALUATE):
            with pytest.raises(SystemExit) as done:
                main([*_filled(args, files, ""), "--out", str(locked / "run")])
            lines = capsys.readouterr().err.strip().splitlines()
            assert done.value.code == 2 and len(lines) == 1, lines
            assert lines[0] == f"error: --out: {locked / 'run'} cannot be created: {locked} is not writable " \
                               "(read-only or another user's); choose another directory"
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o755)


# --- faults while writing (issue 30): a full disk, and a kill -9 during export -------------------------------------
# safetensors reports a failed write as its own SafetensorError (not an OSError), with Rust's io::Error in the text
FULL_DISK = 'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'


def _full_disk(*args, **kwargs):
    from safetensors import SafetensorError

    raise SafetensorError(FULL_DISK)


def _one_error_line(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert done.value.code == 2 and "Traceback" not in err, err
    assert len(errors) == 1 and err.strip().splitlines()[-1] == errors[0], err  # status lines may come before it
    return errors[0]


def test_finetune_on_a_full_disk_is_one_error_line_and_leaves_no_checkpoint(files, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr("transformers.modeling_utils.safe_save_file", _full_disk)  # save_pretrained's writer
    monkeypatch.setattr("subnetlab.io.save_file", _full_disk)  # subnetlab's own tensor files
    torch.set_num_threads(1)
    out = tmp_path / "ft"
    line = _one_error_line([*_filled(FINETUNE, files, ""), "--save-every", "1", "--out", str(out)], capsys)
    assert "cannot write (No space left on device); free some space and rerun" in line, line
    left = sorted(p.name for p in (out / "checkpoints").iterdir()) if (out / "checkpoints").exists() else []
    assert left == [] and not (out / "model").exists() and not (out / "metrics.json").exists(), left


def test_export_on_a_full_disk_is_one_error_line_and_leaves_nothing(files, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr("subnetlab.io.save_file", _full_disk)
    out = tmp_path / "small"
    line = _one_error_line(["export", "--model", files["bert"], "--subnetwork", files["sub"], "--ablation", "zero",
                            "--out", str(out)], capsys)
    assert f"{out}/subnetlab_model.safetensors: cannot write (No space left on device); free some space and rerun" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no --out, no temporary beside it


def test_export_killed_mid_write_leaves_a_temporary_that_the_rerun_removes(files, tmp_path, capsys) -> None:
    """``kill -9`` after the export's config.json: its hidden temporary stays; a rerun removes it (its process is
    gone) and writes the export, while a temporary of a live process (pid 1) and other files stay untouched."""
    from tests.kill_helpers import run_killed

    out = tmp_path / "xk-kill"
    args = ["export", "--model", files["bert"], "--subnetwork", files["sub"], "--ablation", "zero", "--out", str(out)]
    run_killed(args, f"{tmp_path}/.xk-kill.export-*.tmp/config.json")
    stale = [p.name for p in tmp_path.iterdir()]
    assert len(stale) == 1 and stale[0].startswith(".xk-kill.export-") and not out.exists(), stale
    live = tmp_path / ".xk-kill.export-1.abcdefgh.tmp"  # pid 1 is always alive: another process's export
    other = tmp_path / ".xk-kill.unrelated.tmp"
    live.mkdir()
    other.mkdir()
    with pytest.raises(SystemExit) as done:
        main(args)
    assert done.value.code in (0, None), capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name, out.name])
    assert (out / "subnetlab_pruning.json").is_file() and (out / "subnetlab_model.safetensors").is_file()


def test_retraining_a_gpt2_without_a_pad_token_pads_with_its_end_of_text_token(files, tmp_path, capsys) -> None:
    """GPT-2 names no padding token; its classification head then refuses any batch of two rows. subnetlab pads
    with the end-of-text token (``models.loading.pad_like_eos``), so the run finishes."""
    from subnetlab.models import load_model

    loaded = load_model(files["gpt2-nopad"], head="classification", num_labels=3, new_weights=("score.*",))
    assert loaded.model.config.pad_token_id == loaded.tokenizer.eos_token_id == 3
    assert loaded.tokenizer.pad_token == "[SEP]"
    torch.set_num_threads(1)
    out = tmp_path / "retrain"
    with pytest.raises(SystemExit) as done:
        main(["lottery-retrain", "--model", files["gpt2-nopad"], *NLI, "--subnetwork", files["gpt2-nopad-sub"],
              "--max-steps", "2", "--batch-size", "4", "--no-save-model", "--out", str(out)])
    assert done.value.code in (0, None), capsys.readouterr().err
    assert (out / "metrics.json").is_file()


# --- issue 53, class 5: the Python API checks its arguments at the call (runs.job_config.check_call and the runs
# layer's checks the command runs too), raising SubnetlabError before anything is written
NAN = float("nan")
API_CASES: list[tuple[str, str, tuple[str, ...], dict, str]] = [
    # (name, function, positional arguments (fixture names; "{out}" the output), keywords, fragment)
    ("circuit-seeds-negative", "circuit", ("lm", "circuit:ioi"), {"sparsity": 0.9, "seeds": -1},
     "seeds -1: must be at least 0"),
    ("prune-seeds-negative", "prune", ("bert", "nli-synthetic"), {"seeds": -3}, "seeds -3: must be at least 0"),
    ("prune-seeds-repeated", "prune", ("bert", "nli-synthetic"), {"seeds": [1, 1]}, "seeds 1 given twice"),
    ("prune-seeds-past-the-bound", "prune", ("bert", "nli-synthetic"), {"seeds": range(2000)},
     "2,000 seeds given, more than the bound of 1,000 seeds"),
    ("prune-seeds-text", "prune", ("bert", "nli-synthetic"), {"seeds": "0"}, "seeds '0': expected a whole number"),
    ("prune-jobs-zero", "prune", ("bert", "nli-synthetic"), {"jobs": 0}, "jobs 0 must be an integer of at least 1"),
    ("circuit-jobs-zero", "circuit", ("lm", "circuit:ioi"), {"sparsity": 0.9, "jobs": 0},
     "jobs 0 must be an integer of at least 1"),
    ("discover-samples-zero", "discover", ("gpt2", "arith:ab"), {"samples": 0},
     "samples 0 must be an integer of at least 1"),
    ("discover-no-model", "discover", ("missing-model", "arith:ab"), {}, "no such model directory"),
    ("transfer-no-model", "transfer_subnetwork", ("missing-model", "arith:ab"), {"conditions": ["scratch"]},
     "no such model directory"),
    ("prune-model-none", "prune", (None, "nli-synthetic"), {}, "model None: expected a path"),
    ("prune-task-int", "prune", ("bert", 3), {}, "task 3: expected text"),
    ("circuit-out-none", "circuit", ("lm", "circuit:ioi", None), {"sparsity": 0.9}, "out None: expected a path"),
    ("prune-sparsity-nan", "prune", ("bert", "nli-synthetic"), {"sparsity": NAN}, "sparsity: nan is outside (0, 1)"),
    ("prune-sparsity-text", "prune", ("bert", "nli-synthetic"), {"sparsity": "0.5"}, "sparsity '0.5': expected"),
    ("prune-500-sparsities", "prune", ("bert", "nli-synthetic"), {"sparsity": [i / 1000 for i in range(1, 501)]},
     "500 target sparsities given, more than the bound of 100"),
    ("circuit-ig-steps-text", "circuit", ("lm", "circuit:ioi"), {"method": "eap-ig", "ig_steps": "5"},
     "ig_steps '5': a step count is a whole number"),
    ("circuit-eap-zero-ablation", "circuit", ("lm", "circuit:ioi"), {"method": "eap", "ablation": "zero"},
     "ablation 'zero': method eap takes corrupted, or mean under eap and nap"),
    ("circuit-nap-ig-mean-ablation", "circuit", ("lm", "circuit:ioi"), {"method": "nap-ig", "ablation": "mean"},
     "ablation: not used by method nap-ig (used only by edge-pruning, eap and nap)"),
    ("circuit-total-steps-past-the-bound", "circuit", ("lm", "circuit:ioi"), {"sparsity": 0.9,
                                                                              "total_steps": 10 ** 12},
     "total_steps 1,000,000,000,000 is more than the bound"),
    ("circuit-eval-batch-size-nan", "circuit_eval", ("lm", "circuit:ioi"), {"scores": "x", "batch_size": NAN},
     "batch_size nan must be an integer of at least 1"),
    ("circuit-eval-random-circuits-negative", "circuit_eval", ("lm", "circuit:ioi"),
     {"scores": "{nodescores}", "random_circuits": -2}, "random_circuits -2: a whole number of random circuits"),
    ("circuit-eval-random-circuits-past-the-bound", "circuit_eval", ("lm", "circuit:ioi"),
     {"scores": "{nodescores}", "random_circuits": 10 ** 5}, "random_circuits 100,000 is more than the bound"),
    ("circuit-eval-random-circuits-float", "circuit_eval", ("lm", "circuit:ioi"),
     {"scores": "{nodescores}", "random_circuits": 2.5}, "random_circuits 2.5: a whole number"),
    ("circuit-eval-ablations-text", "circuit_eval", ("lm", "circuit:ioi"),
     {"scores": "{nodescores}", "ablations": "corrupted,zero"}, "'corrupted,zero' is not one of"),
    ("circuit-eval-bootstrap-past-the-bound", "circuit_eval", ("lm", "circuit:ioi"),
     {"scores": "{two-embeddings}", "definition": "mib", "bootstrap": 10 ** 9}, "bootstrap 1,000,000,000 is more"),
    ("transfer-seeds-text", "transfer_subnetwork", ("gpt2", "arith:ab"), {"conditions": ["scratch"], "seeds": "0"},
     "seeds '0': expected a whole number"),
    ("transfer-sizes-negative", "transfer_subnetwork", ("gpt2", "arith:ab"), {"conditions": ["scratch"],
                                                                              "sizes": [-1]}, "sizes -1: must be"),
    ("transfer-conditions-repeated", "transfer_subnetwork", ("gpt2", "arith:ab"),
     {"conditions": ["scratch", "scratch"]}, "conditions scratch given twice"),
    ("prune-task-options-list", "prune", ("bert", "nli-synthetic"), {"task_options": [1]},
     "task_options [1]: expected a mapping"),
    ("circuit-device-int", "circuit", ("lm", "circuit:ioi"), {"sparsity": 0.9, "device": 0}, "device 0: expected text"),
]


def _api_value(value, files: dict[str, str], out: str):
    if isinstance(value, str) and value.startswith("{") and value.endswith("}"):
        return out if value == "{out}" else files[value[1:-1]]
    if isinstance(value, str) and value in files:
        return files[value]
    if value == "missing-model":
        return str(Path(files["afile"]).parent / "no-such-model")
    return value


@pytest.mark.parametrize("name, function, args, kwargs, fragment", API_CASES, ids=[c[0] for c in API_CASES])
def test_the_api_refuses_a_bad_argument_at_the_call(name, function, args, kwargs, fragment, files, tmp_path,
                                                     monkeypatch) -> None:
    import subnetlab as sl
    from subnetlab.errors import SubnetlabError

    monkeypatch.setattr("subnetlab.executor.run._has_gpu", lambda: False)
    torch.set_num_threads(1)
    out = str(tmp_path / "out")
    values = [_api_value(a, files, out) for a in args]
    if len(values) == 2:
        values.append(out)
    with pytest.raises(SubnetlabError) as refused:
        getattr(sl, function)(*values, **{k: _api_value(v, files, out) for k, v in kwargs.items()})
    assert fragment in str(refused.value), str(refused.value)
    assert list(tmp_path.iterdir()) == [], "the call wrote before refusing"
