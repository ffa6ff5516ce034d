"""The ``gradacc`` command: serve, worker, migrate, create-api-key, demo, cache; and the client
commands (submit, jobs, status, metrics, cancel, logs, upload, download: ``commands.client_cli``)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from gradacc.settings import Settings, get_settings

CLIENT_COMMANDS = frozenset(
    {"submit", "jobs", "status", "metrics", "cancel", "logs", "upload", "download"}
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gradacc",
        description=__doc__,
        epilog="client commands (gradacc COMMAND --help): submit, jobs, status, metrics, "
        "cancel, logs, upload, download; gradacc preview FILE --model M: what a job on a local "
        "file would train",
    )
    subcommands = parser.add_subparsers(dest="command", required=True)
    serve = subcommands.add_parser(
        "serve", help="the API and N workers (embedded defaults: SQLite)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1, help="worker processes (one job each)")
    serve.add_argument(
        "--log-level",
        choices=["info", "debug"],
        default=None,
        help="info (default): a line per component ready and per job event; debug: everything",
    )
    worker = subcommands.add_parser("worker", help="one Celery worker (one job at a time)")
    worker.add_argument("--name", default="worker")
    subcommands.add_parser("migrate", help="bring the database schema to the latest revision")
    key = subcommands.add_parser(
        "create-api-key",
        help="print a new API key for a tenant, stored in the (migrated) database of "
        "GRADACC_HOME or GRADACC_DATABASE_URL",
    )
    key.add_argument("--tenant", required=True, help="1-64 letters, digits, '_', '.', '-'")
    demo = subcommands.add_parser("demo", help="serve, train a demo job per backend and K, stop")
    demo.add_argument("--port", type=int, default=0, help="default: any free port")
    demo.add_argument("--workers", type=int, default=2)
    tokenizers = subcommands.add_parser(
        "tinker-tokenizers",
        help="write the tokenizers of the models offered to Tinker clients (gradacc/<name>) "
        "into the local Hugging Face cache, or under --dir, for a client without the hub",
    )
    tokenizers.add_argument("--dir", type=Path, default=None, help="write DIR/gradacc/<name>")
    cache = subcommands.add_parser("cache", help="the tokenized-data cache: show or clear it")
    cache.add_argument("action", choices=("show", "clear"))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in CLIENT_COMMANDS:
        from commands.client_cli import run

        return run(argv)
    if argv and argv[0] == "preview":  # a local file, read by the core: no server needed
        from commands.preview import run as run_preview

        return run_preview(argv[1:])
    args = _parser().parse_args(argv)
    settings = get_settings()
    if getattr(args, "log_level", None):
        settings = settings.model_copy(update={"log_level": args.log_level})
    quiet = args.command in (
        "demo",
        "create-api-key",
        "cache",
        "tinker-tokenizers",
    )  # these print their own output
    configure_logging(settings, ours=logging.WARNING if quiet else logging.INFO)
    if args.command == "serve":
        from commands.serve import serve

        return serve(settings, host=args.host, port=args.port, workers=args.workers)
    if args.command == "worker":
        from commands.serve import run_worker

        return run_worker(settings, name=args.name)
    if args.command == "migrate":
        from gradacc.migrate import upgrade_database

        upgrade_database(settings)
        return 0
    if args.command == "create-api-key":
        return _create_api_key(settings, tenant=args.tenant)
    if args.command == "tinker-tokenizers":
        return _tinker_tokenizers(args.dir)
    if args.command == "cache":
        from commands.cache import cache_command

        return cache_command(settings, action=args.action)
    from commands.demo import run_demo

    return run_demo(settings, port=args.port, workers=args.workers)


OUR_LOGGERS = ("commands", "api", "worker", "gradacc")


def configure_logging(settings: Settings, *, ours: int) -> None:
    """Our loggers at ``ours``, every library at WARNING (alembic's plugin lines, uvicorn's
    start-up chatter, Celery's banners), unless ``settings.log_level`` is "debug"."""
    debug = settings.log_level == "debug"
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        force=True,
    )
    for name in OUR_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if debug else ours)


def _tinker_tokenizers(folder: Path | None) -> int:
    from huggingface_hub.constants import HF_HUB_CACHE

    from gradacc.tinker.names import OFFERED, source_of
    from trainer_core.tinker_host.tokenizers import write

    names = {name: source_of(name) for name in OFFERED}
    for path in write(names, cache=None if folder else Path(HF_HUB_CACHE), folder=folder):
        print(path)
    return 0


def _create_api_key(settings: Settings, *, tenant: str) -> int:
    from commands.keys import create_api_key_command

    return create_api_key_command(settings, tenant=tenant)


if __name__ == "__main__":
    sys.exit(main())
