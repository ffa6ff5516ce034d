"""``gradacc cache show|clear`` on the cache under GRADACC_HOME."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from commands.cli import main
from gradacc.settings import get_settings
from trainer_core.data.cache import DataCache


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("GRADACC_HOME", str(tmp_path))
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def test_show_lists_entries_and_clear_removes_them(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = DataCache(get_settings().data_cache_dir)
    assert cache.root == home / "cache" / "data"
    with cache.building("k1", {"dataset": "data.csv", "model": "builtin:tiny-bert"}) as folder:
        (folder / "train.arrow").write_bytes(b"x" * 5000)
    assert main(["cache", "show"]) == 0
    shown = capsys.readouterr().out
    assert "1 entries" in shown and "k1" in shown and "data.csv" in shown and " KB " in shown
    assert main(["cache", "clear"]) == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert cache.entries() == []
    main(["cache", "show"])
    assert "0 entries" in capsys.readouterr().out
