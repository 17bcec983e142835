"""Azure ML's list prices: a command job bills its compute cluster's VMs per node-hour (Azure ML adds no charge of
its own for the compute), priced from `prices.json` in this package, which `crosstrain prices --refresh` rereads
from the Azure Retail Prices API (no key: learn.microsoft.com/rest/api/cost-management/retail-prices/
azure-retail-prices).

The workspace's region is not known at render (its settings name the workspace, not where it is), so the bound
takes the highest price the table holds for the VM size, and says so; `crosstrain check` reads the region.
"""

from __future__ import annotations

import datetime
import json
import urllib.parse
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from crosstrain import pricing

if TYPE_CHECKING:
    from crosstrain.backends.azureml.plan import Plan
    from crosstrain.backends.azureml.settings import AzureMLSettings
    from crosstrain.spec import TrainingJob

PACKAGE = "crosstrain.backends.azureml"
LEAVES_OUT = ("disks, storage and egress",)
#: The public price API; `refresh` reads it (no credential is sent: it needs none).
RETAIL_PRICES = "https://prices.azure.com/api/retail/prices"
API_VERSION = "2023-01-01-preview"
#: The most pages a refresh reads for one VM size (the API pages at 100 items or 1000).
MAX_PAGES = 20


def cost(job: TrainingJob, settings: AzureMLSettings, plan: Plan) -> pricing.Cost:
    size = plan.machine.machine_type
    timeout = job.scheduling.timeout
    if not size:
        compute = settings.compute or "(the default)"
        why = f"the VM size of compute {compute} is not known at render (the job names no machine)"
        return pricing.unpriced("azureml", why, timeout)
    need = pricing.Need(size, plan.nodes, pricing.ANY_REGION, job.scheduling.spot)
    return pricing.cost("azureml", pricing.table(PACKAGE, "Azure VM price"), [need], timeout, LEAVES_OUT)


def refresh(
    items: Iterable[str],
    *,
    base_url: str = RETAIL_PRICES,
    today: datetime.date | None = None,
    read: Callable[[str], Any] | None = None,
    timeout: float = 30.0,
) -> tuple[list[pricing.Price], list[str]]:
    """The on-demand and spot Linux prices of each VM size in `items`, every region the API lists, reread from
    the Retail Prices API at `base_url`; and a line for each size it listed nothing for."""
    day = (today or datetime.datetime.now(datetime.timezone.utc).date()).isoformat()
    origin = _origin(base_url)
    fetch = read or (lambda url: _get(url, timeout))
    prices: list[pricing.Price] = []
    said: list[str] = []
    for item in sorted(set(items)):
        query = urllib.parse.urlencode(
            {
                "api-version": API_VERSION,
                "currencyCode": "'USD'",
                "$filter": f"serviceName eq 'Virtual Machines' and armSkuName eq '{item}' "
                "and priceType eq 'Consumption'",
            },
            quote_via=urllib.parse.quote,
        )
        url: str | None = f"{base_url}?{query}"
        source = pricing.Source(f"{base_url}?{query}", day, "Azure Retail Prices API, Linux, USD")
        found: dict[tuple[str, bool], float] = {}
        pages = 0
        while url and pages < MAX_PAGES:
            url = urllib.parse.quote(url, safe=":/?&=$%'(),;+@!*~")  # a next link may hold its filter's spaces
            if _origin(url) != origin:  # a next page elsewhere is not followed
                said.append(f"{item}: the API's next page is on another host, not followed: {url[:80]}")
                break
            page = fetch(url)
            pages += 1
            for row in page.get("Items") or []:
                kept = _row(row, item)
                if kept is not None:
                    region, spot, value = kept
                    found[(region, spot)] = min(value, found.get((region, spot), value))
            url = page.get("NextPageLink") or None
        if not found:
            said.append(f"{item}: the API lists no Linux consumption price")
        prices += [pricing.Price(item, region, spot, value, source) for (region, spot), value in sorted(found.items())]
    return prices, said


def _origin(url: str) -> tuple[str, str, int]:
    """Scheme, host and port, the default port spelled out (the API's next links say `:443`)."""
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or (443 if parts.scheme == "https" else 80)


def _row(row: dict[str, Any], item: str) -> tuple[str, bool, float] | None:
    """(region, spot, USD per hour) of one Retail Prices item, or None for what a job is not billed (Windows,
    low priority of the Cloud Services kind, reservations, other units or currencies)."""
    if row.get("armSkuName") != item or row.get("type", "Consumption") != "Consumption":
        return None
    product, sku = str(row.get("productName") or ""), str(row.get("skuName") or "")
    if product.endswith("Windows") or "Low Priority" in sku or row.get("currencyCode", "USD") != "USD":
        return None
    if str(row.get("unitOfMeasure") or "1 Hour") != "1 Hour":
        return None
    try:
        value = float(row.get("retailPrice", row.get("unitPrice")) or 0)
    except (TypeError, ValueError):
        return None
    region = str(row.get("armRegionName") or "")
    if value <= 0 or not region:
        return None
    return region, "Spot" in sku, value


def _get(url: str, timeout: float) -> Any:
    import urllib.request  # here: only a refresh reads the price API

    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:  # https, or a test's loopback
        return json.loads(answer.read(32 * 1024 * 1024))
