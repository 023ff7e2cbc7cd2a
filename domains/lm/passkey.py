"""Single-needle passkey retrieval (RULER's S-NIAH with the noise haystack), byte level.

Every example is a sequence of exactly L byte tokens (ids = UTF-8 bytes, vocabulary 256):

    [haystack before] [needle] [haystack after] [question] [answer]

* haystack: RULER's noise text, "The grass is green. The sky is blue. The sun is yellow.
  Here we go. There and back again. " repeated; it is the last H bytes of that repetition,
  so it always ends with a whole sentence (it may start inside one, like a window cut out
  of a longer document); the sentence it ends with is drawn per example (one of 5), so the
  sentence starts, where the needle may go, are not the same handful of positions in
  every example of a length (which a model could otherwise memorise at short lengths);
* needle: "The pass key is NNNNN. Remember it. NNNNN is the pass key. " with D random
  decimal digits (default D = 5), inserted at a sentence start of the haystack;
* question: "What is the pass key? The pass key is ";
* answer: the D digits.

H = L - len(needle) - len(question) - D, so L must be at least 87 + 3 D (H = 0).

Depth: the needle starts at haystack offset p, and depth = p / H (0: the needle opens the
sequence, 1: it sits right before the question). A requested depth d is met at the sentence
start nearest to d H (0 and H are always allowed, so depths 0 and 1 are exact); without a
requested depth, d is drawn uniformly from [0, 1] and snapped the same way.

Targets: next-token prediction scored only on the answer, i.e. `targets[t] = tokens[t + 1]`
for the D positions t = L - D - 1 ... L - 2 (the last question byte and the first D - 1
answer digits) and IGNORE_INDEX elsewhere. Digits occur nowhere else than in the needle and
the answer, so they cannot leak through the haystack or the question.

Determinism: example `index` of length L drawn with `seed` is a pure function of
(seed, L, index, digits, depth), independent of the order or batch in which examples are made
(the digits are drawn first, so fixing the depth keeps the same passkey).

Evaluation: `titans_seq.domains.lm.passkey_eval`.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import random
import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import torch

IGNORE_INDEX = -100
VOCAB_SIZE = 256  # byte-level: ids are the UTF-8 bytes

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = "What is the pass key? The pass key is "
DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


def check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


def check_depth(depth: Any) -> float:
    """A needle depth must be a number in [0, 1]; returns it as a float."""
    if isinstance(depth, bool) or not isinstance(depth, (int, float)) or not 0 <= depth <= 1:
        raise ValueError(f"needle depth must be a number in [0, 1], got {depth!r}")
    return float(depth)


# the noise text's sentences, each with its trailing space
NOISE_SENTENCES = tuple(m.group(0) for m in re.finditer(r"[^.]*\. ", NOISE))


@functools.lru_cache(maxsize=256)
def _haystack(length: int, phase: int) -> tuple[bytes, tuple[int, ...]]:
    """(the last `length` bytes of the noise text repeated, its cycle of sentences rotated
    to end with sentence `phase`; the allowed needle offsets: 0, `length` and every sentence
    start in between).
    """
    cycle = "".join(NOISE_SENTENCES[phase + 1 :] + NOISE_SENTENCES[: phase + 1])
    text = cycle * (length // len(cycle) + 2)
    hay = text[len(text) - length :] if length else ""
    starts = {0, length} | {m.end() for m in re.finditer(r"\. ", hay)}
    return hay.encode("utf-8"), tuple(sorted(s for s in starts if s <= length))


class PasskeyExample(NamedTuple):
    """One example. tokens, targets: [L] int64; answer_start = L - digits (the first answer
    token); needle_start: position of the needle's first token; depth: needle offset in the
    haystack / haystack length (0 for an empty haystack)."""

    tokens: torch.Tensor
    targets: torch.Tensor
    passkey: str
    needle_start: int
    depth: float
    answer_start: int


class PasskeyBatch(NamedTuple):
    """inputs, targets: [B, L] int64; needle_starts: [B] int64; depths: [B] float64;
    passkeys: B strings; answer_start: L - digits (the same for the whole batch)."""

    inputs: torch.Tensor
    targets: torch.Tensor
    passkeys: list[str]
    needle_starts: torch.Tensor
    depths: torch.Tensor
    answer_start: int


@dataclasses.dataclass(frozen=True)
class PasskeyRetrieval:
    """Generator of passkey examples (see the module docstring).

    Args:
        digits: D, the number of decimal digits of the passkey (>= 1).
        seed: the data seed; with the length and the example index it fixes every example.
    """

    digits: int = 5
    seed: int = 0

    def __post_init__(self):
        check_int("digits", self.digits, 1)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    # -- layout ---------------------------------------------------------------------------
    @property
    def min_length(self) -> int:
        """The shortest sequence that holds the needle, the question and the answer."""
        return len(NEEDLE.format(key="0" * self.digits)) + len(QUESTION) + self.digits

    def check_length(self, length: Any) -> int:
        if isinstance(length, bool) or not isinstance(length, int):
            raise ValueError(f"sequence length must be an integer, got {length!r}")
        if length < self.min_length:
            raise ValueError(
                f"sequence length {length} is too short for a {self.digits}-digit passkey: the "
                f"needle, the question and the answer alone take {self.min_length} tokens"
            )
        return length

    def haystack_length(self, length: int) -> int:
        """H: haystack bytes in a sequence of `length` tokens."""
        return self.check_length(length) - self.min_length

    def prompt_length(self, length: int) -> int:
        """Tokens before the answer (the model reads these, then must produce the digits)."""
        return self.check_length(length) - self.digits

    @property
    def chance_accuracy(self) -> float:
        """Probability of guessing all digits uniformly at random."""
        return 10.0**-self.digits

    # -- sampling -------------------------------------------------------------------------
    def example(self, length: int, index: int, depth: float | None = None) -> PasskeyExample:
        """Example `index` of length `length`; `depth` in [0, 1] or None (uniform)."""
        length = self.check_length(length)
        check_int("index", index, 0)
        if depth is not None:
            depth = check_depth(depth)
        # a string seed goes through SHA-512 in `random`: stable across processes/platforms
        rng = random.Random(f"titans-seq passkey:{self.seed}:{length}:{index}")
        passkey = "".join(rng.choice("0123456789") for _ in range(self.digits))
        wanted = rng.random() if depth is None else depth
        phase = rng.randrange(len(NOISE_SENTENCES))

        hay_len = self.haystack_length(length)
        hay, starts = _haystack(hay_len, phase)
        offset = nearest(starts, wanted * hay_len)
        needle = NEEDLE.format(key=passkey).encode("utf-8")
        prompt = hay[:offset] + needle + hay[offset:] + QUESTION.encode("utf-8")
        data = prompt + passkey.encode("utf-8")
        if len(data) != length:  # the layout arithmetic above is the contract; never pad
            raise AssertionError(f"built {len(data)} tokens instead of {length}")

        tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
        targets = torch.full_like(tokens, IGNORE_INDEX)
        answer_start = length - self.digits
        targets[answer_start - 1 : length - 1] = tokens[answer_start:]
        return PasskeyExample(
            tokens=tokens,
            targets=targets,
            passkey=passkey,
            needle_start=offset,
            depth=offset / hay_len if hay_len else 0.0,
            answer_start=answer_start,
        )

    def batch(
        self, length: int, indices: Iterable[int], depth: float | None = None
    ) -> PasskeyBatch:
        """Examples `indices` of length `length`, stacked (see `example`)."""
        examples = [self.example(length, int(i), depth) for i in indices]
        if not examples:
            raise ValueError("a passkey batch needs at least one index")
        return PasskeyBatch(
            inputs=torch.stack([e.tokens for e in examples]),
            targets=torch.stack([e.targets for e in examples]),
            passkeys=[e.passkey for e in examples],
            needle_starts=torch.tensor([e.needle_start for e in examples]),
            depths=torch.tensor([e.depth for e in examples], dtype=torch.float64),
            answer_start=examples[0].answer_start,
        )

    def prompts_and_answers(
        self, length: int, indices: Iterable[int], depth: float | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(prompts [B, length - digits], answers [B, digits]): the examples split where
        the answer starts, for reward-based training (`titans_seq.adapt.train_with_reward`
        with `exact_match_reward`)."""
        batch = self.batch(length, indices, depth)
        return batch.inputs[:, : batch.answer_start], batch.inputs[:, batch.answer_start :]


def nearest(sorted_values: Sequence[int], target: float) -> int:
    """The value closest to `target` (the smaller one on a tie)."""
    i = bisect.bisect_left(sorted_values, target)
    if i == 0:
        return sorted_values[0]
    if i == len(sorted_values):
        return sorted_values[-1]
    below, above = sorted_values[i - 1], sorted_values[i]
    return below if target - below <= above - target else above
