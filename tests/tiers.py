"""The quick tier's rule (`pytest -m "not slow"`): every pure-logic test, no real training, no library child.

A test is slow, marked or not (tests/conftest.py applies this at collection), when it
- needs one of the session's real trainings (`SHARED_TRAININGS`), or
- needs a fixture that asks swift or transformers in a child, or imports them here (`LIBRARY_FIXTURES`), or
- is listed in `SLOW_TESTS` (a module, or one test of it): what starts such a child itself (validate's swift
  build, swift's parser, registry or data view, torch's names) or imports swift here, opens the launch
  workspace (its form is validated by swift in the app's warm child), or drives a real terminal (a pty, tmux).
Swift's argument schema (`require_schema`) is one child a session, cached for every worker: the import and
flag tests that read it stay quick.
Each of these costs seconds to a minute (a cold import of swift is several seconds on two cores); the quick
tier measured in bench/RESULTS.md ("The quick tier") is what is left.
"""

from __future__ import annotations

SHARED_TRAININGS = frozenset({"quill_run", "short_lora_run", "quickstart_cli_run"})

LIBRARY_FIXTURES = frozenset(
    {
        "tiny_model",  # built by transformers in a child (backend/models/demo)
        "swift_registry",  # swift's model registry, dumped in a child
        "formats_request",
        "formats_report",
        "swift_reference",
        "data_profile",  # swift's view of the data
    }
)

LIBRARY_CHILD = "asks swift, transformers or torch in a child"
LIBRARY_IMPORT = "imports swift in the test process"
LAUNCH_WORKSPACE = "opens the launch workspace (validated by swift in the app's warm child)"
REAL_TERMINAL = "drives the real TUI in a terminal (a pty or tmux)"

SLOW_TESTS: dict[str, str] = {
    "tests/data_inspect/test_cli_data.py": LIBRARY_CHILD,
    "tests/data_inspect/test_swift_data.py": LIBRARY_CHILD,
    "tests/data_inspect/test_swift_report_widget.py": LIBRARY_CHILD,
    "tests/test_validate_library_names.py": LIBRARY_CHILD,
    "tests/test_validate_offline.py::test_a_learning_rate_above_one_is_an_error_with_the_range": LIBRARY_CHILD,
    "tests/test_swift_args.py::test_validate_cli_names_the_profile_key": LIBRARY_CHILD,
    "tests/test_import.py::test_import_round_trip_through_swifts_parser": LIBRARY_CHILD,
    "tests/test_extra_args_editor.py::test_completion_help_and_values_as_typed": LIBRARY_CHILD,
    "tests/hang/test_flight_recorder.py::test_the_names_are_the_installed_torchs": LIBRARY_CHILD,
    "tests/faults/test_bad_input_corpus.py": LIBRARY_CHILD,
    "tests/faults/test_8_no_tracebacks.py::test_a_300_character_profile_name": LIBRARY_CHILD,
    "tests/faults/test_round3_hostile_data.py::test_validate_refuses_a_line_too_long_or_too_deep": LIBRARY_CHILD,
    "tests/faults/test_round3_low.py::test_show_never_prints_a_hub_token_given_in_extra_args": LIBRARY_CHILD,
    "tests/estimate/test_moe_all_linear_warning.py::test_all_linear_on_mixtral": LIBRARY_CHILD,
    "tests/test_swift_args.py::test_every_shipped_profile_is_accepted_by_swifts_parser": LIBRARY_CHILD,
    "tests/test_private_internals.py::test_swift_eval_lists_opencompass": LIBRARY_IMPORT,
    "tests/faults/test_3_output_dir.py::test_validate_names_the_run_that_owns_the_output_dir": LIBRARY_CHILD,
    "tests/faults/test_3_output_dir.py::test_validate_refuses_an_output_dir_holding_someone_elses": LIBRARY_CHILD,
    "tests/faults/test_round3_flag_values.py::test_validate_masks_every_smuggled_secret": LIBRARY_CHILD,
    "tests/watch/test_user_notify_file.py::test_launch_and_the_validate_command_refuse_it": LIBRARY_CHILD,
    "tests/estimate/test_estimate_cli.py::test_profile_with_cli_overrides": LIBRARY_CHILD,
    "tests/test_import_dialog.py::test_launch_workspace_imports_a_command": LAUNCH_WORKSPACE,
    "tests/estimate/test_estimate_exact.py": LIBRARY_CHILD,  # transformers' exact shapes, one child a session
    "tests/estimate/test_fsdp_quantized_states.py::test_workbench_estimate_on_an_fsdp2_profile": LIBRARY_CHILD,
    "tests/scoreboard/test_golden_prompts_path.py::test_a_fifo_or_a_folder_as_golden_prompts": LIBRARY_CHILD,
    "tests/tui/test_launch_": LAUNCH_WORKSPACE,  # every tests/tui/test_launch_*.py
    "tests/tui/test_hostile_names.py::test_launch_workspace_views": LAUNCH_WORKSPACE,
    "tests/tui/test_dataset_tab.py": LAUNCH_WORKSPACE,
    "tests/tui/test_swift_defaults_in_form.py": LAUNCH_WORKSPACE,
    "tests/tui/test_model_picker_exact.py": LAUNCH_WORKSPACE,
    "tests/tui/test_lazy_tabs_and_typed_dialogs.py": LAUNCH_WORKSPACE,
    "tests/tui/test_worker_failures.py": LAUNCH_WORKSPACE,
    "tests/queue/test_queue_screen.py::test_f5_offers_queue_and_queues_the_profile": LAUNCH_WORKSPACE,
    "tests/tui/test_terminal_pace.py::test_a_terminal_that_stops_reading": REAL_TERMINAL,
    "tests/tui/test_terminal_gone.py": REAL_TERMINAL,
    "tests/tui/test_tmux_launch.py": REAL_TERMINAL,
}


def slow_reason(nodeid: str, fixturenames: set[str]) -> str | None:
    """Why the test `nodeid` (with the fixtures it needs) is left out of the quick tier, or None."""
    if SHARED_TRAININGS & fixturenames:
        return "trains (one of the session's shared real runs)"
    if LIBRARY_FIXTURES & fixturenames:
        return LIBRARY_CHILD
    return next((why for prefix, why in SLOW_TESTS.items() if nodeid.startswith(prefix)), None)
