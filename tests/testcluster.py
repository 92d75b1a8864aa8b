"""The Slurm test cluster as `scripts/testcluster up` describes it in its connection file: for
the tests (through the `testcluster` fixture) and for the benches, which run outside pytest."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from scheduler_bridge.slurm.ssh import SSHSettings

CONNECTION_FILE = Path(
    os.environ.get(
        "COMPUTESHARE_TESTCLUSTER_CONFIG", "/var/lib/computeshare-testcluster/connection.json"
    )
)


@dataclass(frozen=True)
class TestCluster:
    __test__ = False  # not a test class, whatever its name

    host: str
    port: int
    user: str
    private_key_path: str
    host_key: str
    known_hosts_path: str
    cluster_name: str
    partition: str
    account: str

    @property
    def private_key(self) -> str:
        return Path(self.private_key_path).read_text()

    def ssh_settings(self, **changes: Any) -> SSHSettings:
        """How to reach the cluster's login node (5 s to connect), with `changes` applied."""
        values: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "private_key": self.private_key,
            "host_key": self.host_key,
            "connect_timeout": 5.0,
        }
        return SSHSettings(**{**values, **changes})


def testcluster_read() -> TestCluster:
    """The cluster from its connection file; `FileNotFoundError` when it was never set up."""
    config = json.loads(CONNECTION_FILE.read_text())
    return TestCluster(**{field.name: config[field.name] for field in fields(TestCluster)})
