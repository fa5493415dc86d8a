"""swift's dataset formats, ported for the first look only: which rows swift's AutoPreprocessor keeps, following
its rules (file-level choice of preprocessor from the columns, column aliases, sharegpt in both spellings,
OpenAI / Anthropic tool messages, content blocks), and the chat it makes of each. tests/data_inspect/
test_preview_agrees.py checks it against swift's own loader on every documented format; swift's answer
(backend/oracle/swift_data.py) replaces it when it arrives."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from typing import Any

from backend.data_records import RowError

Message = dict[str, str]

MESSAGE_KEYS = ("messages", "conversation", "conversations")
SYSTEM_KEYS = ("system", "system_prompt")
QUERY_KEYS = ("query", "prompt", "input", "instruction", "question", "problem")
RESPONSE_KEYS = ("response", "answer", "output", "targets", "target", "answer_key", "answers", "solution",
                 "text", "completion", "content")
USER_ROLES = ("user", "human")
ASSISTANT_ROLES = ("assistant", "gpt", "bot")
TOOL_CALL_ROLES = ("function_call",)
TOOL_RESPONSE_ROLES = ("function_response", "observation", "observations")
SWIFT_ROLES = {"system", "user", "tool_call", "tool_response", "tool", "assistant"}


@dataclass(frozen=True)
class Layout:
    """How swift reads a file's rows: its preprocessor and the column renames it applies."""

    kind: str  # "messages", "alpaca" or "response"
    renames: dict[str, str] = field(default_factory=dict)


def _safe_renames(keys: set[str], mapping: dict[str, str]) -> dict[str, str]:
    """swift's safe_rename_columns: case-insensitive, two columns for one name means neither moves."""
    lower = {k.lower(): k for k in keys}
    found = {lower[k]: v for k, v in mapping.items() if k in lower}
    targets = [v for v in found.values()]
    return {k: v for k, v in found.items() if targets.count(v) == 1}


def detect_layout(keys: set[str]) -> Layout:
    """swift's AutoPreprocessor choice for a file with these columns."""
    lower = {k.lower() for k in keys}
    if lower & set(MESSAGE_KEYS):
        mapping = {k: "messages" for k in MESSAGE_KEYS} | {k: "system" for k in SYSTEM_KEYS}
        return Layout("messages", _safe_renames(keys, mapping))
    mapping = ({k: "system" for k in SYSTEM_KEYS} | {k: "query" for k in QUERY_KEYS}
               | {k: "response" for k in RESPONSE_KEYS})
    kind = "alpaca" if {"instruction", "input"} <= keys else "response"
    return Layout(kind, _safe_renames(keys, mapping))


def to_messages(record: Any, layout: Layout | None = None) -> list[Message]:
    """The chat swift makes of one row (RowError: swift drops the row, and why). `layout` is the
    file's (swift decides per file); without it the row's own keys decide."""
    if isinstance(record, RowError):
        raise record
    if not isinstance(record, dict):
        raise RowError(f"a row must be a JSON object, found {type(record).__name__}")
    layout = layout or detect_layout(set(record))
    keyed: dict[str, Any] = record  # a JSON object: its keys are strings
    row = {layout.renames.get(k, k): v for k, v in keyed.items()}
    try:
        if layout.kind == "messages":
            messages = _from_messages(row)
        else:
            messages = _from_response(row, alpaca=layout.kind == "alpaca")
        return _check_messages(messages)
    except RowError:
        raise
    except Exception as err:  # whatever a row holds, it is a reason, never a crash
        raise RowError(f"{type(err).__name__}: {err}") from None


def _from_messages(row: dict[str, Any]) -> list[Any]:
    messages = row.get("messages")
    if isinstance(messages, str):  # swift's repair: a JSON string (a CSV cell, say)
        try:
            messages = json.loads(messages)
        except json.JSONDecodeError:
            raise RowError("`messages` is a string that is not JSON: swift keeps nothing of this row") from None
    if not messages or isinstance(messages, str):
        raise RowError("`messages` is empty: swift keeps nothing of this row")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise RowError("`messages` must be a list of objects")
    messages = [dict(m) for m in messages]
    if any(m.get("tool_calls") for m in messages):
        messages = _from_openai_tools(messages)
    elif any(isinstance(m.get("content"), list) and any(isinstance(b, dict) and b.get("type") in
                                                        ("tool_use", "tool_result") for b in m["content"])
             for m in messages):
        messages = _from_anthropic(messages)
    for m in messages:
        if "from" in m:
            m["role"] = m.pop("from")
        if "value" in m:
            m["content"] = m.pop("value")
    system = row.get("system")
    if "role" not in messages[0] and "content" not in messages[0]:  # sharegpt: [{human, assistant}, ...]
        pairs = []
        for turn in messages:
            user = next((turn[k] for k in USER_ROLES if k in turn), _MISSING)
            answer = next((turn[k] for k in ASSISTANT_ROLES if k in turn), _MISSING)
            if user is _MISSING or answer is _MISSING:
                raise RowError(f"a conversation turn needs a human/user and an assistant key; found "
                               f"{', '.join(map(str, turn)) or 'none'}")
            pairs += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
        return ([{"role": "system", "content": system}] if system is not None else []) + pairs
    if messages[0].get("role") == "system":
        pass
    elif system is not None:
        messages.insert(0, {"role": "system", "content": system})
    for m in messages:
        role = str(m.get("role"))
        if role in USER_ROLES:
            m["role"] = "user"
        elif role in ASSISTANT_ROLES:
            m["role"] = "assistant"
        elif role.replace("-", "_") in TOOL_CALL_ROLES:
            m["role"] = "tool_call"
        elif role.replace("-", "_") in TOOL_RESPONSE_ROLES:
            m["role"] = "tool_response"
    return messages


_MISSING = object()


def _from_openai_tools(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    converted = []
    for m in messages:
        calls = m.get("tool_calls")
        if m.get("role") == "assistant" and calls:
            if m.get("content"):
                converted.append({"role": "assistant", "content": m["content"]})
            for call in calls:
                function = call.get("function", call) if isinstance(call, dict) else {}
                converted.append({"role": "tool_call", "content": json.dumps(
                    {"name": function.get("name"), "arguments": function.get("arguments")})})
        else:
            converted.append(m)
    return converted


def _from_anthropic(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    converted = []
    for m in messages:
        content = m.get("content")
        if not isinstance(content, list):
            converted.append(m)
            continue
        text = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        if text:
            converted.append({"role": m.get("role"), "content": "".join(text)})
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                converted.append({"role": "tool_call", "content": json.dumps(
                    {"name": block.get("name"), "arguments": block.get("input")})})
            elif isinstance(block, dict) and block.get("type") == "tool_result":
                converted.append({"role": "tool_response", "content": _block_text(block.get("content"))})
    return converted


def _block_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return "" if content is None else str(content)


def _from_response(row: dict[str, Any], *, alpaca: bool) -> list[Any]:
    if alpaca:
        instruction, input_ = row.get("instruction"), row.get("input")
        query = f"{instruction}\n{input_}" if instruction and input_ else instruction or input_
        if not isinstance(query, str):
            raise RowError("instruction and input are both empty")
        row = {**row, "query": query}
        if "output" in row and row.get("response") is None:
            row["response"] = row["output"]
    response = row.get("response")
    if isinstance(response, (list, tuple)):
        response = response[0] if response else None
    history = row.get("history") or []
    if isinstance(history, str):  # swift reads it with ast.literal_eval
        try:
            history = ast.literal_eval(history)
        except (ValueError, SyntaxError) as err:
            raise RowError(f"`history` is not a list literal swift can read ({type(err).__name__}); write it as "
                           f"[[\"question\", \"answer\"], ...]") from None
    if not isinstance(history, list):
        raise RowError("`history` must be a list of [question, answer] pairs")
    pairs = [*history, [row.get("query"), response]]
    messages: list[dict[str, Any]] = []
    if row.get("system") is not None:
        messages.append({"role": "system", "content": row["system"]})
    for pair in pairs:
        if not isinstance(pair, (list, tuple)):
            raise RowError("`history` must be a list of [question, answer] pairs")
        if pair[0] is not None:
            messages.append({"role": "user", "content": pair[0]})
        if pair[1] is not None:
            messages.append({"role": "assistant", "content": pair[1]})
    return messages


def _check_messages(messages: list[Any]) -> list[Message]:
    """swift's own check (RowPreprocessor._check_messages) on the converted chat."""
    if not messages:
        raise RowError("no question and no answer: swift keeps nothing of this row")
    checked: list[Message] = []
    for number, message in enumerate(messages, start=1):
        role, content = message.get("role"), message.get("content")
        if role not in SWIFT_ROLES:
            raise RowError(f"message {number} has role {role!r}, which swift rejects; use one of "
                           f"system, user, assistant, tool_call, tool_response")
        if content is None:
            raise RowError(f"message {number} ({role}) has no content")
        checked.append({"role": role, "content": _display(content)})
    return checked


def _display(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return json.dumps(content) if isinstance(content, dict) else str(content)
