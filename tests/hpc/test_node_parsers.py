"""The parsers of the nodes' checks and scrub (`hpc.slurm.nodes`, `hpc.slurm.node_checks`), on
output recorded on the test cluster (its one node, `vm`, is also its login node) and, for what a
one-node cluster cannot show, on `node_probe_four_nodes.txt`: the same lines as the recorded
ones, as the probe printed them when run by hand as other users and where the home's file was
missing (uid 1005, 27 processes of others), put together under the nodes c1 to c5."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc.errors import UnexpectedOutput
from hpc.slurm.node_checks import NodeIdentity, NodeScrub, parse_nodes_probe, parse_nodes_scrub
from hpc.slurm.nodes import (
    LeaseNodes,
    NodeTarget,
    PartitionNodes,
    is_usable_state,
    node_jobs_command,
    parse_lease_nodes,
    parse_partition_nodes,
)

RECORDED = Path(__file__).parent / "recorded"
TOKEN = "@@nodes-recorded@@"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


def test_a_partitions_nodes_are_read_once_each_usable_or_not():
    assert parse_partition_nodes(recorded("testcluster_sinfo_partition_nodes.txt"), ["debug"]) == (
        PartitionNodes(usable=(NodeTarget("vm", "debug"),), unusable=())
    )
    text = "c2|gpu|mix\nc1|cpu|idle\nc2|cpu|alloc\nc3|cpu|drain\nc4|cpu|idle*\nc5|cpu|down~\n"
    assert parse_partition_nodes(text, ["cpu", "gpu"]) == PartitionNodes(
        usable=(NodeTarget("c1", "cpu"), NodeTarget("c2", "cpu")),
        unusable=(("c3", "drain"), ("c4", "idle*"), ("c5", "down~")),
    )


@pytest.mark.parametrize(
    ("state", "usable"),
    [
        ("idle", True),
        ("mix", True),
        ("alloc", True),
        ("idle-", True),
        ("drng", False),
        ("idle*", False),
        ("down", False),
        ("maint", False),
        ("idle~", False),
    ],
)
def test_a_node_state_says_whether_a_job_may_start_there(state, usable):
    assert is_usable_state(state) is usable


def test_an_unreadable_sinfo_line_is_an_error():
    with pytest.raises(UnexpectedOutput):
        parse_partition_nodes("vm|debug\n", ["debug"])


def test_the_nodes_a_lease_ran_on_leave_out_the_login_node():
    nodes = parse_lease_nodes(recorded("testcluster_lease_nodes.txt"))

    assert nodes == LeaseNodes(
        ran=(NodeTarget("vm", "debug"),), login_names=frozenset({"vm"}), hostnames={"vm": "vm"}
    )
    assert nodes.beyond_login == ()


def test_a_node_is_the_login_node_by_its_name_or_its_host_name():
    text = (
        "ran c1 cpu\nran login-node cpu\nran c2 gpu,cpu\nran c9\n"
        "login login login.cluster.example\nhost c1 c1\nhost c2 c2.cluster.example\n"
        "host login-node login.cluster.example\n"
    )

    nodes = parse_lease_nodes(text)

    assert nodes.beyond_login == (
        NodeTarget("c1", "cpu"),
        NodeTarget("c2", "gpu"),
        NodeTarget("c9", ""),
    )


def test_the_probe_reads_the_tenant_as_the_node_sees_it():
    probe = parse_nodes_probe(recorded("testcluster_node_probe.txt"), TOKEN, "cs-tenant-04")

    assert (probe.login_uid, probe.login_home) == ("1006", "/home/cs-tenant-04")
    assert probe.nodes == (
        NodeIdentity(
            node="vm",
            reached=True,
            uid="1006",
            home="/home/cs-tenant-04",
            sees_shared_home=True,
            other_processes=0,
        ),
    )
    assert probe.problems() == []
    assert probe.unreached == []


def test_a_node_slurm_did_not_run_the_probe_on_is_unreached_with_sruns_words():
    probe = parse_nodes_probe(recorded("testcluster_node_probe_refused.txt"), TOKEN, "t")

    assert probe.nodes == (
        NodeIdentity(
            node="vm",
            reached=False,
            problem="srun: error: Unable to allocate resources: Requested nodes are busy",
        ),
    )
    assert probe.problems() == []


def test_each_problem_names_its_node():
    probe = parse_nodes_probe(recorded("node_probe_four_nodes.txt"), TOKEN, "cs-tenant-04")

    assert probe.problems() == [
        "c2: cs-tenant-04 has uid 1005 there, not 1006 as on the login node",
        "c2: cs-tenant-04's home there (/home/cs-tenant-04) is not the login node's "
        "/home/cs-tenant-04: a file written in it on the login node is not there",
        "c3: cs-tenant-04 sees 27 processes of other users (mount /proc with hidepid=2 there)",
        "c5: there is no account cs-tenant-04",
        "c5: cs-tenant-04's home there (none) is not the login node's /home/cs-tenant-04: a "
        "file written in it on the login node is not there",
    ]
    assert [node.node for node in probe.unreached] == ["c4"]


def test_a_probe_without_its_end_marker_is_an_error():
    text = recorded("testcluster_node_probe.txt").replace(f"{TOKEN} end\n", "")

    with pytest.raises(UnexpectedOutput):
        parse_nodes_probe(text, TOKEN, "cs-tenant-04")


def test_the_scrub_of_a_node_counts_what_it_found_and_what_is_left():
    scrub = parse_nodes_scrub(recorded("testcluster_node_scrub.txt"), TOKEN)

    assert scrub.jobs_left == 0
    assert scrub.nodes == (
        NodeScrub(
            node="vm",
            reached=True,
            processes_found=1,
            temporary_files_found=3,
            processes_left=0,
            temporary_files_left=0,
        ),
    )
    assert scrub.nodes[0].is_clean
    assert scrub.nodes[0].describe() == "node vm: 1 processes and 3 temporary files removed"


def test_a_node_the_scrub_did_not_reach_is_not_clean():
    text = recorded("testcluster_node_probe_refused.txt").replace("login 1006 /home/x\n", "")

    scrub = parse_nodes_scrub(text + "jobs 0\n", TOKEN)

    assert not scrub.nodes[0].is_clean
    assert scrub.nodes[0].describe() == (
        "node vm could not be scrubbed (srun: error: Unable to allocate resources: Requested "
        "nodes are busy)"
    )


def test_a_node_with_leftovers_is_not_clean():
    text = recorded("testcluster_node_scrub.txt").replace("left 0 0", "left 1 2")

    [node] = parse_nodes_scrub(text, TOKEN).nodes

    assert not node.is_clean
    assert node.describe() == (
        "node vm: 1 processes still running, 2 files left in /tmp, /var/tmp or /dev/shm"
    )


def test_the_node_jobs_run_in_batches_each_on_its_node_and_partition():
    targets = [NodeTarget(f"c{index}", "cpu") for index in range(40)] + [NodeTarget("g1", "")]

    command = node_jobs_command(
        targets,
        job_script="true",
        job_name="computeshare-node-probe",
        account="computeshare-idle",
        prelude="",
        finale="",
        token=TOKEN,
        wait_seconds=10,
    )

    lines = command.splitlines()
    assert lines.count("wait") == 2
    assert lines.index("wait") == lines.index("on_node c31 cpu &") + 1
    assert "on_node g1 '' &" in lines
    assert "--account=computeshare-idle" in command
    assert "--immediate=10" in command
