"""The embedded demo's task broker: kombu's filesystem transport with writes that other processes
never see half done (docs/adr/0001-embedded-default-without-services.md).

kombu 5.7's transport creates a message's file in the queue folder and then writes it, so a
worker listing the folder at that moment claims an empty file and dies on `JSONDecodeError`; it
also claims by moving the file to the system's temporary folder, which is a copy (and so again
readable half written) when /tmp is another file system, and rewrites exchange tables in place.
Here every file is written beside the queue and renamed into place (a rename within one file
system is atomic), a message is claimed by renaming it into a folder of its own (only one
process's rename succeeds), and an unreadable message is set aside with a log line instead of
stopping the worker."""

from __future__ import annotations

import fcntl
import logging
import os
import time
import uuid
from pathlib import Path
from queue import Empty
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

logger = logging.getLogger(__name__)


def _write_atomically(target: Path, data: bytes, staging: Path) -> None:
    """Write `data` to `target` so that a reader finds either no file or all of it."""
    staging.mkdir(parents=True, exist_ok=True)
    temporary = staging / f"{uuid.uuid4().hex}.part"
    with open(temporary, "wb") as file:
        file.write(data)
    os.replace(temporary, target)


class Channel(filesystem.Channel):
    """The filesystem channel with atomic writes and claims (see the module's docstring)."""

    @property
    def _broker_folder(self) -> Path:
        return Path(self.data_folder_out).parent

    @property
    def _staging_folder(self) -> Path:
        return Path(self.transport_options.get("staging_folder", self._broker_folder / "staging"))

    @property
    def _claimed_folder(self) -> Path:
        return Path(self.transport_options.get("claimed_folder", self._broker_folder / "claimed"))

    @property
    def _rejected_folder(self) -> Path:
        return Path(self.transport_options.get("rejected_folder", self._broker_folder / "rejected"))

    # --- messages -------------------------------------------------------------------------
    # kombu's own filesystem channel names the argument `payload`, its abstract channel
    # `message`: no name overrides both, so the stubs' check is silenced, not the types.
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        # The name sorts by time of sending across processes (CLOCK_MONOTONIC is system-wide),
        # as kombu's does, so that _get takes the oldest first.
        name = f"{time.monotonic_ns() // 1_000_000:015d}_{uuid.uuid4()}.{queue}.msg"
        try:
            _write_atomically(
                Path(self.data_folder_out) / name,
                str_to_bytes(dumps(payload)),
                self._staging_folder,
            )
        except OSError as error:
            raise ChannelError(f"Cannot add message {name!r} to the queue folder") from error

    def _get(self, queue: str, timeout: Any = None) -> Any:
        wanted = f"{queue}.msg"
        folder = Path(self.data_folder_in)
        claimed = self._claimed_folder
        claimed.mkdir(parents=True, exist_ok=True)
        for name in sorted(os.listdir(folder)):
            if name.partition(".")[2] != wanted:
                continue
            mine = claimed / f"{os.getpid()}-{name}"
            try:
                os.rename(folder / name, mine)
            except FileNotFoundError:
                continue  # another process claimed it first
            try:
                payload = mine.read_bytes()
                message = loads(bytes_to_str(payload))
            except (OSError, ValueError) as error:
                self._reject(mine, error)
                continue
            mine.unlink(missing_ok=True)
            return message
        raise Empty()

    def _reject(self, path: Path, error: Exception) -> None:
        rejected = self._rejected_folder
        rejected.mkdir(parents=True, exist_ok=True)
        logger.error("broker: set aside the unreadable message %s (%s)", path.name, error)
        try:
            os.replace(path, rejected / path.name)
        except OSError:
            path.unlink(missing_ok=True)

    # --- exchange tables (fanout: the workers' remote control) ----------------------------
    def get_table(self, exchange: str) -> list[Any]:
        file = self._exchange_file(exchange)
        try:
            table = loads(bytes_to_str(file.read_bytes()))
        except FileNotFoundError:
            return []
        except OSError as error:
            raise ChannelError(f"Cannot open {file}") from error
        return [filesystem.exchange_queue_t(*row) for row in table]

    def _table_update(self, exchange: str, change: Any) -> None:
        """Read, change and replace an exchange's table under a lock of its own file, so that
        two processes binding at once keep both bindings and readers never see a partial
        table."""
        file = self._exchange_file(exchange)
        self.control_folder.mkdir(parents=True, exist_ok=True)
        with open(file.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                rows = self.get_table(exchange)
                changed = change(rows)
                if changed is not None:
                    _write_atomically(file, str_to_bytes(dumps(changed)), self._staging_folder)
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        row = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")

        def add(rows: list[Any]) -> list[Any] | None:
            return None if row in rows else [row, *rows]

        self._table_update(exchange, add)

    def _delete(
        self, queue: str, exchange: str, routing_key: str, pattern: str, *args: Any, **kwargs: Any
    ) -> None:
        # kombu's virtual channel forgets the binding; the file's table is ours to update.
        super(filesystem.Channel, self)._delete(
            queue, exchange, routing_key, pattern, *args, **kwargs
        )
        row = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")

        def remove(rows: list[Any]) -> list[Any] | None:
            return [other for other in rows if other != row] if row in rows else None

        self._table_update(exchange, remove)


class Transport(filesystem.Transport):
    """`filesystem://` with the channel above: CELERY_BROKER_TRANSPORT names this class."""

    Channel = Channel
