"""One smoke test per private (or internal) piece of a library that the workbench patches or calls.

pyproject.toml pins these libraries to the minor versions these tests passed on. When an upgrade breaks
one, its message names the upstream change to look for and the code of ours that depends on it.
The libraries are imported inside the tests: at module level they were imported at collection, by every
pytest worker and by the quick tier, which runs none of these (swift alone: about 8 s each time)."""

from __future__ import annotations

import argparse
import inspect


def _keywords(function: object) -> set[str]:
    return set(inspect.signature(function).parameters)  # type: ignore[arg-type]


def test_swift_row_preprocessor_batched_preprocess() -> None:
    """backend/data/swift_view_drops.py wraps it to name each row swift drops."""
    from swift.dataset.preprocessor.core import RowPreprocessor

    assert {"batched_row", "strict", "ignore_max_length_error"} <= _keywords(RowPreprocessor.batched_preprocess), (
        "ms-swift changed RowPreprocessor.batched_preprocess(self, batched_row, *, strict, ignore_max_length_error) "
        "(swift/dataset/preprocessor/core.py): update observe_preprocessor in backend/data/swift_view_drops.py")
    assert callable(getattr(RowPreprocessor, "batched_to_rows", None)) and callable(
        getattr(RowPreprocessor, "rows_to_batched", None)), (
        "ms-swift removed RowPreprocessor.batched_to_rows / rows_to_batched, which observe_preprocessor uses")
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    kept = RowPreprocessor().batched_preprocess({"messages": [chat]}, strict=True, ignore_max_length_error=False)
    assert kept == {"messages": [chat]}, f"ms-swift's RowPreprocessor now changes a plain chat row: {kept}"


def test_swift_template_prepare_generate_kwargs() -> None:
    """backend/chat/worker.py (install_stop) wraps it to add a stopping criterion."""
    from swift.template import Template

    assert _keywords(Template.prepare_generate_kwargs) == {"self", "generate_kwargs", "model"}, (
        "ms-swift changed Template.prepare_generate_kwargs(self, generate_kwargs, *, model=None) "
        "(swift/template/base.py): update install_stop in backend/chat/worker.py")
    assert "stopping_criteria" in inspect.getsource(Template.prepare_generate_kwargs), (
        "ms-swift's Template.prepare_generate_kwargs no longer builds generate_kwargs['stopping_criteria'], "
        "which install_stop appends to: a stopped chat answer would go on generating")


def test_swift_patch_get_type_hints() -> None:
    """backend/oracle/swift_args.py reads swift's argument dataclasses inside it (falls back without it)."""
    import swift.utils.utils

    patch = getattr(swift.utils.utils, "_patch_get_type_hints", None)
    assert patch is not None, (
        "ms-swift moved or renamed swift.utils.utils._patch_get_type_hints: `workbench schema --swift` then reads "
        "`str | dict` fields without swift's fix (backend/oracle/swift_args.py _swift_type_hint_patch)")
    with patch():
        pass


def test_swift_registries() -> None:
    """The callback plugin registers in callbacks_map; the data oracle reads the model/template registries
    and swift's packing."""
    from swift.callbacks import callbacks_map
    from swift.dataset.packing import calculate_matched_group
    from swift.model.model_meta import get_matched_model_types
    from swift.model.register import MODEL_MAPPING
    from swift.template.register import TEMPLATE_MAPPING

    assert isinstance(callbacks_map, dict) and "early_stop" in callbacks_map, (
        "ms-swift changed swift.callbacks.callbacks_map (the callback registry backend/plugin/workbench_callback.py "
        "adds workbench_events to)")
    assert "qwen2" in MODEL_MAPPING and "qwen" in TEMPLATE_MAPPING, (
        "ms-swift moved MODEL_MAPPING / TEMPLATE_MAPPING (swift.model.register / swift.template.register), which "
        "backend/data/swift_view_child.py and swift_registry.py read")
    assert _keywords(get_matched_model_types) == {"architectures"}, (
        "ms-swift changed get_matched_model_types(architectures) (swift.model.model_meta)")
    groups, _ = calculate_matched_group([(0, 3), (1, 2), (2, 4)], 5, is_finished=True)
    assert sorted(sorted(i for i, _ in g) for g in groups) == [[0, 1], [2]], (
        f"ms-swift changed calculate_matched_group(sequences, packing_length, is_finished) (swift/dataset/packing.py): "
        f"{groups}")


def test_accelerate_optimizers_and_mixed_precision() -> None:
    """backend/plugin/loss_scale.py (LossScale.install_cpu_scaler) wires a GradScaler into accelerate by hand."""
    import accelerate.state
    from accelerate import Accelerator
    from accelerate.optimizer import AcceleratedOptimizer, patch_optimizer_step

    assert "self._optimizers = []" in inspect.getsource(Accelerator.__init__), (
        "accelerate no longer keeps Accelerator._optimizers: update LossScale.install_cpu_scaler (CPU fp16 would train "
        "without its loss scaler)")
    assert "_mixed_precision" in inspect.getsource(accelerate.state), (
        "accelerate renamed AcceleratorState._mixed_precision, which LossScale.install_cpu_scaler sets to fp16")
    source = inspect.getsource(AcceleratedOptimizer)
    missing = [name for name in ("_accelerate_step_called", "_optimizer_original_step_method",
                                 "_optimizer_patched_step_method") if name not in source]
    assert not missing, f"accelerate's AcceleratedOptimizer no longer has {missing}, which LossScale.install_cpu_scaler sets"
    assert _keywords(patch_optimizer_step) == {"accelerated_optimizer", "method"}, (
        "accelerate changed accelerate.optimizer.patch_optimizer_step(accelerated_optimizer, method)")


def test_torch_grad_scaler_scale_and_init_scale() -> None:
    """backend/plugin/loss_scale.py reads GradScaler._scale and _init_scale to count loss-scale drops."""
    import torch

    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    scaler.scale(torch.ones(()))
    assert float(scaler._scale) == 1024.0 and float(scaler._init_scale) == 1024.0, (
        "torch changed GradScaler._scale / _init_scale, which LossScale.count_overflow in backend/plugin/loss_scale.py reads")


def test_plotext_set_size_and_the_theme_name() -> None:
    """tui/widgets/metric_plots.py builds figures off the UI thread as PlotextPlot.render does."""
    from textual_plotext import PlotextPlot
    from textual_plotext.plot import Plot

    plot = Plot()
    plot.plotsize(30, 8)
    plot._set_size(30, 8)  # an AttributeError here: plotext renamed _figure._set_size
    assert len(plot.build().splitlines()) == 8, "plotext's _set_size no longer sizes the figure it builds"
    assert _keywords(PlotextPlot._get_plotext_theme_name) == {"self", "app_theme_name"}, (
        "textual-plotext changed PlotextPlot._get_plotext_theme_name(self, app_theme_name), which MetricPlot "
        "calls for the plot's theme")


def test_argparse_actions() -> None:
    """backend/oracle/swift_args.py reads the parser's actions to list swift's flags."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--x", action="store_false")
    kinds = {type(a) for a in parser._actions}
    assert kinds == {argparse._HelpAction, argparse._StoreFalseAction}, "argparse changed _actions / its action classes"


def test_swift_eval_lists_opencompass_and_calls_evaltype_service() -> None:
    """backend/evaluation/worker.py replaces EvalArguments.list_eval_dataset (it imports OpenCompass, an extra
    that would pin numpy 1.x, even for EvalScope's Native back end), and the eval extra pins evalscope below 1.11
    (ms-swift's get_native_task_cfg uses EvalType.SERVICE, which evalscope 1.11 removed)."""
    from evalscope.api.registry import BENCHMARK_REGISTRY
    from evalscope.constants import EvalType
    from swift.arguments import EvalArguments
    from swift.pipelines.eval.eval import SwiftEval

    assert isinstance(inspect.getattr_static(EvalArguments, "list_eval_dataset"), staticmethod), (
        "ms-swift changed EvalArguments.list_eval_dataset (swift/arguments/eval_args.py), a staticmethod that "
        "run_swift_eval in backend/evaluation/worker.py replaces")
    assert "list_eval_dataset(self.eval_backend)" in inspect.getsource(EvalArguments._init_eval_dataset), (
        "ms-swift's EvalArguments._init_eval_dataset no longer checks --eval_dataset through list_eval_dataset: "
        "review run_swift_eval in backend/evaluation/worker.py (it may not be needed any more)")
    assert {"general_qa", "general_mcq"} <= set(BENCHMARK_REGISTRY), "EvalScope renamed its local benchmarks"
    assert "EvalType.SERVICE" in inspect.getsource(SwiftEval.get_native_task_cfg) and hasattr(EvalType, "SERVICE"), (
        "ms-swift or EvalScope changed EvalType.SERVICE: review the evalscope range of the eval extra "
        "(pyproject.toml)")


def test_trainer_methods_and_ddp_buffer_sync_the_step_timing_wraps() -> None:
    """backend/plugin/step_timing.py (#38) wraps the trainer's get_batch_samples / training_step / compute_loss and
    DDP's _sync_buffers, and fault_hooks.py's slow loader replaces callback_handler.train_dataloader.collate_fn."""
    from torch.nn.parallel import DistributedDataParallel
    from transformers import Trainer
    from transformers.trainer_callback import CallbackHandler

    assert {"epoch_iterator", "num_batches", "device"} <= _keywords(Trainer.get_batch_samples), (
        "transformers changed Trainer.get_batch_samples(epoch_iterator, num_batches, device): update the data-wait "
        "timing in backend/plugin/step_timing.py")
    assert callable(Trainer.training_step) and callable(Trainer.compute_loss)
    assert callable(getattr(DistributedDataParallel, "_sync_buffers", None)), (
        "torch removed DistributedDataParallel._sync_buffers: the forward's wait for the other ranks in "
        "backend/plugin/step_timing.py is no longer timed (a slow rank is then named by its median step)")
    assert "train_dataloader" in inspect.getsource(CallbackHandler.__init__), (
        "transformers' CallbackHandler no longer keeps train_dataloader: fault_hooks.slow_data_loader finds no loader")
