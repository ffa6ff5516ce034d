"""The tokenizers of the built-in models, written where a Tinker client's
``AutoTokenizer.from_pretrained("gradacc/<name>")`` finds them with no network: the local Hugging
Face hub cache (``models--gradacc--<name>/snapshots/<rev>/`` and ``refs/main``), or a folder
``<dir>/gradacc/<name>`` (the cookbook loads a name that is a folder under its working
directory)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from trainer_core.builtin.models import builtin_config, builtin_tokenizer


def write(
    names: dict[str, str], *, cache: Path | None = None, folder: Path | None = None
) -> list[Path]:
    """``names``: client name (``gradacc/tiny-chat``) -> source (``builtin:tiny-chat``). The
    folders written."""
    written = []
    for name, source in names.items():
        tokenizer = builtin_tokenizer(source)
        if folder is not None:
            target = folder / name
        else:
            assert cache is not None
            repo = cache / ("models--" + name.replace("/", "--"))
            revision = hashlib.sha1(source.encode()).hexdigest()
            target = repo / "snapshots" / revision
            (repo / "refs").mkdir(parents=True, exist_ok=True)
            (repo / "refs" / "main").write_text(revision)
        target.mkdir(parents=True, exist_ok=True)
        tokenizer.save_pretrained(str(target))
        # AutoTokenizer reads the model's config too; offline, a file missing from the cache is
        # an error rather than "absent".
        builtin_config(source, tokenizer).save_pretrained(str(target))
        written.append(target)
    return written
