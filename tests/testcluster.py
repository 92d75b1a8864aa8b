"""The Slurm test cluster as `scripts/testcluster up` describes it in its connection file: for
the tests (through the `testcluster` fixture) and for the benches, which run outside pytest."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hpc.ssh import SSHSettings

# Which of the machine's two test clusters: "" for the first, "b" for the second (the variable
# `scripts/testcluster` reads too; scripts/pytest-processes sets it for one of its processes).
INSTANCE = os.environ.get("TESTCLUSTER_INSTANCE", "")
CONNECTION_FILE = Path(
    os.environ.get(
        "COMPUTESHARE_TESTCLUSTER_CONFIG",
        f"/var/lib/computeshare-testcluster{'-' + INSTANCE if INSTANCE else ''}/connection.json",
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
class OwnerSide:
    """The owner's own researcher on the test cluster: a Unix user, not a tenant (the service
    user cannot act as it), in the owner's Slurm account, whose jobs run under the owner's QOS,
    which preempts the market's. Tests act as it through root, on this machine (`run`)."""

    user: str
    account: str
    qos: str
    slurm_conf: str = "/etc/slurm/slurm.conf"
    """The slurm.conf of the cluster this user's commands go to (the machine runs two)."""

    def run(self, *command: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Runs `command` as the owner's user from its home (`runuser`, as root), unchecked."""
        home = Path("~" + self.user).expanduser()
        return subprocess.run(
            ["runuser", "-u", self.user, "--", *command],
            env={**os.environ, "SLURM_CONF": self.slurm_conf},
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=home,
        )

    def submit(self, script: str, *, cpus: int, time_limit_minutes: int = 5) -> str:
        """Submits `script` as the owner's user with `cpus` CPUs, output discarded; the job id."""
        done = self.run(
            "sbatch",
            "--parsable",
            f"--cpus-per-task={cpus}",
            f"--time={time_limit_minutes}",
            "--output=/dev/null",
            "--job-name=owner-job",
            stdin=script,
        )
        if done.returncode != 0:
            raise RuntimeError(f"sbatch as {self.user} failed: {done.stdout}{done.stderr}")
        return done.stdout.strip().split(";")[0]


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
    owner_side: OwnerSide | None = None
    market_qos: str = ""
    """The QOS the teams' jobs run under in fixed mode, which `owner_side.qos` preempts."""
    preemption_grace_seconds: int = 0
    """The market QOS's GraceTime."""
    slurm_conf: str = "/etc/slurm/slurm.conf"
    """The cluster's slurm.conf on this machine, for the commands a test runs here rather than
    over SSH (`scripts/testcluster` sets up two clusters, the second one's in /etc/slurm-b)."""

    @property
    def private_key(self) -> str:
        return Path(self.private_key_path).read_text()

    @property
    def managed_pool(self) -> TenantPool:
        return self.tenant_pool("managed")

    @property
    def fixed_pool(self) -> TenantPool:
        return self.tenant_pool("fixed")

    @property
    def owner(self) -> OwnerSide:
        if self.owner_side is None:
            raise LookupError(
                f"{CONNECTION_FILE} has no owner's user: it was written by an older "
                "scripts/testcluster; run `scripts/testcluster up`"
            )
        return self.owner_side

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
    added_later = {
        "sftp_server",
        "tenant_pools",
        "owner_side",
        "market_qos",
        "preemption_grace_seconds",
        "slurm_conf",
    }
    values = {
        each.name: config[each.name] for each in fields(TestCluster) if each.name not in added_later
    }
    owner = config.get("owner")
    slurm_conf = config.get("slurm_conf", "/etc/slurm/slurm.conf")
    # A file from before the pools still describes the service user's login: the tests that
    # need a pool fail on `tenant_pool`, the others run.
    return TestCluster(
        **values,
        sftp_server=config.get("sftp_server", "/usr/lib/openssh/sftp-server"),
        tenant_pools={
            name: TenantPool.from_json(pool)
            for name, pool in config.get("tenant_pools", {}).items()
        },
        owner_side=OwnerSide(**owner, slurm_conf=slurm_conf) if owner else None,
        market_qos=config.get("market_qos", ""),
        preemption_grace_seconds=config.get("preemption_grace_seconds", 0),
        slurm_conf=slurm_conf,
    )
