"""The one cache rule: an answer is served again only for the same code and the same files.

After an upgrade that changes a question's code (its module or a module of the package it imports),
the cached answers of the old code are not served; a dataset report also depends on the model's
config and tokenizer files. Askers of one key wait for each other: the second gets the first's answer.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.core.paths import PACKAGE_DIR
from backend.data.swift_view import DataRequest
from backend.oracle import OracleCache, ask, cached, code_digest

pytestmark = pytest.mark.one_shot_oracle  # the subject is the oracle's own children (tests/warm_oracle.py)

QUESTION = '''
def answer(payload, progress):
    from backend.oracle.{helper} import VERDICT
    return {{"verdict": VERDICT}}
'''


@pytest.fixture
def question() -> Iterator[tuple[str, Path, Path]]:
    """A question module of this test alone (name, its file, the helper module it imports)."""
    name = f"_test_question_{uuid.uuid4().hex[:8]}"
    module, helper = PACKAGE_DIR / "oracle" / f"{name}.py", PACKAGE_DIR / "oracle" / f"{name}_helper.py"
    module.write_text(QUESTION.format(helper=f"{name}_helper"))
    helper.write_text('VERDICT = "old"\n')
    try:
        yield name, module, helper
    finally:
        module.unlink(missing_ok=True)
        helper.unlink(missing_ok=True)


def test_a_changed_question_gives_a_new_answer_without_refresh(tmp_path: Path, question) -> None:
    name, module, helper = question
    cache = OracleCache(tmp_path)
    assert ask(name, {"rows": 3}, cache=cache) == {"verdict": "old"}
    helper.write_text('VERDICT = "fixed"\n')  # the upgrade fixes a module the question imports
    assert ask(name, {"rows": 3}, cache=cache) == {"verdict": "fixed"}
    module.write_text(module.read_text().replace('{"verdict": VERDICT}', '{"verdict": VERDICT + "!"}'))
    assert cached(name, {"rows": 3}, cache=cache) is None  # the question's own code changed too
    assert ask(name, {"rows": 3}, cache=cache) == {"verdict": "fixed!"}


def test_the_code_digest_follows_the_package_imports_only(question) -> None:
    name, module, helper = question
    before = code_digest(name)
    assert code_digest(name) == before
    helper.write_text('VERDICT = "other"\n')
    assert code_digest(name) != before


def test_a_question_outside_the_oracle_follows_the_modules_of_its_own_room(tmp_path: Path) -> None:
    """swift's view of a dataset is asked by backend.data.swift_view_child, whose helpers live beside it in
    backend/data/: a fix in one of them (what swift drops, how rows map to lines) is a new answer."""
    room = PACKAGE_DIR / "data"
    name = f"_test_room_question_{uuid.uuid4().hex[:8]}"
    module, helper = room / f"{name}.py", room / f"{name}_helper.py"
    module.write_text(f"from backend.data.{name}_helper import VERDICT\n")
    helper.write_text('VERDICT = "old"\n')
    try:
        before = code_digest(f"backend.data.{name}")
        helper.write_text('VERDICT = "fixed"\n')
        assert code_digest(f"backend.data.{name}") != before
    finally:
        module.unlink(missing_ok=True)
        helper.unlink(missing_ok=True)


def test_a_dataset_report_depends_on_the_models_config_and_tokenizer(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    for file in ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"):
        (model / file).write_text("{}")
    data = tmp_path / "rows.jsonl"
    data.write_text("{}\n")
    request = DataRequest(refs=[str(data)], model=str(model))
    assert sorted(p.name for p in request.inputs()) == ["config.json", "rows.jsonl", "tokenizer.json",
                                                       "tokenizer_config.json"]


def test_two_askers_of_one_key_wait_for_each_other_and_share_the_answer(tmp_path: Path, question) -> None:
    name, module, helper = question
    # the answer says which child gave it: equal answers mean one child answered both askers
    module.write_text(QUESTION.format(helper=f"{name}_helper").replace(
        'return {"verdict": VERDICT}', 'import os, time\n    time.sleep(1)\n    return {"pid": os.getpid()}'))
    cache = OracleCache(tmp_path)
    answers: list[dict] = []
    askers = [threading.Thread(target=lambda: answers.append(ask(name, {}, cache=cache))) for _ in range(2)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join(60)
    assert len(answers) == 2 and answers[0] == answers[1]
