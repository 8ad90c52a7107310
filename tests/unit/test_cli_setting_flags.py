"""Library errors name settings; the CLI prints the flag of the running command that sets them."""

from __future__ import annotations

import pytest
import typer

from subnetlab.cli import app, main
from subnetlab.cli.commands._options import error_message, setting_flags
from subnetlab.errors import SubnetlabError
from subnetlab.transfer import CONDITIONS


def _flags(command: str) -> dict[str, str]:
    return setting_flags(typer.main.get_command(app).commands[command])


def _cli(capsys, *args: str) -> tuple[int, list[str]]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    return int(exit_info.value.code), [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_settings_map_to_the_flags_of_the_running_command() -> None:
    finetune = _flags("finetune")
    assert finetune["batch_size"] == "--batch-size" and finetune["eval_data"] == "--eval-data"
    assert finetune["task_options"] == "--task-option"  # named differently in the library
    transfer = _flags("transfer")
    assert transfer["n_jobs"] == transfer["jobs"] == "--jobs" and transfer["freeze"] == "--freeze"
    assert "sparsity" not in transfer and "conditions" not in _flags("reproduce")


@pytest.mark.parametrize("error, printed", [
    # a message that starts with its setting's name: the flag takes its place
    (SubnetlabError("sparsity: 1.5 is outside (0, 1)", setting="sparsity"), "--sparsity: 1.5 is outside (0, 1)"),
    (SubnetlabError("batch_size 0 must be at least 1", setting="batch_size"), "--batch-size 0 must be at least 1"),
    (SubnetlabError("n_jobs 0: expected a positive integer", setting="n_jobs"), "--jobs 0: expected a positive integer"),
    # any other message: the flag in front
    (SubnetlabError("runs/x is not empty; choose another output directory", setting="out"),
     "--out: runs/x is not empty; choose another output directory"),
    (SubnetlabError("sparsity_levels 3: no", setting="sparsity"), "--sparsity: sparsity_levels 3: no"),
    # no setting, or one this command has no flag for: as the library wrote it
    (SubnetlabError("task toy has 3 labels"), "task toy has 3 labels"),
    (SubnetlabError("conditions 'x': unknown condition", setting="conditions"), "conditions 'x': unknown condition"),
])
def test_error_message_names_the_flag(error: SubnetlabError, printed: str) -> None:
    flags = {**_flags("finetune"), **_flags("prune"), **_flags("transfer")}
    assert error_message(error, flags) == printed


def test_the_cli_prints_flags_the_library_does_not_know(tmp_path, capsys) -> None:
    common = ["transfer", "--model", str(tmp_path / "m"), "--task", "arith:a^2+ab", "--out", str(tmp_path / "o")]
    code, err = _cli(capsys, *common, "--condition", "scratch,lottery")
    assert code == 2 and err == [f"error: --condition 'lottery': unknown condition; choose from {', '.join(CONDITIONS)}"]
    code, err = _cli(capsys, *common, "--reinit", "some")
    assert code == 2 and len(err) == 1 and err[0].startswith("error: --reinit 'some': choose 'all'")


def test_a_setting_without_a_flag_is_printed_in_library_terms(tmp_path, capsys) -> None:
    code, err = _cli(capsys, "reproduce", "subtask-induction", "--preset", "demo", "--out", str(tmp_path / "o"),
                     "--set", "conditions=[scratch, lottery]")
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: conditions 'lottery': unknown condition; choose from subnetwork, ")


def test_the_executor_options_live_in_the_cli_only() -> None:
    """The command-line glue is the CLI's: the executor (a lower floor) no longer reaches up for it."""
    import subnetlab.executor as executor

    assert not hasattr(executor, "executor_options") and not hasattr(executor, "OPTION_NAMES")
