"""scripts/cluster-setup, the script owners run on their login node, run for real on this
machine as root: real users, real sudo, the real Slurm test cluster.

The scratch pools (cs-probe, cs-mprobe) are removed and made again by the tests that need them
from scratch; between runs they stay on the machine, which is harmless: no password opens
their accounts and no key is left in their authorized_keys."""

import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testcluster import TenantPool, TestCluster

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "cluster-setup"
LINE = re.compile(r"^\[cluster-setup\] (?P<item>.+?): (?P<said>.+)$")

SERVICE_USER = "cs-probe"
TENANTS = ("cs-probe-01", "cs-probe-02")
GROUP = "cs-probe-tenants"
SUDOERS_FILE = Path("/etc/sudoers.d/computeshare-cs-probe-tenants")
# The scratch pools keep their manifest out of this machine's own, which lists the test
# cluster's pools (scripts/testcluster up writes it): a scratch pool made again gets other ids.
SCRATCH_MANIFEST = "/tmp/computeshare-test-scratch-accounts.manifest"
SCRATCH = (
    "--service-user", SERVICE_USER, "--tenants", "2", "--tenant-group", GROUP,
    "--tenant-prefix", "cs-probe-", "--no-slurm", "--no-hide-processes",
    "--manifest", SCRATCH_MANIFEST,
)  # fmt: skip


@pytest.fixture(autouse=True)
def _as_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("cluster-setup makes users and sudoers rules: run these tests as root")


def run(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    # From /, which every user may enter: sudo and the tools run as other users stay quiet.
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd="/")
    if check and done.returncode != 0:
        pytest.fail(f"{command} exited {done.returncode}: {done.stdout}{done.stderr}")
    return done


def cluster_setup(*arguments: str) -> subprocess.CompletedProcess[str]:
    return run(str(SCRIPT), *arguments, check=False)


def said(output: str) -> dict[str, list[str]]:
    """What the script said about each item, in order."""
    items: dict[str, list[str]] = {}
    for line in output.splitlines():
        if match := LINE.match(line):
            items.setdefault(match["item"], []).append(match["said"])
    return items


def item_lines(output: str) -> list[str]:
    """The lines about items: all but the summary and the hint after it."""
    return [
        line
        for line in output.splitlines()
        if not line.startswith(("[cluster-setup] done:", "[cluster-setup] check:"))
        and line != "[cluster-setup] run again without --check to apply"
    ]


def as_service_user(service_user: str, *command: str) -> subprocess.CompletedProcess[str]:
    return run("runuser", "-u", service_user, "--", *command, check=False)


def passwd(name: str) -> list[str]:
    return run("getent", "passwd", name).stdout.strip().split(":")


def password_field(name: str) -> str:
    return run("getent", "shadow", name).stdout.split(":")[1]


def exists(database: str, name: str) -> bool:
    return run("getent", database, name, check=False).returncode == 0


def remove_users(*names: str) -> None:
    """Deletes the users (their homes and private groups too), as if never made."""
    for name in names:
        if exists("passwd", name):
            run("userdel", "--remove", name)


def remove_scratch_pool() -> None:
    remove_users(SERVICE_USER, *TENANTS)
    if exists("group", GROUP):
        run("groupdel", GROUP)
    SUDOERS_FILE.unlink(missing_ok=True)


@pytest.fixture
def scratch_pool() -> None:
    """The scratch pool as cluster-setup makes it, whatever an earlier run left."""
    done = cluster_setup(*SCRATCH)
    assert done.returncode == 0, done.stdout + done.stderr


# --- A scratch pool, without Slurm ----------------------------------------------------------


def test_a_first_run_makes_the_service_user_the_tenants_and_the_sudoers_rule():
    remove_scratch_pool()

    done = cluster_setup(*SCRATCH)

    assert done.returncode == 0, done.stdout + done.stderr
    items = said(done.stdout)
    assert items[f"service user {SERVICE_USER}"][0] == "created (home /home/cs-probe)"
    assert items[f"tenant group {GROUP}"] == ["created"]
    assert items["tenant cs-probe-01"] == ["created (home /home/cs-probe-01)"]
    assert items["tenant cs-probe-02"] == ["created (home /home/cs-probe-02)"]
    assert items[f"sudoers {SUDOERS_FILE}"] == ["created"]
    # The service user: key log-in only ('*', not the locked '!'), a home only it can enter,
    # and not a tenant.
    service = passwd(SERVICE_USER)
    assert service[5:] == ["/home/cs-probe", "/bin/bash"]
    assert password_field(SERVICE_USER) == "*"
    assert run("id", "-Gn", SERVICE_USER).stdout.split() == [SERVICE_USER]
    home = os.stat("/home/cs-probe")
    assert (stat.S_IMODE(home.st_mode), home.st_uid) == (0o700, int(service[2]))
    # The tenants: locked, their own group and the tenant group, empty private homes.
    assert run("getent", "group", GROUP).stdout.strip().split(":")[3] == ",".join(TENANTS)
    for tenant in TENANTS:
        account = passwd(tenant)
        assert account[5:] == [f"/home/{tenant}", "/bin/bash"]
        assert password_field(tenant) == "!"
        assert run("id", "-Gn", tenant).stdout.split() == [tenant, GROUP]
        home = os.stat(f"/home/{tenant}")
        assert (stat.S_IMODE(home.st_mode), home.st_uid) == (0o700, int(account[2]))
        assert os.listdir(f"/home/{tenant}") == []
    # The sudoers rule: valid, root's, and only the service user acting as the tenants.
    rules = SUDOERS_FILE.stat()
    assert (stat.S_IMODE(rules.st_mode), rules.st_uid, rules.st_gid) == (0o440, 0, 0)
    run("visudo", "-cf", str(SUDOERS_FILE))
    lines = [line for line in SUDOERS_FILE.read_text().splitlines() if not line.startswith("#")]
    assert lines == [
        "cs-probe ALL=(%cs-probe-tenants) NOPASSWD: ALL",
        "Defaults:cs-probe !requiretty",
    ]


def test_the_service_user_acts_as_each_tenant_and_nobody_else(scratch_pool):
    for tenant in TENANTS:
        done = as_service_user(SERVICE_USER, "sudo", "-n", "-u", tenant, "id", "-un")
        assert (done.returncode, done.stdout) == (0, f"{tenant}\n")
    as_root = as_service_user(SERVICE_USER, "sudo", "-n", "-u", "root", "true")
    assert as_root.returncode == 1
    assert "a password is required" in as_root.stderr
    as_itself = as_service_user(SERVICE_USER, "sudo", "-n", "-u", SERVICE_USER, "true")
    assert as_itself.returncode == 1
    for tenant in TENANTS:
        listing = run("sudo", "-l", "-U", tenant).stdout
        assert f"User {tenant} is not allowed to run sudo" in listing


def test_a_second_run_changes_nothing(scratch_pool):
    watched = [
        Path(path)
        for path in ("/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow", SUDOERS_FILE)
    ] + [Path(f"/home/{name}") for name in (SERVICE_USER, *TENANTS)]
    # ctime moves with any chmod or chown, even to the same value.
    before = {path: (path.stat().st_mtime_ns, path.stat().st_ctime_ns) for path in watched}

    done = cluster_setup(*SCRATCH)

    assert (done.returncode, done.stderr) == (0, "")
    for line in item_lines(done.stdout):
        assert LINE.match(line) and re.search(r": ok( \(.*\))?$", line), line
    assert " 0 created, 0 changed, 0 warning(s), 0 failed" in done.stdout.splitlines()[-1]
    after = {path: (path.stat().st_mtime_ns, path.stat().st_ctime_ns) for path in watched}
    assert after == before


def test_check_names_what_was_broken_changes_nothing_and_a_run_repairs_it(scratch_pool):
    run("chmod", "0755", "/home/cs-probe-01")
    SUDOERS_FILE.unlink()
    run("usermod", "--password", "!", SERVICE_USER)

    check = cluster_setup(*SCRATCH, "--check")

    assert check.returncode == 1, check.stdout + check.stderr
    items = said(check.stdout)
    assert items["tenant cs-probe-01"] == ["would change: home mode 0755 -> 0700"]
    assert items[f"sudoers {SUDOERS_FILE}"] == ["would create"]
    assert items[f"service user {SERVICE_USER}"][0] == (
        "would change: password field ! -> * (key log-in only)"
    )
    assert items["tenant cs-probe-02"] == ["ok"]
    # --check changed nothing.
    assert stat.S_IMODE(os.stat("/home/cs-probe-01").st_mode) == 0o755
    assert not SUDOERS_FILE.exists()
    assert password_field(SERVICE_USER) == "!"

    repair = cluster_setup(*SCRATCH)

    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert said(repair.stdout)["tenant cs-probe-01"] == ["changed: home mode 0755 -> 0700"]
    assert stat.S_IMODE(os.stat("/home/cs-probe-01").st_mode) == 0o700
    assert password_field(SERVICE_USER) == "*"
    again = cluster_setup(*SCRATCH, "--check")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "would" not in again.stdout


def test_the_authorized_key_is_added_once_and_other_lines_are_kept(scratch_pool, tmp_path):
    key = tmp_path / "platform"
    run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "platform", "-f", str(key))
    public_key = Path(f"{key}.pub").read_text().strip()
    keys = Path("/home/cs-probe/.ssh/authorized_keys")
    kept = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOl4ZzmXxxTFUHRCkbDbx2Ixq6ofs3yPSmOVVlbn7EN/ kept"
    shutil.rmtree(keys.parent, ignore_errors=True)

    try:
        first = cluster_setup(*SCRATCH, "--authorized-key", f"{key}.pub")
        keys.write_text(keys.read_text() + kept + "\n")
        again = cluster_setup(*SCRATCH, "--authorized-key", f"{key}.pub")
        lines = keys.read_text().splitlines()
        modes = [
            (stat.S_IMODE(path.stat().st_mode), path.stat().st_uid) for path in (keys, keys.parent)
        ]
    finally:
        shutil.rmtree(keys.parent, ignore_errors=True)

    assert first.returncode == 0, first.stdout + first.stderr
    assert said(first.stdout)[f"service user {SERVICE_USER}"] == [
        "changed: /home/cs-probe/.ssh created",
        "changed: authorized_keys: 1 key(s) added",
    ]
    assert again.returncode == 0, again.stdout + again.stderr
    assert said(again.stdout)[f"service user {SERVICE_USER}"] == ["ok"]
    assert lines == [public_key, kept]
    uid = int(passwd(SERVICE_USER)[2])
    assert modes == [(0o600, uid), (0o700, uid)]


def test_a_stranger_in_the_tenant_group_is_a_failure_not_removed(scratch_pool):
    run("gpasswd", "-a", "nobody", GROUP)
    try:
        done = cluster_setup(*SCRATCH, "--check")

        assert done.returncode == 3
        assert (
            "FAILED: tenant group cs-probe-tenants: nobody is a member but not a tenant"
            in done.stderr
        )
        assert "nobody" in run("getent", "group", GROUP).stdout
    finally:
        run("gpasswd", "-d", "nobody", GROUP)


def test_a_rule_elsewhere_that_gives_the_service_user_more_is_a_failure_left_in_place(
    scratch_pool,
):
    leftover = Path("/etc/sudoers.d/cs-probe-leftover")
    # Written aside (sudo skips names with a dot), then moved in whole.
    aside = leftover.with_name(".cs-probe-leftover")
    aside.write_text("cs-probe ALL=(root) NOPASSWD: /usr/bin/id\n")
    aside.chmod(0o440)
    aside.rename(leftover)
    try:
        run("visudo", "-c")

        done = cluster_setup(*SCRATCH)

        assert done.returncode == 3
        assert (
            "FAILED: sudo for cs-probe: may also run '(root) NOPASSWD: /usr/bin/id' "
            "(sudo -l -U cs-probe), from a rule outside cluster-setup's files "
            "(look in /etc/sudoers.d/cs-probe-leftover): remove it"
        ) in done.stderr
        assert leftover.read_text() == "cs-probe ALL=(root) NOPASSWD: /usr/bin/id\n"
    finally:
        leftover.unlink()


# --- The manifest of the accounts, and a compute node made from it -----------------------------


def manifest_entries(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


def test_the_manifest_lists_the_accounts_as_getent_has_them_and_check_compares_it(
    scratch_pool, tmp_path
):
    manifest = tmp_path / "accounts.manifest"

    done = cluster_setup(*SCRATCH, "--manifest", str(manifest))

    assert done.returncode == 0, done.stdout + done.stderr
    assert said(done.stdout)[f"manifest {manifest}"] == [
        "created (2 tenant(s); for cluster-setup --compute-node)"
    ]
    gid = run("getent", "group", GROUP).stdout.split(":")[2]
    expected = ["computeshare-accounts 1", f"group {GROUP} {gid}"]
    for tenant in TENANTS:
        name, _, uid, primary, _, home, _ = passwd(tenant)
        expected.append(f"tenant {name} {uid} {primary} {home} {GROUP}")
    service = passwd(SERVICE_USER)
    expected.append(f"service {SERVICE_USER} {service[2]} {service[3]} {service[5]}")
    assert manifest_entries(manifest.read_text()) == expected
    written = manifest.stat()
    assert (stat.S_IMODE(written.st_mode), written.st_uid, written.st_gid) == (0o644, 0, 0)
    assert os.listdir(tmp_path) == ["accounts.manifest"]  # no temporary file left beside it

    unchanged = cluster_setup(*SCRATCH, "--manifest", str(manifest), "--check")

    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr
    assert said(unchanged.stdout)[f"manifest {manifest}"] == ["ok (2 tenant(s))"]

    # A manifest that no longer says what the accounts are: --check names it, a run rewrites it.
    uid = expected[3].split()[2]
    stale = manifest.read_text().replace(f"tenant cs-probe-02 {uid} ", "tenant cs-probe-02 99999 ")
    manifest.write_text(stale)

    check = cluster_setup(*SCRATCH, "--manifest", str(manifest), "--check")

    assert check.returncode == 1, check.stdout + check.stderr
    assert said(check.stdout)[f"manifest {manifest}"] == [
        f"would change: tenant cs-probe-02 uid 99999 -> {uid}"
    ]
    assert manifest.read_text() == stale
    repair = cluster_setup(*SCRATCH, "--manifest", str(manifest))
    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert manifest_entries(manifest.read_text()) == expected


# Throwaway accounts for the compute node's side, in ids nothing on this machine uses.
NODE_GROUP, NODE_GID = "cs-nprobe-tenants", 61200
NODE_TENANTS = {"cs-nprobe-01": (61201, 61201), "cs-nprobe-02": (61202, 61202)}  # uid, gid


def node_manifest(path: Path, homes: Path, tenants: dict[str, tuple[int, int]]) -> Path:
    lines = ["computeshare-accounts 1", "# written by the test", f"group {NODE_GROUP} {NODE_GID}"]
    lines += [
        f"tenant {name} {uid} {gid} {homes / name} {NODE_GROUP}"
        for name, (uid, gid) in tenants.items()
    ]
    lines.append("service cs-nprobe 61210 61210 /home/cs-nprobe")
    path.write_text("\n".join(lines) + "\n")
    return path


def remove_node_accounts() -> None:
    remove_users(*NODE_TENANTS, "cs-nprobe-03")
    if exists("group", NODE_GROUP):
        run("groupdel", NODE_GROUP)


@pytest.fixture
def node_homes(tmp_path) -> Iterator[Path]:
    """The shared homes as a compute node sees them (made by the login node: here, by hand),
    and no throwaway account before or after."""
    for uid in (NODE_GID, 61201, 61202, 61203, 61205, 61210):
        assert not exists("passwd", str(uid)) and not exists("group", str(uid)), uid
    homes = tmp_path / "home"
    homes.mkdir()
    for name, (uid, _) in NODE_TENANTS.items():
        (homes / name).mkdir(mode=0o700)
        os.chown(homes / name, uid, uid)
    remove_node_accounts()
    try:
        yield homes
    finally:
        remove_node_accounts()


def test_a_compute_node_gets_exactly_the_manifests_accounts_once(node_homes, tmp_path):
    manifest = node_manifest(tmp_path / "accounts.manifest", node_homes, NODE_TENANTS)
    etc = [Path(path) for path in ("/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow")]

    check = cluster_setup("--compute-node", str(manifest), "--check", "--no-hide-processes")

    assert check.returncode == 1, check.stdout + check.stderr
    assert said(check.stdout)["tenant cs-nprobe-01"] == [
        f"would create (uid 61201, gid 61201, home {node_homes}/cs-nprobe-01)"
    ]
    assert not exists("passwd", "cs-nprobe-01") and not exists("group", NODE_GROUP)

    done = cluster_setup("--compute-node", str(manifest), "--no-hide-processes")

    assert (done.returncode, done.stderr) == (0, ""), done.stdout + done.stderr
    items = said(done.stdout)
    assert items[f"tenant group {NODE_GROUP}"] == ["created (gid 61200)"]
    assert items["service user cs-nprobe"] == [
        "ok (not made here: it runs nothing on compute nodes, and uid 61210 is nobody else's)"
    ]
    assert not exists("passwd", "cs-nprobe")
    assert run("getent", "group", NODE_GROUP).stdout.strip() == (
        f"{NODE_GROUP}:x:61200:cs-nprobe-01,cs-nprobe-02"
    )
    for name, (uid, _) in NODE_TENANTS.items():
        home = f"{node_homes}/{name}"
        assert passwd(name) == [name, "x", str(uid), str(uid), "", home, "/bin/bash"]
        assert run("getent", "group", name).stdout.strip() == f"{name}:x:{uid}:"
        assert run("id", "-Gn", name).stdout.split() == [name, NODE_GROUP]
        assert password_field(name) == "!"

    before = {path: (path.stat().st_mtime_ns, path.stat().st_ctime_ns) for path in etc}
    again = cluster_setup("--compute-node", str(manifest), "--no-hide-processes")

    assert (again.returncode, again.stderr) == (0, ""), again.stdout + again.stderr
    for line in item_lines(again.stdout):
        assert re.search(r": ok( \(.*\))?$", line), line
    assert {path: (path.stat().st_mtime_ns, path.stat().st_ctime_ns) for path in etc} == before


def test_a_compute_node_whose_ids_differ_fails_naming_the_account_and_changes_nothing(
    node_homes, tmp_path
):
    made = cluster_setup(
        "--compute-node", str(node_manifest(tmp_path / "first", node_homes, NODE_TENANTS)),
        "--no-hide-processes",
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    # The login node says cs-nprobe-02 is 61205, and gives cs-nprobe-01's uid to cs-nprobe-03.
    manifest = node_manifest(
        tmp_path / "second",
        node_homes,
        {"cs-nprobe-02": (61205, 61202), "cs-nprobe-03": (61201, 61203)},
    )
    passwd_before = Path("/etc/passwd").read_text()

    for mode in ("--check", "--no-hide-processes"):
        done = cluster_setup("--compute-node", str(manifest), "--no-hide-processes", mode)

        assert done.returncode == 3, done.stdout + done.stderr
        failed = [line for line in done.stderr.splitlines() if "FAILED" in line]
        assert failed == [
            "[cluster-setup] FAILED: tenant cs-nprobe-02: uid 61202 here, 61205 on the login "
            "node: its jobs here would run as another user than there (usermod -u 61205 "
            "cs-nprobe-02 here, then chown what it owns; or userdel it and run again)",
            "[cluster-setup] FAILED: tenant cs-nprobe-03: uid 61201 (its uid on the login node) "
            "is user cs-nprobe-01 here: its jobs would run as cs-nprobe-01 (give cs-nprobe-01 "
            "another uid, or remove it), then run again",
        ]
        assert Path("/etc/passwd").read_text() == passwd_before


@pytest.mark.parametrize(
    ("content", "extra", "refusal"),
    [
        pytest.param(
            "computeshare-accounts 2\n",
            (),
            "format version 2, and this cluster-setup reads",
            id="another version",
        ),
        pytest.param(
            "group g 10\n", (), "line 1 is not 'computeshare-accounts 1'", id="no version line"
        ),
        pytest.param(
            "computeshare-accounts 1\ngroup g 10\ntenant t 0 10 /home/t g\n",
            (),
            "uid and gid must be numbers above 0",
            id="root",
        ),
        pytest.param(
            "computeshare-accounts 1\ntenant t 1200 1200 /home/t g\n",
            (),
            "tenant t is in group g, which has no group line",
            id="no group",
        ),
        pytest.param(
            "computeshare-accounts 1\n",
            ("--tenants", "2"),
            "--tenants is for the login node",
            id="a login node's option",
        ),
    ],
)
def test_a_compute_node_refuses_a_manifest_it_cannot_trust(tmp_path, content, extra, refusal):
    manifest = tmp_path / "accounts.manifest"
    manifest.write_text(content)
    group_before = Path("/etc/group").stat().st_mtime_ns

    done = cluster_setup("--compute-node", str(manifest), *extra)

    assert (done.returncode, done.stdout) == (2, "")
    assert refusal in done.stderr
    assert Path("/etc/group").stat().st_mtime_ns == group_before


PREEMPTING = ("--service-user", "cs-probe", "--tenants", "2", "--preemption", "normal")


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param(("--service-user", "cs-probe", "--tenants", "0"), id="no tenants"),
        pytest.param(("--service-user", "cs-probe", "--tenants", "1000"), id="too many"),
        pytest.param(("--tenants", "2"), id="no service user"),
        pytest.param((*SCRATCH, "--frobnicate"), id="unknown option"),
        pytest.param((*SCRATCH, "--mode", "shared"), id="unknown mode"),
        pytest.param((*SCRATCH, "--idle-account", "idle"), id="idle account in fixed mode"),
        pytest.param(("--service-user", "root", "--tenants", "2"), id="root"),
        pytest.param(("--service-user", "Bad Name", "--tenants", "2"), id="bad name"),
        pytest.param((*SCRATCH, "--market-qos", "market"), id="market qos without preemption"),
        pytest.param((*SCRATCH, "--grace-time", "60"), id="grace time without preemption"),
        pytest.param((*SCRATCH, "--preemption", "normal"), id="preemption without slurm"),
        pytest.param((*SCRATCH, "--reservations"), id="reservations without slurm"),
        pytest.param(
            ("--service-user", "cs-probe", "--tenants", "2", "--preemption", "Bad QOS"),
            id="bad owner qos",
        ),
        pytest.param(
            ("--service-user", "cs-probe", "--tenants", "2", "--preemption", "computeshare-market"),
            id="the market qos preempting itself",
        ),
        pytest.param((*PREEMPTING, "--grace-time", "3601"), id="grace time too long"),
        pytest.param((*PREEMPTING, "--grace-time", "2m"), id="grace time not in seconds"),
    ],
)
def test_bad_usage_exits_2_and_changes_nothing(arguments):
    group_before = Path("/etc/group").stat().st_mtime_ns

    done = cluster_setup(*arguments)

    assert (done.returncode, done.stdout) == (2, "")
    assert "usage error" in done.stderr
    assert Path("/etc/group").stat().st_mtime_ns == group_before


# --- The Slurm side -----------------------------------------------------------------------------


def pool_arguments(cluster: TestCluster, name: str) -> list[str]:
    """The options `scripts/testcluster up` gives cluster-setup for the pool."""
    pool: TenantPool = cluster.tenant_pool(name)
    prefix = re.sub(r"[0-9]+$", "", pool.tenants[0].user)
    arguments = [
        "--service-user", cluster.user, "--tenants", str(len(pool.tenants)),
        "--tenant-group", pool.group, "--tenant-prefix", prefix, "--mode", pool.mode,
    ]  # fmt: skip
    if pool.mode == "managed":
        assert pool.idle_account is not None
        arguments += ["--idle-account", pool.idle_account]
        arguments += ["--authorized-key", f"{cluster.private_key_path}.pub"]
    else:
        assert pool.account is not None
        arguments += ["--slurm-account", pool.account]
    arguments += [
        "--preemption", cluster.owner.qos, "--market-qos", cluster.market_qos,
        "--grace-time", str(cluster.preemption_grace_seconds), "--reservations",
    ]  # fmt: skip
    return arguments


@pytest.mark.slurm
@pytest.mark.parametrize("pool", ["managed", "fixed"])
def test_the_test_cluster_is_exactly_as_cluster_setup_makes_it(testcluster, pool):
    done = cluster_setup(*pool_arguments(testcluster, pool), "--check")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "would" not in done.stdout
    for tenant in testcluster.tenant_pool(pool).tenants:
        assert passwd(tenant.user)[5] == tenant.home
    items = said(done.stdout)
    assert items[f"slurm qos {testcluster.market_qos}"] == [
        f"ok (Priority=0, GraceTime={testcluster.preemption_grace_seconds} s, PreemptMode=requeue)"
    ]
    assert items[f"slurm qos {testcluster.owner.qos}"] == [
        f"ok (preempts {testcluster.market_qos})"
    ]
    assert items[f"slurm operator {testcluster.user}"] == [
        "ok (AdminLevel=Administrator: may create and remove reservations)"
    ]
    # slurm.conf has every line the script prints for preemption: it asks for none (only the
    # recommended process tracking, which the test cluster goes without).
    asked = [line for line in done.stderr.splitlines() if "slurm.conf: set" in line]
    assert [line.split("slurm.conf: set ")[1].split("=")[0] for line in asked] == ["ProctrackType"]


@pytest.mark.slurm
def test_this_host_is_in_place_as_a_compute_node_of_its_own_login_node(testcluster):
    """The test cluster's one host is its login node and its compute node: the manifest that
    `scripts/testcluster up` had cluster-setup write finds every account there as it is."""
    done = cluster_setup("--compute-node", "/etc/computeshare/accounts.manifest", "--check")

    assert (done.returncode, done.stderr) == (0, ""), done.stdout + done.stderr
    items = said(done.stdout)
    for pool in ("managed", "fixed"):
        for tenant in testcluster.tenant_pool(pool).tenants:
            _, _, uid, gid, *_ = passwd(tenant.user)
            assert items[f"tenant {tenant.user}"] == [f"ok (uid {uid}, gid {gid})"]
    assert items["/proc"] == ["ok (hidepid=invisible)"]


MANAGED_SERVICE_USER = "cs-mprobe"
MANAGED_TENANTS = ("cs-mprobe-01", "cs-mprobe-02")
IDLE_ACCOUNT = "cs-mprobe-idle"
MANAGED_SCRATCH = (
    "--service-user", MANAGED_SERVICE_USER, "--tenants", "2",
    "--tenant-group", "cs-mprobe-tenants", "--tenant-prefix", "cs-mprobe-",
    "--mode", "managed", "--idle-account", IDLE_ACCOUNT, "--no-hide-processes",
    "--manifest", SCRATCH_MANIFEST,
)  # fmt: skip


def sacctmgr_rows(*arguments: str) -> list[list[str]]:
    output = run("sacctmgr", "-n", "-P", *arguments).stdout
    return [line.split("|") for line in output.splitlines() if line]


@pytest.fixture
def managed_scratch_removed(testcluster) -> Iterator[None]:
    """No trace of the managed scratch pool, in Slurm or on the machine."""
    users = ",".join((MANAGED_SERVICE_USER, *MANAGED_TENANTS))
    # Their jobs first: Slurm refuses to remove a user that has jobs. "Nothing deleted" (exit
    # 1) is fine: an earlier run may have left nothing.
    run("scancel", f"--user={users}", check=False)
    run("sacctmgr", "-i", "remove", "user", "where", f"name={users}", check=False)
    # The account only once no user is left in it: removed under its users, it left their
    # associations without a parent, and slurmdbd 22.05 then crashed on every listing of
    # associations, slurmctld's registration included (the whole cluster stopped accounting).
    left = sacctmgr_rows("show", "assoc", "where", f"account={IDLE_ACCOUNT}", "format=user")
    assert not [row for row in left if row[0]], f"users left in {IDLE_ACCOUNT}: {left}"
    run("sacctmgr", "-i", "remove", "account", "where", f"name={IDLE_ACCOUNT}", check=False)
    remove_users(MANAGED_SERVICE_USER, *MANAGED_TENANTS)
    if exists("group", "cs-mprobe-tenants"):
        run("groupdel", "cs-mprobe-tenants")
    Path("/etc/sudoers.d/computeshare-cs-mprobe-tenants").unlink(missing_ok=True)
    yield


@pytest.mark.slurm
def test_managed_mode_parks_the_tenants_in_an_idle_account_that_runs_nothing(
    testcluster, managed_scratch_removed
):
    done = cluster_setup(*MANAGED_SCRATCH)

    assert done.returncode == 0, done.stdout + done.stderr
    items = said(done.stdout)
    assert items[f"slurm account {IDLE_ACCOUNT}"] == [
        f"created (cluster {testcluster.cluster_name}, MaxJobs=0)"
    ]
    assert items[f"slurm user {MANAGED_SERVICE_USER}"] == [
        f"created (account {IDLE_ACCOUNT}, its default; AdminLevel=Administrator)"
    ]
    where = ["where", f"account={IDLE_ACCOUNT}", f"cluster={testcluster.cluster_name}"]
    associations = sacctmgr_rows("show", "assoc", *where, "format=user,maxjobs")
    assert sorted(associations) == [["", "0"], ["cs-mprobe", "0"]] + [
        [tenant, "0"] for tenant in MANAGED_TENANTS
    ]
    users = sacctmgr_rows(
        "show", "user", "where", "name=cs-mprobe,cs-mprobe-01,cs-mprobe-02",
        "format=user,defaultaccount,adminlevel",
    )  # fmt: skip
    assert sorted(users) == [
        ["cs-mprobe", IDLE_ACCOUNT, "Administrator"],
        ["cs-mprobe-01", IDLE_ACCOUNT, "None"],
        ["cs-mprobe-02", IDLE_ACCOUNT, "None"],
    ]

    # An idle tenant's job is accepted and pends for ever.
    submit = 'cd "$HOME" && sbatch --parsable --wrap true'
    submitted = as_service_user(
        MANAGED_SERVICE_USER, "sudo", "-n", "-u", "cs-mprobe-01", "sh", "-c", submit
    )
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    try:
        reason = ""
        for _ in range(40):
            reason = run("squeue", "-h", "-j", job_id, "-o", "%T %r").stdout.strip()
            if reason == "PENDING AssocMaxJobsLimit":
                break
            time.sleep(0.25)
        assert reason == "PENDING AssocMaxJobsLimit"
    finally:
        run("scancel", job_id)

    again = cluster_setup(*MANAGED_SCRATCH)

    assert again.returncode == 0, again.stdout + again.stderr
    assert re.search(r"done: [0-9]+ ok, 0 created, 0 changed, ", again.stdout)
    assert said(again.stdout)[f"slurm user {MANAGED_SERVICE_USER}"] == [
        f"ok (account {IDLE_ACCOUNT}, AdminLevel=Administrator)"
    ]


# --- The two kinds of capacity, on a fixed scratch pool -----------------------------------------

KINDS_SERVICE_USER = "cs-kprobe"
KINDS_TENANTS = ("cs-kprobe-01", "cs-kprobe-02")
KINDS_ACCOUNT = "cs-kprobe-tenants"
KINDS_MARKET = "cs-kprobe-market"
KINDS_SCRATCH = (
    "--service-user", KINDS_SERVICE_USER, "--tenants", "2",
    "--tenant-group", "cs-kprobe-tenants", "--tenant-prefix", "cs-kprobe-",
    "--mode", "fixed", "--slurm-account", KINDS_ACCOUNT, "--no-hide-processes",
    "--manifest", SCRATCH_MANIFEST,
)  # fmt: skip


def qos_rows(*names: str) -> dict[str, list[str]]:
    """Name -> [Priority, GraceTime, PreemptMode, Preempt] of the QOS named that exist."""
    rows = sacctmgr_rows(
        "show", "qos", "where", f"name={','.join(names)}",
        "format=Name,Priority,GraceTime,PreemptMode,Preempt",
    )  # fmt: skip
    return {row[0]: row[1:] for row in rows}


def preempted_by(owner: str) -> list[str]:
    return [name for name in qos_rows(owner)[owner][3].split(",") if name]


@pytest.fixture
def kinds_scratch_removed(testcluster) -> Iterator[None]:
    """No trace of the scratch pool of the kinds, in Slurm or on the machine, before and after."""

    def remove() -> None:
        users = ",".join((KINDS_SERVICE_USER, *KINDS_TENANTS))
        run("scancel", f"--user={users}", check=False)
        run("sacctmgr", "-i", "remove", "user", "where", f"name={users}", check=False)
        run("sacctmgr", "-i", "remove", "account", "where", f"name={KINDS_ACCOUNT}", check=False)
        if KINDS_MARKET in preempted_by("normal"):
            run("sacctmgr", "-i", "modify", "qos", "where", "name=normal", "set",
                f"preempt-={KINDS_MARKET}")  # fmt: skip
        run("sacctmgr", "-i", "remove", "qos", "where", f"name={KINDS_MARKET}", check=False)
        remove_users(KINDS_SERVICE_USER, *KINDS_TENANTS)
        if exists("group", "cs-kprobe-tenants"):
            run("groupdel", "cs-kprobe-tenants")
        Path("/etc/sudoers.d/computeshare-cs-kprobe-tenants").unlink(missing_ok=True)

    remove()
    yield
    remove()


@pytest.mark.slurm
def test_both_kinds_on_a_fixed_pool_are_made_once_and_put_back_when_changed(
    testcluster, kinds_scratch_removed
):
    kinds = ("--preemption", "normal", "--market-qos", KINDS_MARKET, "--grace-time", "45",
             "--reservations")  # fmt: skip

    done = cluster_setup(*KINDS_SCRATCH, *kinds)

    assert done.returncode == 0, done.stdout + done.stderr
    items = said(done.stdout)
    assert items[f"slurm qos {KINDS_MARKET}"] == [
        "created (Priority=0, GraceTime=45 s, PreemptMode=requeue)"
    ]
    assert items["slurm qos normal"] == [f"changed: preempts {KINDS_MARKET}"]
    assert items[f"slurm qos of account {KINDS_ACCOUNT}"] == [
        f"changed: QOS normal -> {KINDS_MARKET}, its default (the tenants' jobs are preemptible)"
    ]
    assert items[f"slurm operator {KINDS_SERVICE_USER}"] == [
        f"created (account {KINDS_ACCOUNT} with MaxJobs=0, so that it runs nothing; "
        "AdminLevel=Operator)"
    ]
    assert qos_rows(KINDS_MARKET) == {KINDS_MARKET: ["0", "00:00:45", "requeue", ""]}
    assert KINDS_MARKET in preempted_by("normal")
    where = ["where", f"account={KINDS_ACCOUNT}", f"cluster={testcluster.cluster_name}"]
    associations = sacctmgr_rows("show", "assoc", *where, "format=user,qos,defaultqos,maxjobs")
    assert sorted(associations) == [
        ["", KINDS_MARKET, KINDS_MARKET, ""],
        [KINDS_SERVICE_USER, KINDS_MARKET, KINDS_MARKET, "0"],
        *([tenant, KINDS_MARKET, KINDS_MARKET, ""] for tenant in KINDS_TENANTS),
    ]
    assert sacctmgr_rows("show", "user", KINDS_SERVICE_USER, "format=adminlevel") == [["Operator"]]

    again = cluster_setup(*KINDS_SCRATCH, *kinds)

    assert again.returncode == 0, again.stdout + again.stderr
    assert re.search(r"done: [0-9]+ ok, 0 created, 0 changed, ", again.stdout)
    for line in item_lines(again.stdout):
        assert re.search(r": ok( \(.*\))?$", line), line

    # Changed by hand: --check names each change and makes none; a run puts them back.
    run("sacctmgr", "-i", "modify", "qos", "where", f"name={KINDS_MARKET}", "set",
        "gracetime=5", "preemptmode=cancel")  # fmt: skip
    run("sacctmgr", "-i", "modify", "qos", "where", "name=normal", "set",
        f"preempt-={KINDS_MARKET}")  # fmt: skip
    run("sacctmgr", "-i", "modify", "user", "where", f"name={KINDS_TENANTS[1]}",
        f"account={KINDS_ACCOUNT}", "set", "qos=normal", "defaultqos=normal")  # fmt: skip

    check = cluster_setup(*KINDS_SCRATCH, *kinds, "--check")

    assert check.returncode == 1, check.stdout + check.stderr
    items = said(check.stdout)
    assert items[f"slurm qos {KINDS_MARKET}"] == [
        "would change: GraceTime 5 -> 45 s, PreemptMode cancel -> requeue"
    ]
    assert items["slurm qos normal"] == [f"would change: preempts {KINDS_MARKET}"]
    assert items[f"slurm qos of account {KINDS_ACCOUNT}"] == [
        f"would change: QOS of {KINDS_TENANTS[1]} -> {KINDS_MARKET}, their default"
    ]
    assert qos_rows(KINDS_MARKET)[KINDS_MARKET][:3] == ["0", "00:00:05", "cancel"]

    repair = cluster_setup(*KINDS_SCRATCH, *kinds)

    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert qos_rows(KINDS_MARKET) == {KINDS_MARKET: ["0", "00:00:45", "requeue", ""]}
    assert KINDS_MARKET in preempted_by("normal")
    assert sacctmgr_rows(
        "show", "assoc", *where, f"user={KINDS_TENANTS[1]}", "format=qos,defaultqos"
    ) == [[KINDS_MARKET, KINDS_MARKET]]


@pytest.mark.slurm
def test_an_owner_qos_that_does_not_exist_fails_and_nothing_of_preemption_is_made(
    testcluster, kinds_scratch_removed
):
    done = cluster_setup(
        *KINDS_SCRATCH, "--preemption", "normal,cs-no-such-qos", "--market-qos", KINDS_MARKET
    )

    assert done.returncode == 3, done.stdout + done.stderr
    assert (
        "FAILED: slurm qos cs-no-such-qos: there is no such QOS: --preemption names the QOS "
        "your own users' jobs run under (sacctmgr show assoc format=account,user,qos; often "
        "normal); nothing of preemption was made"
    ) in done.stderr
    assert qos_rows(KINDS_MARKET) == {}
    assert KINDS_MARKET not in preempted_by("normal")


# --- Drift on the Slurm side, on the test cluster's managed pool --------------------------------

# A team's account as the platform names it (hpc.slurm.accounts.account_name_for).
LEASE_ACCOUNT = "cs-00000000d71f7000"


def slurm_users(cluster_name: str, names: list[str]) -> list[list[str]]:
    return sorted(
        sacctmgr_rows(
            "show", "user", "withassoc", "where", f"name={','.join(names)}",
            f"cluster={cluster_name}",
            "format=user,defaultaccount,account,partition,qos,defaultqos,maxjobs,adminlevel",
        )
    )  # fmt: skip


@pytest.fixture
def managed_pool_put_back(testcluster) -> Iterator[None]:
    """The test cluster's managed pool afterwards exactly as it was, after a failure too: the
    lease the test makes undone as the platform would (tenant_leave), whatever is left
    repaired by cluster-setup itself."""
    pool = testcluster.tenant_pool("managed")
    tenants = [tenant.user for tenant in pool.tenants]
    cluster = testcluster.cluster_name
    before = slurm_users(cluster, tenants)
    yield
    where = ["where", "name=cs-tenant-03", f"cluster={cluster}"]
    run("sacctmgr", "-i", "modify", "user", *where, "set", f"defaultaccount={pool.idle_account}",
        check=False)  # fmt: skip
    run("sacctmgr", "-i", "remove", "user", *where, f"account={LEASE_ACCOUNT}", check=False)
    run("sacctmgr", "-i", "remove", "user", "where", "name=cs-tenant-04",
        f"account={testcluster.owner.account}", check=False)  # fmt: skip
    if slurm_users(cluster, tenants) != before:
        cluster_setup(*pool_arguments(testcluster, "managed"))
    # The account only once nobody is in it (see managed_scratch_removed).
    left = sacctmgr_rows("show", "assoc", "where", f"account={LEASE_ACCOUNT}", "format=user")
    assert not [row for row in left if row[0]], f"users left in {LEASE_ACCOUNT}: {left}"
    run("sacctmgr", "-i", "remove", "account", "where", f"name={LEASE_ACCOUNT}", check=False)
    assert slurm_users(cluster, tenants) == before


@pytest.mark.slurm
def test_associations_changed_by_hand_are_named_by_check_and_put_back_and_a_lease_is_left(
    testcluster, managed_pool_put_back
):
    cluster, owner = testcluster.cluster_name, testcluster.owner.account
    idle = testcluster.tenant_pool("managed").idle_account
    tenants = [tenant.user for tenant in testcluster.tenant_pool("managed").tenants]
    # The pool's options without the two kinds of capacity, which this test leaves alone: each
    # kind costs every run more sacctmgr reads.
    arguments = pool_arguments(testcluster, "managed")
    arguments = arguments[: arguments.index("--preemption")]

    def sacctmgr(*words: str) -> None:
        run("sacctmgr", "-i", *words)

    # Given a lease as the platform makes one (tenant_join): cs-tenant-03 in a team's account,
    # its default there.
    sacctmgr("add", "account", LEASE_ACCOUNT, f"cluster={cluster}")
    sacctmgr("add", "user", "cs-tenant-03", f"account={LEASE_ACCOUNT}", f"cluster={cluster}")
    sacctmgr("modify", "user", "where", "name=cs-tenant-03", f"cluster={cluster}", "set",
             f"defaultaccount={LEASE_ACCOUNT}")  # fmt: skip
    # And what an owner's other admin did by hand: cs-tenant-02's only association deleted (Slurm
    # forgets the user), the leased cs-tenant-03's way back to the idle account deleted,
    # cs-tenant-04 left in the owner's account with no default account at all, cs-tenant-01
    # given jobs, the market QOS and operator rights.
    sacctmgr("delete", "user", "cs-tenant-02", f"account={idle}")
    sacctmgr("delete", "user", "cs-tenant-03", f"account={idle}")
    sacctmgr("add", "user", "cs-tenant-04", f"account={owner}", f"cluster={cluster}")
    sacctmgr("delete", "user", "cs-tenant-04", f"account={idle}")
    first = ["where", "name=cs-tenant-01", f"account={idle}", f"cluster={cluster}"]
    sacctmgr("modify", "user", *first, "set", "maxjobs=10", f"qos=normal,{testcluster.market_qos}")
    sacctmgr("modify", "user", "where", "name=cs-tenant-01", "set", "adminlevel=operator")
    drifted = slurm_users(cluster, tenants)
    assert [row[:3] for row in drifted if row[0] == "cs-tenant-04"] == [["cs-tenant-04", "", owner]]

    check = cluster_setup(*arguments, "--check")

    assert check.returncode == 1, check.stdout + check.stderr
    items = said(check.stdout)
    assert items["slurm user cs-tenant-01"] == [
        f"would change: MaxJobs 10 -> 0 in {idle}",
        f"would change: QOS {testcluster.market_qos},normal (default none) -> normal "
        "(default none), the account's",
        "would change: AdminLevel Operator -> None (a team's code must not manage Slurm)",
    ]
    assert items["slurm user cs-tenant-02"] == [f"would create (account {idle}, its default)"]
    joined = f"would change: associated with {idle} (its MaxJobs=0: an idle tenant runs nothing)"
    assert items["slurm user cs-tenant-03"] == [joined]
    assert items["slurm user cs-tenant-04"] == [
        joined,
        f"would change: default account none -> {idle}",
    ]
    assert (
        f"warning: slurm user cs-tenant-04: also associated with {owner}: its jobs may be "
        "charged there"
    ) in check.stderr
    assert slurm_users(cluster, tenants) == drifted

    repair = cluster_setup(*arguments)

    assert repair.returncode == 0, repair.stdout + repair.stderr
    idle_row = [idle, "", "normal", "", "0", "None"]
    assert slurm_users(cluster, tenants) == [
        ["cs-tenant-01", idle, *idle_row],
        ["cs-tenant-02", idle, *idle_row],
        ["cs-tenant-03", LEASE_ACCOUNT, *idle_row],
        ["cs-tenant-03", LEASE_ACCOUNT, LEASE_ACCOUNT, "", "normal", "", "", "None"],
        ["cs-tenant-04", idle, *idle_row],
        ["cs-tenant-04", idle, owner, "", "normal", "", "", "None"],
    ]
    # The lease is the platform's: its account and the default there were left as they were.
    assert said(repair.stdout)["slurm user cs-tenant-03"] == [
        joined.replace("would change", "changed")
    ]
