"""One small dataset per format of ms-swift's custom-dataset documentation (rows of our own, in the
docs' shapes), plus malformed ones. Each entry says by hand how many rows swift keeps and drops."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Format:
    name: str
    ref: str  # relative to the folder the files are written to (may end in #N)
    rows: int  # rows swift's loader keeps
    dropped: dict[int, str] = field(default_factory=dict)  # line -> words the reason contains
    unreadable: bool = False
    bad_lines: tuple[int, ...] = ()
    zero_trained: tuple[int, ...] = ()  # rows with no trained token
    encode_errors: int = 0  # rows swift's template cannot encode (swift drops them at training)


def _jsonl(path: Path, rows: list[object]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


TOOLS = json.dumps([{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])

ALIASES = [("prompt", "completion"), ("question", "answer"), ("instruction", "response"), ("input", "target"),
           ("problem", "solution"), ("query", "answer"), ("prompt", "response")]


def write_formats(folder: Path) -> list[Format]:
    """Write every format's file into `folder`; the list says what swift makes of each."""
    folder.mkdir(parents=True, exist_ok=True)
    formats: list[Format] = []
    _jsonl(folder / "messages.jsonl", [
        {"messages": [{"role": "system", "content": "You answer in one short sentence."},
                      {"role": "user", "content": "What colour is the sky?"},
                      {"role": "assistant", "content": "Blue on a clear day."},
                      {"role": "user", "content": "And at night?"},
                      {"role": "assistant", "content": "Dark, with stars."}]},
        {"messages": [{"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "Seven."}]},
        {"messages": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi!"}]},
    ])
    formats.append(Format("messages", "messages.jsonl", 3))
    _jsonl(folder / "sharegpt_docs.jsonl", [
        {"system": "You are terse.", "conversation": [{"human": "Capital of France?", "assistant": "Paris."},
                                                      {"human": "Of Italy?", "assistant": "Rome."}]},
        {"conversation": [{"human": "Two plus two?", "assistant": "Four."}]},
    ])
    formats.append(Format("sharegpt (docs: system + conversation human/assistant)", "sharegpt_docs.jsonl", 2))
    _jsonl(folder / "sharegpt_classic.jsonl", [
        {"conversations": [{"from": "system", "value": "You are a patient teacher who explains step by step."},
                           {"from": "human", "value": "Why is ice slippery?"},
                           {"from": "gpt", "value": "A thin film of water forms on top."}]},
        {"conversations": [{"from": "human", "value": "Hello"}, {"from": "gpt", "value": "Hello to you."}]},
    ])
    formats.append(Format("sharegpt (classic: conversations from/value)", "sharegpt_classic.jsonl", 2))
    _jsonl(folder / "alpaca.jsonl", [
        {"system": "You translate.", "instruction": "Translate to French", "input": "cat", "output": "chat"},
        {"instruction": "Give a synonym of big", "input": "", "output": "large"},
    ])
    formats.append(Format("alpaca (instruction/input/output)", "alpaca.jsonl", 2))
    _jsonl(folder / "query_response.jsonl", [
        {"system": "Be precise.", "query": "And 3*3?", "response": "9",
         "history": [["What is 2*2?", "4"]]},
        {"query": "Spell cat", "response": "c-a-t"},
    ])
    formats.append(Format("query/response/history", "query_response.jsonl", 2))
    for query, response in ALIASES:
        name = f"alias_{query}_{response}.jsonl"
        _jsonl(folder / name, [{query: "Is water wet?", response: "Yes."},
                               {query: "Is fire cold?", response: "No."}])
        formats.append(Format(f"column alias {query}/{response}", name, 2))
    _jsonl(folder / "pretrain_messages.jsonl", [
        {"messages": [{"role": "assistant", "content": "Rivers run to the sea."}]},
        {"messages": [{"role": "assistant", "content": "Mountains rise slowly."}]},
    ])
    formats.append(Format("pre-training (assistant-only messages)", "pretrain_messages.jsonl", 2))
    (folder / "pretrain.txt").write_text("The first plain line.\nA second line of text.\nThird.\n",
                                         encoding="utf-8")
    formats.append(Format("pre-training (.txt)", "pretrain.txt", 3))
    _jsonl(folder / "agent.jsonl", [
        {"tools": TOOLS, "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "tool_call", "content": json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})},
            {"role": "tool_response", "content": json.dumps({"weather": "sunny"})},
            {"role": "assistant", "content": "Sunny in Paris."}]},
    ])
    formats.append(Format("agent (tools + tool_call/tool_response)", "agent.jsonl", 1))
    _jsonl(folder / "openai_tools.jsonl", [
        {"tools": TOOLS, "messages": [
            {"role": "user", "content": "Weather in Rome?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "get_weather", "arguments": json.dumps({"city": "Rome"})}}]},
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"weather": "rain"})},
            {"role": "assistant", "content": "Rain in Rome."}]},
    ])
    formats.append(Format("OpenAI tool_calls", "openai_tools.jsonl", 1))
    _jsonl(folder / "anthropic_tools.jsonl", [
        {"messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather",
                                               "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "snow"}]},
            {"role": "assistant", "content": "Snow in Oslo."}]},
    ])
    formats.append(Format("Anthropic tool_use/tool_result", "anthropic_tools.jsonl", 1))
    _jsonl(folder / "content_blocks.jsonl", [
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "Say yes."}]},
                      {"role": "assistant", "content": [{"type": "text", "text": "Yes."}]}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "Say no."}]},
                      {"role": "assistant", "content": "No."}]},
    ])
    formats.append(Format("OpenAI content blocks", "content_blocks.jsonl", 2))
    with open(folder / "table.csv", "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["query", "response"])
        writer.writerows([["One?", "one"], ["Two,\nwith a line break?", "two"], ["Three?", "three"]])
    formats.append(Format("csv (query,response)", "table.csv", 3))
    (folder / "numbers.csv").write_text("question,answer\nOne plus one?,2\nTwo plus two?,4\n", encoding="utf-8")
    formats.append(Format("csv whose answers are numbers", "numbers.csv", 2, encode_errors=2))
    (folder / "array.json").write_text(json.dumps([
        {"messages": [{"role": "user", "content": "A?"}, {"role": "assistant", "content": "a"}]},
        {"messages": [{"role": "user", "content": "B?"}, {"role": "assistant", "content": "b"}]},
    ], indent=1), encoding="utf-8")
    formats.append(Format("json array", "array.json", 2))
    (folder / "folder").mkdir(exist_ok=True)
    for part in ("a", "b"):
        _jsonl(folder / "folder" / f"{part}.jsonl", [
            {"messages": [{"role": "user", "content": f"{part}{i}?"}, {"role": "assistant", "content": f"{i}"}]}
            for i in range(2)])
    formats.append(Format("folder of jsonl files", "folder", 4))
    formats.append(Format("#N sampling", "messages.jsonl#2", 2))
    _jsonl(folder / "malformed.jsonl", [
        {"messages": [{"role": "user", "content": "Fine?"}, {"role": "assistant", "content": "Fine."}]},
        {"messages": [{"role": "wizard", "content": "abracadabra"}, {"role": "assistant", "content": "no"}]},
        {"messages": []},
    ])
    formats.append(Format("malformed rows", "malformed.jsonl", 1, {2: "wizard", 3: "keeps nothing"}))
    _jsonl(folder / "nothing_trained.jsonl", [
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello.", "loss": False}]},
        {"messages": [{"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Bye."}]},
    ])
    # swift masks the answer but still trains the end-of-turn suffix: no row is without trained tokens
    formats.append(Format("assistant turn with loss false", "nothing_trained.jsonl", 2))
    _jsonl(folder / "bad_history.jsonl", [
        {"query": "q", "response": "r", "history": "this is not JSON"},
        {"query": "q2", "response": "r2"},
    ])
    formats.append(Format("history that is not JSON", "bad_history.jsonl", 1, {1: "history"}))
    (folder / "broken.jsonl").write_text(
        '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}\n'
        '{"messages": [{"role": "user", "content": "c"\n', encoding="utf-8")
    formats.append(Format("broken JSON line", "broken.jsonl", 0, unreadable=True, bad_lines=(2,)))
    return formats
