"""Look inside a training dataset before a run: preview rows as chats, count rows, find the bad ones.

Files are read as a stream (a line, or one array element, at a time), so a dataset of any
size is scanned in constant memory apart from one length per row. Every malformed row is
reported with its line number and why: bad JSON, no `messages`, an unknown role, empty
content. Rows in the other layouts ms-swift reads (query/response, instruction/output,
ShareGPT `conversations`) are turned into messages first.

Token lengths need the model's tokenizer; they are counted in a child process
(`python -m backend.inspect_data --tokens MODEL_DIR FILE`) with the `tokenizers` library,
so neither this module nor the TUI imports transformers.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.paths import BUILTIN_DATASETS, BUILTIN_PREFIX, REPO_DIR, is_builtin

ROLES = ("system", "user", "assistant", "tool", "tool_call", "tool_response")
SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "system": "system", "function_call": "tool_call",
                  "observation": "tool_response", "user": "user", "assistant": "assistant"}
SUFFIXES = (".jsonl", ".json", ".csv")
ROW_KEYS = {"messages", "conversations", "query", "response", "instruction", "output"}
MAX_TOKENIZED_ROWS = 20_000
CHUNK = 1 << 16
MAX_ELEMENT_CHARS = 64 << 20  # a longer array element is taken as broken JSON


class RowError(ValueError):
    """Why one row cannot be trained on (the message names the fix where there is one)."""


Message = dict[str, str]


# ---------------------------------------------------------------- references


@dataclass(frozen=True)
class DatasetRef:
    """One entry of `data.train`: where it is and how many rows are sampled (`#N`)."""

    ref: str
    kind: str  # "builtin", "local", "hub", "missing"
    path: Path | None
    sample: int | None = None
    problem: str | None = None


def parse_ref(ref: str, base_dir: Path | None = None) -> DatasetRef:
    path_part, _, sample_text = ref.partition("#")
    sample = None
    if sample_text:
        if not sample_text.isdigit() or int(sample_text) < 1:
            return DatasetRef(ref, "missing", None, problem=f"'#{sample_text}' is not a row count; use #N, N >= 1")
        sample = int(sample_text)
    if is_builtin(path_part):
        path = BUILTIN_DATASETS.get(path_part.removeprefix(BUILTIN_PREFIX))
        if path is None:
            return DatasetRef(ref, "missing", None, sample, f"unknown built-in dataset; known: "
                              f"{', '.join(BUILTIN_PREFIX + n for n in BUILTIN_DATASETS)}")
        return DatasetRef(ref, "builtin", path, sample)
    path = Path(path_part).expanduser()
    if not path.is_absolute() and base_dir is not None and (base_dir / path).exists():
        path = base_dir / path
    if path.is_file():
        return DatasetRef(ref, "local", path.resolve(), sample)
    if path_part.startswith(("/", "./", "../", "~")) or path.suffix in SUFFIXES:
        return DatasetRef(ref, "missing", path, sample, f"file {path_part!r} does not exist")
    return DatasetRef(ref, "hub", None, sample)


# ---------------------------------------------------------------- reading rows


def iter_records(path: Path, stop: threading.Event | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, parsed record or RowError) for each row of a .jsonl / .json / .csv file."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        yield from _iter_csv(path, stop)
        return
    with open(path, encoding="utf-8", errors="replace") as handle:
        first = _first_char(handle)
        handle.seek(0)
        if suffix == ".json" and first == "[":
            yield from _iter_json_array(handle, stop)
        else:
            yield from _iter_jsonl(handle, stop)


def _first_char(handle: Any) -> str:
    while True:
        chunk = handle.read(4096)
        if not chunk:
            return ""
        stripped = chunk.lstrip()
        if stripped:
            return stripped[0]


def _iter_jsonl(handle: Any, stop: threading.Event | None) -> Iterator[tuple[int, Any]]:
    for number, line in enumerate(handle, start=1):
        if stop is not None and stop.is_set():
            return
        if not line.strip():
            continue
        try:
            yield number, json.loads(line.rstrip("\r\n"))
        except json.JSONDecodeError as err:
            yield number, RowError(f"not valid JSON: {err.msg} (column {err.colno})")


def _iter_json_array(handle: Any, stop: threading.Event | None) -> Iterator[tuple[int, Any]]:
    """Elements of a top-level JSON array, decoded one at a time from a sliding buffer."""
    decoder = json.JSONDecoder()
    buffer, pos, line, eof = "", 0, 1, False

    def fill() -> bool:
        nonlocal buffer, pos
        chunk = handle.read(CHUNK)
        buffer = buffer[pos:] + chunk
        pos = 0
        return bool(chunk)

    def skip(chars: str) -> None:
        nonlocal pos, line, eof
        while True:
            while pos < len(buffer) and buffer[pos] in chars:
                line += buffer[pos] == "\n"
                pos += 1
            if pos < len(buffer) or eof:
                return
            eof = not fill()

    eof = not fill()
    skip(" \t\r\n")
    pos += 1  # the opening '['
    while True:
        if stop is not None and stop.is_set():
            return
        skip(" \t\r\n,")
        if pos >= len(buffer) or buffer[pos] == "]":
            return
        while True:
            try:
                value, end = decoder.raw_decode(buffer, pos)
                break
            except json.JSONDecodeError as err:
                if eof or len(buffer) - pos > MAX_ELEMENT_CHARS:
                    yield line, RowError(f"not valid JSON: {err.msg}; the rest of the file cannot be read")
                    return
                eof = not fill()
        start_line = line
        line += buffer.count("\n", pos, end)
        pos = end
        yield start_line, value


def _iter_csv(path: Path, stop: threading.Event | None) -> Iterator[tuple[int, Any]]:
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        reader = csv.DictReader(handle)
        start = 2  # line 1 is the header
        for row in reader:
            if stop is not None and stop.is_set():
                return
            yield start, {k: v for k, v in row.items() if k is not None}
            start = reader.line_num + 1


def looks_like_dataset(path: Path) -> bool:
    """A quick look at the start of a file: does it hold chat rows (not, say, a config or a log)?"""
    suffix = path.suffix.lower()
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            head = handle.read(8192)
    except OSError:
        return False
    if suffix == ".csv":
        header = {name.strip().lower() for name in head.partition("\n")[0].split(",")}
        return bool(header & ROW_KEYS)
    stripped = head.lstrip()
    if suffix == ".json" and stripped.startswith("["):
        return True
    try:
        first = json.loads(stripped.partition("\n")[0])
    except json.JSONDecodeError:
        return suffix == ".jsonl"  # a broken jsonl is still worth inspecting
    return isinstance(first, dict) and bool(set(first) & ROW_KEYS)


# ---------------------------------------------------------------- rows -> messages


def to_messages(record: Any) -> list[Message]:
    """The chat of one row, in any layout swift reads; RowError says what is wrong."""
    if isinstance(record, RowError):
        raise record
    if not isinstance(record, dict):
        raise RowError(f"a row must be a JSON object, found {type(record).__name__}")
    if "messages" in record:
        messages = record["messages"]
        if isinstance(messages, str):  # a CSV cell holding JSON
            try:
                messages = json.loads(messages)
            except json.JSONDecodeError as err:
                raise RowError(f"`messages` is not valid JSON: {err.msg}") from None
        return _check_messages(messages, "messages")
    if "conversations" in record:
        return _check_messages(_from_sharegpt(record["conversations"]), "conversations")
    if _has(record, "query") and _has(record, "response"):
        return _check_messages(_from_pairs(record, "query", "response"), "query/response")
    if _has(record, "instruction") and _has(record, "output"):
        record = {**record, "query": "\n".join(p for p in (record["instruction"], record.get("input") or "") if p)}
        return _check_messages(_from_pairs(record, "query", "output"), "instruction/output")
    keys = ", ".join(sorted(map(str, record))) or "none"
    raise RowError(f"missing `messages` (keys: {keys}); use {{\"messages\": [{{\"role\": \"user\", "
                   f"\"content\": ...}}, {{\"role\": \"assistant\", \"content\": ...}}]}}")


def _has(record: dict[str, Any], key: str) -> bool:
    return key in record and record[key] is not None


def _from_pairs(record: dict[str, Any], query: str, response: str) -> list[Any]:
    messages: list[Any] = []
    if record.get("system"):
        messages.append({"role": "system", "content": record["system"]})
    history = record.get("history") or []
    if isinstance(history, str):
        history = json.loads(history) if history.strip() else []
    for pair in history:
        if isinstance(pair, (list, tuple)) and len(pair) == 2:
            messages += [{"role": "user", "content": pair[0]}, {"role": "assistant", "content": pair[1]}]
    messages += [{"role": "user", "content": record[query]}, {"role": "assistant", "content": record[response]}]
    return messages


def _from_sharegpt(turns: Any) -> Any:
    if not isinstance(turns, list):
        return turns
    converted = []
    for turn in turns:
        if isinstance(turn, dict) and "from" in turn:
            role = SHAREGPT_ROLES.get(str(turn["from"]), str(turn["from"]))
            converted.append({"role": role, "content": turn.get("value")})
        else:
            converted.append(turn)
    return converted


def _check_messages(messages: Any, where: str) -> list[Message]:
    if not isinstance(messages, list) or not messages:
        raise RowError(f"`{where}` must be a non-empty list of {{role, content}} objects")
    checked: list[Message] = []
    for number, message in enumerate(messages, start=1):
        if not isinstance(message, dict):
            raise RowError(f"message {number} is not an object with role and content")
        role = message.get("role")
        if role not in ROLES:
            raise RowError(f"message {number} has unknown role {role!r}; use one of {', '.join(ROLES[:4])}")
        content = message.get("content")
        if content is None and message.get("tool_calls"):
            content = json.dumps(message["tool_calls"])
        if not isinstance(content, str) or not content.strip():
            raise RowError(f"message {number} ({role}) has empty content")
        checked.append({"role": role, "content": content})
    if not any(m["role"] == "assistant" for m in checked):
        raise RowError("no assistant message: nothing for the model to learn from this row")
    return checked


# ---------------------------------------------------------------- the scan


@dataclass(frozen=True)
class LengthStats:
    count: int
    minimum: int
    median: float
    p95: int
    maximum: int
    mean: float

    @classmethod
    def of(cls, values: list[int]) -> LengthStats | None:
        if not values:
            return None
        ordered = sorted(values)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        return cls(len(ordered), ordered[0], statistics.median(ordered), p95, ordered[-1],
                   sum(ordered) / len(ordered))

    def describe(self, unit: str) -> str:
        return (f"{unit}: min {self.minimum:,}, median {self.median:,.0f}, p95 {self.p95:,}, "
                f"max {self.maximum:,}, mean {self.mean:,.0f}")


@dataclass(frozen=True)
class Malformed:
    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass
class DatasetScan:
    """What one dataset file holds."""

    path: Path
    rows: int = 0  # rows that can be trained on
    malformed_count: int = 0
    malformed: list[Malformed] = field(default_factory=list)  # the first `max_malformed`
    preview: list[list[Message]] = field(default_factory=list)
    chars: LengthStats | None = None
    complete: bool = True  # False when stopped early
    char_lengths: list[int] = field(default_factory=list, repr=False)

    @property
    def total_rows(self) -> int:
        return self.rows + self.malformed_count


def scan_dataset(
    path: Path,
    *,
    preview_rows: int = 3,
    max_malformed: int = 50,
    stop: threading.Event | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> DatasetScan:
    """Stream through `path` once: counts, malformed rows, a preview and character lengths."""
    scan = DatasetScan(path=path)
    for number, (line, record) in enumerate(iter_records(path, stop), start=1):
        try:
            messages = to_messages(record)
        except RowError as err:
            scan.malformed_count += 1
            if len(scan.malformed) < max_malformed:
                scan.malformed.append(Malformed(line, str(err)))
            continue
        scan.rows += 1
        if len(scan.preview) < preview_rows:
            scan.preview.append(messages)
        scan.char_lengths.append(sum(len(m["content"]) for m in messages))
        if on_progress is not None and number % 10_000 == 0:
            on_progress(number)
    scan.complete = not (stop is not None and stop.is_set())
    scan.chars = LengthStats.of(scan.char_lengths)
    return scan


# ---------------------------------------------------------------- tokens (child process)


@dataclass(frozen=True)
class TokenSummary:
    stats: LengthStats | None
    method: str  # "chat template" or "contents only"
    rows_counted: int
    over_max_length: int | None = None


def has_local_tokenizer(model_dir: Path | None) -> bool:
    return model_dir is not None and (model_dir / "tokenizer.json").is_file()


def token_summary(path: Path, model_dir: Path, *, max_length: int | None = None,
                  timeout: float = 120.0) -> TokenSummary:
    """Token lengths of the rows of `path`, counted in a child process."""
    command = [sys.executable, "-m", "backend.inspect_data", "--tokens", str(model_dir), str(path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=str(REPO_DIR),
                          env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    if done.returncode != 0:
        raise RuntimeError(f"counting tokens failed: {done.stderr.strip()[-500:]}")
    result = json.loads(done.stdout)
    lengths: list[int] = result["lengths"]
    over = sum(1 for n in lengths if n > max_length) if max_length else None
    return TokenSummary(LengthStats.of(lengths), result["method"], len(lengths), over)


def _count_tokens(model_dir: Path, path: Path) -> dict[str, Any]:
    """Runs in the child: tokenize each row (with the model's chat template when it has one)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    render = _chat_renderer(model_dir)
    lengths = []
    for _line, record in iter_records(path):
        try:
            messages = to_messages(record)
        except RowError:
            continue
        text = render(messages) if render else "\n".join(m["content"] for m in messages)
        lengths.append(len(tokenizer.encode(text, add_special_tokens=False).ids))
        if len(lengths) >= MAX_TOKENIZED_ROWS:
            break
    return {"lengths": lengths, "method": "chat template" if render else "contents only"}


def _chat_renderer(model_dir: Path) -> Callable[[list[Message]], str] | None:
    source = None
    if (model_dir / "chat_template.jinja").is_file():
        source = (model_dir / "chat_template.jinja").read_text(encoding="utf-8")
    elif (model_dir / "tokenizer_config.json").is_file():
        value = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template")
        source = value if isinstance(value, str) else None
    if not source:
        return None
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        return None
    template = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(source)
    return lambda messages: template.render(messages=messages, add_generation_prompt=False)


# ---------------------------------------------------------------- one reference, everything


@dataclass
class DatasetReport:
    """What the workbench knows about one `data.train` / `data.val` entry."""

    ref: DatasetRef
    scan: DatasetScan | None = None
    tokens: TokenSummary | None = None
    token_note: str = ""

    @property
    def problem(self) -> str | None:
        return self.ref.problem


def inspect_ref(
    ref: str,
    *,
    base_dir: Path | None = None,
    model_dir: Path | None = None,
    max_length: int | None = None,
    stop: threading.Event | None = None,
) -> DatasetReport:
    """Scan a dataset reference; count tokens too when the model's tokenizer is local."""
    parsed = parse_ref(ref, base_dir)
    report = DatasetReport(parsed)
    if parsed.path is None or parsed.problem:
        return report
    report.scan = scan_dataset(parsed.path, stop=stop)
    if stop is not None and stop.is_set():
        return report
    if not has_local_tokenizer(model_dir):
        report.token_note = "tokens: no local tokenizer for the chosen model (characters only)"
        return report
    try:
        report.tokens = token_summary(parsed.path, model_dir, max_length=max_length)  # type: ignore[arg-type]
    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as err:
        report.token_note = f"tokens: not counted ({err})"
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Dataset inspection (child-process entry point).")
    parser.add_argument("--tokens", nargs=2, metavar=("MODEL_DIR", "FILE"), type=Path, required=True)
    args = parser.parse_args(argv)
    model_dir, path = args.tokens
    print(json.dumps(_count_tokens(model_dir, path)))


if __name__ == "__main__":
    main()
