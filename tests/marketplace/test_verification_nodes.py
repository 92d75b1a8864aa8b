"""Verification's `nodes` step on what a one-node test cluster cannot show: nodes where the
tenant is not as on the login node, and nodes no job reached. The cluster's answers are the
lines recorded in tests/hpc/recorded (see tests/hpc/test_node_parsers.py), given by a stand-in
for the SSH connection; the step on the real test cluster is in test_verification_tenants.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc.slurm import node_checks
from hpc.ssh import CommandResult
from marketplace.models import TenantAccount
from marketplace.services.verification_nodes import NodesCheckFailed, nodes_check
from tests.factories import ClusterFactory

RECORDED = Path(__file__).parent.parent / "hpc" / "recorded"
TOKEN = "@@nodes-recorded@@"
SINFO = "c1|cpu|idle\nc2|cpu|mix\nc3|cpu|idle\nc4|cpu|alloc\nc5|cpu|idle\nc6|cpu|drain\n"


class RecordedCluster:
    """Answers sinfo with `SINFO` and the probe with `probe`; keeps who ran what."""

    def __init__(self, probe: str) -> None:
        self.probe = probe
        self.commands: list[tuple[str | None, str]] = []

    def run(self, command, *, timeout, as_user=None, check=True):
        text = command if isinstance(command, str) else " ".join(command)
        self.commands.append((as_user, text))
        stdout = SINFO if text.startswith("sinfo") else self.probe
        return CommandResult(text, 0, stdout, "", 0.1)


@pytest.fixture(autouse=True)
def recorded_token(monkeypatch):
    monkeypatch.setattr(node_checks, "new_token", lambda: TOKEN)


def check(cluster, connection):
    return nodes_check(
        connection,
        cluster,
        partitions=["cpu"],
        tenants=["cs-tenant-01", "cs-tenant-02"],
        cluster_name="site",
        idle_account="",
        timeout=30,
    )


@pytest.mark.django_db
def test_the_step_fails_naming_each_node_that_is_not_as_the_login_node():
    cluster = ClusterFactory(tenants=2)
    connection = RecordedCluster((RECORDED / "node_probe_four_nodes.txt").read_text())

    with pytest.raises(NodesCheckFailed) as failure:
        check(cluster, connection)

    assert str(failure.value) == (
        "c2: cs-tenant-01 has uid 1005 there, not 1006 as on the login node; c2: cs-tenant-01's "
        "home there (/home/cs-tenant-04) is not the login node's /home/cs-tenant-04: a file "
        "written in it on the login node is not there; c3: cs-tenant-01 sees 27 processes of "
        "other users (mount /proc with hidepid=2 there); c5: there is no account cs-tenant-01; "
        "c5: cs-tenant-01's home there (none) is not the login node's /home/cs-tenant-04: a "
        "file written in it on the login node is not there."
    )
    # One probe as the first tenant no team holds, in the fixed account, on the usable nodes.
    probe_user, probe = connection.commands[1]
    assert probe_user == "cs-tenant-01"
    assert "--account=computeshare" in probe
    assert [f"on_node {node} cpu &" in probe for node in ("c1", "c5", "c6")] == [
        True,
        True,
        False,
    ]


@pytest.mark.django_db
def test_nodes_no_job_reached_are_a_warning_that_names_them():
    cluster = ClusterFactory(tenants=2)
    TenantAccount.objects.filter(username="cs-tenant-01").update(status=TenantAccount.Status.LEASED)
    # c1 is as the login node; Slurm did not run the probe on c4.
    lines = (RECORDED / "node_probe_four_nodes.txt").read_text().splitlines()
    kept = lines[:6] + lines[16:19] + [f"{TOKEN} end"]
    connection = RecordedCluster("\n".join(kept) + "\n")

    reached, detail = check(cluster, connection)

    assert not reached
    assert detail == (
        "As cs-tenant-02 on c1: the login node's uid, the shared home, no other users' "
        "processes. Not checked, no job could start there: c6 (drain); c4 (srun: error: Unable "
        "to allocate resources: Requested nodes are busy)."
    )
    assert connection.commands[1][0] == "cs-tenant-02"


@pytest.mark.django_db
def test_the_nodes_are_not_checked_while_every_tenant_is_leased():
    cluster = ClusterFactory(tenants=2)
    TenantAccount.objects.update(status=TenantAccount.Status.LEASED)
    connection = RecordedCluster("")

    assert check(cluster, connection) == (
        False,
        "Every tenant account is leased to a team: the nodes were not checked.",
    )
    assert connection.commands == []
