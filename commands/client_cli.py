"""The client commands of ``gradacc``: submit, jobs, status, metrics, cancel, logs, upload,
download. They talk to the API at ``--server`` / ``GRADACC_SERVER`` with ``--api-key`` /
``GRADACC_API_KEY``.

Exit status: 0 succeeded (or done), 1 failed (or an API/connection error), 2 bad usage or spec,
3 cancelled. ``--json`` prints machine-readable JSON on stdout instead of tables.
"""

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.console import Console

from commands.client import ApiError, Client
from commands.client_view import follow_job, job_table, metrics_table, print_events

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CANCELLED = 0, 1, 2, 3
EXIT_OF_STATUS = {"succeeded": EXIT_OK, "failed": EXIT_FAILED, "cancelled": EXIT_CANCELLED}

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
out, err = Console(), Console(stderr=True)

Server = Annotated[str, typer.Option(envvar="GRADACC_SERVER", help="The API's base URL")]
ApiKey = Annotated[str | None, typer.Option(envvar="GRADACC_API_KEY", help="A bearer key")]
Json = Annotated[bool, typer.Option("--json", help="JSON on stdout, for scripts")]
JobId = Annotated[str, typer.Argument(help="A job id (job_…)")]
DEFAULT_SERVER = "http://127.0.0.1:8000"


def _fail(message: str, code: int) -> NoReturn:
    err.print(f"[red]gradacc:[/red] {message}", highlight=False)
    raise typer.Exit(code)


def _call(server: str, api_key: str | None, work: Callable[[Client], int]) -> None:
    """Run ``work`` with a client; API and connection errors become a message and an exit code."""
    try:
        with Client(server, api_key=api_key) as client:
            code = work(client)
    except ApiError as exc:
        _fail(str(exc), EXIT_USAGE if exc.status in (400, 413, 422) else EXIT_FAILED)
    except httpx.HTTPError as exc:
        _fail(f"cannot reach {server}: {type(exc).__name__}: {exc}", EXIT_FAILED)
    raise typer.Exit(code)


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2) + "\n")


def load_spec(path: Path, overrides: list[str]) -> dict[str, Any]:
    """The spec file with each ``key=value`` applied (value read as JSON, else as a string)."""
    try:
        spec = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        _fail(f"cannot read spec {path}: {exc}", EXIT_USAGE)
    if not isinstance(spec, dict):
        _fail(f"spec {path} is not a JSON object", EXIT_USAGE)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            _fail(f"--set {item!r}: expected key=value", EXIT_USAGE)
        try:
            spec[key] = json.loads(raw)
        except json.JSONDecodeError:
            spec[key] = raw
    return spec


@app.command()
def submit(
    spec_file: Annotated[Path, typer.Argument(metavar="SPEC.json", help="A JSON job spec")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="key=value, repeatable")] = None,
    follow: Annotated[bool, typer.Option("--follow", help="Live progress, then metrics")] = False,
    server: Server = DEFAULT_SERVER,
    api_key: ApiKey = None,
    as_json: Json = False,
) -> None:
    """Submit a job; with --follow, watch it to the end (the exit status says how it ended)."""
    spec = load_spec(spec_file, set_ or [])

    def work(client: Client) -> int:
        job = client.submit(spec)
        if not follow:
            _print_json(job) if as_json else out.print(job["id"])
            return EXIT_OK
        if not as_json:
            err.print(f"submitted {job['id']}", highlight=False)
        final = follow_job(client, job, quiet=as_json)
        _show_final(client, final, as_json)
        return EXIT_OF_STATUS.get(final["status"], EXIT_FAILED)

    _call(server, api_key, work)


def _show_final(client: Client, job: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _print_json(job | {"metrics_by_epoch": client.metrics(job["id"])})
        return
    out.print(metrics_table(client.metrics(job["id"])))
    out.print(f"{job['id']} {job['status']}", highlight=False)
    if job.get("error"):
        out.print(f"error ({job['error']['code']}): {job['error']['message']}", highlight=False)


@app.command()
def jobs(
    status: Annotated[str | None, typer.Option(help="Only jobs in this status")] = None,
    name: Annotated[str | None, typer.Option(help="Only jobs of this name")] = None,
    metadata: Annotated[
        list[str] | None, typer.Option("--metadata", help="KEY=VALUE, repeatable: jobs with it")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=100)] = 20,
    server: Server = DEFAULT_SERVER,
    api_key: ApiKey = None,
    as_json: Json = False,
) -> None:
    """The newest jobs: id (whole), name or suffix, model, status, progress, age; and backend
    and bxK in a terminal of 120 columns or more."""
    pairs = {}
    for item in metadata or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"--metadata {item!r}: expected KEY=VALUE", EXIT_USAGE)
        pairs[key] = value

    def work(client: Client) -> int:
        found = client.jobs(status=status, limit=limit, name=name, metadata=pairs)
        _print_json(found) if as_json else out.print(job_table(found, width=out.width))
        return EXIT_OK

    _call(server, api_key, work)


@app.command()
def status(
    job_id: JobId, server: Server = DEFAULT_SERVER, api_key: ApiKey = None, as_json: Json = False
) -> None:
    """One job: status, progress, name, suffix, metadata, its model once it succeeded and the
    latest metrics."""

    def work(client: Client) -> int:
        job = client.get(job_id)
        _print_json(job) if as_json else out.print(job_table([job], detail=True, width=out.width))
        return EXIT_OK

    _call(server, api_key, work)


@app.command()
def metrics(
    job_id: JobId,
    steps: Annotated[bool, typer.Option("--steps", help="Step records, not epochs")] = False,
    server: Server = DEFAULT_SERVER,
    api_key: ApiKey = None,
    as_json: Json = False,
) -> None:
    """A job's metrics: one row per epoch (or per logging step with --steps)."""

    def work(client: Client) -> int:
        records = client.metrics(job_id, granularity="step" if steps else "epoch")
        _print_json(records) if as_json else out.print(metrics_table(records))
        return EXIT_OK

    _call(server, api_key, work)


@app.command()
def cancel(
    job_id: JobId, server: Server = DEFAULT_SERVER, api_key: ApiKey = None, as_json: Json = False
) -> None:
    """Cancel a queued or running job."""

    def work(client: Client) -> int:
        job = client.cancel(job_id)
        _print_json(job) if as_json else out.print(f"{job['id']} {job['status']}")
        return EXIT_OK

    _call(server, api_key, work)


@app.command()
def logs(
    job_id: JobId,
    follow: Annotated[bool, typer.Option("--follow", help="Keep printing until the end")] = False,
    server: Server = DEFAULT_SERVER,
    api_key: ApiKey = None,
    as_json: Json = False,
) -> None:
    """A job's event log; with --follow, new events as they happen, to the final status."""

    def work(client: Client) -> int:
        if not follow:
            found = client.events(job_id)
            _print_json(found) if as_json else print_events(out, found)
            return EXIT_OK
        final: dict[str, Any] = {}
        for kind, data in client.stream(job_id):
            if kind == "event":
                _print_json(data) if as_json else print_events(out, [data])
            elif kind == "job":
                final = data
        return EXIT_OF_STATUS.get(final.get("status", ""), EXIT_FAILED)

    _call(server, api_key, work)


@app.command()
def upload(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="A file to upload")],
    purpose: Annotated[str, typer.Option(help='"dataset" or "model"')] = "dataset",
    server: Server = DEFAULT_SERVER,
    api_key: ApiKey = None,
    as_json: Json = False,
) -> None:
    """Upload a dataset (or a model archive); prints its file id for a spec's "dataset"."""

    def work(client: Client) -> int:
        found = client.upload(file, purpose=purpose)
        _print_json(found) if as_json else out.print(found["id"])
        return EXIT_OK

    _call(server, api_key, work)


@app.command()
def download(
    job_id: JobId,
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where to extract the model")],
    server: Server = DEFAULT_SERVER,
    api_key: ApiKey = None,
) -> None:
    """Download a finished job's model into DIR (loadable with from_pretrained)."""

    def work(client: Client) -> int:
        out.print(str(client.download(job_id, directory)))
        return EXIT_OK

    _call(server, api_key, work)


def run(argv: list[str]) -> int:
    """Run one client command (``argv`` without the program name); its exit status."""
    try:
        app(argv, prog_name="gradacc")  # standalone: click's usage errors exit 2 with a message
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_FAILED
    return EXIT_OK
