"""Forms of the market pages. They parse what the browser sends into the types the services
take; the services decide what is allowed (ranges, prices, windows, roles) and their refusals
are put beside these forms' fields by the views."""

import datetime
from collections.abc import Iterable
from typing import Any

from django import forms
from django.utils import timezone

from computeshare.forms import StyledFormMixin
from computeshare.numbers import MICRO_PLACES
from marketplace.filters import OfferFilter
from marketplace.models import Capacity, Cluster, Offer, Resource

UTC = datetime.UTC
DATETIME_LOCAL = "%Y-%m-%dT%H:%M"


class UtcDateTimeInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs, format=DATETIME_LOCAL)


class UtcDateTimeField(forms.DateTimeField):
    """A `datetime-local` input read as UTC whatever the time zone of the server or of the
    browser: the pages say so beside the field, and the market's times are shown in UTC."""

    widget = UtcDateTimeInput

    def to_python(self, value: Any) -> datetime.datetime | None:
        with timezone.override(UTC):
            return super().to_python(value)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, datetime.datetime) and timezone.is_aware(value):
            return timezone.make_naive(value, UTC)
        return value


def _styled_select(choices: Iterable[tuple[Any, Any]], css: str = "form-select") -> forms.Select:
    return forms.Select(attrs={"class": css}, choices=list(choices))


# --- Browsing offers ---------------------------------------------------------------------------

# Empty is `OfferFilter`'s default order: the auctions that close soonest first.
ORDERING_CHOICES = [
    ("", "Closing soonest"),
    ("reserve_price", "Reserve price, lowest first"),
    ("-reserve_price", "Reserve price, highest first"),
    ("window_start", "Window start, earliest first"),
]


class OfferBrowseForm(StyledFormMixin, forms.Form):
    """The base form of `OfferBrowseFilter`: django-filter adds the filters' fields to it."""


class OfferBrowseFilter(OfferFilter):
    """The API's offer filters (`OfferFilter`) as they are, so that the page and the API filter
    identically; only their form is dressed for a page: selects with readable labels, a
    cluster select instead of an id box, and `datetime-local` inputs read as UTC."""

    class Meta(OfferFilter.Meta):
        form = OfferBrowseForm

    def __init__(self, data: Any, *, queryset: Any, clusters: Iterable[Cluster]) -> None:
        super().__init__(data, queryset=queryset)
        self.cluster_choices = [("", "Any cluster")] + [
            (str(cluster.uuid), f"{cluster.name} ({cluster.organization.name})")
            for cluster in clusters
        ]

    @property
    def form(self) -> forms.Form:
        if not hasattr(self, "_form"):
            form: forms.Form = super().form
            fields = form.fields
            fields["resource"].widget = _styled_select([("", "Any resource"), *Resource.choices])
            fields["capacity"].label = "Kind"
            fields["capacity"].widget = _styled_select([("", "Any kind"), *Capacity.choices])
            fields["cluster"].label = "Cluster"
            fields["partition"].label = "Partition"
            fields["cluster"].widget = _styled_select(self.cluster_choices)
            fields["partition"].widget.attrs["placeholder"] = "Any partition"
            fields["status"].widget = _styled_select([("", "Any status"), *Offer.Status.choices])
            fields["min_quantity"].label = "Units left, at least"
            fields["max_price"].label = "Reserve price, at most"
            fields["window_starts_before"].label = "Window starts before (UTC)"
            fields["window_ends_after"].label = "Window ends after (UTC)"
            fields["q"].widget.input_type = "search"
            fields["q"].widget.attrs["placeholder"] = "Search clusters, owners, GPU types, features"
            fields["gpu_type"].widget.attrs["placeholder"] = "a100"
            fields["feature"].widget.attrs["placeholder"] = "avx512"
            for name in ("min_cpus_per_node", "min_memory_per_node_gb", "min_gpus_per_node"):
                fields[name].widget.attrs.update({"min": "0", "inputmode": "numeric"})
            for name in ("window_starts_before", "window_ends_after"):
                fields[name].widget = UtcDateTimeInput(attrs={"class": "form-control"})
            for name in ("min_quantity", "max_price"):
                fields[name].widget.attrs.update({"min": "0", "inputmode": "decimal"})
            ordering = fields["ordering"]
            ordering.label = "Sort by"
            # Only the labels change: the field still accepts what the API accepts.
            ordering.widget.choices = ORDERING_CHOICES
            ordering.widget.attrs["class"] = "form-select"
            return form
        return self._form  # type: ignore[no-any-return]  # django-filter is untyped


# --- Buying and bidding ------------------------------------------------------------------------


class OrderFormMixin(StyledFormMixin):
    fields: dict[str, forms.Field]

    def __init__(self, *args: Any, organizations: Iterable[Any] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The value is the organization's public id; the view resolves it to the user's
        # membership, and the service checks the role.
        choices = [(str(organization.uuid), organization.name) for organization in organizations]
        self.fields["organization"].widget.choices = choices


class BuyNowForm(OrderFormMixin, forms.Form):
    prefix = "buy"

    organization = forms.UUIDField(label="Organization", widget=forms.Select)
    quantity = forms.IntegerField(
        label="Units", widget=forms.NumberInput(attrs={"min": "1", "step": "1"})
    )


class BidForm(OrderFormMixin, forms.Form):
    prefix = "bid"

    organization = forms.UUIDField(label="Organization", widget=forms.Select)
    quantity = forms.IntegerField(
        label="Units", widget=forms.NumberInput(attrs={"min": "1", "step": "1"})
    )
    price = forms.DecimalField(
        label="Price per unit",
        max_digits=20,
        decimal_places=MICRO_PLACES,
        widget=forms.NumberInput(attrs={"min": "0", "step": "any", "inputmode": "decimal"}),
    )
    min_quantity = forms.IntegerField(
        label="Fewest units you accept",
        required=False,
        help_text="Empty for any partial fill down to 1 unit.",
        widget=forms.NumberInput(attrs={"min": "1", "step": "1"}),
    )


# --- Price history -----------------------------------------------------------------------------


class PriceHistoryForm(StyledFormMixin, forms.Form):
    cluster = forms.UUIDField(label="Cluster", required=False)
    partition = forms.CharField(label="Partition", max_length=64, required=False)
    resource = forms.ChoiceField(
        label="Resource", choices=[("", "Any resource"), *Resource.choices], required=False
    )
    capacity = forms.ChoiceField(
        label="Kind",
        choices=Capacity.choices,
        required=False,
        help_text="One kind at a time: a reserved core-hour is dearer than a preemptible one.",
    )

    def __init__(self, *args: Any, clusters: Iterable[Cluster] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["cluster"].widget = _styled_select(
            [("", "Any cluster")]
            + [
                (str(cluster.uuid), f"{cluster.name} ({cluster.organization.name})")
                for cluster in clusters
            ]
        )


# --- Owners: clusters and offers ---------------------------------------------------------------


class ClusterRegisterForm(StyledFormMixin, forms.Form):
    name = forms.CharField(label="Name", max_length=120)
    ssh_host = forms.CharField(
        label="SSH host", max_length=255, help_text="The login node's host name or IP address."
    )
    ssh_port = forms.IntegerField(label="SSH port", initial=22)
    ssh_user = forms.CharField(
        label="SSH user",
        max_length=64,
        help_text="The service account that runs sbatch, squeue and sacct for the platform.",
    )
    ssh_private_key = forms.CharField(
        label="Private key of the SSH user",
        max_length=20_000,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 5, "spellcheck": "false", "autocomplete": "off"}),
        help_text="Unencrypted OpenSSH or PEM. Stored encrypted and never shown again.",
    )
    ssh_host_key = forms.CharField(
        label="Host key of the login node",
        max_length=2_000,
        help_text="One public key line, <code>type base64</code>, as in "
        "<code>/etc/ssh/ssh_host_ed25519_key.pub</code>. It is pinned: a host that offers "
        "another key is refused.",
    )
    account_mode = forms.ChoiceField(
        label="Slurm accounts",
        choices=Cluster.AccountMode.choices,
        initial=Cluster.AccountMode.MANAGED,
    )
    slurm_account = forms.CharField(
        label="Slurm account (fixed mode)",
        max_length=64,
        required=False,
        help_text="Every job runs under this account in fixed mode; leave empty when managed.",
    )
    tenant_group = forms.CharField(
        label="Tenant group",
        max_length=32,
        required=False,
        initial=Cluster._meta.get_field("tenant_group").default,
        help_text="The Unix group of tenant accounts that <code>scripts/cluster-setup</code> "
        "made: each team works as one of them.",
    )
    sftp_server = forms.CharField(
        label="SFTP server",
        max_length=255,
        required=False,
        initial=Cluster._meta.get_field("sftp_server").default,
        help_text="The program as on the <code>Subsystem sftp</code> line of the login node's "
        "<code>sshd_config</code>.",
    )

    # Left empty, they are the prefilled defaults, as in the API; the service checks them.
    def clean_tenant_group(self) -> str:
        return str(self.cleaned_data["tenant_group"] or self.fields["tenant_group"].initial)

    def clean_sftp_server(self) -> str:
        return str(self.cleaned_data["sftp_server"] or self.fields["sftp_server"].initial)


class OfferCreateForm(StyledFormMixin, forms.Form):
    cluster = forms.UUIDField(label="Cluster")
    partition = forms.CharField(label="Partition", max_length=64)
    resource = forms.ChoiceField(label="Resource", choices=Resource.choices)
    capacity = forms.ChoiceField(
        label="Kind",
        choices=Capacity.choices,
        initial=Capacity.PREEMPTIBLE,
        required=False,
        help_text="Preemptible: core-hours (GPU-hours) on idle cores; your own users' jobs "
        "preempt them and your users notice nothing. Reserved: whole cores (GPUs, whole "
        "nodes' worth) held for the buyer by a Slurm reservation for the whole window, which "
        "is whole hours and starts when the auction closes.",
    )
    quantity = forms.IntegerField(
        label="Units for sale",
        help_text="Core-hours (GPU-hours) if preemptible; cores (GPUs) if reserved.",
        widget=forms.NumberInput(attrs={"min": "1", "step": "1"}),
    )
    window_start = UtcDateTimeField(label="Window starts (UTC)")
    window_end = UtcDateTimeField(label="Window ends (UTC)")
    reserve_price = forms.DecimalField(
        label="Reserve price per core-hour (GPU-hour)",
        max_digits=20,
        decimal_places=MICRO_PLACES,
        widget=forms.NumberInput(attrs={"min": "0", "step": "any", "inputmode": "decimal"}),
    )
    buy_now_price = forms.DecimalField(
        label="Buy-now price per core-hour (GPU-hour)",
        max_digits=20,
        decimal_places=MICRO_PLACES,
        required=False,
        help_text="Empty: no buy-now, the auction only.",
        widget=forms.NumberInput(attrs={"min": "0", "step": "any", "inputmode": "decimal"}),
    )
    auction_closes_at = UtcDateTimeField(label="Auction closes (UTC)")
    max_per_buyer = forms.IntegerField(
        label="Cap per buyer",
        required=False,
        help_text="Empty for no cap.",
        widget=forms.NumberInput(attrs={"min": "1", "step": "1"}),
    )

    def clean_capacity(self) -> str:
        # Left out (an older form), it is what every offer was before there were two kinds.
        return str(self.cleaned_data["capacity"] or Capacity.PREEMPTIBLE)

    def __init__(self, *args: Any, clusters: Iterable[Cluster] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        clusters = list(clusters)
        self.fields["cluster"].widget = _styled_select(
            (str(cluster.uuid), cluster.name) for cluster in clusters
        )
        # Grouped by cluster: the service checks that the partition is the chosen cluster's.
        self.fields["partition"].widget = _styled_select(
            (
                cluster.name,
                [
                    (partition.name, partition.name)
                    for partition in cluster.partitions.all()
                    if partition.is_up
                ],
            )
            for cluster in clusters
        )
