"""Archives for the upload tests: a model as a client would send it, and the attacks."""

from __future__ import annotations

import io
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path


def tar_gz_of(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(folder, arcname="my-model")
    return buf.getvalue()


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


CONFIG = b'{"model_type": "bert"}'


def _with_model(*extra: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    """A plausible model plus the attack, so only the attack can be the reason for a refusal."""
    return _tar((_member("config.json"), CONFIG), (_member("model.safetensors"), b"x" * 64), *extra)


def _zip(name: str, data: bytes, mode: int = 0o100644) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zipped:
        zipped.writestr("config.json", CONFIG)
        info = zipfile.ZipInfo(name)
        info.external_attr = mode << 16
        zipped.writestr(info, data)
    return buf.getvalue()


def _bomb(unpacked_bytes: int) -> bytes:
    """Zeros compress ~1000:1: a small upload that would unpack past the server's cap."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zipped:
        zipped.writestr("config.json", CONFIG)
        with zipped.open("model.safetensors", "w", force_zip64=True) as out:
            block = b"\0" * (1 << 20)
            for _ in range(unpacked_bytes >> 20):
                out.write(block)
    return buf.getvalue()


def attacks(bomb_bytes: int) -> dict[str, tuple[str, Callable[[], bytes]]]:
    """name -> (file name, archive bytes); every one must be refused with 422."""
    return {
        "traversal": ("m.tar.gz", lambda: _with_model((_member("../escape.txt"), b"x"))),
        "absolute": ("m.tar.gz", lambda: _with_model((_member("/tmp/escape.txt"), b"x"))),
        "symlink": ("m.tar.gz", lambda: _with_model((_member("l", tarfile.SYMTYPE, "/etc"), None))),
        "hardlink": (
            "m.tar.gz",
            lambda: _with_model((_member("h", tarfile.LNKTYPE, "config.json"), None)),
        ),
        "device": ("m.tar.gz", lambda: _with_model((_member("d", tarfile.CHRTYPE), None))),
        "pickle": ("m.tar.gz", lambda: _with_model((_member("pytorch_model.bin"), b"x"))),
        "zip-traversal": ("m.zip", lambda: _zip("../../escape.txt", b"x")),
        "zip-symlink": ("m.zip", lambda: _zip("link", b"/etc/passwd", mode=0o120777)),
        "bomb": ("m.zip", lambda: _bomb(bomb_bytes)),
        "not-a-model": ("m.tar.gz", lambda: _tar((_member("readme.txt"), b"hello"))),
    }
