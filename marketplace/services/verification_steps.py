"""The steps of a cluster's verification as the owner follows them: each check is a step that
runs, then passes, fails with a reason the owner can act on, or passes with a warning; a step of
one kind of capacity may fail while the verification goes on (`Steps.check_kind`). The checks
themselves are in `verification_checks`, and `verification` runs them and stores what they read."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

from hpc.errors import AuthenticationRefused, BridgeError

PASSED = "passed"
FAILED = "failed"
WARNING = "warning"
RUNNING = "running"


@dataclass
class Step:
    """One check as the owner reads it. Its status is a report of what the check found, kept in
    the verification's `steps` (JSON), not a model's state: it changes through `end`, not
    through `computeshare/states.py`."""

    key: str
    title: str
    status: str = RUNNING
    detail: str = ""

    def end(self, status: str, detail: str | None = None) -> None:
        """Ends the step as `status` (passed, failed or warning), with `detail` when given."""
        self.status = status
        if detail is not None:
            self.detail = detail


class CheckFailed(Exception):
    """A step failed: the verification stops there, with the step's reason."""


@dataclass
class Steps:
    """The steps of one verification, reported to `on_change` as they start and end."""

    on_change: Callable[[list[dict[str, str]]], None] | None = None
    steps: list[Step] = field(default_factory=list)
    # The steps of a kind of capacity that failed while the other kind can be sold.
    kind_failures: list[str] = field(default_factory=list)

    def as_list(self) -> list[dict[str, str]]:
        return [asdict(step) for step in self.steps]

    @contextmanager
    def check(self, key: str, title: str) -> Iterator[Step]:
        """Runs one step: passed when its block ends, failed on `CheckFailed` (which goes on,
        to stop the verification) or on a bridge error (re-raised as is)."""
        step = Step(key, title)
        self.steps.append(step)
        self._changed()
        try:
            yield step
        except CheckFailed as failure:
            step.end(FAILED, str(failure))
            self._changed()
            raise
        except (BridgeError, ValueError) as error:
            step.end(FAILED, step_reason(error))
            self._changed()
            raise
        if step.status == RUNNING:
            step.end(PASSED)
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self.as_list())

    @contextmanager
    def check_kind(self, key: str, title: str) -> Iterator[Step]:
        """Runs the step of one kind of capacity: like `check`, except that a `CheckFailed`
        marks the step failed and the verification goes on (the cluster may sell the other
        kind). `failed` passes over such a step until `kind_failures_count` makes it count."""
        try:
            with self.check(key, title) as step:
                yield step
        except CheckFailed:
            self.kind_failures.append(key)

    def kind_failures_count(self) -> None:
        """The steps of the kinds that failed now fail the verification (neither kind can be
        sold)."""
        self.kind_failures.clear()

    @property
    def failed(self) -> Step | None:
        return next(
            (
                step
                for step in self.steps
                if step.status == FAILED and step.key not in self.kind_failures
            ),
            None,
        )

    def step(self, key: str) -> Step | None:
        return next((step for step in self.steps if step.key == key), None)


def step_reason(error: BaseException) -> str:
    """What a failed step says of an error of the bridge (or a value it could not read)."""
    reason = str(error) or type(error).__name__
    if isinstance(error, AuthenticationRefused):
        reason = f"the service user's key was refused: {reason}"
    return reason
