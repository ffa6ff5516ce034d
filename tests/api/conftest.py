"""The API in-process (TestClient) on each database of ``db_settings``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from gradacc.settings import Settings


@pytest.fixture
def client(db_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(db_settings), raise_server_exceptions=False) as client:
        yield client
