"""The events file: the contract between the training process and everything that watches it.

`events.jsonl` is append-only, one JSON object per line, each one of the event Structs below (a
union tagged by `type`). Every line has `v` (the format's version), `type`, `time` (unix seconds)
and `rank`. The callback inside the trainer WRITES these Structs and every reader DECODES them:
the fields are defined here and nowhere else.

A line that is not one of them (torn, not JSON, a field of the wrong shape such as `"cuda": [1]`)
is a damaged line: counted and said, never a traceback. A line of a newer format (`v` above
SCHEMA_VERSION) is said as such ("events format v2 is newer than this workbench reads"), never
guessed at. A line without `v` is of version 1 (the only format there was before it was checked).

The writer (any rank) appends whole lines with one `write` on an O_APPEND descriptor, so lines
from several ranks never interleave. The reader is backend.core.tail's: whole lines only, from an
offset. Imported inside the training process too: stdlib, msgspec and backend.core.tail only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Union

import msgspec

from backend.core.tail import READ_BYTES, Tail

SCHEMA_VERSION = 1
EVENTS_FILE_NAME = "events.jsonl"


# ---------------------------------------------------------------- the schema


class CudaMemory(msgspec.Struct, frozen=True):
    """The caching allocator's counters of one device (bytes)."""

    device: int
    allocated: int
    reserved: int
    max_allocated: int
    max_reserved: int


class GpuUsed(msgspec.Struct, frozen=True):
    """NVML's used memory of one GPU (bytes, every process on it; NVML's index, not CUDA's)."""

    index: int
    used: int | None = None
    total: int | None = None


class _Event(msgspec.Struct, tag_field="type", kw_only=True, frozen=True):
    v: int = SCHEMA_VERSION
    time: float = 0.0
    rank: int = 0


class RunBegin(_Event, tag="run_begin", frozen=True):
    precision: str | None = None
    mixed_precision: str | None = None
    scaler: str | None = None  # the loss scaler's class name; None: no loss scaling
    scaler_reason: str | None = None
    distributed_type: str | None = None
    world_size: int | None = None
    devices: list[str] = []
    trainable_params: int | None = None
    total_params: int | None = None
    param_dtype: str | None = None
    max_steps: int | None = None
    start_step: int | None = None
    rss_bytes: int | None = None
    output_dir: str | None = None
    train_rows: int | None = None  # rows of the training set (all ranks together); None: not countable (streamed)


class Log(_Event, tag="log", frozen=True):
    step: int | None = None
    max_steps: int | None = None
    epoch: float | None = None
    loss: float | None = None
    learning_rate: float | None = None
    grad_norm: float | None = None
    token_acc: float | None = None
    nonfinite: list[str] = []  # which of the values above were NaN/inf (written as null), not missing
    steps_per_second: float | None = None
    tokens_per_second: float | None = None
    rss_bytes: int | None = None
    loss_scale: float | None = None
    overflow_count: int | None = None
    skipped_steps: int | None = None
    cuda: list[CudaMemory] | None = None  # when CUDA is in use


class Eval(_Event, tag="eval", frozen=True):
    step: int | None = None
    metrics: dict[str, float | None] = {}


class Checkpoint(_Event, tag="checkpoint", frozen=True):
    step: int | None = None
    path: str = ""
    # asked for, and why: "save now" (workbench save, the monitor's key), "SIGUSR1", "SIGTERM"; None: the schedule
    requested: str | None = None


class RunEnd(_Event, tag="run_end", frozen=True):
    step: int | None = None
    max_steps: int | None = None
    status: str = "finished"  # "stopped": the trainer saved and stopped when asked (`reason` says how)
    reason: str | None = None
    runtime_seconds: float | None = None
    peak_rss_bytes: int | None = None
    cuda_peaks: list[CudaMemory] = []
    loss_scale: float | None = None
    overflow_count: int | None = None
    skipped_steps: int | None = None


class MemoryPhase(_Event, tag="memory_phase", frozen=True):
    """Memory measured over one phase of the run (load, first_step, optimizer_step, steady_step, eval,
    save: the planner's timeline), written when the phase ends; a phase that recurs (steady steps
    between evaluations) is written each time. `cuda`: the allocator's peaks since the phase began
    (reset at each boundary); `rss_bytes`: the process's host RSS at the boundary; `tree_rss_bytes`: the
    process and its children (data-loader workers; in DDP each rank writes its own tree, ranks are
    siblings, not children); `nvml`: rank 0's reading of every GPU at the boundary (CUDA runs only)."""

    phase: str
    step: int | None = None
    rss_bytes: int | None = None
    cuda: list[CudaMemory] | None = None
    tree_rss_bytes: int | None = None
    nvml: list[GpuUsed] | None = None


class Phase(_Event, tag="phase", frozen=True):
    """A phase of the run's start that the trainer itself sees begin (#35): "model" when swift has read its
    arguments (it imports the plugin then) and loads the model next. The phases before it and the dataset's
    progress come from swift's own lines in output.log (backend/rundir/startup.py); `run_begin` starts the
    first step. Added in format v1: a reader before it counts these lines as damaged, never misreads them."""

    phase: str


class StepTime(_Event, tag="step_time", frozen=True):
    """Where the time of the optimizer steps since the last such event went, on this rank (seconds; the
    throughput doctor, #38), written at each log and at the run's end. Inside a step: waiting for the data
    loader (`data_wait`), forward and backward of every micro-batch, the optimizer step, and the rest
    (clipping, scheduler). Between steps: logging, evaluation, checkpoint saving, and anything else.
    `clock`: "cuda_events" (forward/backward and optimizer timed on the GPU) or "host". Tokens from the
    batches' attention masks: real (attended) and padded; `real_tokens_sq`: the sum of each row's real length
    squared (attention's sequence term). Added in format v1 with defaults: a reader before it counts these
    lines as damaged, never misreads them."""

    first_step: int | None = None
    last_step: int | None = None
    step_seconds: list[float] = []  # each step's wall time, fetch to step end, in order
    data_wait: float = 0.0
    forward_backward: float = 0.0
    forward: float = 0.0  # of forward_backward: the loss's forward, before any gradient exchange
    forward_wait: float = 0.0  # of forward: waiting for the other ranks in DDP's buffer broadcast
    optimizer: float = 0.0
    other_in_step: float = 0.0
    logging: float = 0.0
    eval: float = 0.0
    save: float = 0.0
    between_other: float = 0.0
    micro_batches: int = 0
    rows: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0
    real_tokens_sq: int = 0
    clock: str = "host"
    device: str | None = None
    device_name: str | None = None
    # each step's largest micro-batch (rows x padded length) and the memory after its largest forward, in
    # step order like step_seconds (#37: creep told from length); `memory_kind`: "host_peak_rss" (the process's
    # RSS at its highest within the step, CPU runs on Linux), "host_rss" (after the forward, elsewhere) or
    # "cuda_allocated" (the allocator's bytes after the forward); `memory_limit`: the RAM or the GPU's total
    step_tokens: list[int] = []
    step_memory: list[int] = []
    memory_kind: str | None = None
    memory_limit: int | None = None

    def memory_steps(self) -> list[tuple[int, int, int]]:
        """(step, its largest micro-batch's tokens, its memory) of each step listed with a memory reading."""
        if self.first_step is None:
            return []
        pairs = zip(self.step_tokens, self.step_memory, strict=False)
        return [(self.first_step + i, tokens, memory) for i, (tokens, memory) in enumerate(pairs) if memory > 0]


Event = Union[RunBegin, Log, Eval, Checkpoint, RunEnd, MemoryPhase, StepTime, Phase]
EVENT_CLASSES: dict[str, type[_Event]] = {cls.__struct_config__.tag: cls  # type: ignore[misc]
                                          for cls in (RunBegin, Log, Eval, Checkpoint, RunEnd, MemoryPhase,
                                                      StepTime, Phase)}
EVENT_TYPES = tuple(EVENT_CLASSES)


class _Version(msgspec.Struct):
    """Only the version of a line that did not decode (is it a newer format, or damaged?)."""

    v: Any = None


_DECODER = msgspec.json.Decoder(Event)
_VERSION = msgspec.json.Decoder(_Version)


def newer_format_text(version: int) -> str:
    return f"events format v{version} is newer than this workbench reads (v{SCHEMA_VERSION})"


def damaged_text(count: int) -> str:
    return f"{count} damaged line{'s' if count != 1 else ''} skipped"


# ---------------------------------------------------------------- decoding


class Decoded:
    """The events of some lines, and what the other lines were (plain classes here: the status line
    imports this module, and dataclasses costs it ~12 ms)."""

    def __init__(self, events: list[Event] | None = None) -> None:
        self.events: list[Event] = events or []
        self.bad_lines = 0  # damaged: not an event of this format
        self.newer_version: int | None = None  # the newest format version seen above ours (those lines skipped)


def decode_lines(block: bytes | memoryview) -> Decoded:
    """Every line of a block of whole lines (blank lines ignored)."""
    try:
        events = _DECODER.decode_lines(block)
    except (msgspec.DecodeError, msgspec.ValidationError):  # a damaged line: find it, keep the rest
        return _decode_each(bytes(block))
    if all(event.v == SCHEMA_VERSION for event in events):
        return Decoded(list(events))
    return _decode_each(bytes(block))


def _decode_each(block: bytes) -> Decoded:
    decoded = Decoded()
    for raw in block.split(b"\n"):
        if raw.strip():
            note_line(decoded, raw)
    return decoded


def decode_line(raw: bytes) -> Event | None:
    """One line's event, or None when it is not one of this format (damaged, or newer)."""
    try:
        event = _DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return event if event.v == SCHEMA_VERSION else None


def note_line(decoded: Decoded, raw: bytes) -> None:
    """Decode one line into `decoded`: an event, a damaged line or a newer format's line."""
    event = decode_line(raw)
    if event is not None:
        decoded.events.append(event)
        return
    version = line_version(raw)
    if version is not None and version > SCHEMA_VERSION:
        decoded.newer_version = max(version, decoded.newer_version or 0)
    else:
        decoded.bad_lines += 1


def line_version(raw: bytes) -> int | None:
    """The `v` of a JSON object line, when it has an integer one."""
    try:
        version = _VERSION.decode(raw).v
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def to_plain(event: Event) -> dict[str, Any]:
    """The event as JSON values (every field, `type` included): for JSON output and tests."""
    return msgspec.to_builtins(event)


# ---------------------------------------------------------------- reading a file


class EventReader:
    """Incremental reader: `read_new()` returns only events appended since the last call.

    Its state is the tail's offset and the counts below (saved and restored by the caller where
    needed: the events summary keeps the offset)."""

    def __init__(self, path: str | Path, offset: int = 0, tail: Tail | None = None) -> None:
        self.path = Path(path)
        self.tail = tail or Tail(self.path, offset)
        self.offset = self.tail.offset
        self.bad_lines = 0  # damaged lines, those over the tail's bound included
        self.newer_version: int | None = None
        self._long_seen = 0

    def __repr__(self) -> str:
        return f"EventReader({str(self.path)!r}, offset={self.offset}, bad_lines={self.bad_lines})"

    @classmethod
    def from_end(cls, path: str | Path, window: int) -> EventReader:
        """A reader of the file's last `window` bytes, from the first whole line there (a cut line is not
        a damaged one)."""
        return cls(path, tail=Tail.from_end(Path(path), window))

    def read_new(self, max_bytes: int | None = None) -> list[Event]:
        """The events of the whole lines appended since the last read (at most about `max_bytes`)."""
        events: list[Event] = []
        for block in self._blocks(max_bytes):
            events += self._take(decode_lines(block))
        return events

    def each(self) -> Iterator[Event]:
        """Every event from here to the file's end, decoded a block at a time (memory stays bounded on a long run)."""
        while True:
            before = self.offset
            events = self.read_new(max_bytes=READ_BYTES)
            if self.offset == before:
                return
            yield from events

    def _blocks(self, max_bytes: int | None) -> Iterator[bytes]:
        read = 0
        while max_bytes is None or read < max_bytes:
            before = self.tail.offset
            block = self.tail.read_block(READ_BYTES if max_bytes is None else min(READ_BYTES, max_bytes - read))
            self._sync()
            if self.tail.offset == before:  # a read that took nothing ends the read
                return
            read += self.tail.offset - before
            yield block

    def _take(self, decoded: Decoded) -> list[Event]:
        self.bad_lines += decoded.bad_lines
        if decoded.newer_version is not None:
            self.newer_version = max(decoded.newer_version, self.newer_version or 0)
        return decoded.events

    def _sync(self) -> None:
        self.bad_lines += self.tail.long_lines - self._long_seen
        self._long_seen = self.tail.long_lines
        self.offset = self.tail.offset

    def problems(self) -> list[str]:
        """What a person should be told about the lines read so far (empty when all were events)."""
        said = [damaged_text(self.bad_lines)] if self.bad_lines else []
        return said + ([newer_format_text(self.newer_version)] if self.newer_version else [])


def read_events(path: str | Path) -> list[Event]:
    """Every complete event in a file (small files)."""
    return EventReader(Path(path)).read_new()


def read_all(path: str | Path) -> list[dict[str, Any]]:
    """Every complete event in a file as JSON values (tests and JSON output; code reads `read_events`)."""
    return [to_plain(event) for event in read_events(path)]
