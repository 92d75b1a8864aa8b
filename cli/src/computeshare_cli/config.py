"""Where the client keeps the server's address and the API token between runs.

The token is a bearer secret: the file is created with mode 0600 in a folder of mode 0700 and
replaced atomically, so that no other user can read it, not even for the moment it is written."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from platformdirs import user_config_dir

CONFIG_FILE_ENV = "COMPUTESHARE_CONFIG"
URL_ENV = "COMPUTESHARE_URL"
TOKEN_ENV = "COMPUTESHARE_TOKEN"  # noqa: S105 (the name of a variable, not a secret)
DEFAULT_URL = "http://127.0.0.1:8000"


@dataclass
class Config:
    url: str = DEFAULT_URL
    token: str | None = None
    token_id: str | None = None  # so that `logout` can revoke the token it stored
    username: str | None = None
    organization: str | None = None  # the default for commands that need one


def config_path() -> Path:
    """`$COMPUTESHARE_CONFIG`, else `config.json` in the user's config folder (XDG on Linux,
    `~/Library/Application Support` on macOS, `%APPDATA%` on Windows)."""
    explicit = os.environ.get(CONFIG_FILE_ENV)
    if explicit:
        return Path(explicit)
    return Path(user_config_dir("computeshare", appauthor=False)) / "config.json"


def config_load(path: Path | None = None) -> Config:
    """The stored settings, or the defaults when nothing was stored. Unknown keys (from a newer
    client) are ignored rather than refused."""
    path = path or config_path()
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return Config()
    except (OSError, ValueError) as error:
        raise ConfigError(f"Cannot read {path}: {error}") from error
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} does not hold a JSON object.")
    known = Config.__dataclass_fields__
    return Config(**{key: value for key, value in raw.items() if key in known})


def config_save(config: Config, path: Path | None = None) -> Path:
    """Writes `config` to a temporary file of mode 0600 beside `path` and renames it over
    `path`: a reader sees the old file or the new one, never half of one, and the token is
    never in a file that others may read."""
    path = path or config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".config-", suffix=".tmp")
    try:
        os.fchmod(descriptor, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump(asdict(config), handle, indent=2)
            handle.write("\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


class ConfigError(Exception):
    """The config file exists but cannot be read as one."""
