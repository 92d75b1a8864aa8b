"""REST endpoints of clusters and their pools of tenant accounts (docs/api.md). Clusters
are public to anyone signed in; their connection, verifications and pool are their
owners'."""

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from computeshare.api import ErrorSerializer, idempotent, paginated, paginated_response, validated
from computeshare.authentication import request_user
from computeshare.errors import PermissionDenied, ValidationFailed
from computeshare.ids import ID_PREFIX_PARAMETER
from computeshare.openapi import ERRORS, IDEMPOTENCY_KEY, LIST_ERRORS, PAGE_PARAMETERS
from marketplace import selectors, services
from marketplace.api.access import admin_named_in_body, owner_membership
from marketplace.serializers.clusters import (
    ClusterConnectionSerializer,
    ClusterCreateSerializer,
    ClusterDetailSerializer,
    ClusterFilterSerializer,
    ClusterSerializer,
    TenantAccountSerializer,
)


def _cluster_response(request: Request, cluster_uuid: Any, code: int = 200) -> Response:
    cluster = selectors.cluster_get_for_user(request_user(request), cluster_uuid)
    return Response(ClusterSerializer(cluster).data, status=code)


def _cluster_detail_response(
    request: Request, cluster_uuid: Any, code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """One cluster; to its owners with its latest verification."""
    cluster = selectors.cluster_get_for_user(request_user(request), cluster_uuid)
    return Response(ClusterDetailSerializer(cluster).data, status=code, headers=headers)


class ClusterListCreateApi(APIView):
    @extend_schema(
        operation_id="clusters_list",
        responses={200: paginated(ClusterSerializer), **LIST_ERRORS},
        parameters=[*PAGE_PARAMETERS, ID_PREFIX_PARAMETER],
        description=(
            "Every cluster with its partitions and `tenant_accounts`: how many teams it serves "
            "at once (`total`) and how many more it can take now (`free`). The owners also see "
            "their connection and pool settings."
        ),
    )
    def get(self, request: Request) -> Response:
        filters = validated(ClusterFilterSerializer, request.query_params)
        clusters = selectors.cluster_list_for_user(
            request_user(request), id_prefix=filters.get("id_prefix")
        )
        return paginated_response(request, self, clusters, ClusterSerializer)

    @extend_schema(
        operation_id="clusters_create",
        request=ClusterCreateSerializer,
        responses={201: ClusterSerializer, **ERRORS},
        parameters=[IDEMPOTENCY_KEY],
        description=(
            "Registers a cluster, `unverified`, with its host key pinned. `tenant_group` names "
            "the Unix group of the tenant accounts scripts/cluster-setup made on it (each team "
            "works as one of them); `sftp_server` the SFTP server program of its sshd_config."
        ),
    )
    def post(self, request: Request) -> Response:
        def create() -> Response:
            actor = admin_named_in_body(request, "register clusters")
            data = validated(ClusterCreateSerializer, request.data)
            data.pop("organization")
            cluster = services.cluster_create(actor=actor, **data)
            return _cluster_response(request, cluster.uuid, 201)

        return idempotent(request, create)


class ClusterDetailApi(APIView):
    @extend_schema(
        operation_id="clusters_retrieve",
        responses={200: ClusterDetailSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
        description=(
            "A cluster. Its owners also see its latest `verification`: `status` `running` while "
            "a worker verifies it, with the steps as they run, then `succeeded` or `failed` "
            "with the outcome's `code` and `detail`."
        ),
    )
    def get(self, request: Request, cluster_id: str) -> Response:
        return _cluster_detail_response(request, cluster_id)

    @extend_schema(
        operation_id="clusters_partial_update",
        request=ClusterConnectionSerializer,
        responses={200: ClusterDetailSerializer, **ERRORS},
        description=(
            "The owners change the connection settings (for example a rotated host key) or the "
            "pool's (`tenant_group`, `sftp_server`); the cluster is `unverified` until verified "
            "again. A host that resolves to an address the platform does not connect to "
            "(loopback, private, link-local, metadata...) is 400 `address_not_allowed`."
        ),
    )
    def patch(self, request: Request, cluster_id: str) -> Response:
        cluster = selectors.cluster_get(cluster_id)
        actor = owner_membership(request, cluster)
        if not actor.is_admin:
            raise PermissionDenied("Only an admin of the owning organization can do this.")
        changes = validated(ClusterConnectionSerializer, request.data)
        if unknown := set(request.data) - set(ClusterConnectionSerializer().fields):
            raise ValidationFailed(
                fields={name: ["Cannot be changed."] for name in sorted(unknown)}
            )
        services.cluster_connection_update(actor=actor, cluster=cluster, **changes)
        return _cluster_detail_response(request, cluster_id)


class ClusterVerifyApi(APIView):
    @extend_schema(
        operation_id="clusters_verify",
        request=None,
        responses={202: ClusterDetailSerializer, **ERRORS, 429: ErrorSerializer},
        description=(
            "Queues a verification in a worker and answers at once: 202 with the cluster and "
            "its `verification` (`status: running`), and `Location`, the cluster, whose GET "
            "follows it. A verification already running is returned, not queued again. The "
            "worker checks every capability the platform will use, as the steps of "
            "`verification.steps`, in order: `connect` (with the pinned host key), `partitions` "
            "(sinfo), `queries` (squeue and sacct), `visibility` (the service user sees every "
            "tenant's jobs), in managed mode `operator` and `limits` (GrpTRESMins on QOS that "
            "never decay), `pool` (the members of `tenant_group`), `sudo` (to each tenant "
            "without a password and to nobody else), `homes` (only their owner reads them), "
            "`sftp` (as a tenant), in managed mode `idle` (idle tenants sit in an account that "
            "runs nothing), `sbatch` (a `--test-only` submission as a tenant), `gpus` "
            "(accounting records GPUs), `proctrack` (Slurm ends every process of a job), "
            "`nodes` (a job as a tenant on each compute node: the login node's uid, the shared "
            "home, no other users' processes; a node no job reached is a warning), "
            "`preemption` and `reservations` (the two kinds of capacity; either may fail while "
            "the other passes). "
            "Each step is `running`, `passed`, `failed` or `warning` (the cluster is usable; "
            "`detail` says what is at risk). When all pass, the partitions and the pool are "
            "stored, the cluster is `online` and the verification `succeeded`. Otherwise it "
            "`failed` with its `code`: `cluster_unreachable` (no SSH connection could be "
            "opened: one reason whatever kept it from opening), `host_key_mismatch` (the "
            "cluster is marked so), `cluster_misconfigured` (it answered, but the check "
            "`failed_step` failed). Refused at once: 409 `cluster_suspended`; 429 `throttled` "
            "(with `Retry-After`) past the organization's `CLUSTER_VERIFY_RATE`."
        ),
    )
    def post(self, request: Request, cluster_id: str) -> Response:
        cluster = selectors.cluster_get(cluster_id)
        actor = owner_membership(request, cluster)
        services.cluster_verification_start(actor=actor, cluster=cluster)
        location = reverse("api-cluster", args=[cluster.uuid])
        return _cluster_detail_response(
            request,
            cluster_id,
            status.HTTP_202_ACCEPTED,
            headers={"Location": location},
        )


# --- Tenant accounts: the cluster's owners --------------------------------------------------------


class TenantAccountListApi(APIView):
    @extend_schema(
        operation_id="clusters_tenant_accounts_list",
        responses={200: paginated(TenantAccountSerializer), **LIST_ERRORS, 403: ErrorSerializer},
        parameters=PAGE_PARAMETERS,
        description=(
            "The cluster's pool of tenant accounts, by user name, for its owners (members of "
            "its organization; 403 for anyone else): each account's `status` (`available`, "
            "`leased`, `quarantined` when a scrub left something behind, with the reason in "
            "`status_detail`, `retired` when it left the tenant group), the organization whose "
            "lease holds it, and when it was last scrubbed."
        ),
    )
    def get(self, request: Request, cluster_id: str) -> Response:
        cluster = selectors.cluster_get(cluster_id)
        owner_membership(request, cluster)
        return paginated_response(
            request, self, selectors.tenant_account_list(cluster), TenantAccountSerializer
        )


class TenantAccountScrubApi(APIView):
    @extend_schema(
        operation_id="clusters_tenant_accounts_scrub",
        request=None,
        responses={202: TenantAccountSerializer, **ERRORS},
        description=(
            "An admin of the cluster's owners, having looked at a quarantined account (and "
            "perhaps cleaned it by hand), asks for another scrub: a worker cancels the "
            "tenant's jobs, ends its processes and removes its files, and returns the account "
            "to the pool if nothing is left (it stays quarantined, with the new reason, "
            "otherwise). 202 with the account as it is now; 409 "
            "`tenant_account_not_quarantined` for an account that is not quarantined; 404 for "
            "a user name not in the cluster's pool."
        ),
    )
    def post(self, request: Request, cluster_id: str, username: str) -> Response:
        cluster = selectors.cluster_get(cluster_id)
        actor = owner_membership(request, cluster)
        account = selectors.tenant_account_get(cluster, username)
        if not actor.is_admin:
            raise PermissionDenied("Only an admin of the cluster's owners can do this.")
        services.tenant_account_rescrub(actor=actor, account=account)
        return Response(
            TenantAccountSerializer(selectors.tenant_account_get(cluster, username)).data,
            status=status.HTTP_202_ACCEPTED,
        )
