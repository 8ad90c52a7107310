"""Every ```python block of the README and of the tour pages that hold the Python API's examples (``PAGES``) runs as
written, in order, in a fresh directory: the README's in its own namespace, the pages' in one namespace (later
blocks use the names earlier ones define: docs/export.md's block exports the Python tour's ``m``, ``sub`` and
``means``).

Conventions in a block's first comment lines:

* ``# after: subnetlab CMD ...`` (continued on ``#        subnetlab ...`` lines): the commands a user runs before
  the block. The test runs them through ``subnetlab.cli.main``, except the fine-tuning runs, whose trained models
  are stood in for by tiny models of the same family saved where the command writes them (``STAND_INS``:
  fine-tuning MiniLM takes an hour on a CPU; the block only needs a model directory of that kind there).
* ``TINY``: the tour's calls run with fewer steps and rows than the page says (each substitution must match).
* ``# needs: PACKAGE``: the block uses an optional tool (TransformerLens, nnsight); skipped where it is not
  installed, and its hub model (``gpt2``) must be reachable.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest
import torch

from subnetlab.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# each group runs in one namespace, in its own directory: the README alone, then the pages in the site's order
PAGES = ((README,), (ROOT / "docs" / "python-api.md", ROOT / "docs" / "export.md", ROOT / "docs" / "circuits.md"))
pytestmark = pytest.mark.integration


def readme_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def block_commands(block: str, key: str) -> list[str]:
    """The ``# key: ...`` lines at the block's top (and their ``#        ...`` continuations)."""
    found, inside = [], False
    for line in block.splitlines():
        if line.startswith(f"# {key}:"):
            found.append(line.split(":", 1)[1].strip())
            inside = True
        elif inside and re.match(r"#\s{2,}\S", line):
            found.append(line[1:].strip())
        elif not line.startswith("#"):
            break
    return found


def _bert_classifier(out: Path) -> None:
    from transformers import BertConfig, BertForSequenceClassification

    from subnetlab.tasks import NLI3
    from tests.unit.lottery_helpers import word_tokenizer

    tok = word_tokenizer()
    config = BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, num_labels=3,
                        id2label=dict(enumerate(NLI3)), label2id={k: i for i, k in enumerate(NLI3)})
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(out)
    tok.save_pretrained(out)


def _arithmetic_gpt2(out: Path) -> None:
    from subnetlab.methods.finetune.model import model_for_task
    from subnetlab.tasks import get_task

    loaded = model_for_task("gpt2-arith:2", get_task("arith:ab"), seed=0)  # what finetune starts from, untrained
    loaded.model.save_pretrained(out)
    loaded.tokenizer.save_pretrained(out)


STAND_INS = {"runs/py/ft": _bert_classifier, "runs/py/lm": _arithmetic_gpt2}  # a finetune's --out -> its DIR/model

ARITH = '{"n_train": 1000, "n_eval": 16, "n_test": 16}'
NLI = '{"n_train": 64, "n_eval": 16, "hans_per_subcase": 1}'
# page text -> what this test runs instead: the tour's own calls at a tiny scale (its quick presets take 12 minutes
# here); each must occur in its page, so a changed call fails here until this table follows it
TINY = {
    'sparsity=[0.5, 0.7], seeds=[0, 1], preset="quick")':
        f'sparsity=[0.5, 0.7], seeds=[0, 1], preset="quick", task_options={NLI}, total_steps=3, warmup_steps=2, '
        'eval_limit=16, means_examples=16, train_limit=32)',
    '"runs/py/discover", preset="quick")': f'"runs/py/discover", preset="quick", epochs=1, task_options={ARITH})',
    'sizes=[0, 100], seeds=[0, 1], preset="quick")':
        f'sizes=[0, 100], seeds=[0, 1], preset="quick", epochs=1, task_options={ARITH})',
    '"runs/py/circuits", sparsity=0.95, preset="quick")':
        f'"runs/py/circuits", sparsity=0.95, preset="quick", task_options={ARITH}, total_steps=4, warmup_steps=2, '
        'batch_size=4)',
    'circuits=c.paths["circuits"])': f'circuits=c.paths["circuits"], task_options={ARITH})',
}


def tiny(block: str, used: set[str]) -> str:
    for text, instead in TINY.items():
        if text in block:
            block = block.replace(text, instead)
            used.add(text)
    return block


def _run_before(command: str) -> None:
    args = shlex.split(command)
    assert args[0] == "subnetlab", command
    if args[1] == "finetune":
        out = args[args.index("--out") + 1]
        STAND_INS[out](Path(out) / "model")
        return
    with pytest.raises(SystemExit) as done:
        main(args[1:])
    assert done.value.code in (0, None), command


def page_blocks() -> list[list[tuple[str, int, str]]]:
    """Per group of ``PAGES``: (page name, block index, block) for every ```python block, in order."""
    return [[(page.relative_to(ROOT).as_posix(), i, block) for page in group
             for i, block in enumerate(readme_blocks(page.read_text()))] for group in PAGES]


def test_the_pages_have_python_blocks_and_the_conventions_parse():
    groups = page_blocks()
    assert len(groups[0]) >= 1 and sum(len(g) for g in groups) >= 6
    assert block_commands("# after: subnetlab a\n#        subnetlab b\nx = 1\n", "after") == ["subnetlab a", "subnetlab b"]
    assert block_commands("x = 1\n# after: no\n", "after") == []


def test_every_python_block_of_the_readme_and_the_tour_pages_runs_as_written(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    ran, skipped, used = [], [], set()
    for g, group in enumerate(page_blocks()):
        (tmp_path / f"group-{g}").mkdir()
        monkeypatch.chdir(tmp_path / f"group-{g}")
        namespace: dict = {"__name__": "__readme__"}
        for name, i, block in group:
            missing = [p for p in block_commands(block, "needs") if importlib.util.find_spec(p) is None]
            if missing:
                skipped.append((name, i, missing))
                continue
            for command in block_commands(block, "after"):
                _run_before(command)
            exec(compile(tiny(block, used), f"{name} block {i}", "exec"), namespace)  # noqa: S102  (the page's text)
            ran.append((name, i))
    assert ("README.md", 0) in ran and len(ran) >= 4, (ran, skipped)
    assert used == set(TINY), f"no longer in the pages: {set(TINY) - used}"
