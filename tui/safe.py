"""Text from data (names, paths, log lines, errors) as the terminal must show it: as written.

Never parsed as markup (a run named `x [/] y` or a log line `[rank0]: ...` prints as it is) and
with control characters shown as escapes (`\\x1b`), never sent to the terminal.
"""

from __future__ import annotations

from rich.text import Text

from backend.core.safe_text import visible


def shown_as_is(value: object) -> str:
    """The text with control characters made visible; line breaks kept."""
    return "\n".join(visible(line) for line in str(value).split("\n"))


def plain(value: object, style: str = "") -> Text:
    """A `Text` of the value as written (no markup), control characters made visible."""
    return Text(shown_as_is(value), style=style)
