"""The Slurm test cluster as `scripts/testcluster up` describes it in its connection file: for
the tests (through the `testcluster` fixture) and for the benches, which run outside pytest."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hpc.ssh import SSHSettings

CONNECTION_FILE = Path(
    os.environ.get(
        "COMPUTESHARE_TESTCLUSTER_CONFIG", "/var/lib/computeshare-testcluster/connection.json"
    )
)


@dataclass(frozen=True)
class TenantAccountInfo:
    """One pool account: a Unix user the service user acts as through `sudo -n -u`."""

    user: str
    home: str


@dataclass(frozen=True)
class TenantPool:
    """A group of tenant accounts that `scripts/cluster-setup` made on the cluster.

    `mode` is "managed" (idle tenants sit in `idle_account`, which runs nothing; the platform
    moves a leased tenant into its team's account) or "fixed" (every tenant is in `account`).
    The other mode's account is None."""

    group: str
    mode: str
    tenants: tuple[TenantAccountInfo, ...]
    account: str | None = None
    idle_account: str | None = None

    @classmethod
    def from_json(cls, config: dict[str, Any]) -> TenantPool:
        return cls(
            group=config["group"],
            mode=config["mode"],
            tenants=tuple(
                TenantAccountInfo(user=tenant["user"], home=tenant["home"])
                for tenant in config["tenants"]
            ),
            account=config.get("account"),
            idle_account=config.get("idle_account"),
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
    sftp_server: str
    """The OpenSSH sftp-server program, which the platform starts as a tenant under sudo."""
    tenant_pools: dict[str, TenantPool] = field(hash=False)
    """The pools by name: "managed" and "fixed"."""

    @property
    def private_key(self) -> str:
        return Path(self.private_key_path).read_text()

    @property
    def managed_pool(self) -> TenantPool:
        return self.tenant_pool("managed")

    @property
    def fixed_pool(self) -> TenantPool:
        return self.tenant_pool("fixed")

    def tenant_pool(self, name: str) -> TenantPool:
        try:
            return self.tenant_pools[name]
        except KeyError:
            raise LookupError(
                f"{CONNECTION_FILE} has no tenant pool {name!r}: it was written by an older "
                "scripts/testcluster; run `scripts/testcluster up`"
            ) from None

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
    added_with_the_pools = {"sftp_server", "tenant_pools"}
    values = {
        each.name: config[each.name]
        for each in fields(TestCluster)
        if each.name not in added_with_the_pools
    }
    # A file from before the pools still describes the service user's login: the tests that
    # need a pool fail on `tenant_pool`, the others run.
    return TestCluster(
        **values,
        sftp_server=config.get("sftp_server", "/usr/lib/openssh/sftp-server"),
        tenant_pools={
            name: TenantPool.from_json(pool)
            for name, pool in config.get("tenant_pools", {}).items()
        },
    )
