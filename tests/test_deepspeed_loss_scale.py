"""The callback's DeepSpeed fp16 path with a fake engine: DeepSpeed keeps its own dynamic loss scaler inside
its optimizer (`engine.optimizer.cur_scale`) and counts the steps it skipped (`engine.skipped_steps`);
accelerate then has no scaler. DeepSpeed itself is not installed here, so the engine is a stand-in with
those two attributes, as DeepSpeedEngine and its fp16 / ZeRO optimizers have them."""

from __future__ import annotations

import importlib
import signal
import sys
import types
from pathlib import Path

import pytest

from backend.contract.events import read_all


class FakeZeroOptimizer:
    def __init__(self, scale: float) -> None:
        self.cur_scale = scale


class FakeDeepSpeedEngine:
    def __init__(self) -> None:
        self.optimizer = FakeZeroOptimizer(65536.0)
        self.skipped_steps = 0

    def overflow(self) -> None:
        """What DeepSpeed does on an fp16 overflow: skip the step and halve the scale."""
        self.skipped_steps += 1
        self.optimizer.cur_scale /= 2


@pytest.fixture
def callback_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The real callback file; swift's registry (a 10 s import) is replaced by a plain dict."""
    monkeypatch.setitem(sys.modules, "swift.callbacks", types.SimpleNamespace(callbacks_map={}))
    monkeypatch.delitem(sys.modules, "backend.plugin.workbench_callback", raising=False)
    module = importlib.import_module("backend.plugin.workbench_callback")
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGUSR1, signal.SIGTERM)}
    yield module
    sys.modules.pop("backend.plugin.workbench_callback", None)
    for sig, handler in handlers.items():  # the callback takes SIGUSR1/SIGTERM for the save on signal, as in a trainer
        signal.signal(sig, handler)


def _trainer(engine: FakeDeepSpeedEngine) -> types.SimpleNamespace:
    return types.SimpleNamespace(deepspeed=engine, model_wrapped=engine,
                                 args=types.SimpleNamespace(fp16=True, bf16=False),
                                 accelerator=types.SimpleNamespace(scaler=None))


def _log(callback: object, step: int) -> None:
    state = types.SimpleNamespace(global_step=step, max_steps=10, epoch=step / 10)
    callback.on_log(None, state, None, logs={"loss": 1.5, "learning_rate": 1e-4, "grad_norm": 2.0})  # type: ignore[attr-defined]


def test_deepspeed_fp16_scale_and_skipped_steps_come_from_the_engine(
        callback_module: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_RUN_DIR", str(tmp_path))
    engine = FakeDeepSpeedEngine()
    callback = callback_module.WorkbenchEventsCallback(None, _trainer(engine))
    assert callback.loss_scale.description() == ("DeepSpeedDynamicLossScaler", "DeepSpeed keeps its own fp16 loss scaler")
    _log(callback, 1)
    engine.overflow()
    engine.overflow()
    _log(callback, 2)
    first, second = [e for e in read_all(tmp_path / "events.jsonl") if e["type"] == "log"]
    assert (first["loss_scale"], first["overflow_count"], first["skipped_steps"]) == (65536.0, 0, 0)
    assert (second["loss_scale"], second["overflow_count"], second["skipped_steps"]) == (16384.0, 2, 2)


def test_deepspeed_bf16_has_no_loss_scale(callback_module: types.ModuleType, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_RUN_DIR", str(tmp_path))
    trainer = _trainer(FakeDeepSpeedEngine())
    trainer.args = types.SimpleNamespace(fp16=False, bf16=True)
    callback = callback_module.WorkbenchEventsCallback(None, trainer)
    assert callback.loss_scale.description()[0] is None
    _log(callback, 1)
    (event,) = [e for e in read_all(tmp_path / "events.jsonl") if e["type"] == "log"]
    assert (event["loss_scale"], event["overflow_count"], event["skipped_steps"]) == (None, 0, 0)
