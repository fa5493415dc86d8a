"""The launch workspace's files: save, save as, open, diff, quit with changes, copy the command, save it as a script.

A mixin of `LaunchScreen`: the dialogs and messages are here, the work is `ProfileDocument`'s
(tui/profile_document.py) and the plan's.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from backend.core.fs import write_text_atomic
from tui.modals.dialogs import Choice, ConfirmScreen, PathPromptScreen, TextScreen

if TYPE_CHECKING:  # the document and its profile models are imported once the first frame is drawn (#41)
    from textual.screen import Screen

    from backend.launch.command import LaunchPlan
    from tui.profile_document import ProfileDocument

    _Base = Screen
else:
    _Base = object


class Unsaved(Enum):
    """What to do with unsaved changes before quitting (Cancel: None)."""

    SAVE = "save"
    DISCARD = "discard"


def _is_toml(path: Path) -> str | None:
    return None if path.suffix == ".toml" else "a profile file name ends in .toml"


class ProfileFiles(_Base):
    document: ProfileDocument
    plan: LaunchPlan | None

    def changed(self) -> None: ...

    def _say(self, message: str, title: str = "", severity: str = "information") -> None:
        self.notify(message, title=title, severity=severity, timeout=15 if severity == "error" else 5,  # type: ignore[arg-type]
                    markup=False)

    # ------------------------------------------------------------ save

    def action_save(self) -> None:
        if self.document.path is None or self.document.read_only:
            self.action_save_as()
            return
        self.save_to(self.document.path)

    def save_to(self, path: Path, *, as_new: bool = False) -> bool:
        """Save the form's profile to `path`; False (and a message) when it cannot be."""
        from tui.command_text import display_path
        from tui.profile_document import SaveRefused

        try:
            saved = self.document.save_as(path) if as_new else self.document.save(path)
        except SaveRefused as err:
            self._say(str(err), "Not saved", "error")
            return False
        self.changed()
        self._say(f"Saved {display_path(saved)}")
        return True

    def action_save_as(self, then: Callable[[], object] | None = None) -> None:
        prompt = PathPromptScreen("Save profile as", f"./{self.document.profile.name}.toml", check=_is_toml,
                                  id="save-as-dialog")
        self.app.push_screen(prompt, lambda path: self._save_as_chosen(path, then))

    def _save_as_chosen(self, path: Path | None, then: Callable[[], object] | None) -> None:
        from tui.command_text import display_path

        if path is None:
            return
        path = path.resolve()

        def save() -> None:
            if self.save_to(path, as_new=True) and then is not None:
                then()

        if path.exists() and path != self.document.path:
            self.app.push_screen(ConfirmScreen("Replace file?", f"{display_path(path)} exists.",
                                               [Choice("Replace", True, "warning", "replace"),
                                                Choice("Cancel", False, "default", "cancel")]),
                                 lambda replace: save() if replace else None)
            return
        save()

    def confirm_quit(self, quit: Callable[[], object]) -> None:
        """Ask before quitting with unsaved changes; `quit` runs once they are saved or discarded."""
        choices: list[Choice[Unsaved | None]] = [Choice("Save and quit", Unsaved.SAVE, "primary", "save"),
                                                 Choice("Quit without saving", Unsaved.DISCARD, "error", "discard"),
                                                 Choice("Cancel", None, "default", "cancel")]
        body = (f"Profile '{self.document.profile.name}' has changes that are not saved.\n"
                "Runs already started keep going either way.")

        def answered(answer: Unsaved | None) -> None:
            if answer is Unsaved.DISCARD:
                quit()
            elif answer is Unsaved.SAVE and (self.document.path is None or self.document.read_only):
                self.app.switch_mode("launch")
                self.action_save_as(then=quit)
            elif answer is Unsaved.SAVE and self.save_to(self.document.path):  # type: ignore[arg-type]
                quit()

        screen: ConfirmScreen[Unsaved | None] = ConfirmScreen("Unsaved changes", body, choices, id="confirm-quit")
        self.app.push_screen(screen, answered)

    # ------------------------------------------------------------ open, diff

    def action_open(self) -> None:
        if self.document.is_dirty:
            self.app.push_screen(ConfirmScreen("Unsaved changes", "Opening another profile discards the changes "
                                               "in the form.", [Choice("Discard and open", True, "warning", "open"),
                                                                Choice("Cancel", False, "default", "cancel")]),
                                 lambda discard: self._ask_open() if discard else None)
            return
        self._ask_open()

    def _ask_open(self) -> None:
        from tui.profile_document import check_profile, profile_choices

        self.app.push_screen(PathPromptScreen("Open profile", "", suggestions=profile_choices(Path.cwd()),
                                              check=check_profile, id="open-dialog"),
                             lambda path: self.open_profile(path) if path is not None else None)

    def open_profile(self, path: Path) -> None:
        from tui.command_text import display_path
        from tui.profile_document import ProfileDocument

        opened = ProfileDocument.open(path)
        if opened.open_problem:
            self._say(opened.open_problem, "Profile not opened", "error")
            return
        self.document.adopt(opened)
        self.changed()
        self._say(f"Opened {display_path(path)}")

    def action_import_command(self) -> None:
        """"Import command…" (#11): paste a swift command or script; it becomes a new, unsaved profile."""
        from tui.profile_document import ProfileDocument
        from tui.widgets.import_dialog import ImportCommandScreen

        def imported(profile: object) -> None:
            if profile is None:
                return
            self.document.adopt(ProfileDocument(profile, None, ""))  # type: ignore[arg-type]
            self.changed()
            self._say("Imported as a new profile, not saved yet (Ctrl+N saves it).")

        def ask() -> None:
            self.app.push_screen(ImportCommandScreen(id="import-dialog"), imported)

        if self.document.is_dirty:
            self.app.push_screen(ConfirmScreen("Unsaved changes", "Importing replaces the profile in the form.",
                                               [Choice("Discard and import", True, "warning", "import"),
                                                Choice("Cancel", False, "default", "cancel")]),
                                 lambda discard: ask() if discard else None)
            return
        ask()

    def action_diff(self) -> None:
        text = self.document.diff_text()
        if not text:
            self._say("The form matches the saved profile.", "No differences")
            return
        self.app.push_screen(TextScreen("Form vs saved profile", text, diff=True, id="diff-view"))

    # ------------------------------------------------------------ the command

    def action_copy_command(self) -> None:
        if self.plan is None:
            self._say("There is no command yet.", severity="warning")
            return
        line = self.plan.shell_line()
        self.app.copy_to_clipboard(line)
        self._say(f"Copied {len(line)} characters (OSC 52: the terminal must allow clipboard access).",
                  "Command copied")

    def action_save_script(self) -> None:
        if self.plan is None:
            self._say("There is no command yet.", severity="warning")
            return
        self.app.push_screen(PathPromptScreen("Save the launch command as a script",
                                              f"./{self.document.profile.name}-launch.sh", id="script-dialog"),
                             lambda path: self.save_script(path) if path is not None else None)

    def save_script(self, path: Path) -> None:
        """Write the accelerate config the command names, then the executable script (atomic)."""
        from tui.command_text import display_path, launch_script

        if self.plan is None:
            return
        try:
            self.plan.write_configs()
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, launch_script(self.plan, self.document.profile.name, self.document.path),
                              mode=0o755)
        except OSError as err:
            self._say(f"{path}: {err}", "Script not written", "error")
            return
        self._say(f"Wrote {display_path(path)}", "Script saved")
