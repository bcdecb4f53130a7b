"""Unit tests for compute definitions in the Azure ML CLI v2 YAML shapes (pure, no I/O)."""

from __future__ import annotations

from typing import Any

import pytest

from cloudlet.domain.compute.compute_spec import (
    DEFAULT_IDLE_SCALE_DOWN_S,
    DEFAULT_MAX_INSTANCES,
    AmlComputeSpec,
    ComputeInstanceSpec,
    KubernetesSpec,
    VirtualMachineSpec,
    doc_to_spec,
    iso_minutes,
    parse_compute,
    seconds_to_iso,
    spec_to_doc,
)
from cloudlet.domain.errors import CloudletError

SCHEMA = "https://azuremlschemas.azureedge.net/latest/amlCompute.schema.json"


def cluster(**extra: Any) -> dict[str, Any]:
    return {
        "$schema": SCHEMA,
        "name": "cpu-cluster",
        "type": "amlcompute",
        "size": "Standard_DS3_v2",
        **extra,
    }


def instance(**extra: Any) -> dict[str, Any]:
    return {"name": "ci1", "type": "computeinstance", "size": "Standard_DS3_v2", **extra}


def refused(doc: Any, name: str | None = None) -> CloudletError:
    with pytest.raises(CloudletError) as info:
        parse_compute(doc, name)
    error = info.value
    assert error.status == 400
    return error


# --- accepted shapes -------------------------------------------------------------------------


def test_amlcompute_defaults() -> None:
    spec = parse_compute(cluster())
    assert isinstance(spec, AmlComputeSpec)
    assert spec.name == "cpu-cluster"
    assert spec.min_instances == 0
    assert spec.max_instances == DEFAULT_MAX_INSTANCES == 4
    assert spec.idle_time_before_scale_down == DEFAULT_IDLE_SCALE_DOWN_S == 120
    assert spec.tier == "dedicated"
    assert spec.ssh_public_access_enabled is False
    assert spec.tags == {}


def test_amlcompute_full_document() -> None:
    spec = parse_compute(
        cluster(
            min_instances=1,
            max_instances=8,
            idle_time_before_scale_down=300,
            tier="low_priority",
            location="westeurope",
            description="training",
            tags={"team": "ml"},
            identity={"type": "user_assigned", "user_assigned_identities": [{"resource_id": "/x/id"}]},
            ssh_settings={"admin_username": "azureuser", "ssh_key_value": "ssh-rsa AAAA"},
            network_settings={"vnet_name": "vnet", "subnet": "default"},
        )
    )
    assert isinstance(spec, AmlComputeSpec)
    assert (spec.min_instances, spec.max_instances, spec.idle_time_before_scale_down) == (1, 8, 300)
    assert spec.tier == "low_priority"
    assert spec.tags == {"team": "ml"}
    assert spec.identity is not None and spec.identity.type == "user_assigned"
    assert spec.ssh_settings is not None and spec.ssh_settings.admin_username == "azureuser"
    assert spec.network_settings is not None and spec.network_settings.subnet == "default"


def test_schema_key_is_ignored() -> None:
    with_schema = parse_compute(cluster())
    without = parse_compute({k: v for k, v in cluster().items() if k != "$schema"})
    assert spec_to_doc(with_schema) == spec_to_doc(without)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("dedicated", "dedicated"),
        ("Dedicated", "dedicated"),
        ("low_priority", "low_priority"),
        ("LowPriority", "low_priority"),
        ("lowpriority", "low_priority"),
        ("low-priority", "low_priority"),
        ("LOW_PRIORITY", "low_priority"),
    ],
)
def test_tier_is_normalised(raw: str, expected: str) -> None:
    spec = parse_compute(cluster(tier=raw))
    assert isinstance(spec, AmlComputeSpec)
    assert spec.tier == expected


@pytest.mark.parametrize("kind", ["AmlCompute", "AMLCOMPUTE", "amlcompute"])
def test_type_is_case_insensitive(kind: str) -> None:
    spec = parse_compute(cluster(type=kind))
    assert spec.type == "amlcompute"


def test_computeinstance_full_document() -> None:
    spec = parse_compute(
        instance(
            idle_time_before_shutdown_minutes=30,
            schedules={
                "compute_start_stop": [
                    {"action": "stop", "trigger": {"type": "cron", "expression": "0 18 * * 1-5"}},
                    {
                        "action": "start",
                        "state": "disabled",
                        "trigger": {"type": "recurrence", "frequency": "day", "interval": 1},
                    },
                ]
            },
            setup_scripts={
                "creation_script": {"path": "setup.sh"},
                "startup_script": {"command": "echo hi", "timeout_minutes": 10},
            },
            create_on_behalf_of={"user_object_id": "00000000-0000-0000-0000-000000000001"},
            ssh_public_access_enabled=True,
            ssh_settings={"ssh_key_value": "ssh-ed25519 AAAA"},
            enable_sso=False,
            release_quota_on_stop=True,
        )
    )
    assert isinstance(spec, ComputeInstanceSpec)
    assert spec.idle_time_before_shutdown_minutes == 30
    assert spec.schedules is not None
    first, second = spec.schedules.compute_start_stop
    assert (first.action, first.state, first.trigger.type) == ("stop", "enabled", "cron")
    assert first.trigger.time_zone == "UTC"
    assert (second.action, second.state, second.trigger.frequency) == ("start", "disabled", "day")
    assert spec.setup_scripts is not None
    assert spec.setup_scripts.creation_script is not None
    assert spec.setup_scripts.creation_script.timeout_minutes == 30
    assert spec.setup_scripts.startup_script is not None
    assert spec.setup_scripts.startup_script.command == "echo hi"
    assert spec.enable_sso is False
    assert spec.release_quota_on_stop is True


def test_computeinstance_defaults() -> None:
    spec = parse_compute(instance())
    assert isinstance(spec, ComputeInstanceSpec)
    assert spec.idle_time_before_shutdown_minutes is None
    assert spec.enable_sso is True
    assert spec.enable_root_access is True
    assert spec.enable_os_patching is False


@pytest.mark.parametrize(
    ("iso", "minutes"),
    [("PT15M", 15), ("PT1H30M", 90), ("P1D", 1440), ("P3D", 4320), ("PT2H", 120)],
)
def test_instance_idle_from_iso_duration(iso: str, minutes: int) -> None:
    spec = parse_compute(instance(idle_time_before_shutdown=iso))
    assert isinstance(spec, ComputeInstanceSpec)
    assert spec.idle_time_before_shutdown_minutes == minutes


@pytest.mark.parametrize("minutes", [15, 60, 4320])
def test_instance_idle_bounds_are_inclusive(minutes: int) -> None:
    spec = parse_compute(instance(idle_time_before_shutdown_minutes=minutes))
    assert isinstance(spec, ComputeInstanceSpec)
    assert spec.idle_time_before_shutdown_minutes == minutes


@pytest.mark.parametrize(
    "target", [{"resource_id": "/subscriptions/s/.../virtualMachines/vm1"}, {"address": "10.0.0.4"}]
)
def test_virtualmachine_attach(target: dict[str, str]) -> None:
    spec = parse_compute(
        {"name": "vm1", "type": "virtualmachine", **target, "ssh_settings": {"admin_username": "u"}}
    )
    assert isinstance(spec, VirtualMachineSpec)


def test_kubernetes_defaults_namespace() -> None:
    spec = parse_compute({"name": "k8s", "type": "kubernetes", "resource_id": "/x/connectedClusters/a"})
    assert isinstance(spec, KubernetesSpec)
    assert spec.namespace == "default"


def test_url_name_fills_a_missing_body_name() -> None:
    doc = cluster()
    del doc["name"]
    assert parse_compute(doc, "from-url").name == "from-url"


def test_url_name_matching_body_name_is_fine() -> None:
    assert parse_compute(cluster(), "cpu-cluster").name == "cpu-cluster"


def test_parse_does_not_mutate_the_input() -> None:
    doc = cluster(type="AmlCompute")
    del doc["name"]
    before = dict(doc)
    parse_compute(doc, "c1")
    assert doc == before


def test_numeric_strings_are_coerced() -> None:
    spec = parse_compute(cluster(min_instances="2", max_instances="3"))
    assert isinstance(spec, AmlComputeSpec)
    assert (spec.min_instances, spec.max_instances) == (2, 3)


# --- refusals --------------------------------------------------------------------------------


def test_not_a_mapping() -> None:
    error = refused(["type", "amlcompute"])
    assert error.target == "$"
    assert "mapping" in error.message


@pytest.mark.parametrize("kind", ["gpucluster", None, 3, ""])
def test_unknown_type(kind: Any) -> None:
    error = refused(cluster(type=kind))
    assert error.code == "InvalidComputeType"
    assert error.target == "type"
    assert "amlcompute, computeinstance, virtualmachine, kubernetes" in error.message


def test_missing_type() -> None:
    doc = cluster()
    del doc["type"]
    assert refused(doc).target == "type"


def test_unknown_top_level_field() -> None:
    error = refused(cluster(max_nodes=3))
    assert error.code == "ValidationError"
    assert error.target == "max_nodes"
    assert "unknown field 'max_nodes'" in error.message
    assert "remove it" in error.message
    assert "max_instances" in error.message  # the allowed fields are listed
    assert "$schema" in error.message


def test_field_of_another_type_is_unknown() -> None:
    error = refused(cluster(idle_time_before_shutdown_minutes=30))
    assert error.target == "idle_time_before_shutdown_minutes"
    assert "for type amlcompute" in error.message


@pytest.mark.parametrize(
    ("doc", "target"),
    [
        (cluster(ssh_settings={"admin_user": "u"}), "ssh_settings.admin_user"),
        (cluster(network_settings={"vnet": "v"}), "network_settings.vnet"),
        (
            instance(setup_scripts={"startup_script": {"command": "ls", "timeout": 5}}),
            "setup_scripts.startup_script.timeout",
        ),
        (
            instance(
                schedules={
                    "compute_start_stop": [
                        {"action": "stop", "trigger": {"type": "cron", "expression": "0 1 * * *", "tz": "x"}}
                    ]
                }
            ),
            "schedules.compute_start_stop[0].trigger.tz",
        ),
    ],
)
def test_unknown_nested_field(doc: dict[str, Any], target: str) -> None:
    error = refused(doc)
    assert error.target == target
    field = target.rsplit(".", 1)[-1]
    assert f"unknown field '{field}' at '{target}'" in error.message
    assert "remove it" in error.message


@pytest.mark.parametrize(
    ("field", "value", "phrase"),
    [
        ("min_instances", "two", "must be a whole number"),
        ("max_instances", 2.5, "must be a whole number"),
        ("idle_time_before_scale_down", "soon", "must be a whole number"),
        ("ssh_public_access_enabled", "maybe", "must be true or false"),
        ("tags", ["a"], "must be a mapping"),
        ("ssh_settings", "azureuser", "must be a mapping"),
        ("size", 42, "must be a string"),
        ("tier", "spot", "must be one of"),
    ],
)
def test_wrong_type(field: str, value: Any, phrase: str) -> None:
    error = refused(cluster(**{field: value}))
    assert error.target == field
    assert phrase in error.message
    assert repr(value) in error.message


@pytest.mark.parametrize(("field", "value"), [("min_instances", -1), ("max_instances", 0)])
def test_out_of_range_counts(field: str, value: int) -> None:
    error = refused(cluster(**{field: value}))
    assert error.target == field
    assert "greater than or equal" in error.message


def test_missing_required_field() -> None:
    error = refused(cluster(identity={}))
    assert error.target == "identity.type"
    assert "'identity.type' is required" in error.message


@pytest.mark.parametrize("kind", ["amlcompute", "computeinstance"])
def test_minimal_file_gets_the_default_size(kind: str) -> None:
    """Issue 12 item 6: Azure ML's cluster-minimal.yml / instance-minimal.yml are a name and a type;
    the size is Standard_DS3_v2 (azure-ai-ml's ComputeDefaults.VMSIZE)."""
    spec = parse_compute({"name": "minimal", "type": kind})
    assert spec.size == "Standard_DS3_v2"  # type: ignore[union-attr]


def test_several_problems_are_all_reported() -> None:
    error = refused(cluster(min_instances="x", max_instances="y"))
    assert error.target == "min_instances"
    assert [d["target"] for d in error.details] == ["min_instances", "max_instances"]
    assert all(d["code"] == "ValidationError" for d in error.details)
    assert "min_instances:" in error.message and "max_instances:" in error.message


def test_max_below_min() -> None:
    error = refused(cluster(min_instances=5, max_instances=2))
    assert error.target == "max_instances"
    assert "max_instances (2) is less than min_instances (5)" in error.message
    assert "set max_instances ≥ min_instances" in error.message


def test_min_above_default_max() -> None:
    error = refused(cluster(min_instances=5))
    assert error.target == "max_instances"
    assert "max_instances (4)" in error.message


def test_max_equal_min_is_fine() -> None:
    spec = parse_compute(cluster(min_instances=3, max_instances=3))
    assert isinstance(spec, AmlComputeSpec)


@pytest.mark.parametrize("minutes", [0, 14, 4321, 10_000])
def test_instance_idle_minutes_out_of_range(minutes: int) -> None:
    error = refused(instance(idle_time_before_shutdown_minutes=minutes))
    assert error.target == "idle_time_before_shutdown_minutes"
    assert "between 15 minutes and 3 days (4320 minutes)" in error.message
    assert f"got {minutes} minutes" in error.message


@pytest.mark.parametrize(("iso", "minutes"), [("PT10M", 10), ("P4D", 5760), ("PT4321M", 4321)])
def test_instance_idle_iso_out_of_range(iso: str, minutes: int) -> None:
    error = refused(instance(idle_time_before_shutdown=iso))
    assert error.target == "idle_time_before_shutdown"
    assert f"got {minutes} minutes" in error.message


@pytest.mark.parametrize("iso", ["junk", "30M", "PT", "P", "PT1.5H"])
def test_instance_idle_iso_not_a_duration(iso: str) -> None:
    error = refused(instance(idle_time_before_shutdown=iso))
    assert error.target == "idle_time_before_shutdown"
    assert "is not an ISO 8601 duration such as 'PT30M'" in error.message


def start_stop(trigger: dict[str, Any]) -> dict[str, Any]:
    return instance(schedules={"compute_start_stop": [{"action": "stop", "trigger": trigger}]})


@pytest.mark.parametrize("expression", ["nope", "61 * * * *", "* * *", "0 25 * * *"])
def test_invalid_cron(expression: str) -> None:
    error = refused(start_stop({"type": "cron", "expression": expression}))
    assert error.target == "schedules.compute_start_stop[0].trigger"
    assert f"'{expression}' is not a valid cron expression" in error.message
    assert "e.g. '0 18 * * 1-5'" in error.message


def test_cron_without_expression() -> None:
    error = refused(start_stop({"type": "cron"}))
    assert error.target == "schedules.compute_start_stop[0].trigger"
    assert "needs 'expression'" in error.message


@pytest.mark.parametrize("trigger", [{"interval": 1}, {"frequency": "day"}, {}])
def test_recurrence_without_frequency_or_interval(trigger: dict[str, Any]) -> None:
    error = refused(start_stop({"type": "recurrence", **trigger}))
    assert error.target == "schedules.compute_start_stop[0].trigger"
    assert "needs 'frequency' and 'interval'" in error.message


def test_recurrence_with_bad_frequency() -> None:
    error = refused(start_stop({"type": "recurrence", "frequency": "fortnight", "interval": 1}))
    assert error.target == "schedules.compute_start_stop[0].trigger.frequency"


def test_schedule_problem_in_second_entry_points_at_it() -> None:
    doc = instance(
        schedules={
            "compute_start_stop": [
                {"action": "stop", "trigger": {"type": "cron", "expression": "0 18 * * *"}},
                {"action": "start", "trigger": {"type": "cron", "expression": "bad"}},
            ]
        }
    )
    assert refused(doc).target == "schedules.compute_start_stop[1].trigger"


@pytest.mark.parametrize(
    "script", [{"path": "a.sh", "command": "ls"}, {}, {"timeout_minutes": 5}, {"path": "", "command": ""}]
)
def test_script_needs_exactly_one_of_path_or_command(script: dict[str, Any]) -> None:
    error = refused(instance(setup_scripts={"creation_script": script}))
    assert error.target == "setup_scripts.creation_script"
    assert "give exactly one of 'path' or 'command'" in error.message


@pytest.mark.parametrize("ssh", [None, {}, {"admin_username": "u"}, {"ssh_key_value": ""}])
def test_instance_ssh_access_needs_a_key(ssh: dict[str, Any] | None) -> None:
    doc = instance(ssh_public_access_enabled=True)
    if ssh is not None:
        doc["ssh_settings"] = ssh
    error = refused(doc)
    assert error.target == "ssh_settings.ssh_key_value"
    assert "ssh_public_access_enabled needs ssh_settings.ssh_key_value" in error.message


def test_vm_attach_needs_resource_id_or_address() -> None:
    error = refused({"name": "vm1", "type": "virtualmachine"})
    assert error.target == "resource_id"
    assert "'resource_id'" in error.message and "'address'" in error.message


@pytest.mark.parametrize(
    "name",
    ["a", "1cluster", "-cluster", "my_cluster", "my cluster", "a" * 33, "clüster", ""],
)
def test_bad_name(name: str) -> None:
    error = refused(cluster(name=name))
    assert error.target == "name"
    assert "2–32 characters, start with a letter" in error.message


@pytest.mark.parametrize("name", ["ab", "A1", "cpu-cluster", "a" * 32])
def test_good_name(name: str) -> None:
    assert parse_compute(cluster(name=name)).name == name


def test_name_with_trailing_newline_is_refused() -> None:
    refused(cluster(name="ab\n"))


def test_bad_name_from_url() -> None:
    doc = cluster()
    del doc["name"]
    assert refused(doc, "_bad").target == "name"


def test_body_name_differs_from_url_name() -> None:
    error = refused(cluster(name="other"), "cpu-cluster")
    assert error.target == "name"
    assert "the body names 'other' but the request is for 'cpu-cluster'" in error.message
    assert "make them match" in error.message


# --- stored form -----------------------------------------------------------------------------


def test_spec_to_doc_drops_secrets_and_schema() -> None:
    spec = parse_compute(
        cluster(ssh_settings={"admin_username": "azureuser", "admin_password": "hunter2", "ssh_port": 22})
    )
    doc = spec_to_doc(spec)
    assert "$schema" not in doc
    assert "schema_" not in doc
    assert doc["ssh_settings"] == {"admin_username": "azureuser", "ssh_port": 22}
    assert "hunter2" not in repr(doc)


def test_spec_to_doc_fills_defaults_and_omits_none() -> None:
    doc = spec_to_doc(parse_compute(cluster()))
    assert doc == {
        "name": "cpu-cluster",
        "type": "amlcompute",
        "size": "Standard_DS3_v2",
        "tags": {},
        "min_instances": 0,
        "max_instances": 4,
        "idle_time_before_scale_down": 120,
        "tier": "dedicated",
        "ssh_public_access_enabled": False,
        "enable_node_public_ip": True,
    }


def test_spec_to_doc_does_not_change_the_spec() -> None:
    spec = parse_compute(cluster(ssh_settings={"admin_password": "hunter2"}))
    spec_to_doc(spec)
    assert isinstance(spec, AmlComputeSpec)
    assert spec.ssh_settings is not None and spec.ssh_settings.admin_password == "hunter2"


@pytest.mark.parametrize(
    "doc",
    [
        cluster(tier="LowPriority", min_instances=1, tags={"a": "b"}),
        instance(
            idle_time_before_shutdown="PT1H",
            schedules={
                "compute_start_stop": [
                    {"action": "stop", "trigger": {"type": "cron", "expression": "0 1 * * *"}}
                ]
            },
        ),
        {"name": "vm1", "type": "virtualmachine", "address": "10.0.0.4"},
        {"name": "k8s", "type": "kubernetes"},
    ],
)
def test_stored_doc_round_trips(doc: dict[str, Any]) -> None:
    spec = parse_compute(doc)
    stored = spec_to_doc(spec)
    assert spec_to_doc(doc_to_spec(stored)) == stored
    assert spec_to_doc(parse_compute(stored)) == stored


# --- durations -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("iso", "minutes"),
    [
        ("PT30M", 30),
        ("PT1H30M", 90),
        ("PT1H", 60),
        ("P1D", 1440),
        ("P1DT2H3M", 1440 + 123),
        ("PT90S", 1),
        ("PT59S", 0),
        ("PT0S", 0),
        ("PT1H0M120S", 62),
    ],
)
def test_iso_minutes(iso: str, minutes: int) -> None:
    assert iso_minutes(iso, "f") == minutes


@pytest.mark.parametrize("bad", ["", "P", "PT", "30M", "PT-5M", "pt30m", "PT30M ", "P1W"])
def test_iso_minutes_refuses(bad: str) -> None:
    with pytest.raises(ValueError, match="not an ISO 8601 duration"):
        iso_minutes(bad, "f")


@pytest.mark.parametrize(
    ("seconds", "iso"),
    [
        (0, "PT0S"),
        (59, "PT59S"),
        (60, "PT1M"),
        (120, "PT2M"),
        (3600, "PT1H"),
        (3661, "PT1H1M1S"),
        (5400, "PT1H30M"),
        (86400, "PT24H"),
    ],
)
def test_seconds_to_iso(seconds: int, iso: str) -> None:
    assert seconds_to_iso(seconds) == iso


@pytest.mark.parametrize("seconds", [0, 1, 59, 60, 61, 120, 900, 3599, 3600, 3661, 7260, 86400, 259200])
def test_seconds_iso_round_trip(seconds: int) -> None:
    assert iso_minutes(seconds_to_iso(seconds), "f") == seconds // 60


@pytest.mark.parametrize("minutes", [15, 30, 60, 90, 1440, 4320])
def test_minutes_iso_round_trip(minutes: int) -> None:
    assert iso_minutes(seconds_to_iso(minutes * 60), "f") == minutes
