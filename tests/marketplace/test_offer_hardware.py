"""The hardware verification reads (CPUs and memory per node, GPU types and counts, features)
is stored on each partition, shown with every offer, and filtered and searched by, in the API
and on the public offers page alike (one FilterSet)."""

from pathlib import Path

import pytest
from django.urls import reverse

from hpc.slurm.inventory import ClusterInventory, parse_sinfo_nodes
from marketplace.models import Offer, Partition
from marketplace.services.clusters import cluster_inventory_store
from tests.conftest import client_for
from tests.factories import ClusterFactory, MembershipFactory, OfferFactory, PartitionFactory

pytestmark = pytest.mark.django_db
API = "/api/v1"
RECORDED = Path(__file__).resolve().parents[1] / "hpc" / "recorded"


def test_verification_stores_each_partitions_hardware():
    cluster = ClusterFactory(name="fjord")
    PartitionFactory(cluster=cluster, name="gpu", gpu_types=[], features=[], cpus_per_node=1)
    partitions = parse_sinfo_nodes((RECORDED / "gpucluster_sinfo_nodes.txt").read_text())

    inventory = ClusterInventory(
        cluster_name="fjord", slurm_version="23.11.4", partitions=partitions
    )

    cluster_inventory_store(cluster, inventory)

    stored = {
        partition.name: (
            partition.cpus_per_node,
            partition.memory_per_node_mb,
            partition.gpus_per_node,
            partition.gpu_types,
            partition.features,
            partition.nodes_differ,
        )
        for partition in Partition.objects.filter(cluster=cluster)
    }
    assert stored == {
        "cpu": (64, 257000, 0, [], ["avx512", "bigmem", "ib"], True),
        "debug": (32, 191000, 0, [], ["avx512", "ib"], True),
        # The partition that existed is updated in place.
        "gpu": (32, 191000, 2, ["a100", "h100", "v100"], ["ib", "nvlink"], True),
        "long": (64, 257000, 0, [], ["avx512", "ib"], False),
    }


@pytest.fixture
def offers() -> dict[str, Offer]:
    owner = ClusterFactory(name="fjord", organization__name="Fjord Compute")
    other = ClusterFactory(name="atlas", organization__name="Atlas Lab")
    a100 = PartitionFactory(
        cluster=owner,
        name="gpu",
        nodes=2,
        cpus=128,
        gpus=8,
        memory_per_node_mb=512 * 1024,
        gpu_types=["a100"],
        features=["ib", "nvlink"],
    )
    small = PartitionFactory(
        cluster=owner,
        name="batch",
        nodes=4,
        cpus=64,
        gpus=0,
        memory_per_node_mb=32 * 1024,
        features=["avx2"],
    )
    h100 = PartitionFactory(
        cluster=other,
        name="ai",
        nodes=1,
        cpus=96,
        gpus=4,
        memory_per_node_mb=1024 * 1024,
        gpu_types=["h100"],
        features=["ib", "avx512"],
    )
    return {
        "a100": OfferFactory(partition=a100, resource="gpu"),
        "small": OfferFactory(partition=small, resource="cpu"),
        "h100": OfferFactory(partition=h100, resource="gpu"),
    }


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("gpu_type=a100", {"a100"}),
        ("gpu_type=A100", {"a100"}),
        ("gpu_type=a10", set()),  # a whole type, not a part of one
        ("feature=ib", {"a100", "h100"}),
        ("feature=i", set()),
        ("feature=avx512", {"h100"}),
        ("min_cpus_per_node=64", {"a100", "h100"}),
        ("min_cpus_per_node=97", set()),
        ("min_memory_per_node_gb=512", {"a100", "h100"}),
        ("min_memory_per_node_gb=512.5", {"h100"}),
        ("min_gpus_per_node=4", {"a100", "h100"}),
        ("min_gpus_per_node=5", set()),
        ("q=fjord", {"a100", "small"}),
        ("q=atlas+lab", {"h100"}),
        ("q=nvlink", {"a100"}),
        ("q=h100", {"h100"}),
        ("q=fjord+avx2", {"small"}),
        ("q=nowhere", set()),
        ("feature=ib&min_gpus_per_node=4&q=fjord", {"a100"}),
    ],
)
def test_offers_filter_and_search_by_hardware(offers, query, expected):
    user = MembershipFactory().user
    names = {str(offer.uuid): name for name, offer in offers.items()}

    answer = client_for(user).get(f"{API}/offers/?{query}")
    page = client_for(user).get(f"{reverse('offer-list')}?{query}")

    assert answer.status_code == 200, answer.content
    assert {names[row["id"]] for row in answer.json()["results"]} == expected
    assert page.status_code == 200
    assert {names[str(offer.uuid)] for offer in page.context["page"]} == expected


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("gpu_type=a100%22,%22x", "gpu_type"),
        ("feature=a%20b", "feature"),
        ("feature=" + "f" * 65, "feature"),
        ("min_cpus_per_node=-1", "min_cpus_per_node"),
        ("min_memory_per_node_gb=lots", "min_memory_per_node_gb"),
        ("min_gpus_per_node=many", "min_gpus_per_node"),
        ("q=" + "q" * 101, "q"),
    ],
)
def test_bad_hardware_filters_are_400_naming_the_parameter(offers, query, parameter):
    user = MembershipFactory().user

    answer = client_for(user).get(f"{API}/offers/?{query}")
    page = client_for(user).get(f"{reverse('offer-list')}?{query}")

    assert answer.status_code == 400, answer.content
    assert answer.json()["code"] == "invalid"
    assert list(answer.json()["extra"]["fields"]) == [parameter]
    assert page.status_code == 400


def test_a_visitor_filters_the_offers_page_by_hardware(client, offers):
    page = client.get(f"{reverse('offer-list')}?gpu_type=h100")

    assert page.status_code == 200
    assert [offer.uuid for offer in page.context["page"]] == [offers["h100"].uuid]
    text = page.content.decode()
    assert "96 CPUs" in text
    assert "1024 GB" in text
