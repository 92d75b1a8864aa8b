"""A cluster's card is drawn from the cluster, read first, and its latest verification, read
after it. The worker commits a verified cluster's status before its verification's end, so a
verification that ends between the two reads must not leave the card showing the cluster as it
was: the finished card polls no more (seen once in CI, "Unverified" beside "Online: ...")."""

from datetime import timedelta

import pytest
from django.utils import timezone

from marketplace.models import Cluster, ClusterVerification
from marketplace.views.clusters import cluster_card_contexts
from tests.factories import ClusterFactory

pytestmark = pytest.mark.django_db


def test_a_card_read_while_its_verification_ends_shows_the_cluster_as_verified():
    cluster = ClusterFactory(status=Cluster.Status.UNVERIFIED)
    read_before = Cluster.objects.get(pk=cluster.pk)
    # The worker's two commits, between the page's read of the cluster and of the verification.
    Cluster.objects.filter(pk=cluster.pk).update(status=Cluster.Status.ONLINE)
    ClusterVerification.objects.create(
        cluster=cluster, status=ClusterVerification.Status.SUCCEEDED, finished_at=timezone.now()
    )

    [card] = cluster_card_contexts([read_before])

    assert card["cluster"].status == Cluster.Status.ONLINE
    assert card["verification"].status == ClusterVerification.Status.SUCCEEDED


def test_a_card_does_not_read_a_cluster_again_long_after_its_verification(
    django_assert_num_queries,
):
    cluster = ClusterFactory(status=Cluster.Status.ONLINE)
    ClusterVerification.objects.create(
        cluster=cluster,
        status=ClusterVerification.Status.SUCCEEDED,
        finished_at=timezone.now() - timedelta(minutes=5),
    )
    read = Cluster.objects.get(pk=cluster.pk)
    with django_assert_num_queries(2):  # the verifications and the pools, nothing more
        cluster_card_contexts([read])
