from django.urls import path

from scheduler_bridge import api

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
    path("organizations/<uuid:organization_id>/usage/", api.UsageApi.as_view(), name="api-usage"),
]
