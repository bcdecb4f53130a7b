"""What points azure-ai-ml at cloudlet: the cloud metadata (``ARM_CLOUD_METADATA_URL``) and the
managed-identity token endpoint (``IDENTITY_ENDPOINT``, as App Service serves it). The workspace's
discovery document (``properties.discoveryUrl``) is the run history's (``api/arm/history.py``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request, Response

from cloudlet.api.arm import https_base
from cloudlet.api.deps import AML_RESOURCE_ID, PORTAL, AppState, Context, app_state, context, json_response
from cloudlet.api.openapi import errors
from cloudlet.api.routing import PublicRoute
from cloudlet.domain.errors import CloudletError
from cloudlet.services.access import identity

router = APIRouter(tags=["azureml"], route_class=PublicRoute)
# Where the SDK would upload blobs (https://{account}.blob.{suffix}); the blob service sets its own.
STORAGE_SUFFIX = "core.windows.net"


@router.get("/metadata/endpoints")
async def cloud_metadata(request: Request, state: AppState = Depends(app_state)) -> Response:
    """One cloud, named ``cloudlet``, whose resource manager is this listener (no store, no auth:
    the SDK reads it often). ``portal`` makes the SDK's ``aml_resource_id`` ``AML_RESOURCE_ID``."""
    base = https_base(request, state) + "/"
    cloud = {
        "name": "cloudlet",
        "portal": PORTAL,
        "resourceManager": base,
        "authentication": {"loginEndpoint": base, "audiences": [base, AML_RESOURCE_ID]},
        "suffixes": {"storage": STORAGE_SUFFIX},
    }
    return json_response([cloud])


@router.get("/msi/token", responses=errors(400, 401, 503))
def msi_token(
    resource: Annotated[
        str,
        Query(
            min_length=1,
            max_length=512,
            description="the audience wanted: https://ml.azure.cloudlet, this server's HTTPS URL, or "
            "https://storage.azure.com (a trailing '/' or '/.default' is accepted); others are a 400",
        ),
    ],
    x_identity_header: Annotated[
        str | None,
        Header(
            alias="X-IDENTITY-HEADER",
            max_length=4096,
            description="a cloudlet credential: an API key or access token (IDENTITY_HEADER)",
        ),
    ] = None,
    ctx: Context = Depends(context),
) -> Response:
    """A JWT for the principal behind the credential in ``X-IDENTITY-HEADER``, with ``aud`` the
    requested resource, as an App Service managed identity answers ``DefaultAzureCredential``;
    only for the audiences azure-ai-ml and jobs use (``identity.token_audience``), else 400."""
    if not x_identity_header:
        raise CloudletError(
            "AuthenticationFailed",
            "missing X-IDENTITY-HEADER: set IDENTITY_HEADER to a cloudlet API key or access token "
            '(eval "$(cloudlet azureml env)")',
            "X-IDENTITY-HEADER",
            401,
        )
    state = ctx.state
    caller = identity.authenticate(ctx.session, x_identity_header, state.token_secret, state.https.audiences)
    audience = identity.token_audience(resource, state.https.audiences)
    token, expires = identity.mint_jwt(
        ctx.session, caller, x_identity_header, state.token_secret, audience, state.installation_id
    )
    body = {
        "access_token": token,
        "expires_on": str(expires),
        "resource": audience,
        "token_type": "Bearer",
        "client_id": caller.name,
    }
    return json_response(body, headers={"Cache-Control": "no-store"})
