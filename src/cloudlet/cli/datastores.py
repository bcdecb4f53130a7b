"""``cloudlet datastore upload|download``: put local files where Azure's samples read them.

Azure's repository puts its sample data in place with ``az storage blob upload-batch``
(``-d <container> --destination-path example-data/... -s ./data``); here the same lands beneath
``azureml://datastores/<name>/paths/<destination-path>``, which jobs and ``azureml:`` data assets read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from cloudlet.cli.compute import state
from cloudlet.cli.output import err_console
from cloudlet.client.artifacts import DEFAULT_DATASTORE, download_from_path, upload_to_path

app = typer.Typer(
    help="Datastore files: upload and download by path (like `az storage blob`).", no_args_is_help=True
)
NameOpt = Annotated[str, typer.Option("-n", "--name", help="The datastore.")]


@app.command("upload")
def upload(
    ctx: typer.Context,
    source: Annotated[
        str, typer.Option("-s", "--source", "--src", help="A local folder (its contents) or file.")
    ],
    destination_path: Annotated[
        str,
        typer.Option(
            "--destination-path", "--path", "-p", help="Where beneath the datastore, e.g. example-data/x."
        ),
    ],
    name: NameOpt = DEFAULT_DATASTORE,
) -> None:
    """Upload a folder's contents (or a file) beneath a datastore path (existing files are replaced)."""
    st = state(ctx)
    done = upload_to_path(st.rest, st.ws_path(), Path(source), destination_path, name)
    err_console.print(f"uploaded {done.size} B from {escape(done.local_path)}", highlight=False)
    st.emit({"path": destination_path.strip("/"), "uri": done.uri})


@app.command("download")
def download(
    ctx: typer.Context,
    path: Annotated[str, typer.Option("--path", "-p", help="A file or folder beneath the datastore.")],
    download_path: Annotated[str, typer.Option("--download-path", "-d", help="Local folder.")] = ".",
    name: NameOpt = DEFAULT_DATASTORE,
) -> None:
    """Download a datastore file, or a folder's contents, into a local folder."""
    st = state(ctx)
    written = download_from_path(st.rest, st.ws_path(), path, download_path, name)
    st.emit([str(Path(download_path) / rel) for rel in written])


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="datastore")
