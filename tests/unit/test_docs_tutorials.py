"""docs/quickstart.md runs: its ```bash and ```python blocks, in order, in one fresh directory, at a tiny scale.

The page's commands are the ones a user types (settings that finish in minutes on a laptop). This test runs the
same text after the substitutions in ``TINY`` (each must occur in the page, so a changed setting fails here until
``TINY`` follows it): fewer steps and rows, and ``--model minilm`` replaced by a 2-layer BERT of hidden size 16
built from a config and saved with MiniLM's tokenizer (``tiny-bert``). A ``bash`` line is one ``subnetlab``
command (``\\`` continues it; shell globs are expanded); every other shell line fails the test, so the page
cannot show a command this test does not run. The commands run through ``subnetlab.cli.main`` in this process;
the ``python`` blocks are executed in one namespace.
"""

from __future__ import annotations

import glob
import re
import shlex
from pathlib import Path

import pytest
import torch

from subnetlab.cli import main

PAGE = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"

TINY = {  # page text -> what this test runs instead
    "--model minilm": "--model tiny-bert",
    "--max-steps 200 --lr 5e-5 --eval-limit 500":
        "--max-steps 2 --lr 5e-5 --eval-limit 16 --task-option n_train=64 --task-option n_eval=16 "
        "--task-option hans_per_subcase=1",
    "--task nli-synthetic --sparsity 0.5 --seeds 0-1 --preset demo":
        "--task nli-synthetic --task-option n_train=64 --task-option n_eval=16 --task-option hans_per_subcase=1 "
        "--sparsity 0.5 --seeds 0-1 --preset demo --set warmup_steps=2 --set total_steps=3 --set eval_limit=16 "
        "--set means_examples=16",
    "--max-steps 600": "--max-steps 2 --task-option n_train=1000 --task-option n_eval=16 --task-option n_test=16",
    "--method eap --limit 64": "--method eap --limit 4",
    "--limit 64 --out": "--limit 4 --out",
}


def page_blocks(text: str) -> list[tuple[str, str]]:
    """The page's (language, body) blocks fenced as ```bash or ```python, in order."""
    return re.findall(r"^```(bash|python)\n(.*?)^```", text, flags=re.S | re.M)


def tiny(text: str) -> str:
    for page_text, small in TINY.items():
        assert page_text in text, f"docs/quickstart.md no longer shows {page_text!r}: update TINY"
        text = text.replace(page_text, small)
    return text


def commands(bash: str) -> list[list[str]]:
    """Each ``subnetlab`` command of a bash block as argv (comments dropped, ``\\`` continued, globs expanded)."""
    joined = re.sub(r"\\\n\s*", " ", bash)
    found = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if not line:
            continue
        argv = shlex.split(line)
        assert argv[0] == "subnetlab", f"the quickstart shows a shell line this test cannot run: {line}"
        expanded = []
        for arg in argv[1:]:
            matches = sorted(glob.glob(arg)) if any(c in arg for c in "*?[") else []
            expanded.extend(matches or [arg])
        found.append(expanded)
    return found


def _tiny_bert(where: Path) -> None:
    from transformers import BertConfig, BertModel

    from subnetlab.models import load_model

    tok = load_model("minilm").tokenizer
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=128)).save_pretrained(where)
    tok.save_pretrained(where)


def test_the_substitutions_apply_and_every_block_parses():
    text = PAGE.read_text()
    blocks = page_blocks(text)
    assert sum(lang == "bash" for lang, _ in blocks) >= 2 and any(lang == "python" for lang, _ in blocks)
    small = tiny(text)
    assert "minilm" not in " ".join(body for lang, body in page_blocks(small) if lang == "bash")
    for lang, body in page_blocks(small):
        if lang == "bash":
            commands(body)  # parses, and is nothing but subnetlab commands
        else:
            compile(body, "docs/quickstart.md", "exec")


def test_the_quickstart_runs_at_a_tiny_scale(tmp_path, monkeypatch, capsys):
    torch.set_num_threads(1)
    monkeypatch.chdir(tmp_path)
    _tiny_bert(tmp_path / "tiny-bert")
    namespace: dict = {"__name__": "__quickstart__"}
    ran = []
    for i, (lang, body) in enumerate(page_blocks(tiny(PAGE.read_text()))):
        if lang == "python":
            exec(compile(body, f"docs/quickstart.md block {i}", "exec"), namespace)  # noqa: S102  (the page's own text)
            ran.append("python")
            continue
        for argv in commands(body):
            with pytest.raises(SystemExit) as done:
                main(argv)
            assert done.value.code in (0, None), (argv, capsys.readouterr().err[-2000:])
            ran.append(argv[0])
    assert {"finetune", "prune", "export", "circuit", "circuit-eval", "python"} <= set(ran), ran
    assert (tmp_path / "runs" / "quickstart" / "page.html").is_file()
