"""docker-compose.yml as `make compose-check` needs it, read on every run of the suite: the
check itself needs Docker and about five minutes, so it is not part of CI, and a change
elsewhere once broke it unseen (issue 33, item 4)."""

from pathlib import Path

import yaml

COMPOSE_FILE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def test_the_stand_in_slurm_container_may_hide_tenants_processes_as_verification_requires():
    """The verification refuses a cluster whose tenants can list each other's processes, and
    cluster-setup hides them by remounting /proc with hidepid: in a container that takes
    CAP_SYS_ADMIN and no AppArmor profile that denies mounts (without them, compose-check
    stopped at 'verify the cluster')."""
    slurm = yaml.safe_load(COMPOSE_FILE.read_text())["services"]["slurm"]
    assert "SYS_ADMIN" in slurm.get("cap_add", [])
    assert "apparmor=unconfined" in slurm.get("security_opt", [])
