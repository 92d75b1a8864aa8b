"""The errors of jobs. Codes are part of the public contract (docs/api.md, Error codes)."""

from typing import Any

from computeshare.errors import ApplicationError, Conflict, PaymentRequired
from hpc.slurm.directives import SLURM_VERSION, DirectiveRefused


class ScriptRefused(ApplicationError):
    """A script, or one of its `#SBATCH` lines, refused as sbatch refuses it (or as the
    platform does: `sbatch_directive_not_supported`). `extra`: `line` (the script's line),
    `option` (as written), `reason` (sbatch's own words, or the platform's)."""


class ScriptNotBatchScript(ScriptRefused):
    code = "script_not_a_batch_script"
    default_detail = "sbatch would not take this script."


class ScriptDosLineBreaks(ScriptRefused):
    code = "script_dos_line_breaks"
    default_detail = "The script has DOS line breaks (\\r\\n); sbatch takes Unix ones (\\n)."


class SbatchDirectiveNotAllowed(ScriptRefused):
    code = "sbatch_directive_not_allowed"
    default_detail = (
        "The script carries #PBS or #BSUB lines, another scheduler's options: write them as "
        "#SBATCH lines."
    )


class SbatchDirectiveUnknown(ScriptRefused):
    code = "sbatch_directive_unknown"
    default_detail = f"An #SBATCH line gives an option sbatch {SLURM_VERSION} does not have."


class SbatchDirectiveRemoved(ScriptRefused):
    code = "sbatch_directive_removed"
    default_detail = f"An #SBATCH line gives an option sbatch {SLURM_VERSION} no longer has."


class SbatchDirectiveInvalid(ScriptRefused):
    code = "sbatch_directive_invalid"
    default_detail = "sbatch cannot read an #SBATCH line of the script."


class SbatchDirectiveConflict(ScriptRefused):
    code = "sbatch_directive_conflict"
    default_detail = "Two #SBATCH options of the script exclude each other."


class SbatchDirectiveNotSupported(ScriptRefused):
    code = "sbatch_directive_not_supported"
    default_detail = "The platform cannot honour an #SBATCH option of the script."


class SbatchExclusiveNotCovered(ScriptRefused):
    code = "sbatch_exclusive_not_covered"
    default_detail = (
        "--exclusive takes whole nodes, and this allocation does not cover a whole node for "
        "the job's time."
    )


class SbatchDependencyNotAllowed(ScriptRefused):
    code = "sbatch_dependency_not_allowed"
    default_detail = (
        "--dependency may name only the team's own jobs on this cluster, by their ids here or "
        "their Slurm ids."
    )


_REFUSALS: dict[str, type[ScriptRefused]] = {
    "not_batch_script": ScriptNotBatchScript,
    "dos_line_breaks": ScriptDosLineBreaks,
    "other_directives": SbatchDirectiveNotAllowed,
    "unknown": SbatchDirectiveUnknown,
    "removed": SbatchDirectiveRemoved,
    "invalid": SbatchDirectiveInvalid,
    "conflict": SbatchDirectiveConflict,
    "not_supported": SbatchDirectiveNotSupported,
}


def script_refused(refusal: DirectiveRefused, **extra: Any) -> ScriptRefused:
    """The API's error for a refusal of the script's reading: its code, the line, the option
    and the reason."""
    error_class = _REFUSALS[refusal.kind]
    return error_class(
        f"Line {refusal.line}: {refusal.reason}",
        extra={"line": refusal.line, "option": refusal.option, "reason": refusal.reason, **extra},
    )


class AllocationNotActive(Conflict):
    code = "allocation_not_active"
    default_detail = "The allocation's window is not open: jobs run only during the window."


class AllocationExhausted(PaymentRequired):
    code = "allocation_exhausted"
    default_detail = "The allocation has too few unreserved units left for this job."


class ClusterNotAvailable(Conflict):
    code = "cluster_not_available"
    default_detail = "The allocation's cluster does not take jobs now."


class JobAlreadyEnded(Conflict):
    code = "job_already_ended"
    default_detail = "The job has already ended."


class OutputUnavailable(ApplicationError):
    status_code = 502
    code = "cluster_unreachable"
    default_detail = "The job's output could not be read from the cluster."


class OutputNotReadable(Conflict):
    code = "output_not_readable"
    default_detail = (
        "The job replaced this output file by a symbolic link, a FIFO or another file's hard "
        "link: the platform does not read through those (`extra.reason` says which)."
    )


class OutputNotKept(Conflict):
    code = "output_not_kept"
    default_detail = (
        "This job was submitted on the cluster by one of the team's own jobs: its output went "
        "where that job sent it, not to a folder the platform keeps."
    )


class InputFileNameInvalid(ApplicationError):
    code = "input_file_name_invalid"
    default_detail = "An input file's name is not a plain path inside the job's folder."


class TooManyInputFiles(ApplicationError):
    code = "too_many_input_files"
    default_detail = "The job has more input files than allowed."


class InputFilesTooLarge(ApplicationError):
    status_code = 413
    code = "input_files_too_large"
    default_detail = "The input files are larger than allowed."


class SweepTableEmpty(ApplicationError):
    code = "sweep_table_empty"
    default_detail = (
        "The table is empty: a sweep needs a header of column names and one row per task."
    )


class SweepHeaderInvalid(ApplicationError):
    code = "sweep_header_invalid"
    default_detail = "A column name cannot be an environment variable's name."


class SweepRowRagged(ApplicationError):
    code = "sweep_row_ragged"
    default_detail = "A row does not have one value per column."


class SweepTooManyRows(ApplicationError):
    code = "sweep_too_many_rows"
    default_detail = "The table has more rows than a sweep runs."


class SweepValueInvalid(ApplicationError):
    code = "sweep_value_invalid"
    default_detail = "A value of the table cannot be given to a task."


class SweepTableTooLarge(ApplicationError):
    code = "sweep_table_too_large"
    default_detail = "The table is larger than a sweep takes."


class SweepStillRunning(Conflict):
    code = "sweep_still_running"
    default_detail = (
        "The sweep has not ended: its failed rows are retried once every row has ended."
    )


class SweepNothingToRetry(Conflict):
    code = "sweep_nothing_to_retry"
    default_detail = "No row of the sweep failed."
