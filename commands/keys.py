"""``gradacc create-api-key``: a key in the server's database, never in a database of its own.

Run from another directory, the embedded default (``./var``) would name a database the server
never reads; so the command writes only to a database that exists and is migrated, and says
which one it wrote to (on stderr: stdout is the key alone, for scripts).
"""

from __future__ import annotations

import sys

from sqlalchemy import make_url
from sqlalchemy.exc import DBAPIError

from gradacc.settings import Settings

EXIT_USAGE = 2


class NoDatabase(Exception):
    """The database the settings name is missing or not migrated: the fix is in the message."""


def database_label(settings: Settings) -> str:
    """Where keys go, as a person can check it: the SQLite file (and the GRADACC_HOME it came
    from), or the URL without its password."""
    if settings.is_embedded:
        return f"{settings.home.resolve() / 'gradacc.db'} (GRADACC_HOME={settings.home})"
    return make_url(settings.resolved_database_url()).render_as_string(hide_password=True)


def check_database(settings: Settings) -> None:
    """Raise ``NoDatabase`` unless the database exists and is at the latest revision. A missing
    SQLite file is never opened (opening it would create it)."""
    from gradacc.db import get_engine
    from gradacc.migrate import schema_problem

    where = database_label(settings)
    if settings.is_embedded and not (settings.home / "gradacc.db").is_file():
        raise NoDatabase(
            f"no database at {where}: set GRADACC_HOME to the server's home (where `gradacc "
            "serve` keeps gradacc.db), or run `gradacc migrate` to create this one"
        )
    try:
        problem = schema_problem(get_engine(settings.resolved_database_url()))
    except DBAPIError as exc:
        raise NoDatabase(f"cannot open {where}: {type(exc.orig).__name__}: {exc.orig}") from None
    if problem is not None:
        other = (
            "GRADACC_HOME at the server's home"
            if settings.is_embedded
            else ("GRADACC_DATABASE_URL at the server's database")
        )
        raise NoDatabase(f"{where}: {problem}; or point {other}")


def create_api_key_command(settings: Settings, *, tenant: str) -> int:
    """Print the new key on stdout, alone, and where it was stored on stderr."""
    from gradacc.auth import create_api_key
    from gradacc.db import session_scope

    try:
        check_database(settings)
        with session_scope(settings) as session:
            token = create_api_key(session, tenant=tenant)
    except (NoDatabase, ValueError) as exc:
        print(f"gradacc: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(token)
    print(f"stored for tenant {tenant} in {database_label(settings)}", file=sys.stderr)
    return 0
