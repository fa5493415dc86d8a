"""The on-disk cache of oracle answers: one JSON file per key, and the one rule for that key.

A key holds the question, the versions of the libraries it asks, its payload, the content of every
file the answer depends on, and a digest of the question's own code (its module and every
`backend` module it imports, followed through their imports): an upgrade that changes how a
question answers is never served an answer of the old code. Concurrent askers of one key wait for
each other on a file lock, and the loser takes the winner's answer.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from backend.core import fs
from backend.core.paths import PACKAGE_DIR, cache_dir
from backend.core.tail import FileMark, mark
from backend.oracle.errors import OracleCancelled

CACHE_FORMAT = 2
CODE_PACKAGE = "backend.oracle"  # the code a question's digest follows


def library_versions(names: Iterable[str]) -> dict[str, str]:
    """Installed versions of the named distributions ("missing" where not installed): fast, no import."""
    versions = {}
    for name in names:
        try:
            versions[name] = _version(metadata.distribution(name))
        except metadata.PackageNotFoundError:
            versions[name] = "missing"
    return versions


def _version(dist: metadata.Distribution) -> str:
    """The `Version:` header read directly: `metadata.version()` parses the whole METADATA file as an
    e-mail (torch's is long), about 6 ms a library; a cached oracle answer must cost a few ms in all."""
    text = dist.read_text("METADATA") or ""
    found = re.search(r"^Version:[ \t]*(\S+)", text, re.MULTILINE)
    return found.group(1) if found else dist.version


def file_fingerprint(path: Path, *, chunk: int = 1 << 20) -> str:
    """sha256 of a file's content, or of a folder's (relative names and file digests, sorted)."""
    path = Path(path)
    if not path.is_dir():
        return f"{path.name}:{_content_sha(path, chunk)}"
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(f"{file.relative_to(path)}:{_content_sha(file, chunk)};".encode())
    return digest.hexdigest()


_CONTENT: dict[Path, tuple[FileMark, str]] = {}  # file -> (its mark when hashed, sha256)


def _content_sha(file: Path, chunk: int) -> str:
    """A file's sha256, read again only when its inode, size or modification time changed: a model's
    tokenizer.json (up to ~20 MB) is hashed once per process, not at every look-up."""
    stamp = mark(file)
    known = _CONTENT.get(file)
    if stamp is not None and known is not None and known[0] == stamp:
        return known[1]
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    if stamp is not None:
        _CONTENT[file] = (stamp, digest.hexdigest())
    return digest.hexdigest()


def cache_key(question: str, payload: dict[str, Any], versions: dict[str, str],
              fingerprints: dict[str, str] | None = None, code: str = "") -> str:
    """A stable key: question + library versions + payload + content fingerprints of its inputs +
    the digest of the question's code (`code_digest`)."""
    material = json.dumps(
        {"format": CACHE_FORMAT, "question": question, "payload": payload, "versions": versions,
         "inputs": fingerprints or {}, "code": code},
        sort_keys=True, default=str,
    )
    return hashlib.sha256(material.encode()).hexdigest()[:32]


# ---------------------------------------------------------------- the question's own code


def question_module(question: str) -> str | None:
    """The module that answers `question`: `name` is `backend.oracle.name`; a dotted name under
    `backend` names its module itself (e.g. `backend.models.demo.build`). None when there is no such file."""
    module = f"backend.oracle.{question}" if question.isidentifier() else question
    parts = module.split(".")
    if parts[0] != "backend" or not all(part.isidentifier() for part in parts):
        return None
    return module if _module_file(module) is not None else None


@functools.cache  # where a module lives does not change while the program runs; its content may
def _module_file(module: str) -> Path | None:
    base = PACKAGE_DIR.parent.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


_SOURCES: dict[Path, tuple[FileMark, str, tuple[str, ...]]] = {}  # file -> (its mark, sha, imports)


def _source(file: Path) -> tuple[str, tuple[str, ...]]:
    """(sha256 of the file, the `backend` modules it imports anywhere in it), memoised by stat."""
    stamp = mark(file)
    known = _SOURCES.get(file)
    if stamp is not None and known is not None and known[0] == stamp:
        return known[1], known[2]
    text = file.read_bytes()
    imports: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            imports.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imports.add(node.module)  # `from backend.x import y`: y may be a module too
            imports.update(f"{node.module}.{alias.name}" for alias in node.names)
    found = tuple(sorted(name for name in imports if name.split(".")[0] == "backend"))
    sha = hashlib.sha256(text).hexdigest()
    if stamp is not None:
        _SOURCES[file] = (stamp, sha, found)
    return sha, found


def code_digest(question: str) -> str:
    """sha256 over the question's module, the child that runs it and the modules of `backend.oracle` and of
    the question's own room (backend.data for swift's view of a dataset) they import (lazily or not),
    followed through their imports. Costs a stat a file once they were read.

    Modules outside those rooms are not followed: paths and refs lead to most of the backend, and a
    question keeps what it asks of the libraries in its own room."""
    module = question_module(question)
    if module is None:
        return "unknown"
    followed = (CODE_PACKAGE, module.rpartition(".")[0] + ".")
    todo, seen, digest = [module, "backend.oracle.child"], set(), hashlib.sha256()
    while todo:
        name = todo.pop()
        file = _module_file(name)
        if name in seen or file is None:
            continue
        seen.add(name)
        sha, imports = _source(file)
        digest.update(f"{name}:{sha};".encode())
        todo.extend(found for found in imports if found.startswith(followed))
    return digest.hexdigest()


@contextmanager
def file_lock(path: Path, cancelled: Callable[[], bool] | None = None) -> Iterator[None]:
    """The project's file lock (backend.core.fs) on `path`; a waiter polls `cancelled` and raises
    OracleCancelled once it is true."""
    try:
        with fs.file_lock(path, cancelled=cancelled, make_parent=True):
            yield
    except fs.LockCancelled as err:
        raise OracleCancelled(str(err)) from None


_SHAPES: dict[str, Callable[[dict[str, Any]], object]] = {}  # question -> its answer's decoder


def register_shape(question: str, decode: Callable[[dict[str, Any]], object]) -> None:
    """How `question`'s answer is decoded into its typed form (raises when it does not fit): a kept
    answer that does not decode is treated as absent and asked again, never handed to a caller."""
    _SHAPES[question] = decode


def _fits(question: str, answer: dict[str, Any]) -> bool:
    decode = _SHAPES.get(question)
    if decode is None:
        return True
    try:
        decode(answer)
    except Exception:  # noqa: BLE001 - any misfit (a wrong type, a missing key) is a damaged entry
        return False
    return True


@dataclass(frozen=True)
class OracleCache:
    """Answers kept under `<cache_dir>/oracle/<question>/<key>.json`."""

    root: Path

    @classmethod
    def default(cls) -> OracleCache:
        return cls(cache_dir() / "oracle")

    def path(self, question: str, key: str) -> Path:
        return self.root / question / f"{key}.json"

    def get(self, question: str, key: str) -> dict[str, Any] | None:
        """The kept answer when it has its question's shape; None (ask again) when missing or damaged."""
        try:
            record = json.loads(self.path(question, key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # missing or damaged: ask again
        answer = record.get("answer") if isinstance(record, dict) else None
        return answer if isinstance(answer, dict) and _fits(question, answer) else None

    def lock(self, question: str, key: str, cancelled: Callable[[], bool] | None = None) -> Any:
        """The lock askers of one key share (see `file_lock`)."""
        return file_lock(self.path(question, key).with_suffix(".lock"), cancelled)

    def put(self, question: str, key: str, answer: dict[str, Any], meta: dict[str, Any]) -> None:
        target = self.path(question, key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fs.write_text_atomic(target, json.dumps({"meta": meta, "answer": answer}, default=str))

    def clear(self, question: str | None = None) -> None:
        folder = self.root / question if question else self.root
        for file in folder.rglob("*.json") if folder.is_dir() else ():
            try:
                os.unlink(file)
            except OSError:
                pass
