from django.urls import path

from scheduler_bridge import api

urlpatterns = [
    path("jobs/", api.JobListCreateApi.as_view(), name="api-jobs"),
    path("jobs/<uuid:job_id>/", api.JobDetailApi.as_view(), name="api-job"),
    path("jobs/<uuid:job_id>/cancel/", api.JobCancelApi.as_view(), name="api-job-cancel"),
    path("jobs/<uuid:job_id>/output/", api.JobOutputApi.as_view(), name="api-job-output"),
    path("organizations/<uuid:organization_id>/usage/", api.UsageApi.as_view(), name="api-usage"),
]
