from django.urls import path

from scheduler_bridge.api import jobs as api
from scheduler_bridge.api import sweeps

urlpatterns = [
    path("jobs/", api.JobListCreateApi.as_view(), name="api-jobs"),
    path("jobs/quote/", api.JobQuoteApi.as_view(), name="api-job-quote"),
    path("jobs/<uuid:job_id>/", api.JobDetailApi.as_view(), name="api-job"),
    path("jobs/<uuid:job_id>/files/", api.JobFilesApi.as_view(), name="api-job-files"),
    path(
        "jobs/<uuid:job_id>/files/<path:name>",
        api.JobFileDownloadApi.as_view(),
        name="api-job-file",
    ),
    path(
        "jobs/<uuid:job_id>/files.tar.gz",
        api.JobFilesArchiveApi.as_view(),
        name="api-job-files-archive",
    ),
    path("jobs/<uuid:job_id>/cancel/", api.JobCancelApi.as_view(), name="api-job-cancel"),
    path("jobs/<uuid:job_id>/output/", api.JobOutputApi.as_view(), name="api-job-output"),
    path("sweeps/", sweeps.SweepListCreateApi.as_view(), name="api-sweeps"),
    path("sweeps/<uuid:sweep_id>/", sweeps.SweepDetailApi.as_view(), name="api-sweep"),
    path(
        "sweeps/<uuid:sweep_id>/retry-failed/",
        sweeps.SweepRetryFailedApi.as_view(),
        name="api-sweep-retry-failed",
    ),
    path(
        "sweeps/<uuid:sweep_id>/results/",
        sweeps.SweepResultsApi.as_view(),
        name="api-sweep-results",
    ),
    path(
        "sweeps/<uuid:sweep_id>/results.csv",
        sweeps.SweepResultsCsvApi.as_view(),
        name="api-sweep-results-csv",
    ),
    path("organizations/<uuid:organization_id>/usage/", api.UsageApi.as_view(), name="api-usage"),
    path(
        "organizations/<uuid:organization_id>/efficiency/",
        api.EfficiencyApi.as_view(),
        name="api-efficiency",
    ),
    path("job-templates/", api.JobTemplateListApi.as_view(), name="api-job-templates"),
]
