"""The connection pool against the real test cluster: one connection per process and cluster
settings, a new one in a forked child (the parent's untouched), a new one after a drop."""

import json
import os
import threading

import pytest

from hpc.errors import AuthenticationRefused
from hpc.pool import ConnectionPool
from hpc.ssh import SSHConnection
from tests.factories import ssh_key_pair

pytestmark = pytest.mark.slurm


@pytest.fixture
def pool():
    pool = ConnectionPool()
    yield pool
    pool.close_all()


def test_the_same_open_connection_is_reused_in_one_process(pool, testcluster):
    settings = testcluster.ssh_settings()

    first = pool.connection(settings)
    second = pool.connection(testcluster.ssh_settings())

    assert second is first
    assert second.transport is first.transport
    assert first.is_open
    assert len(pool) == 1


def test_other_settings_get_their_own_connection(pool, testcluster):
    original = pool.connection(testcluster.ssh_settings())

    other = pool.connection(testcluster.ssh_settings(keepalive_seconds=15))

    assert other is not original
    assert other.transport is not original.transport
    assert len(pool) == 2


def test_a_rotated_key_is_never_served_by_the_session_of_the_old_one(pool, testcluster):
    pool.connection(testcluster.ssh_settings())
    rotated_text, _ = ssh_key_pair()  # a key the cluster does not accept

    with pytest.raises(AuthenticationRefused):
        pool.connection(testcluster.ssh_settings(private_key=rotated_text))


def test_threads_share_one_connection_and_never_exceed_the_channel_cap(pool, testcluster):
    settings = testcluster.ssh_settings()
    connections = []
    outputs = []
    errors = []

    def work(number: int) -> None:
        try:
            connection = pool.connection(settings)
            connections.append(connection)
            outputs.append(connection.run(["sh", "-c", f"sleep 0.3; echo {number}"]).stdout)
        except Exception as error:  # collected for the assertion below
            errors.append(error)

    # 16 commands at once on one connection: sshd allows 10 sessions (MaxSessions), the cap 8.
    threads = [threading.Thread(target=work, args=(number,)) for number in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert errors == []
    assert sorted(outputs) == sorted(f"{number}\n" for number in range(16))
    assert len({id(connection) for connection in connections}) == 1


def test_a_forked_child_opens_its_own_connection_and_leaves_the_parents_alone(pool, testcluster):
    settings = testcluster.ssh_settings()
    parent_connection = pool.connection(settings)
    parent_transport = parent_connection.transport
    reader, writer = os.pipe()

    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        report = {}
        try:
            connection = pool.connection(settings)
            report = {
                "same_object": connection is parent_connection,
                "same_transport": connection.transport is parent_transport,
                "output": connection.run(["echo", "from the child"]).stdout,
                "pool_size": len(pool),
            }
            connection.close()
        except BaseException as error:  # reported to the parent
            report = {"error": repr(error)}
        finally:
            os.write(writer, json.dumps(report).encode())
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        report = json.loads(pipe.read())
    os.waitpid(child, 0)

    assert report == {
        "same_object": False,
        "same_transport": False,
        "output": "from the child\n",
        "pool_size": 1,
    }
    # The child closed its own connection; the parent's session was never touched.
    assert pool.connection(settings) is parent_connection
    assert parent_connection.transport is parent_transport
    assert parent_connection.run(["echo", "parent still here"]).stdout == "parent still here\n"


def test_a_connection_inherited_through_fork_is_abandoned_not_closed(testcluster):
    """Without the pool too: a child never sends anything on the parent's session."""
    connection = SSHConnection(testcluster.ssh_settings())
    connection.open()
    parent_transport = connection.transport
    reader, writer = os.pipe()

    child = os.fork()
    if child == 0:  # pragma: no cover
        try:
            was_open = connection.is_open
            connection.forget_after_fork()
            output = connection.run(["echo", "own"]).stdout
            connection.close()
            os.write(writer, json.dumps([was_open, output]).encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        was_open, output = json.loads(pipe.read())
    os.waitpid(child, 0)

    assert (was_open, output) == (False, "own\n")
    assert connection.transport is parent_transport
    assert connection.run(["echo", "intact"]).stdout == "intact\n"
    connection.close()


def test_a_dropped_transport_is_replaced_on_the_next_get(pool, testcluster):
    settings = testcluster.ssh_settings()
    connection = pool.connection(settings)
    dropped = connection.transport
    dropped.close()

    again = pool.connection(settings)

    assert again is connection
    assert again.transport is not dropped
    assert again.transport.is_active()
    assert again.run(["echo", "back"]).stdout == "back\n"


def test_sftp_reopens_after_the_connection_drops(pool, testcluster):
    connection = pool.connection(testcluster.ssh_settings())
    home = connection.home
    connection.transport.close()

    with connection.sftp() as sftp:
        assert sftp.normalize(".") == home == f"/home/{testcluster.user}"


def test_discard_closes_and_forgets(pool, testcluster):
    settings = testcluster.ssh_settings()
    connection = pool.connection(settings)

    pool.discard(settings)

    assert not connection.is_open
    assert len(pool) == 0
    assert pool.connection(settings) is not connection
