"""bAbI tasks 1-5: the parser against hand-written stories, the mirrored files' counts and
splits, and clear errors on damaged text."""

import pytest

from titans_seq.data import DataError
from titans_seq.data.babi import TASKS, load_babi, parse_babi

STORY = (
    "1 Mary moved to the bathroom.\n"
    "2 John went to the hallway.\n"
    "3 Where is Mary? \tbathroom\t1\n"
    "4 Daniel went back to the hallway.\n"
    "5 Where is Daniel? \thallway\t4\n"
    "1 Sandra travelled to the office.\n"
    "2 Where is Sandra? \toffice\t1\n"
)


def test_parse_keeps_the_facts_before_each_question():
    questions = parse_babi(STORY)
    asked = ["Where is Mary?", "Where is Daniel?", "Where is Sandra?"]
    assert [q.question for q in questions] == asked
    first, second, third = questions
    assert first.facts == ("Mary moved to the bathroom.", "John went to the hallway.")
    assert first.answer == "bathroom" and first.supporting == (0,) and first.story == 0
    # the earlier question is not a fact; line 4 is the story's third fact
    assert second.facts[-1] == "Daniel went back to the hallway." and second.supporting == (2,)
    assert third.facts == ("Sandra travelled to the office.",) and third.story == 1


@pytest.mark.parametrize(
    "text, message",
    [
        ("Mary moved.\n", "expected '<number> <text>'"),
        ("2 Mary moved to the bathroom.\n", "must start at line number 1"),
        ("1 Mary moved.\n2 Where is Mary?\tbathroom\n", "question line"),
        ("1 Mary moved.\n2 Where is Mary?\tbathroom\t7\n", "supporting lines '7'"),
        ("1 Mary moved.\n", "no bAbI questions"),
    ],
)
def test_damaged_text_is_refused_by_line(text, message):
    with pytest.raises(DataError, match=message):
        parse_babi(text, "story.txt")


@pytest.mark.parametrize("task", sorted(TASKS))
def test_mirrored_files_and_splits(task):
    train, valid, test = (load_babi(task, s) for s in ("train", "valid", "test"))
    expected_train, expected_test = TASKS[task].questions
    assert len(train) + len(valid) == expected_train and len(test) == expected_test
    assert 0.05 < len(valid) / expected_train < 0.15
    assert max(q.story for q in train) < min(q.story for q in valid)  # whole stories held out
    for q in train[:50] + test[:50]:
        assert q.answer and " " not in q.answer
        assert all(0 <= i < len(q.facts) for i in q.supporting)


def test_bad_task_and_split_are_named():
    with pytest.raises(ValueError, match="bAbI task must be one of"):
        load_babi(6)
    with pytest.raises(ValueError, match="bAbI split must be one of"):
        load_babi(1, "dev")
