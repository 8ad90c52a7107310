"""Attribution methods' examples per second, and TransformerLens 4.3's ``attribution_patch`` (same model, same batch).

A GPT-2-style model built from a config (no download), float32, CPU. Side by side, interleaved so machine noise
hits all alike, median over repeats:

* plain: one forward + backward of the metric on the clean prompts (parameters frozen, gradient to the
  embeddings), and EAP's floor: that plus a no-grad forward on the corrupted prompts;
* subnetlab EAP (``methods.attribution``, edge scores of every edge, the batch in one pass);
* subnetlab EAP-IG at k = 5 (``--steps``);
* subnetlab EAP-IG on activations at k = 5 (``(1 + 2L) k`` forward+backwards), clean-corrupted (two);
* subnetlab exact patching (one forward row per edge and pair, batched, no backward; hours at GPT-2 small's
  graph, so leave it out there with ``--methods eap,eap-ig``);
* with ``--expanded``, each gradient method again with ``expand_readers=True``: the reader gradients through
  ``intervene.edges``'s expanded readers instead of the model's own backward (the path before
  ``methods.attribution.reader_gradients``);
* TransformerLens 4.3 ``attribution_patch(granularity="edge")`` on the same model wrapped with
  ``TransformerBridge.boot_transformers`` (it scores each pair separately, per position).

    pip install -e '.[bench]'   # TransformerLens 4.3 beside transformers 5, in the same environment
    OMP_NUM_THREADS=1 python benchmarks/bench_attribution.py [--layers 4 ...]

Without TransformerLens the TransformerLens row is left out.

What dominated (torch.profiler, GPT-2 small's graph: 12 layers x 12 heads, hidden 768, vocabulary 1,000;
batch 8 x 16; 32,491 edges; one thread). Through the expanded readers one EAP call spent about 60% of its time
on the expansion: ``addmm_`` building every reader's copy of the stream less its writers (24%, 975 calls),
that product's backward (24%), the per-head Q/K/V projections of the expanded readers and the norm on
``[readers, batch, pos, hidden]`` (about 15%); the model's own linear layers over its three forwards about 30%.
The plain-backward path runs the model's two forwards and one backward and adds, per layer, the heads'
cotangents ``g_h W_h^T`` (the cost of the Q/K/V projection, which replaces the model's own backward through it),
the norm's batched vjp, the heads' writer outputs (the cost of the output projection) and the scoring matmuls
``grads @ D^T`` (edges x batch x pos x hidden, about a third of a forward): together about a third of the floor.
Measured with ``--layers 12 --heads 12 --hidden 768 --methods eap,eap-ig --expanded --repeats 5`` (a 2-core
machine shared with other jobs, load about 14, so absolute times are several times a quiet machine's; the rows
are interleaved): EAP 1.24x its floor (expanded readers: 4.01x), EAP-IG k=5 0.87 x 5 x EAP (expanded: 0.71).
At the default 4 x 8 x 256 (``--methods eap,eap-ig,eap-ig-activations,clean-corrupted --expanded --repeats 5``),
where the hooks' fixed cost weighs more: EAP 1.36x its floor (expanded: 2.92x), EAP-IG k=5 0.75 x 5 x EAP.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time

import torch

METHOD_ROWS = {"eap": "subnetlab EAP", "eap-ig": "subnetlab EAP-IG k={k}",
               "eap-ig-activations": "subnetlab EAP-IG-activations k={k}",
               "clean-corrupted": "subnetlab clean-corrupted", "exact": "subnetlab exact patching",
               "nap": "subnetlab NAP (node scores)", "nap-ig": "subnetlab NAP-IG k={k} (node scores)"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="EAP-IG's k")
    parser.add_argument("--methods", default=",".join(METHOD_ROWS),
                        help=f"comma-separated subset of {','.join(METHOD_ROWS)} (exact patching is hours at GPT-2 "
                             "small's graph)")
    parser.add_argument("--expanded", action="store_true",
                        help="beside each gradient method, the same through intervene.edges's expanded readers")
    args = parser.parse_args()
    methods = args.methods.split(",")
    unknown = set(methods) - set(METHOD_ROWS)
    if unknown:
        parser.error(f"unknown methods {sorted(unknown)}; choose from {', '.join(METHOD_ROWS)}")
    torch.set_num_threads(1)

    from transformers import GPT2Config

    from subnetlab.methods.attribution import attribute_batch
    from subnetlab.models import build_model, get_adapter
    from subnetlab.models.graph import Graph

    vocab = 1000
    config = GPT2Config(vocab_size=vocab, n_positions=128, n_embd=args.hidden, n_layer=args.layers, n_head=args.heads,
                        bos_token_id=0, eos_token_id=0)
    model = build_model(config, head="causal-lm", seed=0).model.eval()
    adapter = get_adapter(model)
    graph = Graph.from_adapter(adapter, embedding_nodes=1)
    g = torch.Generator().manual_seed(0)
    clean_ids = torch.randint(3, vocab, (args.batch, args.length), generator=g)
    corrupt_ids = clean_ids.clone()
    corrupt_ids[:, 2] = torch.randint(3, vocab, (args.batch,), generator=g)
    mask = torch.ones_like(clean_ids)
    clean, corrupted = {"input_ids": clean_ids, "attention_mask": mask}, {"input_ids": corrupt_ids, "attention_mask": mask}

    def rows(logits, _full):
        return logits[:, -1, 5] - logits[:, -1, 9]

    def plain(floor: bool) -> None:
        for p in model.parameters():
            p.requires_grad_(False)
        embed = model.transformer.wte
        handle = embed.register_forward_hook(lambda m, a, out: out.requires_grad_())
        try:
            if floor:
                with torch.no_grad():
                    model(**corrupted)
            rows(model(**clean).logits, None).sum().backward()
        finally:
            handle.remove()

    runs = {
        "plain forward+backward": lambda: plain(False),
        "EAP floor (corrupted forward + forward+backward)": lambda: plain(True),
    }
    for method in methods:
        steps = args.steps if method in ("eap-ig", "eap-ig-activations", "nap-ig") else 1
        name = METHOD_ROWS[method].format(k=steps)
        for expand in (False, True) if args.expanded and method not in ("exact", "nap", "nap-ig") else (False,):
            runs[name + (" (expanded readers)" if expand else "")] = (
                lambda method=method, steps=steps, expand=expand: attribute_batch(
                    model, adapter, graph, clean, corrupted, rows, method=method, steps=steps, expand_readers=expand))
    try:
        from transformer_lens.model_bridge import TransformerBridge
        from transformer_lens.tools.analysis import attribution_patching as ap
        from transformers import AutoTokenizer, GPT2TokenizerFast  # noqa: F401

        from tests.unit.circuit_helpers import gpt2_style_tokenizer

        hf = copy.deepcopy(model)  # the bridge wraps its model's modules in place
        with tempfile.TemporaryDirectory() as d:
            hf.save_pretrained(d)
            gpt2_style_tokenizer().save_pretrained(d)
            bridge = TransformerBridge.boot_transformers(d, hf_model=hf, tokenizer=AutoTokenizer.from_pretrained(d))
        bridge.eval()
        runs["TransformerLens 4.3 attribution_patch (edge)"] = lambda: ap.attribution_patch(
            bridge, clean_ids, corrupt_ids, lambda logits: logits[0, -1, 5] - logits[0, -1, 9],
            ap.EdgeAttributionConfig(granularity="edge"))
    except ImportError as e:
        print(f"TransformerLens not installed ({e}); its row is left out")

    times: dict[str, list[float]] = {name: [] for name in runs}
    for name, run in runs.items():  # warm-up
        run()
    for _ in range(args.repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    print(f"GPT-2-style {args.layers} layers x {args.heads} heads, hidden {args.hidden}; batch {args.batch} x "
          f"length {args.length}; {graph.num_edges} edges; torch threads 1; median of {args.repeats}")
    base = statistics.median(times["plain forward+backward"])
    floor = statistics.median(times["EAP floor (corrupted forward + forward+backward)"])
    eap = statistics.median(times.get("subnetlab EAP", [float("nan")]))
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"{name:60s} {args.batch / t:9.3g} examples/s  {t * 1000:9.1f} ms  x{t / base:6.2f} plain  "
              f"x{t / floor:6.2f} floor  x{t / eap:6.2f} EAP")
    for suffix in ("", " (expanded readers)"):
        ig, one = f"subnetlab EAP-IG k={args.steps}{suffix}", f"subnetlab EAP{suffix}"
        if ig in times and one in times:
            print(f"EAP-IG k={args.steps}{suffix} / ({args.steps} x EAP{suffix}): "
                  f"{statistics.median(times[ig]) / (args.steps * statistics.median(times[one])):.2f}")
    tl = "TransformerLens 4.3 attribution_patch (edge)"
    if tl in times:
        print(f"subnetlab EAP speed / TransformerLens speed: {statistics.median(times[tl]) / eap:.2f}x")


if __name__ == "__main__":
    main()
