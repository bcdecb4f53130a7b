"""``cloudlet location …`` and ``cloudlet size …``: the pools and the size catalogue (admin)."""

from __future__ import annotations

from typing import Annotated

import typer

from cloudlet.cli.compute import state

location_app = typer.Typer(help="Locations: pools of capacity behind a provider.", no_args_is_help=True)
size_app = typer.Typer(help="Custom VM sizes for your own hardware (admin).", no_args_is_help=True)


@location_app.command("list")
def location_list(ctx: typer.Context) -> None:
    """List locations with their provider and capacity."""
    st = state(ctx)
    st.emit(st.rest.list_values("/api/v1/locations"))


@location_app.command("create")
def location_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Option("-n", "--name", help="Location name, e.g. lab-west.")],
    provider: Annotated[str, typer.Option("--provider", help="Provider kind.")] = "local",
    vcpus: Annotated[int | None, typer.Option("--vcpus", help="vCPUs the pool offers.")] = None,
    memory_gb: Annotated[float | None, typer.Option("--memory-gb", help="Memory the pool offers.")] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", help="GPUs the pool offers.")] = None,
) -> None:
    """Create or update a location (admin)."""
    st = state(ctx)
    capacity = {
        k: v for k, v in {"vcpus": vcpus, "memory_gb": memory_gb, "gpus": gpus}.items() if v is not None
    }
    st.emit(st.rest.put(f"/api/v1/locations/{name}", {"provider": provider, "capacity": capacity}))


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
