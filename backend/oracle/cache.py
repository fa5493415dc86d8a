"""The on-disk cache of oracle answers: one JSON file per (question, versions, input) key."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from backend.paths import cache_dir

CACHE_FORMAT = 1


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
    """sha256 of a file's content, or of a folder's (relative names and contents, sorted)."""
    digest = hashlib.sha256()
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        digest.update(str(file.relative_to(path) if path.is_dir() else file.name).encode())
        with open(file, "rb") as handle:
            while block := handle.read(chunk):
                digest.update(block)
    return digest.hexdigest()


def cache_key(question: str, payload: dict[str, Any], versions: dict[str, str],
              fingerprints: dict[str, str] | None = None) -> str:
    """A stable key: question + library versions + payload + content fingerprints of its inputs."""
    material = json.dumps(
        {"format": CACHE_FORMAT, "question": question, "payload": payload, "versions": versions,
         "inputs": fingerprints or {}},
        sort_keys=True, default=str,
    )
    return hashlib.sha256(material.encode()).hexdigest()[:32]


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
        try:
            record = json.loads(self.path(question, key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # missing or damaged: ask again
        return record.get("answer") if isinstance(record, dict) else None

    def put(self, question: str, key: str, answer: dict[str, Any], meta: dict[str, Any]) -> None:
        from backend.profile import write_text_atomic

        target = self.path(question, key)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(target, json.dumps({"meta": meta, "answer": answer}, default=str))

    def clear(self, question: str | None = None) -> None:
        folder = self.root / question if question else self.root
        for file in folder.rglob("*.json") if folder.is_dir() else ():
            try:
                os.unlink(file)
            except OSError:
                pass
