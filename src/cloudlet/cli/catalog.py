"""``cloudlet location …`` and ``cloudlet size …``: the pools and the size catalogue (admin)."""

from __future__ import annotations

from typing import Annotated

import typer

from cloudlet.cli.compute import load_yaml_file, state
from cloudlet.cli.state import CliState
from cloudlet.client._rest import API_PREFIX
from cloudlet.client.locations import LocationOperations
from cloudlet.client.operations import _Scope

location_app = typer.Typer(help="Locations: pools of capacity behind a provider.", no_args_is_help=True)
size_app = typer.Typer(help="Custom VM sizes for your own hardware (admin).", no_args_is_help=True)


ConfigOpt = Annotated[
    str | None,
    typer.Option("--config", help="The provider's settings: a YAML or JSON file ('-': stdin)."),
]
ProviderOpt = Annotated[
    str | None, typer.Option("--provider", help="Provider name (see `cloudlet location providers`).")
]
VcpusOpt = Annotated[int | None, typer.Option("--vcpus", help="vCPUs the pool offers.")]
MemoryOpt = Annotated[float | None, typer.Option("--memory-gb", help="Memory the pool offers.")]
GpusOpt = Annotated[int | None, typer.Option("--gpus", help="GPUs the pool offers.")]
LocationName = Annotated[str, typer.Option("-n", "--name", help="Location name, e.g. lab-west.")]


def _locations(ctx: typer.Context) -> tuple[CliState, LocationOperations]:
    st = state(ctx)
    return st, LocationOperations(st.rest, _Scope(st.config))


def _put(
    ctx: typer.Context,
    name: str,
    provider: str | None,
    config_file: str | None,
    capacity: dict[str, float | None],
    accept_host_keys: list[str] | None = None,
) -> None:
    st, ops = _locations(ctx)
    config = load_yaml_file(config_file, "provider setting") if config_file is not None else None
    given = {k: v for k, v in capacity.items() if v is not None}
    st.emit(ops.create_or_update(name, provider, config, given, accept_host_keys or ()))


@location_app.command("list")
def location_list(ctx: typer.Context) -> None:
    """List locations with their provider, its settings and the capacity."""
    st, ops = _locations(ctx)
    st.emit(ops.list(), "location")


@location_app.command("providers")
def location_providers(ctx: typer.Context) -> None:
    """The providers a location can name, and the settings each takes in --config."""
    st = state(ctx)
    st.emit(st.rest.list_values(f"{API_PREFIX}/providers"))


@location_app.command("show")
def location_show(ctx: typer.Context, name: LocationName) -> None:
    """One location."""
    st, ops = _locations(ctx)
    st.emit(ops.get(name))


@location_app.command("create")
def location_create(
    ctx: typer.Context,
    name: LocationName,
    provider: ProviderOpt = None,
    config: ConfigOpt = None,
    vcpus: VcpusOpt = None,
    memory_gb: MemoryOpt = None,
    gpus: GpusOpt = None,
) -> None:
    """Create a location (or update it, if it exists) (admin). No --provider: local."""
    _put(ctx, name, provider, config, {"vcpus": vcpus, "memory_gb": memory_gb, "gpus": gpus})


@location_app.command("update")
def location_update(
    ctx: typer.Context,
    name: LocationName,
    provider: ProviderOpt = None,
    config: ConfigOpt = None,
    vcpus: VcpusOpt = None,
    memory_gb: MemoryOpt = None,
    gpus: GpusOpt = None,
    accept_host_key: Annotated[
        list[str] | None,
        typer.Option(
            "--accept-host-key",
            help="SSH location: ADDRESS[:PORT] of a host whose changed host key to accept (repeatable).",
        ),
    ] = None,
) -> None:
    """Change an existing location (admin): only what is given changes; a new --provider without
    --config starts from that provider's defaults."""
    _locations(ctx)[1].get(name)  # an update never creates: a missing location is an error
    capacity = {"vcpus": vcpus, "memory_gb": memory_gb, "gpus": gpus}
    _put(ctx, name, provider, config, capacity, accept_host_key)


@location_app.command("delete")
def location_delete(ctx: typer.Context, name: LocationName) -> None:
    """Remove a location nothing is in (admin)."""
    st, ops = _locations(ctx)
    ops.delete(name)
    st.emit({"deleted": name})


@size_app.command("create")
def size_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Option("-n", "--name", help="Size name, e.g. Lab_GPU_A40.")],
    vcpus: Annotated[int, typer.Option("--vcpus")],
    memory_gb: Annotated[float, typer.Option("--memory-gb")],
    gpus: Annotated[int, typer.Option("--gpus")] = 0,
    gpu_model: Annotated[str | None, typer.Option("--gpu-model")] = None,
    gpu_architecture: Annotated[str | None, typer.Option("--gpu-architecture", help="e.g. Ampere")] = None,
    family: Annotated[str, typer.Option("--family", help="Quota family.")] = "customFamily",
    price: Annotated[float, typer.Option("--price", help="Dedicated price per hour.")] = 0.0,
    low_priority_price: Annotated[float | None, typer.Option("--low-priority-price")] = 0.0,
) -> None:
    """Add a custom size for your own hardware (admin)."""
    st = state(ctx)
    body = {
        "name": name,
        "vcpus": vcpus,
        "memory_gb": memory_gb,
        "gpus": gpus,
        "gpu_model": gpu_model,
        "gpu_architecture": gpu_architecture,
        "family": family,
        "price_dedicated": price,
        "price_low_priority": low_priority_price,
    }
    st.emit(st.rest.post("/api/v1/sizes", {k: v for k, v in body.items() if v is not None}), "size")


def register(app: typer.Typer) -> None:
    app.add_typer(location_app, name="location")
    app.add_typer(size_app, name="size")
