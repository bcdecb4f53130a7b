"""A folder a browser uploads (as one .zip or .tar.gz, or packed by the page from a folder it
picked), stored where the CLI's upload puts a local folder: ``LocalUpload/<sha256>/<name>`` of
``workspaceblobstore`` (``client/artifacts.upload_data``), so a batch invocation or an asset can
name it by its ``azureml://`` URI."""

from __future__ import annotations

import hashlib
import re

from sqlalchemy.orm import Session

from cloudlet.domain.errors import validation_error
from cloudlet.services.access import workspaces
from cloudlet.services.assets import code_archives
from cloudlet.services.core.storage import DEFAULT_DATASTORE, DataRoot, stat_beneath, unpack_beneath
from cloudlet.store.schema import Workspace

UPLOAD_PREFIX = "LocalUpload"  # the client's (client/artifacts.py)
FOLDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def store_folder(session: Session, data: DataRoot, ws: Workspace, archive: bytes, name: str) -> str:
    """ARCHIVE (a .zip or .tar.gz of a folder's contents) unpacked at
    ``LocalUpload/<sha256 of the tar.gz>/<name>`` of the default datastore, within the workspace's
    storage quota (the same bytes again are not written twice); its ``azureml://`` URI."""
    if not FOLDER_NAME.fullmatch(name):
        raise validation_error("name", "the folder's name: letters, digits, '.', '_' or '-' (100 at most)")
    packed = code_archives.as_tar_gz(archive)
    digest = hashlib.sha256(packed).hexdigest()
    parts = (UPLOAD_PREFIX, digest, name)
    base = data.datastore(ws.id, DEFAULT_DATASTORE)
    if stat_beneath(base, parts) is None:
        unpack_beneath(packed, base, parts, workspaces.storage_budget(session, data, ws.id))
    return f"azureml://datastores/{DEFAULT_DATASTORE}/paths/{'/'.join(parts)}"
