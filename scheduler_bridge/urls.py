"""The job pages (the HTML views live in scheduler_bridge/views/: job_submit.py, jobs.py,
sweeps.py)."""

from django.urls import path

from scheduler_bridge.views import job_submit, sweeps
from scheduler_bridge.views import jobs as views

urlpatterns = [
    path(
        "allocations/<uuid:allocation_id>/jobs/new/",
        job_submit.JobSubmitView.as_view(),
        name="job-submit",
    ),
    path(
        "allocations/<uuid:allocation_id>/jobs/estimate/",
        job_submit.JobEstimateView.as_view(),
        name="job-estimate",
    ),
    path(
        "allocations/<uuid:allocation_id>/jobs/directives/",
        job_submit.JobDirectivesView.as_view(),
        name="job-directives",
    ),
    path(
        "allocations/<uuid:allocation_id>/jobs/quote/",
        job_submit.JobQuoteView.as_view(),
        name="job-quote",
    ),
    path(
        "organizations/<uuid:organization_id>/efficiency/",
        views.EfficiencyReportView.as_view(),
        name="organization-efficiency",
    ),
    path("jobs/", views.JobListView.as_view(), name="job-list"),
    path("jobs/new/", job_submit.JobNewView.as_view(), name="job-new"),
    path("jobs/rows/", views.JobRowsView.as_view(), name="job-list-rows"),
    path("jobs/<uuid:job_id>/", views.JobDetailView.as_view(), name="job-detail"),
    path("jobs/<uuid:job_id>/status/", views.JobStatusView.as_view(), name="job-status"),
    path("jobs/<uuid:job_id>/output/", views.JobOutputView.as_view(), name="job-output"),
    path(
        "jobs/<uuid:job_id>/output/download/",
        views.JobOutputDownloadView.as_view(),
        name="job-output-download",
    ),
    path("jobs/<uuid:job_id>/cancel/", views.JobCancelView.as_view(), name="job-cancel"),
    path("jobs/<uuid:job_id>/resubmit/", views.JobResubmitView.as_view(), name="job-resubmit"),
    path("jobs/<uuid:job_id>/files/", views.JobFilesView.as_view(), name="job-files"),
    path(
        "jobs/<uuid:job_id>/files/<path:name>",
        views.JobFileDownloadView.as_view(),
        name="job-file",
    ),
    path(
        "jobs/<uuid:job_id>/files.tar.gz",
        views.JobFilesArchiveView.as_view(),
        name="job-files-archive",
    ),
    path(
        "allocations/<uuid:allocation_id>/sweeps/new/",
        sweeps.SweepSubmitView.as_view(),
        name="sweep-submit",
    ),
    path("sweeps/", sweeps.SweepListView.as_view(), name="sweep-list"),
    path("sweeps/<uuid:sweep_id>/", sweeps.SweepDetailView.as_view(), name="sweep-detail"),
    path(
        "sweeps/<uuid:sweep_id>/status/",
        sweeps.SweepStatusView.as_view(),
        name="sweep-status",
    ),
    path(
        "sweeps/<uuid:sweep_id>/retry-failed/",
        sweeps.SweepRetryFailedView.as_view(),
        name="sweep-retry-failed",
    ),
    path(
        "sweeps/<uuid:sweep_id>/results.csv",
        sweeps.SweepResultsCsvView.as_view(),
        name="sweep-results-csv",
    ),
]
