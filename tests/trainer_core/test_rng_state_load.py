"""A checkpoint's ``rng_state.pth`` is loaded with ``weights_only``: the state our writer saves
(Python's, numpy's and torch's generators) comes back whole, and a file whose pickle would run
code on load is refused without running it."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer_core.checkpoint.format import RNG, restore_rng, rng_state


def _touch(path: str) -> None:
    Path(path).write_text("ran")


class _Planted:
    """Unpickling this calls ``_touch``: what a hostile file would do with ``os.system``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return _touch, (str(self.marker),)


def _draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_the_saved_state_comes_back(tmp_path: Path) -> None:
    torch.save(rng_state(), tmp_path / RNG)
    expected = _draws()
    _draws()  # move every generator on
    restore_rng(tmp_path)
    assert _draws() == expected


def test_a_pickle_that_runs_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    state = {**rng_state(), "python": _Planted(marker)}
    torch.save(state, tmp_path / RNG)
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        restore_rng(tmp_path)
    assert not marker.exists()
