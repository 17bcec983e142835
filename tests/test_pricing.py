"""A cost in every render: the price table crosstrain ships (each price with its source and the date read), the
job's price per hour and its bound for `scheduling.timeout` (spot priced as spot), a missing price said, never
guessed, `scheduling.max_cost` refusing a job whose bound exceeds it (render and validate agree), and
`crosstrain prices --refresh` against a loopback server answering as Azure's Retail Prices API does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from crosstrain import api, pricing
from crosstrain.backends.loopback import Call, LoopbackService, Reply, serving
from crosstrain.errors import SpecError
from crosstrain.loader import job_from_dict, load_job
from crosstrain.registry import BUILTIN_BACKENDS, create_backend, get_backend_class
from tests.conftest import EXAMPLES, ROOT
from tests.test_cli import run

CLOUD = [name for name in BUILTIN_BACKENDS if get_backend_class(name).price_package is not None]
AZURE = {"subscription_id": "00000000-0000-0000-0000-000000000000", "resource_group": "rg", "workspace": "ws"}


def _job(**scheduling: Any) -> dict[str, Any]:
    return {
        "name": "priced",
        "image": "python:3.11",
        "command": "python train.py",
        "primary": {"machine": "V100:4"},
        "workers": {"replicas": 1},
        "scheduling": scheduling,
        "targets": {"azureml": {**AZURE, "compute": "gpu"}, "vertex": {"project": "p", "region": "us-central1"}},
    }


def _cloud_renders() -> list[tuple[Path, str]]:
    cases = []
    for example in EXAMPLES:
        for target in load_job(example).targets:
            if target in CLOUD:
                cases.append((example, target))
    return cases


@pytest.mark.parametrize(("example", "target"), _cloud_renders(), ids=lambda v: str(v).replace(str(ROOT), ""))
def test_every_example_renders_with_a_cost_or_says_which_price_is_missing(example: Path, target: str) -> None:
    try:
        request = api.render(example, target)
    except SpecError:
        pytest.skip("the example is refused here (its own tests say why)")
    cost = request.cost
    assert cost is not None
    assert cost.target == target
    assert (cost.usd_per_hour is not None) != bool(cost.missing)
    for line in cost.lines:
        if line.price is not None:
            assert line.price.source.url.startswith("https://")
            assert len(line.price.source.read) == 10
        else:
            assert line.missing
    assert any(note.startswith(f"cost on {target}") for note in cost.notes())
    assert "cost" not in request.to_dict()  # the request sent, and its golden file, carry no cost
    assert request.with_cost()["cost"] == cost.to_dict()


def test_the_bound_is_the_price_per_hour_for_the_timeout_and_spot_is_priced_as_spot() -> None:
    backend = create_backend("azureml", environ={})
    on_demand = backend.render(job_from_dict(_job(timeout="10h"))).cost
    spot = backend.render(job_from_dict(_job(timeout="10h", spot=True))).cost
    assert on_demand is not None
    assert spot is not None
    (line,) = on_demand.lines
    item = line.need.item  # 4 x V100 on two nodes: the size with InfiniBand
    assert item == "Standard_NC24rs_v3"
    assert line.need.count == 2
    assert not line.need.spot
    # the workspace's region is not known at render: the highest price of the table's regions
    highest = max(p.usd_per_hour for p in pricing.shipped(backend.price_package or "") if p.item == item and not p.spot)
    assert on_demand.usd_per_hour == pytest.approx(2 * highest)
    assert on_demand.bound_usd == pytest.approx(round(20 * highest, 2))
    assert spot.lines[0].need.spot
    assert spot.lines[0].price is not None
    assert spot.lines[0].price.spot
    assert spot.bound_usd is not None
    assert on_demand.bound_usd is not None
    assert spot.bound_usd < on_demand.bound_usd / 3


@pytest.mark.parametrize("target", ["local", "fake"])
def test_a_target_on_this_machine_bills_nothing(target: str) -> None:
    job = job_from_dict({"name": "here", "command": "python train.py", "scheduling": {"timeout": "1h", "max_cost": 1}})
    cost = create_backend(target, environ={}).render(job, {"root": "cloud"} if target == "fake" else {}).cost
    assert cost is not None
    assert cost.usd_per_hour == 0.0
    assert cost.bound_usd == 0.0
    assert cost.notes()[0].startswith(f"cost on {target}: nothing billed")


def test_submit_dry_run_prints_the_request_with_its_cost() -> None:
    done = run("submit", str(ROOT / "examples" / "azureml-seed-pytorch.yaml"), "--dry-run")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["cost"]["bound_usd"] > 0
    assert printed["calls"]


def test_a_price_the_table_lacks_is_said_never_guessed() -> None:
    cost = create_backend("vertex", environ={}).render(job_from_dict(_job(timeout="1h"))).cost
    assert cost is not None
    assert cost.usd_per_hour is None
    assert cost.bound_usd is None
    assert "no on-demand Vertex AI training price of n1-standard-32 in us-central1" in cost.missing
    assert "unknown" in cost.notes()[0]


@pytest.mark.parametrize("target", ["azureml", "vertex"])
def test_max_cost_refuses_at_its_field_path_and_render_and_validate_agree(target: str) -> None:
    job = job_from_dict(_job(timeout="10h", max_cost=50))
    with pytest.raises(SpecError) as refused:
        create_backend(target, environ={}).render(job)
    (problem,) = [p for p in refused.value.problems if p.path == "scheduling.max_cost"]
    assert problem.fix
    if target == "azureml":
        assert "more than max_cost $50.00" in problem.message
    else:  # no price: the cap cannot be held, and says which price is missing
        assert "cannot be held" in problem.message
        assert "n1-standard-32" in problem.message
    assert [p.path for p in api.validate(job, [target])[target]] == ["scheduling.max_cost"]


def test_max_cost_within_the_bound_renders_and_without_a_timeout_is_refused() -> None:
    backend = create_backend("azureml", environ={})
    assert backend.render(job_from_dict(_job(timeout="1h", max_cost=1000))).cost is not None
    with pytest.raises(SpecError) as refused:
        backend.render(job_from_dict(_job(max_cost=1000)))
    assert any(p.path == "scheduling.max_cost" and "timeout" in p.message for p in refused.value.problems)


def test_max_cost_must_be_a_positive_number() -> None:
    with pytest.raises(SpecError) as refused:
        job_from_dict(_job(max_cost=-1))
    assert refused.value.problems[0].path == "scheduling.max_cost"


def test_the_render_json_envelope_and_the_notes_carry_the_cost() -> None:
    done = run("render", str(ROOT / "examples" / "azureml-seed-pytorch.yaml"), "--json")
    assert done.returncode == 0, done.stderr
    cost = json.loads(done.stdout)["cost"]
    assert cost["bound_usd"] > 0
    assert cost["timeout_s"] == 4 * 3600
    assert cost["currency"] == "USD"
    assert "note: cost on azureml: $" in done.stderr
    assert "at most $" in done.stderr


def test_the_table_round_trips_and_refuses_a_row_without_a_price_or_source() -> None:
    prices = pricing.shipped("crosstrain.backends.azureml")
    assert prices
    assert pricing.parse(pricing.dump(prices)) == sorted(prices, key=lambda p: (p.item, p.region, p.spot))
    with pytest.raises(ValueError, match="prices\\[0\\]"):
        pricing.parse({"sources": {}, "prices": [{"item": "x", "usd_per_hour": 1, "source": "s9"}]})


class RetailPrices(LoopbackService):
    """Azure's Retail Prices API (`GET /api/retail/prices?$filter=...`): `Items` and `NextPageLink`, a Linux
    and a Windows meter per VM size and region, a spot meter, a low-priority one, and two pages."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        super().__init__()
        self.rows = rows
        self.base = ""

    def operation(self, call: Call) -> str:
        return "prices"

    def answer(self, call: Call) -> Reply:
        if call.path != "/api/retail/prices" or call.query.get("api-version") != "2023-01-01-preview":
            return self.error(400, "Invalid API version or path")
        wanted = unquote(call.query.get("$filter", "")).split("armSkuName eq '")[1].split("'")[0]
        rows = [row for row in self.rows if row["armSkuName"] == wanted]
        page = int(call.query.get("$skip", "0"))
        more = page + 2 < len(rows)
        query = f"api-version=2023-01-01-preview&$filter={call.query['$filter']}"  # decoded, as a next link may be
        body = {
            "BillingCurrency": "USD",
            "CustomerEntityId": "Default",
            "Items": rows[page : page + 2],
            "NextPageLink": f"{self.base}{call.path}?{query}&$skip={page + 2}" if more else None,
            "Count": len(rows[page : page + 2]),
        }
        return Reply(200, body, {"Content-Type": "application/json"})


def _meter(sku: str, region: str, price: float, kind: str = "") -> dict[str, Any]:
    name = sku.removeprefix("Standard_").replace("_", " ")
    return {
        "currencyCode": "USD",
        "retailPrice": price,
        "unitPrice": price,
        "armRegionName": region,
        "armSkuName": sku,
        "productName": f"Virtual Machines NCSv3 Series{' Windows' if kind == 'windows' else ''}",
        "skuName": f"{name}{' Spot' if kind == 'spot' else ' Low Priority' if kind == 'low' else ''}",
        "meterName": name,
        "serviceName": "Virtual Machines",
        "unitOfMeasure": "1 Hour",
        "type": "Consumption",
        "effectiveStartDate": "2026-10-01T00:00:00Z",
    }


def test_prices_refresh_rereads_the_retail_prices_api() -> None:
    sku = "Standard_NC24rs_v3"
    rows = [
        _meter(sku, "eastus", 14.0),
        _meter(sku, "eastus", 16.5, "windows"),
        _meter(sku, "eastus", 1.5, "spot"),
        _meter(sku, "eastus", 2.0, "low"),
        _meter(sku, "uksouth", 15.0),
    ]
    service = RetailPrices(rows)
    with serving(service) as url:
        service.base = url
        done = run("prices", sku, "-t", "azureml", "--refresh", "--api-url", f"{url}/api/retail/prices", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    got = {(r["region"], r["spot"]): r["usd_per_hour"] for r in out["prices"]}
    assert got == {("eastus", False): 14.0, ("eastus", True): 1.5, ("uksouth", False): 15.0}
    assert all(r["read"] and r["source"].startswith(url) for r in out["prices"])
    change = out["refreshed"]["azureml"]
    assert {"item": sku, "region": "eastus", "spot": False, "was": 13.46, "now": 14.0} in change["changed"]
    assert {"item": sku, "region": "uksouth", "spot": False, "now": 15.0} in change["new"]
    assert len([c for c in service.received if c.path == "/api/retail/prices"]) == 3  # two pages: 2 + 2 + 1 rows
    assert all("Authorization" not in c.headers for c in service.received)


def test_prices_refresh_needs_refresh_for_write_and_says_what_has_no_api() -> None:
    done = run("prices", "--write")
    assert done.returncode == 2
    assert "--refresh" in done.stderr
    done = run("prices", "-t", "vertex", "--refresh")
    assert done.returncode == 0
    assert "no price API without a key" in done.stderr


def test_prices_refresh_write_saves_the_reread_prices_and_keeps_the_rest(tmp_path: Path) -> None:
    import shutil

    shutil.copytree(ROOT / "src" / "crosstrain", tmp_path / "crosstrain")  # a checkout's table, rewritten here
    sku = "Standard_NC24rs_v3"
    service = RetailPrices([_meter(sku, "eastus", 14.0), _meter(sku, "eastus", 1.5, "spot")])
    with serving(service) as url:
        service.base = url
        done = run(
            "prices",
            sku,
            "-t",
            "azureml",
            "--refresh",
            "--write",
            "--api-url",
            f"{url}/api/retail/prices",
            env={"PYTHONPATH": str(tmp_path)},
        )
    assert done.returncode == 0, done.stderr
    assert "wrote 2 prices" in done.stderr
    written = pricing.parse(json.loads((tmp_path / "crosstrain/backends/azureml/prices.json").read_text()))
    mine = {(p.region, p.spot): p.usd_per_hour for p in written if p.item == sku}
    assert mine == {("eastus", False): 14.0, ("eastus", True): 1.5}
    shipped = pricing.shipped("crosstrain.backends.azureml")
    assert {p for p in written if p.item != sku} == {p for p in shipped if p.item != sku}
    assert all(p.source.url.startswith(url) for p in written if p.item == sku)
