""""Import command…": paste a `swift sft|pt` command or script, see the profile it becomes, take it.

The same importer as `workbench import` (`backend.importing.swift_flags`); it runs in a worker thread (swift's schema
may have to be read once). What cannot be carried is listed and the Import button stays disabled.
"""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static, TextArea

from backend.profile import LaunchProfile
from tui.safe import plain


class ImportCommandScreen(ModalScreen[LaunchProfile | None]):
    """Returns the imported profile, or None (Escape / Cancel)."""

    DEFAULT_CSS = """
    ImportCommandScreen { align: center middle; }
    ImportCommandScreen > Vertical {
        width: 90%; height: 90%; border: round $accent; padding: 0 1; background: $surface;
    }
    ImportCommandScreen #import-text { height: 10; }
    ImportCommandScreen #import-preview-scroll { height: 1fr; }
    ImportCommandScreen #import-status.-refused { color: $error; }
    ImportCommandScreen .dialog-buttons { height: auto; align-horizontal: right; }
    """

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="import-cancel", tooltip="Close without importing")]

    def __init__(self, text: str = "", *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.initial = text
        self.profile: LaunchProfile | None = None

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Import a swift command: paste `swift sft ...`, a script, or an accelerate/torchrun line")
            yield TextArea(self.initial, id="import-text", soft_wrap=True)
            yield Static("", id="import-status", markup=False)
            with VerticalScroll(id="import-preview-scroll"):
                yield Static("", id="import-preview", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Import", id="import-ok", variant="primary", compact=True, disabled=True)
                yield Button("Cancel", id="import-cancel-button", compact=True)

    def on_mount(self) -> None:
        self.query_one("#import-text", TextArea).focus()
        if self.initial:
            self._convert(self.initial)

    @on(TextArea.Changed, "#import-text")
    def _changed(self, event: TextArea.Changed) -> None:
        self._convert(event.text_area.text)

    @work(thread=True, exclusive=True, group="import", exit_on_error=False, description="Importing the command")
    def _convert(self, text: str) -> None:
        from backend.importing.swift_flags import ImportError_, import_script
        from backend.launch.swift_schema import load_schema
        from backend.profile import profile_to_toml

        if not text.strip():
            self.app.call_from_thread(self._show, None, "", "Paste a command.", False)
            return
        schema = load_schema()  # a worker thread: may read swift's schema once
        if schema is None:
            self.app.call_from_thread(self._show, None, "", "swift's argument list is not available.", True)
            return
        try:
            result = import_script(text, schema)
        except ImportError_ as err:
            listing = "\n".join(f"  [{n}] {c.title()}" for n, c in enumerate(err.commands, 1)) \
                if len(err.commands) > 1 else ""
            reasons = "\n".join(f"✗ {r}" for r in err.reasons)
            self.app.call_from_thread(self._show, None, listing, reasons, True)
            return
        notes = "\n".join(f"note: {n}" for n in result.notes)
        self.app.call_from_thread(self._show, result.profile, profile_to_toml(result.profile),
                                  notes or "Imported; nothing was left out.", False)

    def _show(self, profile: LaunchProfile | None, preview: str, status: str, refused: bool) -> None:
        self.profile = profile
        self.query_one("#import-preview", Static).update(plain(preview))  # a script's text: escapes shown, no markup
        status_line = self.query_one("#import-status", Static)
        status_line.update(plain(status))
        status_line.set_class(refused, "-refused")
        self.query_one("#import-ok", Button).disabled = profile is None

    @on(Button.Pressed, "#import-ok")
    def _ok(self) -> None:
        self.dismiss(self.profile)

    @on(Button.Pressed, "#import-cancel-button")
    def _cancel(self) -> None:
        self.dismiss(None)
