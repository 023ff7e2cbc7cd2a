"""An lm-evaluation-harness model for TitansLM: `lm_eval` tasks run on a trained model.

    titans-seq lm-eval --model_args pretrained=runs/lm --tasks wikitext --device cpu
    # or from Python, after importing this module (it registers the model "titans-seq"):
    lm_eval.simple_evaluate(model="titans-seq", model_args="pretrained=runs/lm", tasks=[...])

Every request streams its tokens through the model in pieces of `max_length` tokens, carrying
the memory / attention state between pieces (the library's streaming equals one call), so
documents of any length are scored with their whole history. A byte-level model has no
start-of-text id: a context that is empty (rolling log-likelihood of a document) is read as if
it followed a line break, the separator of the corpora such models are trained on; a
tokenizer with an end-of-text id uses that id, as the harness does for Hugging Face models.
Needs the `lm-eval` extra.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

try:
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the lm-eval adapter needs lm_eval: pip install 'titans-seq[lm-eval]'"
    ) from error

from titans_seq.devices import resolve_device

from ..generation import stream
from ..model import load_lm_and_tokenizer

NEWLINE_BYTE = 10


@register_model("titans-seq", "titans_seq")
class TitansEvalLM(LM):
    """`pretrained`: a saved TitansLM folder or an `lm` training run; `device`: auto, cpu,
    cuda...; `max_length`: tokens per forward call (the state carries across calls)."""

    def __init__(
        self,
        pretrained: str,
        device: str = "auto",
        batch_size: int | str = 1,
        max_length: int = 2048,
        **kwargs,
    ):
        super().__init__()
        model, tokenizer = load_lm_and_tokenizer(pretrained, resolve_device(device))
        self._use(model, tokenizer, int(max_length))

    @classmethod
    def from_model(cls, model, tokenizer, max_length: int = 2048) -> TitansEvalLM:
        """An adapter around a model already in memory (no files)."""
        self = cls.__new__(cls)
        LM.__init__(self)
        self._use(model, tokenizer, max_length)
        return self

    def _use(self, model, tokenizer, max_length: int) -> None:
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        self.model, self.tokenizer, self.max_length = model.eval(), tokenizer, max_length
        self._device = next(model.parameters()).device
        self._cached_context = None  # (context ids, log-softmax after it, state after it)
        eos = getattr(tokenizer, "eos_id", None)
        self.prefix_id = NEWLINE_BYTE if eos is None else eos

    # ------------------------------------------------------------------------- scoring
    @torch.no_grad()
    def _stream(self, ids: list[int], state=None):
        """Read ids [N] (N >= 1) in pieces of max_length tokens with the state carried:
        (log-softmax [N, V] of the prediction after every token, the state after the last)."""
        tokens = torch.tensor([ids], dtype=torch.long, device=self._device)
        pieces = []
        for start in range(0, len(ids), self.max_length):
            logits, state = self.model(tokens[:, start : start + self.max_length], state)
            pieces.append(F.log_softmax(logits[0].float(), dim=-1))
        return torch.cat(pieces), state

    def token_logprobs(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(log p(ids[i] | ids[:i]), whether ids[i] was the argmax) for i >= 1, each [len-1],
        streamed in pieces of max_length tokens with the state carried."""
        log_softmax, _ = self._stream(ids[:-1])
        return _score(log_softmax, ids[1:])

    def _context(self, context_ids: list[int]):
        """(log-softmax [V] of the token after the context, the state after it), kept for
        the next request: multiple-choice tasks send one request per option with the same
        context, which is then read once instead of once per option."""
        key = tuple(context_ids)
        if self._cached_context is None or self._cached_context[0] != key:
            log_softmax, state = self._stream(context_ids)
            self._cached_context = (key, log_softmax[-1:], state)
        return self._cached_context[1:]

    def _context_ids(self, context: str) -> list[int]:
        return self.tokenizer.encode(context) if context else [self.prefix_id]

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """log p(continuation | context) and whether greedy decoding reproduces it."""
        results = []
        self._cached_context = None  # the weights may have changed since the last call
        for request in requests:
            context, continuation = request.args
            continuation_ids = self.tokenizer.encode(continuation)
            if not continuation_ids:
                results.append((0.0, True))
                continue
            first, state = self._context(self._context_ids(context))
            if len(continuation_ids) > 1:
                # the state is a value: reading the continuation from it leaves the cache intact
                rest, _ = self._stream(continuation_ids[:-1], state)
                first = torch.cat([first, rest])
            logprobs, greedy = _score(first, continuation_ids)
            results.append((float(logprobs.sum()), bool(greedy.all())))
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """log p(document): every token scored with the whole document before it."""
        results = []
        for request in requests:
            (text,) = request.args[:1]
            logprobs, _ = self.token_logprobs([self.prefix_id, *self.tokenizer.encode(text)])
            results.append(float(logprobs.sum()))
        return results

    # ----------------------------------------------------------------------- generation
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy (or sampled, with `do_sample`) continuation, cut at the first stop string."""
        outputs = []
        for request in requests:
            context, gen_kwargs = request.args
            until = gen_kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            max_new = int(gen_kwargs.get("max_gen_toks", 256))
            temperature = float(gen_kwargs.get("temperature", 0.0))
            if not gen_kwargs.get("do_sample", False):
                temperature = 0.0
            ids: list[int] = []
            text = ""
            prompt = self._context_ids(context)
            for next_ids, _ in stream(self.model, prompt, max_new, temperature=temperature):
                ids.append(int(next_ids[0]))
                text = self.tokenizer.decode(ids)
                if any(stop in text for stop in until):
                    break
            for stop in until:
                text = text.split(stop)[0]
            outputs.append(text)
        return outputs


def _score(log_softmax: torch.Tensor, targets: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """log_softmax [N, V] predicting targets [N] -> (their log-probabilities, argmax hits),
    each [N] on the CPU."""
    target = torch.tensor(targets, device=log_softmax.device)
    logprobs = log_softmax.gather(-1, target[:, None])[:, 0]
    return logprobs.cpu(), (log_softmax.argmax(-1) == target).cpu()
