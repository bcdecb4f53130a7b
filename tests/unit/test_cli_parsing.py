"""Pure CLI/client pieces: --set parsing, YAML loading, rendering, config, errors, LRO polling.

No server: HTTP goes to an ``httpx.MockTransport`` fake where a test needs answers.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from cloudlet.cli.az_args import hoist_global_options
from cloudlet.cli.compute import apply_set, build_body, load_yaml_file, parse_path, parse_set
from cloudlet.cli.main import CliState, app
from cloudlet.cli.output import OutputFormat, build_table, format_error, render, table_rows
from cloudlet.client import (
    AmlCompute,
    Compute,
    ComputeInstance,
    ConfigurationError,
    HttpResponseError,
    MLClient,
    ResourceNotFoundError,
    SshSettings,
    load_config,
)
from cloudlet.client._rest import RestClient, operation_id_from, raise_for_response, ws_path

SUB = "00000000-0000-0000-0000-000000000001"
WS = f"/api/v1/subscriptions/{SUB}/resourceGroups/default/workspaces/default"


# --- --set parsing -------------------------------------------------------------------------------


def test_parse_set_yaml_typed_values() -> None:
    assert parse_set("max_instances=4") == (["max_instances"], 4)
    assert parse_set("tier=low_priority") == (["tier"], "low_priority")
    assert parse_set("ssh_public_access_enabled=false") == (["ssh_public_access_enabled"], False)
    assert parse_set("tags={a: 1}") == (["tags"], {"a": 1})
    assert parse_set("description=") == (["description"], None)
    assert parse_set("description=a: b: c") == (["description"], "a: b: c")  # invalid YAML → string


def test_parse_path_dotted_and_indexed() -> None:
    assert parse_path("schedules.compute_start_stop[0].cron") == [
        "schedules",
        "compute_start_stop",
        0,
        "cron",
    ]
    for bad in ("", ".a", "a.", "a..b", "[0]", "a]b"):
        with pytest.raises(ValueError):
            parse_path(bad)
    with pytest.raises(ValueError):
        parse_set("no-equals-sign")


def test_apply_set_creates_nested_dicts_and_lists() -> None:
    doc: dict[str, Any] = {"name": "c", "ssh_settings": {"admin_username": "u"}}
    apply_set(doc, *parse_set("ssh_settings.ssh_port=2222"))
    apply_set(doc, *parse_set("schedules.compute_start_stop[1].action=stop"))
    assert doc["ssh_settings"] == {"admin_username": "u", "ssh_port": 2222}
    assert doc["schedules"]["compute_start_stop"] == [None, {"action": "stop"}]
    with pytest.raises(ValueError):
        apply_set(doc, ["name", 0], 1)  # cannot index a string


def test_build_body_precedence_and_schema_passthrough(tmp_path: Path) -> None:
    f = tmp_path / "c.yml"
    f.write_text(
        "$schema: https://azuremlschemas.azureedge.net/latest/amlCompute.schema.json\n"
        "name: from-file\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 2\n"
        "schedules:\n  compute_start_stop:\n  - start_time: 2024-05-01T08:00:00\n"
    )
    doc = load_yaml_file(str(f))
    assert doc["schedules"]["compute_start_stop"][0]["start_time"] == "2024-05-01T08:00:00"
    body = build_body(
        doc, ["max_instances=4", "tier=low_priority"], {"size": None, "min_instances": 1}, "cli"
    )
    assert body["$schema"].endswith("amlCompute.schema.json")
    assert body["name"] == "cli"
    assert body["max_instances"] == 4 and body["tier"] == "low_priority" and body["min_instances"] == 1
    assert body["size"] == "Standard_DS3_v2"
    json.dumps(body)  # JSON-safe


def test_load_yaml_file_errors(tmp_path: Path) -> None:
    bad = tmp_path / "list.yml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigurationError, match="mapping"):
        load_yaml_file(str(bad))
    with pytest.raises(ConfigurationError, match="cannot read"):
        load_yaml_file(str(tmp_path / "missing.yml"))


def test_hoist_global_options() -> None:
    args = ["compute", "list", "-o", "json", "--workspace=w2", "-gRG", "--", "-o"]
    assert hoist_global_options(args) == [
        "-o",
        "json",
        "--workspace=w2",
        "-gRG",
        "compute",
        "list",
        "--",
        "-o",
    ]


# --- output --------------------------------------------------------------------------------------

CLUSTER = {
    "name": "cpu-cluster",
    "type": "amlcompute",
    "size": "Standard_DS3_v2",
    "location": "local",
    "provisioning_state": "Succeeded",
    "allocation_state": "Steady",
    "current_node_count": 0,
    "target_node_count": 2,
    "min_instances": 0,
    "max_instances": 2,
}
INSTANCE = {
    "name": "ci1",
    "type": "computeinstance",
    "size": "Standard_DS3_v2",
    "location": "local",
    "provisioning_state": "Succeeded",
    "state": "Running",
    "owner": "alice",
}


def test_compute_table_columns() -> None:
    headers, rows = table_rows([CLUSTER, INSTANCE], "compute")
    assert headers == ["NAME", "TYPE", "SIZE", "LOCATION", "STATE", "NODES"]
    assert rows[0] == ["cpu-cluster", "amlcompute", "Standard_DS3_v2", "local", "Succeeded/Steady", "0/2"]
    assert rows[1][4:] == ["Succeeded/Running", "-"]


def test_size_and_usage_tables() -> None:
    size = {
        "name": "Standard_NC6",
        "series": "NC",
        "vcpus": 6,
        "memory_gb": 56.0,
        "gpus": 1,
        "price_dedicated": 0.9,
        "price_low_priority": 0.18,
        "low_priority_capable": True,
        "supported_compute_types": ["amlcompute", "computeinstance"],
        "retired_on": "2023-08-31",
    }
    headers, rows = table_rows([size], "size")
    assert headers == ["NAME", "SERIES", "VCPUS", "MEMORY_GB", "GPUS", "PRICE/H", "LOW-PRI", "SUPPORTED"]
    assert rows[0] == ["Standard_NC6", "NC", "6", "56", "1", "0.9", "0.18", "retired 2023-08-31"]
    usage = {
        "name": "standardDSv2Family",
        "current_value": 8,
        "limit": 24,
        "holders": [{"compute": "ci1", "workspace": "default", "cores": 4, "state": "Stopped"}],
    }
    headers, rows = table_rows([usage], "usage")
    assert headers == ["NAME", "CURRENT", "LIMIT", "HOLDERS"]
    assert rows[0] == ["standardDSv2Family", "8", "24", "default/ci1:4 (Stopped)"]


def test_render_json_and_yaml_are_the_server_objects() -> None:
    out = io.StringIO()
    render([CLUSTER], OutputFormat.json, "compute", stream=out)
    assert json.loads(out.getvalue()) == [CLUSTER]
    out = io.StringIO()
    render(CLUSTER, "yaml", "compute", stream=out)
    assert yaml.safe_load(out.getvalue()) == CLUSTER
    out = io.StringIO()
    render([CLUSTER], "table", "compute", stream=out)
    assert "cpu-cluster" in out.getvalue() and "Succeeded/Steady" in out.getvalue()
    assert build_table(CLUSTER).row_count == len(CLUSTER)


# --- config and errors ---------------------------------------------------------------------------


def _write_home(home: Path, endpoint: str = "http://127.0.0.1:8571") -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.json").write_text(
        json.dumps(
            {
                "endpoint": endpoint,
                "subscription_id": SUB,
                "resource_group": "default",
                "workspace": "default",
                "location": "local",
            }
        )
    )
    (home / "credentials").write_text(json.dumps({"api_key": "clk_file", "principal": "admin"}))


def test_load_config_files_and_env_overrides(tmp_path: Path) -> None:
    _write_home(tmp_path)
    cfg = load_config(env={"CLOUDLET_HOME": str(tmp_path)})
    assert (cfg.endpoint, cfg.api_key, cfg.subscription_id) == ("http://127.0.0.1:8571", "clk_file", SUB)
    env = {"CLOUDLET_HOME": str(tmp_path), "CLOUDLET_ENDPOINT": "http://h:1/", "CLOUDLET_API_KEY": "clk_env"}
    cfg = load_config(env=env).with_overrides(workspace="w2", resource_group=None)
    assert (cfg.endpoint, cfg.api_key, cfg.workspace, cfg.resource_group) == (
        "http://h:1",
        "clk_env",
        "w2",
        "default",
    )


def test_missing_config_message(tmp_path: Path) -> None:
    cfg = load_config(env={"CLOUDLET_HOME": str(tmp_path / "none")})
    with pytest.raises(ConfigurationError, match="no cloudlet server configured"):
        cfg.require_endpoint()


def test_error_mapping_and_formatting() -> None:
    body = {
        "error": {
            "code": "ClusterMinNodesExceedCoreQuota",
            "message": "min_instances needs 8 cores; quota is 4.",
            "target": "min_instances",
            "details": [],
        }
    }
    with pytest.raises(HttpResponseError) as info:
        raise_for_response(httpx.Response(400, json=body))
    exc = info.value
    assert exc.status_code == 400 and exc.error.code == "ClusterMinNodesExceedCoreQuota"
    assert str(exc) == "(ClusterMinNodesExceedCoreQuota) min_instances needs 8 cores; quota is 4."
    assert format_error(exc).endswith("Target: min_instances")
    with pytest.raises(ResourceNotFoundError):
        raise_for_response(httpx.Response(404, json={"error": {"code": "ResourceNotFound", "message": "x"}}))
    with pytest.raises(HttpResponseError, match="Http500"):
        raise_for_response(httpx.Response(500, text="boom"))


def test_operation_id_from_header_or_body() -> None:
    r = httpx.Response(201, headers={"Operation-Location": "http://h/api/v1/operations/op-1"}, json={})
    assert operation_id_from(r) == "op-1"
    assert operation_id_from(httpx.Response(202, json={"id": "op-2", "status": "InProgress"})) == "op-2"
    assert operation_id_from(httpx.Response(200, json={"name": "c"})) is None


# --- entities ------------------------------------------------------------------------------------


def test_entities_round_trip() -> None:
    c = AmlCompute(
        name="c", size="Standard_DS3_v2", max_instances=2, ssh_settings=SshSettings(admin_username="u")
    )
    assert c._to_rest() == {
        "name": "c",
        "type": "amlcompute",
        "size": "Standard_DS3_v2",
        "max_instances": 2,
        "ssh_settings": {"admin_username": "u"},
    }
    got = Compute._from_rest({**INSTANCE, "idle_time_before_shutdown_minutes": 30})
    assert isinstance(got, ComputeInstance)
    assert (got.state, got.owner, got.idle_time_before_shutdown_minutes) == ("Running", "alice", 30)
    cluster = Compute._from_rest(CLUSTER)
    assert isinstance(cluster, AmlCompute) and cluster.allocation_state == "Steady"
    assert cluster.current_node_count == 0 and cluster.state is None
    assert cluster._to_dict() == CLUSTER


# --- LRO polling and the CLI against a fake transport ---------------------------------------------


class FakeServer:
    """Just enough of the API for a create that polls its operation."""

    def __init__(self, final_status: str = "Succeeded") -> None:
        self.final_status = final_status
        self.polls = 0
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        if request.method == "PUT" and path == f"{WS}/computes/cpu-cluster":
            body = json.loads(request.content)
            return httpx.Response(
                201,
                json={**body, "provisioning_state": "Creating"},
                headers={"Operation-Location": "/api/v1/operations/op-1"},
            )
        if path == "/api/v1/operations/op-1":
            self.polls += 1
            done = self.polls >= 2
            op: dict[str, Any] = {"id": "op-1", "kind": "create", "status": "InProgress", "error": None}
            if done:
                op["status"] = self.final_status
                if self.final_status == "Failed":
                    op["error"] = {"code": "QuotaExceeded", "message": "not enough cores"}
            return httpx.Response(200, json=op)
        if request.method == "GET" and path == f"{WS}/computes/cpu-cluster":
            return httpx.Response(200, json=CLUSTER)
        return httpx.Response(404, json={"error": {"code": "ResourceNotFound", "message": path}})


def test_client_create_polls_until_succeeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_home(tmp_path)
    monkeypatch.setenv("CLOUDLET_HOME", str(tmp_path))
    monkeypatch.delenv("CLOUDLET_ENDPOINT", raising=False)
    monkeypatch.delenv("CLOUDLET_API_KEY", raising=False)
    fake = FakeServer()
    client = MLClient(transport=httpx.MockTransport(fake))
    client._rest.poll_interval = 0.0
    poller = client.compute.begin_create_or_update(AmlCompute(name="cpu-cluster", size="Standard_DS3_v2"))
    result = poller.result()
    assert isinstance(result, AmlCompute) and result.provisioning_state == "Succeeded"
    assert poller.done() and poller.status() == "Succeeded"
    assert fake.requests[0].headers["Authorization"] == "Bearer clk_file"

    failing = MLClient(transport=httpx.MockTransport(FakeServer("Failed")))
    failing._rest.poll_interval = 0.0
    with pytest.raises(HttpResponseError, match=r"\(QuotaExceeded\) not enough cores"):
        failing.compute.begin_create_or_update(AmlCompute(name="cpu-cluster")).result()


def test_rest_wait_operation_timeout() -> None:
    def never_done(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"id": "op", "status": "InProgress"})

    rest = RestClient("http://x", transport=httpx.MockTransport(never_done))
    rest.poll_interval = 0.01
    seen: list[str] = []
    with pytest.raises(TimeoutError):
        rest.wait_operation("op", timeout=0.05, on_progress=lambda op: seen.append(op["status"]))
    assert seen and ws_path("s", "g", "w") == "/api/v1/subscriptions/s/resourceGroups/g/workspaces/w"


@pytest.mark.parametrize(("final", "code"), [("Succeeded", 0), ("Failed", 1)])
def test_cli_create_waits_and_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, final: str, code: int
) -> None:
    _write_home(tmp_path)
    monkeypatch.setenv("CLOUDLET_HOME", str(tmp_path))
    monkeypatch.delenv("CLOUDLET_ENDPOINT", raising=False)
    monkeypatch.setattr(RestClient, "__init__", _fast_init(RestClient.__init__))
    f = tmp_path / "c.yml"
    f.write_text("name: cpu-cluster\ntype: amlcompute\nsize: Standard_DS3_v2\n")
    fake = FakeServer(final)
    state = CliState(transport=httpx.MockTransport(fake))
    result = CliRunner().invoke(
        app, ["compute", "create", "-f", str(f), "--set", "max_instances=4", "-o", "json"], obj=state
    )
    assert result.exit_code == code, result.output
    sent = json.loads(fake.requests[0].content)
    assert sent["max_instances"] == 4 and sent["name"] == "cpu-cluster"
    if code == 0:
        assert json.loads(result.stdout) == CLUSTER
    else:
        assert "QuotaExceeded" in result.output


def test_cli_missing_config_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDLET_HOME", str(tmp_path / "nothing"))
    monkeypatch.delenv("CLOUDLET_ENDPOINT", raising=False)
    result = CliRunner().invoke(app, ["compute", "list"])
    assert result.exit_code == 1
    assert "no cloudlet server configured" in result.output


def _fast_init(orig: Any) -> Any:
    def init(self: RestClient, *args: Any, **kwargs: Any) -> None:
        orig(self, *args, **kwargs)
        self.poll_interval = 0.0

    return init
