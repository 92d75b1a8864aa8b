"""The errors of jobs. Codes are part of the public contract (API.md)."""

from computeshare.errors import ApplicationError, Conflict, PaymentRequired


class SbatchDirectiveNotAllowed(ApplicationError):
    code = "sbatch_directive_not_allowed"
    default_detail = (
        "The script carries #SBATCH (or #PBS, #BSUB) lines. Resources are set by the job's "
        "fields (time_limit_minutes, cpus_per_task, ntasks, nodes, gpus, array); remove those "
        "lines."
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
