"""The FastAPI application: routers, error rendering, and start-up (migrate, bootstrap, reconcile)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.routing import APIRoute, APIRouter

from cloudlet import __version__
from cloudlet.api import blob as blob_service
from cloudlet.api import (
    errors,
    online_gateway,
    openapi,
    route_index,
    routes_access,
    routes_admin,
    routes_agent,
    routes_agent_apps,
    routes_agent_data,
    routes_agent_replicas,
    routes_assets,
    routes_batch_endpoints,
    routes_compute,
    routes_data,
    routes_events,
    routes_instance_setup,
    routes_instances,
    routes_jobs,
    routes_metrics,
    routes_online,
    routes_schedules,
    routes_studio,
    routes_teams,
)
from cloudlet.api.arm import assets as arm_assets
from cloudlet.api.arm import batch_endpoints as arm_batch_endpoints
from cloudlet.api.arm import codes as arm_codes
from cloudlet.api.arm import components as arm_components
from cloudlet.api.arm import computes as arm_computes
from cloudlet.api.arm import data_plane as arm_data_plane
from cloudlet.api.arm import datastores as arm_datastores
from cloudlet.api.arm import history as arm_history
from cloudlet.api.arm import jobs as arm_jobs
from cloudlet.api.arm import metadata as arm_metadata
from cloudlet.api.arm import online_endpoints as arm_online
from cloudlet.api.arm import schedules as arm_schedules
from cloudlet.api.arm import workspaces as arm_workspaces
from cloudlet.api.deps import AppState
from cloudlet.api.mlflow import artifacts as mlflow_artifacts
from cloudlet.api.mlflow import experiments as mlflow_experiments
from cloudlet.api.mlflow import models as mlflow_models
from cloudlet.api.mlflow import runs as mlflow_runs

log = logging.getLogger("cloudlet.api")


def _operation_id(route: APIRoute) -> str:
    """Unique per method: a GET+HEAD route would otherwise give two operations one id."""
    methods = "_".join(sorted(m.lower() for m in route.methods or ()))
    return f"{route.name}_{methods}"


def _add_routes(app: FastAPI, router: APIRouter) -> None:
    """The router's routes as the app's own: ``include_router`` would wrap them in an included
    router that FastAPI matches route by route twice per request (~0.3 ms of CPU a request here
    for these ~60 routes); the app's own routes are matched once, by their compiled path."""
    app.router.routes.extend(router.routes)


def create_app(state: AppState) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        state.notifier.bind(asyncio.get_running_loop())
        state.batcher.start(asyncio.get_running_loop())
        for loop in state.loops:
            loop.start()
        await asyncio.to_thread(state.online.load)
        state.online.start_watching()
        yield
        for loop in state.loops:
            loop.stop()
        state.batcher.stop()
        await routes_instances.forwarder.close()
        await online_gateway.gateway.close()
        await asyncio.to_thread(state.online.stop)

    app = FastAPI(
        title="cloudlet",
        version=__version__,
        description="Self-hosted compute for ML teams: workspaces, sizes, quotas, locks, computes.",
        lifespan=lifespan,
        generate_unique_id_function=_operation_id,
    )
    app.state.cloudlet = state
    # Routes are matched in registration order (the first full match wins), so the order
    # matters where paths overlap: routes_jobs before routes_compute, whose catch-all
    # POST {ws}/computes/{name}/{action} would otherwise shadow POST {ws}/computes/{name}/evict.
    # What a match costs no longer depends on the place: route_index (below) finds a path's few
    # candidates in one walk of its segments, not a walk of every route before it.
    for router in (
        routes_agent.router,
        arm_jobs.router,
        routes_jobs.router,
        routes_compute.router,
        routes_data.router,
        routes_assets.router,
        routes_admin.router,
        routes_events.router,
        routes_access.router,
        routes_teams.router,
        routes_agent_apps.router,
        routes_agent_data.router,
        routes_agent_replicas.router,
        routes_instance_setup.router,
        routes_instances.router,  # /instances/{name}/{app}/… and /signin
        arm_history.router,  # /history/v1.0/… (azure-ai-ml's run history)
        arm_history.public,  # its discovery document and signed log URLs
        arm_data_plane.router,  # /data/v1.0/…/batchGetResolvedUris (jobs.download)
        arm_codes.router,  # ARM codes and datastores (issue 12)
        arm_datastores.router,
        arm_assets.router,  # ARM environments, data and models
        arm_components.router,  # ARM components (issue 13)
        routes_batch_endpoints.router,  # batch endpoints (issue 14)
        arm_batch_endpoints.router,
        routes_schedules.router,  # job schedules (az ml schedule)
        arm_schedules.router,
        blob_service.router,  # /blob/{account}/{container}/… (SAS-signed only)
        # The Azure ML (ARM) facade: paths outside /api/v1 (api/arm/).
        arm_metadata.router,
        arm_workspaces.router,
        arm_computes.router,
        # MLflow's tracking API (api/mlflow/): /mlflow/v1.0/subscriptions/…/api/2.0/mlflow/…
        mlflow_runs.router,
        mlflow_experiments.router,
        mlflow_models.router,
        mlflow_artifacts.router,
        routes_online.router,  # online endpoints and deployments (issue 14)
        arm_online.router,  # ARM online endpoints and deployments (issue 14)
        routes_studio.router,  # the studio's one-time sign-in links (issue 27)
    ):
        _add_routes(app, router)
    # The online endpoints' scoring path (/online/{sub}/{rg}/{ws}/{endpoint}/score) first: a plain
    # ASGI route that overlaps no other path (a class of its own: a candidate of every path, one
    # regular expression, for the route index).
    app.router.routes.insert(0, online_gateway.route)

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "installation": state.installation_id, "replica": state.replica_id}

    routes_metrics.install(app)  # GET /metrics and the HTTP requests' counters (issue 29)
    errors.install(app)
    openapi.install(app)
    # Routes matched in one step: a trie of their literal leading segments finds a path's few
    # candidates, in order (api/route_index.py; built on the first request, after the studio's).
    route_index.install(app.router)
    return app
