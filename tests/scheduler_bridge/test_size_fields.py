"""The API's and the pages' size fields take their bounds from the one declaration
(`hpc.sizes.LIMITS`)."""

import pytest

from hpc import sizes
from scheduler_bridge.forms.jobs import JobSizesForm
from scheduler_bridge.forms.sweeps import SweepSubmitForm
from scheduler_bridge.serializers.jobs import JobCreateSerializer
from scheduler_bridge.serializers.sweeps import SweepCreateSerializer


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        (JobCreateSerializer().fields, list(sizes.LIMITS)),
        (JobSizesForm(has_gpus=True).fields, list(sizes.LIMITS)),
        (SweepCreateSerializer().fields, ["time_limit_minutes", "cpus_per_task"]),
        (SweepSubmitForm().fields, ["time_limit_minutes", "cpus_per_task"]),
    ],
)
def test_each_size_field_has_the_limits_bounds(fields, names):
    for name in names:
        limit = sizes.LIMITS[name]
        assert (fields[name].min_value, fields[name].max_value) == (limit.minimum, limit.maximum)


def test_a_sweeps_concurrency_is_the_arrays_throttle():
    limit = sizes.ARRAY_THROTTLE
    for fields in (SweepCreateSerializer().fields, SweepSubmitForm().fields):
        bounds = (fields["concurrency"].min_value, fields["concurrency"].max_value)
        assert bounds == (limit.minimum, limit.maximum)
