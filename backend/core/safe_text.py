"""Text from files (profile names, run ids, log lines, failure reasons) shown as plain text.

A profile name can hold terminal escape sequences (clear the screen, set the window title),
newlines or bidirectional overrides (U+202E) that would rewrite what the user sees. `visible`
turns every such character into a visible escape (`\\x1b`, `\\n`, `\\u202e`), so the text is
shown exactly and never acts on the terminal. Rich markup in it stays text when the caller
prints with markup off or wraps it in `rich.text.Text`.
"""

from __future__ import annotations

import re
import unicodedata

# categories Cc (C0/C1 controls, DEL), Cf (format: bidi overrides, zero-width), Zl/Zp (line/paragraph separators)
_HIDDEN = ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn")


def is_hidden(char: str) -> bool:
    """A character that acts on the terminal or hides itself instead of showing (ESC, BEL, U+202E ...)."""
    return unicodedata.category(char) in _HIDDEN


def _escape(char: str) -> str:
    code = ord(char)
    if char in "\n\t\r":
        return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: object, limit: int | None = None) -> str:
    """`text` with control and invisible format characters shown as escapes; cut to `limit` chars."""
    text = str(text)
    shown = "".join(_escape(c) if is_hidden(c) else c for c in text)
    if limit is not None and len(shown) > limit:
        return shown[: max(0, limit - 1)] + "…"
    return shown


def visible_lines(text: object) -> str:
    """`visible`, except that line breaks and tabs stay as they are (a template's turns, a multi-line error,
    indented code in a row): only what would act on the terminal or hide itself is escaped."""
    return "".join(c if c in "\n\t" or not is_hidden(c) else _escape(c) for c in str(text))


def shell_escape(char: str) -> str:
    """`char` inside bash's `$'...'` quoting: control characters as escapes bash turns back into them."""
    if char in "\\'":
        return "\\" + char
    return _escape(char) if is_hidden(char) else char


# a swift flag or environment variable whose value must never be shown or stored
SECRET_NAME = re.compile(r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|SECRET_KEY|PRIVATE_KEY)(_|$)")


def is_secret_name(name: str) -> bool:
    """A swift flag or environment variable whose value must never be shown or stored
    (hub_token, HF_TOKEN, WANDB_API_KEY ...; not max_new_tokens or TOKENIZERS_PARALLELISM)."""
    return bool(SECRET_NAME.search(name.upper()))


# tokens whose form names them whatever flag carries them (Hugging Face, OpenAI-style, GitHub, Slack, AWS keys)
_TOKEN = re.compile(r"\b(hf_|sk-|ghp_|gho_|ghs_|github_pat_|xox[abprs]-|AKIA)[A-Za-z0-9_\-]{8,}")
_SECRET_FLAG = re.compile(r"^(-+)([^=\s]+)=(.*)$", re.DOTALL)


def masked(value: str, key: str = "") -> str:
    """`value` fit for an error message: all of it when `key` is a secret's name, the value of a secret flag
    word (`--hub_token=hf_…` -> `--hub_token=***`) and any token-shaped word (`hf_…`, `sk-…`) as ***."""
    if key and is_secret_name(key.rsplit(".", 1)[-1]):
        return "***"
    flag = _SECRET_FLAG.match(value)
    if flag and is_secret_name(flag.group(2)):
        return f"{flag.group(1)}{flag.group(2)}=***"
    return _TOKEN.sub(lambda found: f"{found.group(1)}***", value)


def redact_words(words: list[str]) -> list[str]:
    """Command words with each secret flag's value (`--hub_token=x`, `--hub_token x`) as ***."""
    shown: list[str] = []
    secret = False
    for word in words:
        name, eq, _ = word.partition("=")
        if word.startswith("--") and is_secret_name(name[2:]):
            shown.append(f"{name}=***" if eq else word)
            secret = not eq
        elif word.startswith("--"):
            shown.append(word)
            secret = False
        else:
            shown.append("***" if secret else word)
    return shown
