"""Reading a stack dump as text: faulthandler's ("File "x.py", line 3 in f", most recent call first) or
py-spy's ("f (x.py:3)", most recent call first), into threads of frames, and the one call that says
where a training process is: a collective it waits in, the data loader, a save, or its innermost frame."""

from __future__ import annotations

import re
from dataclasses import dataclass

_FAULTHANDLER_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)(?: \[(?P<name>[^\]]*)\])? "
                                  r"\(most recent call first\):")
_FAULTHANDLER_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_PYSPY_THREAD = re.compile(r'^Thread (?P<id>\S+) \((?P<state>[^)]*)\)(?:: "(?P<name>[^"]*)")?')
_PYSPY_FRAME = re.compile(r"^\s+(?P<func>\S+) \((?P<file>[^:()]+):(?P<line>\d+)\)")

# torch.distributed's collectives (the Python names, c10d's op types lower-cased map onto them)
COLLECTIVES = ("all_reduce", "broadcast", "barrier", "monitored_barrier", "all_gather", "all_gather_into_tensor",
               "all_gather_object", "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
               "gather", "scatter", "reduce", "send", "recv", "broadcast_object_list", "wait")


_SINGULAR = {"wait": "waits", "are": "is", "have": "has"}


@dataclass(frozen=True)
class Frame:
    func: str
    file: str
    line: int

    def where(self) -> str:
        return f"{self.func} ({_short(self.file)}:{self.line})"


@dataclass(frozen=True)
class Thread:
    name: str
    current: bool
    frames: tuple[Frame, ...]  # most recent call first


@dataclass(frozen=True)
class Call:
    """Where a process is: `kind` is collective / backward / data / save / code; `waiting` says it waits on the
    other ranks (a collective, or DDP's backward, whose gradient all-reduce waits for every rank)."""

    kind: str
    name: str
    frame: Frame | None

    @property
    def waiting(self) -> bool:
        return self.kind in ("collective", "backward")

    def describe(self, one: bool = False) -> str:
        """"wait in all_reduce (torch/distributed/distributed_c10d.py:2806)": the verb for several ranks, or for
        `one`."""
        text = self._describe()
        verb, _, rest = text.partition(" ")
        return f"{_SINGULAR[verb]} {rest}" if one and verb in _SINGULAR and rest else text

    def _describe(self) -> str:
        at = f" ({_short(self.frame.file)}:{self.frame.line})" if self.frame else ""
        if self.kind == "collective":
            return f"wait in {self.name}{at}"
        if self.kind == "backward":
            return f"wait in backward{at} for DDP's gradient all-reduce"
        if self.kind == "data":
            return f"are in the data loader, {self.name}{at}"
        if self.kind == "save":
            return f"are saving, {self.name}{at}"
        if self.kind == "none":
            return f"have no stack ({self.name})"
        return f"are in {self.name}{at}"


def parse_threads(text: str) -> list[Thread]:
    """Every thread of a faulthandler or py-spy dump; [] for text that is neither (an error message)."""
    threads: list[Thread] = []
    name, current = "", False
    frames: list[Frame] = []
    started = False
    for raw in text.splitlines():
        head = _FAULTHANDLER_THREAD.match(raw)
        spy = None if head else _PYSPY_THREAD.match(raw)
        if head or spy:
            if started:
                threads.append(Thread(name, current, tuple(frames)))
            started, frames = True, []
            if head:
                name, current = head.group("name") or head.group(2), head.group(1) == "Current thread"
            elif spy:
                name, current = spy.group("name") or spy.group("id"), "active" in spy.group("state")
            continue
        match = _FAULTHANDLER_FRAME.match(raw) or _PYSPY_FRAME.match(raw)
        if match and started:
            frames.append(Frame(match.group("func"), match.group("file"), int(match.group("line"))))
    if started:
        threads.append(Thread(name, current, tuple(frames)))
    return threads


def main_thread(threads: list[Thread]) -> Thread | None:
    """The training thread: py-spy names it MainThread; faulthandler does not, so the one in the trainer's loop,
    else the last listed (faulthandler lists the newest thread first, the main thread last)."""
    if not threads:
        return None
    named = [t for t in threads if t.name == "MainThread"]
    if named:
        return named[0]
    training = [t for t in threads if any(f.func in ("_inner_training_loop", "training_step", "train")
                                          for f in t.frames)]
    return training[0] if training else threads[-1]


def call_of(text: str) -> Call:
    """The call the training thread of a dump is in."""
    thread = main_thread(parse_threads(text))
    if thread is None or not thread.frames:
        first = text.strip().splitlines()[0] if text.strip() else "no stack"
        return Call("none", first[:200], None)
    for frame in thread.frames:
        path = frame.file.replace("\\", "/")
        if _is_collective(frame.func, path):
            return Call("collective", frame.func, frame)
        if frame.func == "backward" and ("torch/autograd" in path or path.endswith("torch/_tensor.py")):
            return Call("backward", "backward", frame)
        if "torch/utils/data" in path:
            return Call("data", frame.func, frame)
        if frame.func in ("save_file", "_save_checkpoint", "save_pretrained", "save_model") or "safetensors" in path:
            return Call("save", frame.func, frame)
    return Call("code", thread.frames[0].func, thread.frames[0])


def _is_collective(func: str, path: str) -> bool:
    """torch.distributed's collectives, and the wrappers that call them (DDP's buffer broadcast before each
    forward, DeepSpeed's and accelerate's communication helpers)."""
    if not any(place in path for place in ("torch/distributed", "torch/nn/parallel", "deepspeed/comm",
                                           "accelerate/utils/operations")):
        return False
    return func in COLLECTIVES or any(word in func for word in _COLLECTIVE_WORDS)


_COLLECTIVE_WORDS = ("broadcast", "all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter", "barrier",
                     "all_to_all")


def _short(path: str) -> str:
    """The path from the package folder on: site-packages/torch/x.py -> torch/x.py; backend/plugin/x.py kept."""
    path = path.replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    parts = path.split("/")
    return "/".join(parts[-3:]) if len(parts) > 3 else path
