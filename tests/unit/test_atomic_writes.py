"""subnetlab.io's atomic writes: modes under the umask, fsync before the rename, a failed write loses nothing."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
import torch

from subnetlab import io
from subnetlab.cli import main
from subnetlab.errors import SubnetlabError


@pytest.fixture
def umask():
    """Set the process umask for one test (it is process-wide), then put the old one back."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda mask: os.umask(mask)
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask, file_mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600), (0o002, 0o664)])
def test_files_get_0666_less_the_umask(mask, file_mode, tmp_path, umask) -> None:
    umask(mask)
    assert io.current_umask() == mask
    io.write_json(tmp_path / "a.json", {"x": 1})
    io.write_text(tmp_path / "b.txt", "hello\n")
    io.save_tensors(tmp_path / "c.safetensors", {"t": torch.zeros(2)})
    io.append_jsonl(tmp_path / "d.jsonl", {"step": 1})
    for name in ("a.json", "b.txt", "c.safetensors", "d.jsonl"):
        assert _mode(tmp_path / name) == file_mode, name
    assert io.default_mode(directory=True) == 0o777 & ~mask


def test_the_file_is_synced_before_the_rename_and_the_directory_after(tmp_path, monkeypatch) -> None:
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else str(fd)
        events.append(("fsync", Path(target).name))
        real_fsync(fd)

    def replace(src, dst) -> None:
        events.append(("replace", Path(dst).name))
        real_replace(src, dst)

    monkeypatch.setattr(io.os, "fsync", fsync)
    monkeypatch.setattr(io.os, "replace", replace)
    io.write_json(tmp_path / "metrics.json", {"accuracy": 0.5})
    assert [e[0] for e in events] == ["fsync", "replace", "fsync"]
    assert events[0][1].startswith(".metrics.json.") and events[0][1].endswith(".tmp")  # the temporary file
    assert events[1][1] == "metrics.json" and events[2][1] == tmp_path.name  # then its directory


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_failing_write_keeps_the_previous_file_and_says_so(tmp_path, monkeypatch) -> None:
    path = tmp_path / "metrics.json"
    io.write_json(path, {"accuracy": 0.5})
    before = path.read_bytes()
    monkeypatch.setattr(Path, "write_text", _no_space)  # the writer runs out of disk space half-way
    with pytest.raises(SubnetlabError, match=r"metrics\.json: cannot write \(No space left on device\); free some "
                                             r"space and rerun; the previous file, if any, is unchanged"):
        io.write_json(path, {"accuracy": 0.9})
    monkeypatch.undo()
    monkeypatch.setattr(io, "save_file", _no_space)
    with pytest.raises(SubnetlabError, match="No space left on device"):
        io.save_tensors(tmp_path / "metrics.json", {"t": torch.ones(1)})
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]  # no temporary file left behind


def test_a_command_whose_write_fails_ends_with_one_error_line(tmp_path, monkeypatch, capsys) -> None:
    """Disk full while `subnetlab results` writes its table: exit 2, one error line, the previous table intact."""
    run = tmp_path / "runs" / "r1"
    io.write_json(run / "config.json", {"seed": 1})
    io.write_json(run / "metrics.json", {"accuracy": 0.5})
    with pytest.raises(SystemExit) as done:
        main(["results", str(tmp_path / "runs"), "--out", str(tmp_path / "table")])
    assert done.value.code == 0
    capsys.readouterr()
    before = (tmp_path / "table.csv").read_bytes()
    io.write_json(run / "metrics.json", {"accuracy": 0.75})
    import pandas as pd

    monkeypatch.setattr(pd.DataFrame, "to_csv", _no_space)
    with pytest.raises(SystemExit) as done:
        main(["results", str(tmp_path / "runs"), "--out", str(tmp_path / "table")])
    err = capsys.readouterr().err.strip().splitlines()
    assert done.value.code == 2 and len(err) == 1, err
    assert err[0].startswith("error: ") and "table.csv: cannot write (No space left on device)" in err[0]
    assert (tmp_path / "table.csv").read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_run_directory_written_under_umask_022_is_readable_by_everyone(tmp_path, umask, capsys) -> None:
    """Every file a run writes is 0644 and every directory 0755 (the table in the issue's closing note)."""
    from transformers import BertConfig, BertForSequenceClassification

    from subnetlab.tasks import NLI3
    from tests.unit.lottery_helpers import word_tokenizer

    umask(0o022)
    model = tmp_path / "bert"
    config = BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=64, num_labels=3, id2label=dict(enumerate(NLI3)),
                        label2id={k: i for i, k in enumerate(NLI3)})
    BertForSequenceClassification(config).save_pretrained(model)
    word_tokenizer().save_pretrained(model)
    out = tmp_path / "ft"
    with pytest.raises(SystemExit) as done:
        main(["finetune", "--model", str(model), "--task", "nli-synthetic", "--task-option", "n_train=16",
              "--task-option", "n_eval=8", "--task-option", "hans_per_subcase=1", "--max-steps", "2",
              "--batch-size", "8", "--save-every", "1", "--eval-every", "1", "--device", "cpu", "--out", str(out)])
    assert done.value.code == 0, capsys.readouterr().err
    modes = {str(p.relative_to(out)): oct(_mode(p)) for p in sorted(out.rglob("*"))}
    print("\n".join(f"{mode}  {name}" for name, mode in modes.items()))
    files = {n: m for n, m in modes.items() if (out / n).is_file()}
    dirs = {n: m for n, m in modes.items() if (out / n).is_dir()}
    assert {"config.json", "metrics.json", "metrics.jsonl", "model/model.safetensors"} <= set(files)
    assert set(files.values()) == {"0o644"} and set(dirs.values()) == {"0o755"}, modes
    assert oct(_mode(out)) == "0o755"


def test_a_directory_written_by_another_library_replaces_the_old_one_or_leaves_it(tmp_path, umask) -> None:
    umask(0o022)
    final = tmp_path / "model"
    with io.atomic_directory(final) as tmp:
        (tmp / "a.bin").write_bytes(b"first")
        os.chmod(tmp / "a.bin", 0o600)  # as some writers make their files
    assert sorted(p.name for p in final.iterdir()) == ["a.bin"] and _mode(final / "a.bin") == 0o644
    assert _mode(final) == 0o755
    with pytest.raises(SubnetlabError, match=r"model: cannot write \(No space left on device\)"):
        with io.atomic_directory(final) as tmp:
            (tmp / "b.bin").write_bytes(b"half")
            _no_space()
    assert sorted(p.name for p in final.iterdir()) == ["a.bin"] and (final / "a.bin").read_bytes() == b"first"
    with io.atomic_directory(final) as tmp:
        (tmp / "c.bin").write_bytes(b"second")
    assert sorted(p.name for p in final.iterdir()) == ["c.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary or old copy left


def _tiny_bert(where: Path) -> Path:
    from transformers import BertConfig, BertForSequenceClassification

    from subnetlab.tasks import NLI3
    from tests.unit.lottery_helpers import word_tokenizer

    config = BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=64, num_labels=3, id2label=dict(enumerate(NLI3)),
                        label2id={k: i for i, k in enumerate(NLI3)})
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(where)
    word_tokenizer().save_pretrained(where)
    return where


def _cli(argv: list[str], capsys) -> tuple[int, list[str]]:
    capsys.readouterr()  # what the set-up printed
    with pytest.raises(SystemExit) as done:
        main(argv)
    return done.value.code or 0, capsys.readouterr().err.strip().splitlines()


def test_finetune_whose_save_pretrained_hits_a_full_disk_ends_cleanly_and_resumes(tmp_path, monkeypatch, capsys) -> None:
    """The second checkpoint's save_pretrained runs out of space: one error line, exit 2, the first checkpoint
    complete and nothing half-written; the rerun resumes from it and finishes."""
    from transformers import PreTrainedModel

    model = _tiny_bert(tmp_path / "bert")
    out = tmp_path / "ft"
    argv = ["finetune", "--model", str(model), "--task", "nli-synthetic", "--task-option", "n_train=16",
            "--task-option", "n_eval=8", "--task-option", "hans_per_subcase=1", "--max-steps", "3", "--batch-size", "8",
            "--save-every", "1", "--eval-every", "1", "--device", "cpu", "--lr", "1e-3",  # a never-trained model's rate:
            "--out", str(out)]                                                          # no fresh-model warning line
    real = PreTrainedModel.save_pretrained
    saves = []

    def save_pretrained(self, directory, *args, **kwargs):
        saves.append(directory)
        if len(saves) == 2:
            (Path(directory) / "model.safetensors").write_bytes(b"half a file")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, directory, *args, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", save_pretrained)
    code, err = _cli(argv, capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: ") and "step-2: cannot write (No space left on device)" in err[0], err
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-1"]  # complete, no temporary beside it
    assert not (out / "metrics.json").exists()
    monkeypatch.setattr(PreTrainedModel, "save_pretrained", real)
    code, err = _cli(argv, capsys)
    assert code == 0, err
    assert io.read_json(out / "metrics.json")["steps"] == 3


def test_export_whose_tokenizer_write_hits_a_full_disk_writes_nothing(tmp_path, monkeypatch, capsys) -> None:
    from transformers import BertForSequenceClassification, PreTrainedTokenizerBase

    from subnetlab.models import get_adapter
    from subnetlab.subnetwork import Subnetwork

    model = _tiny_bert(tmp_path / "bert")
    adapter = get_adapter(BertForSequenceClassification.from_pretrained(model))
    Subnetwork.structured(adapter, torch.tensor([[1.0, 0.0]])).save(tmp_path / "sub.safetensors")
    monkeypatch.setattr(PreTrainedTokenizerBase, "save_pretrained", _no_space)
    code, err = _cli(["export", "--model", str(model), "--subnetwork", str(tmp_path / "sub.safetensors"),
                      "--ablation", "zero", "--out", str(tmp_path / "small")], capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: ") and "small: cannot write (No space left on device)" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bert", "sub.safetensors"]


def test_a_restarted_run_removes_temporaries_and_puts_back_a_directory_caught_mid_swap(tmp_path) -> None:
    from subnetlab.run_directory import remove_temporaries

    (tmp_path / ".metrics.json.a1b2.tmp").write_text("{")  # a killed file write
    (tmp_path / ".model.x9.tmp").mkdir()  # a killed directory write, with a temporary inside
    (tmp_path / ".model.x9.tmp" / ".weights.q.tmp").write_text("")
    (tmp_path / "model").mkdir()
    (tmp_path / ".model.old-77.tmp").mkdir()  # swapped out after the new one arrived: stale
    (tmp_path / ".run.old-78.tmp").mkdir()  # swapped out, and the new one never arrived: the only copy
    (tmp_path / ".run.old-78.tmp" / "a.bin").write_bytes(b"previous")
    (tmp_path / "seed-0").mkdir()
    (tmp_path / "seed-0" / ".history.json.zz.tmp").write_text("")
    assert remove_temporaries(tmp_path) == 4
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "model", "run", "run/a.bin", "seed-0"]
    assert (tmp_path / "run" / "a.bin").read_bytes() == b"previous"
