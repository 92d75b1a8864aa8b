"""Why a job or task is in its state, in words: Slurm's reason codes (`NonZeroExitCode`,
`Resources`, `JobHeldUser`…, as squeue's %r and sacct's Reason give them, and as the local
backend writes them) are never shown as they are. The platform's own reasons are already
sentences ("Waiting to reach the cluster: …", "Cancelled by mia") and are shown unchanged."""

from __future__ import annotations

import re

# Slurm's codes, and the local backend's (the same names), by what they say.
KNOWN = {
    "TimeLimit": "Reached its time limit",
    "Resources": "Waiting for cores or nodes to free up",
    "Priority": "Waiting behind jobs of higher priority",
    "Dependency": "Waiting for the jobs it depends on",
    "DependencyNeverSatisfied": "Will not start: a job it depends on did not end as required",
    "BeginTime": "Waiting for its start time",
    "JobHeldUser": "Held by its submitter",
    "JobHeldAdmin": "Held by the cluster's administrators",
    "JobArrayTaskLimit": "Waiting: the array runs at most its throttle of tasks at once",
    "ReqNodeNotAvail": "Waiting: a node it needs is not available",
    "NodeDown": "A node it needs is down",
    "NodeFail": "A node it ran on failed",
    "PartitionDown": "Waiting: the partition is down",
    "PartitionInactive": "Waiting: the partition is inactive",
    "PartitionTimeLimit": "Waiting: its time limit is over the partition's",
    "PartitionNodeLimit": "Waiting: it asks for more nodes than the partition allows",
    "Reservation": "Waiting for its reservation to begin",
    "ReservationDeleted": "Will not start: its reservation was deleted",
    "Requeued": "Queued again by Slurm",
    "Prolog": "Starting: the cluster's prolog is running",
    "OutOfMemory": "Ran out of memory",
    "Preempted": "Preempted: the cluster took its cores back",
    "BadConstraints": "Will not start: the cluster cannot meet what it asks for",
    "InvalidAccount": "Will not start: its Slurm account is not valid",
    "InvalidQOS": "Will not start: its QOS is not valid",
    "launch failed requeued held": "Failed to launch and is held",
    "None": "",
}

_CODE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)(?:\s*[,(].*)?$")
_LIMIT = re.compile(r"^(Assoc|QOS)\w*Limit")
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def reason_text(reason: str, exit_code: int | None = None) -> str:
    """`reason` in words; `exit_code` says with which code a `NonZeroExitCode` exited."""
    reason = reason.strip()
    if not reason:
        return ""
    if reason in KNOWN:
        return KNOWN[reason]
    found = _CODE.match(reason)
    if found is None:
        return reason  # the platform's own sentence
    code = found.group(1)
    if code == "NonZeroExitCode":
        return (
            "Exited with a non-zero code" if exit_code is None else f"Exited with code {exit_code}"
        )
    if code in KNOWN:
        return KNOWN[code]
    if _LIMIT.match(code):
        return f"Waiting: a limit of its Slurm account or QOS is reached ({_words(code)})"
    if code == reason and len(_WORD.findall(code)) > 1:
        return f"Slurm says: {_words(code)}"
    return reason


def _words(code: str) -> str:
    """`AssocGrpCpuLimit` as "assoc grp cpu limit"."""
    return " ".join(word.lower() for word in _WORD.findall(code))
