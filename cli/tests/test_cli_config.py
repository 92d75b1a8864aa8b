"""The stored token: mode 0600 in a folder of mode 0700, replaced atomically, read back."""

import os
import stat
from pathlib import Path

import pytest
from computeshare_cli.config import Config, ConfigError, config_load, config_path, config_save


def test_saved_config_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "config.json"
    config_save(Config(url="https://cs.example", token="secret-key", username="tom"), path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert config_load(path) == Config(url="https://cs.example", token="secret-key", username="tom")


def test_saving_over_a_file_others_could_read_makes_it_private(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{}")
    os.chmod(path, 0o644)
    config_save(Config(token="t"), path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]  # no temporary file left


def test_missing_file_gives_defaults_and_unknown_keys_are_ignored(tmp_path: Path) -> None:
    assert config_load(tmp_path / "none.json") == Config()
    path = tmp_path / "config.json"
    path.write_text('{"token": "t", "from_a_newer_client": 1}')
    assert config_load(path).token == "t"


def test_a_file_that_is_not_a_config_is_an_error_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError):
        config_load(path)
    path.write_text("not json")
    with pytest.raises(ConfigError):
        config_load(path)


def test_config_folder_follows_xdg_and_the_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COMPUTESHARE_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config_path() == tmp_path / "xdg" / "computeshare" / "config.json"
    monkeypatch.setenv("COMPUTESHARE_CONFIG", str(tmp_path / "elsewhere.json"))
    assert config_path() == tmp_path / "elsewhere.json"
