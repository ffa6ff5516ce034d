"""A window's counts are made in one place: the per-window sums of a per-row count in
``EpochIndex.window_sums``, and their ÷W for a rank in ``EpochPlan.__getitem__`` (every method's
plan goes through both). The check reads the core's source; a second place planted in a copy
of the tree (a method's plan summing its own window counts) makes it fail."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from tests.conftest import ROOT

CORE = ROOT / "trainer_core"
THE_PLACES = {"data/plan.py:EpochIndex.window_sums", "data/loader.py:EpochPlan.__getitem__"}


def count_sites(root: Path) -> set[str]:
    """Each function that sums a count per window (``np.add.reduceat``) or divides by the rank
    count (``/ ….world.size``), as ``module:Class.function``."""
    found: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node, where in _walk(tree, []):
            if _window_sum(node) or _by_ranks(node):
                found.add(f"{path.relative_to(root)}:{'.'.join(where)}")
    return found


def _walk(node: ast.AST, where: list[str]) -> list[tuple[ast.AST, list[str]]]:
    out = []
    for child in ast.iter_child_nodes(node):
        named = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        inner = [*where, child.name] if named else where  # type: ignore[attr-defined]
        out.append((child, inner))
        out.extend(_walk(child, inner))
    return out


def _window_sum(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "reduceat"
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr == "add"
    )


def _by_ranks(node: ast.AST) -> bool:
    right = node.right if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) else None
    return (
        isinstance(right, ast.Attribute)
        and right.attr == "size"
        and isinstance(right.value, ast.Attribute)
        and right.value.attr == "world"
    )


def test_a_window_s_counts_are_made_in_one_place() -> None:
    assert count_sites(CORE) == THE_PLACES


def test_a_second_place_is_found(tmp_path: Path) -> None:
    copy = tmp_path / "trainer_core"
    shutil.copytree(CORE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    planted = copy / "data" / "dpo.py"
    planted.write_text(planted.read_text() + (
        "\n\ndef own_window_tokens(plan, tokens, starts):\n"
        "    return np.add.reduceat(tokens[plan.order], starts) / plan.world.size\n"
    ))  # fmt: skip
    assert count_sites(copy) == THE_PLACES | {"data/dpo.py:own_window_tokens"}
