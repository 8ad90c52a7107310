"""Finding the bundled data: SUBNETLAB_DATA first, then ../shared/data next to the checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

from subnetlab.errors import SubnetlabError
from subnetlab.tasks import data_location
from subnetlab.tasks.data_location import data_root, find_data_root
from subnetlab.tasks.registry import shared_data_dir


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """No SUBNETLAB_DATA, and searches start (working directory and package) in an empty checkout."""
    checkout = tmp_path / "work" / "repo"
    package = checkout / "src" / "pkg"
    package.mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("[project]\nname = 'repo'\n")
    monkeypatch.delenv("SUBNETLAB_DATA", raising=False)
    monkeypatch.chdir(checkout)
    monkeypatch.setattr(data_location, "_starts", lambda: [Path.cwd(), package])
    return checkout


def test_env_var_wins_over_shared_data(nowhere, tmp_path, monkeypatch):
    (nowhere.parent / "shared" / "data").mkdir(parents=True)
    chosen = tmp_path / "elsewhere"
    chosen.mkdir()
    monkeypatch.setenv("SUBNETLAB_DATA", str(chosen))
    assert data_root() == chosen.resolve()
    assert find_data_root() == chosen.resolve()


def test_env_var_pointing_nowhere_is_an_error_naming_it(nowhere, tmp_path, monkeypatch):
    (nowhere.parent / "shared" / "data").mkdir(parents=True)  # would be found, but the variable is wrong
    missing = tmp_path / "missing"
    monkeypatch.setenv("SUBNETLAB_DATA", str(missing))
    for find in (data_root, find_data_root):
        with pytest.raises(SubnetlabError, match="SUBNETLAB_DATA") as err:
            find()
        assert str(missing) in str(err.value)


def test_env_var_naming_a_file_is_an_error(nowhere, tmp_path, monkeypatch):
    a_file = tmp_path / "data.tsv"
    a_file.write_text("x\n")
    monkeypatch.setenv("SUBNETLAB_DATA", str(a_file))
    with pytest.raises(SubnetlabError, match="not a directory"):
        data_root()


def test_neither_is_an_error_naming_both_places(nowhere):
    with pytest.raises(SubnetlabError) as err:
        data_root()
    message = str(err.value)
    assert "SUBNETLAB_DATA" in message and "../shared/data" in message
    assert find_data_root() is None
    assert not shared_data_dir().exists()


def test_shared_data_next_to_the_checkout_from_a_subdirectory(nowhere, monkeypatch):
    shared = nowhere.parent / "shared" / "data"
    shared.mkdir(parents=True)
    monkeypatch.chdir(nowhere / "src")
    assert data_root() == shared.resolve()
    assert shared_data_dir() == shared.resolve()


def test_package_location_when_the_working_directory_is_elsewhere(nowhere, tmp_path, monkeypatch):
    shared = nowhere.parent / "shared" / "data"
    shared.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    monkeypatch.chdir(outside)
    assert data_root() == shared.resolve()


def test_shared_data_above_a_directory_that_is_no_checkout_is_ignored(nowhere, tmp_path, monkeypatch):
    (tmp_path / "shared" / "data").mkdir(parents=True)
    stray = tmp_path / "stray"
    stray.mkdir()
    monkeypatch.chdir(stray)
    assert find_data_root() is None


def test_the_real_checkout_finds_its_shared_data(monkeypatch):
    # running from the repository finds <repository>/../shared/data, as before
    monkeypatch.delenv("SUBNETLAB_DATA", raising=False)
    repo = Path(__file__).resolve().parents[2]
    shared = repo.parent / "shared" / "data"
    if not shared.is_dir():
        pytest.skip("../shared/data is absent")
    monkeypatch.chdir(repo)
    assert data_root().resolve() == shared.resolve()
