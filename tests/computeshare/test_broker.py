"""The demo's filesystem broker (computeshare/broker.py) used by several processes at once, as
gunicorn, the Celery worker and beat use it: each message reaches one consumer, whole, once."""

import multiprocessing
import queue as queue_module
from pathlib import Path
from typing import Any

from kombu import Connection

from computeshare.broker import _write_atomically

PRODUCERS = 4
CONSUMERS = 3
MESSAGES_PER_PRODUCER = 300
QUEUE = "soak"


def _connection(folder: Path) -> Connection:
    return Connection(
        "filesystem://",
        transport="computeshare.broker:Transport",
        transport_options={
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "control_folder": str(folder / "control"),
        },
    )


# Fresh interpreters, not forks: the suite's process has threads of its own by then (the
# browser driver's, a server's), and a fork taken while one of them holds a lock hangs on it.
# Daemons, so that a process that does hang cannot keep pytest from exiting.
START_METHOD = "spawn"


def _produce(folder: Path, producer: int) -> None:
    with _connection(folder) as connection:
        simple = connection.SimpleQueue(QUEUE)
        for number in range(MESSAGES_PER_PRODUCER):
            # A body of some size, so that a write takes long enough to be caught half done.
            simple.put({"producer": producer, "number": number, "padding": "x" * 20_000})
        simple.close()


def _consume(folder: Path, results: Any, errors: Any) -> None:
    received = []
    try:
        with _connection(folder) as connection:
            simple = connection.SimpleQueue(QUEUE)
            idle = 0
            while idle < 20:
                try:
                    message = simple.get(timeout=0.1)
                except queue_module.Empty:
                    idle += 1
                    continue
                idle = 0
                received.append((message.payload["producer"], message.payload["number"]))
                assert len(message.payload["padding"]) == 20_000
                message.ack()
            simple.close()
    except Exception as error:  # the test reports it
        errors.put(repr(error))
    results.put(received)


def test_concurrent_producers_and_consumers_get_every_message_once_and_whole(tmp_path):
    (tmp_path / "queue").mkdir()
    (tmp_path / "control").mkdir()
    context = multiprocessing.get_context(START_METHOD)
    results, errors = context.Queue(), context.Queue()
    consumers = [
        context.Process(target=_consume, args=(tmp_path, results, errors), daemon=True)
        for _ in range(CONSUMERS)
    ]
    producers = [
        context.Process(target=_produce, args=(tmp_path, number), daemon=True)
        for number in range(PRODUCERS)
    ]
    for process in consumers + producers:
        process.start()
    received = [results.get(timeout=120) for _ in consumers]
    for process in consumers + producers:
        process.join(timeout=30)

    assert errors.empty()
    everything = [item for batch in received for item in batch]
    expected = {(p, n) for p in range(PRODUCERS) for n in range(MESSAGES_PER_PRODUCER)}
    assert len(everything) == len(expected)
    assert set(everything) == expected
    # Every consumer took part, and nothing was left behind or set aside.
    assert all(batch for batch in received)
    assert list((tmp_path / "queue").iterdir()) == []
    assert not (tmp_path / "rejected").exists()
    assert list((tmp_path / "staging").iterdir()) == []


def test_an_unreadable_message_is_set_aside_and_the_next_one_is_delivered(tmp_path):
    (tmp_path / "queue").mkdir()
    (tmp_path / "control").mkdir()
    with _connection(tmp_path) as connection:
        simple = connection.SimpleQueue(QUEUE)
        # A file another program left half written, older than the good message.
        (tmp_path / "queue" / f"000000000000001_broken.{QUEUE}.msg").write_bytes(b'{"bo')
        simple.put({"number": 7})
        message = simple.get(timeout=2)
        message.ack()
        simple.close()

    assert message.payload == {"number": 7}
    rejected = [path.name for path in (tmp_path / "rejected").iterdir()]
    assert len(rejected) == 1
    assert rejected[0].endswith(f"000000000000001_broken.{QUEUE}.msg")


def _bind(folder: Path, number: int) -> None:
    with _connection(folder) as connection:
        channel = connection.channel()
        for round_number in range(20):
            channel._queue_bind("fanout", "", "", f"queue-{number}-{round_number}")


def test_exchange_bindings_made_at_once_by_several_processes_are_all_kept(tmp_path):
    (tmp_path / "queue").mkdir()
    (tmp_path / "control").mkdir()
    context = multiprocessing.get_context(START_METHOD)
    processes = [
        context.Process(target=_bind, args=(tmp_path, number), daemon=True) for number in range(4)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)

    with _connection(tmp_path) as connection:
        table = connection.channel().get_table("fanout")
    assert sorted(row.queue for row in table) == sorted(
        f"queue-{number}-{round_number}" for number in range(4) for round_number in range(20)
    )


def test_a_file_written_atomically_is_never_seen_partial(tmp_path):
    target = tmp_path / "table"
    _write_atomically(target, b"first", tmp_path / "staging")
    _write_atomically(target, b"second", tmp_path / "staging")
    assert target.read_bytes() == b"second"
    assert list((tmp_path / "staging").iterdir()) == []
