"""CLI subcommand `titans-seq generate`: continue a prompt with a saved LM.

Prints the prompt, then the continuation as it is generated (each step's text is written and
flushed as soon as it decodes to whole characters), then a newline. Generation stops after
`--max-new-tokens` or at the tokenizer's end-of-text id (not printed).
"""

from __future__ import annotations

import argparse
import os
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "generate",
        help="continue a prompt with a saved language model",
        description=(
            "Sample a continuation of PROMPT from a TitansLM saved with TitansLM.save (or the "
            "newest checkpoint of an lm training run), using the streaming state: the prompt "
            "is read in one pass, then one token per step."
        ),
    )
    p.add_argument("--model", required=True, help="saved model folder or training run folder")
    p.add_argument("--prompt", required=True, help="text to continue")
    p.add_argument("--max-new-tokens", type=int, default=256, help="tokens to generate")
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=None, help="sample among the k likeliest")
    p.add_argument("--top-p", type=float, default=None, help="nucleus sampling, in (0, 1]")
    p.add_argument("--seed", type=int, default=None, help="seed of the sampling generator")
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda:0...")
    p.set_defaults(handler=run_generate)


class TextStream:
    """Writes the text of a growing id sequence, holding back a cut multi-byte character."""

    def __init__(self, tokenizer, out):
        self.tokenizer, self.out = tokenizer, out
        self.ids: list[int] = []
        self.written = ""

    def add(self, token_id: int) -> None:
        self.ids.append(token_id)
        text = self.tokenizer.decode(self.ids)
        if not text.endswith("\ufffd"):  # may be the first bytes of a character
            self._write(text)

    def close(self) -> None:
        self._write(self.tokenizer.decode(self.ids))
        self.out.write("\n")
        self.out.flush()

    def _write(self, text: str) -> None:
        # decoding a longer sequence can rewrite the tail (e.g. SentencePiece spaces):
        # write what extends the text already written
        common = 0
        for a, b in zip(text, self.written):
            if a != b:
                break
            common += 1
        if common < len(self.written):
            return  # cannot unwrite; wait for the text to extend it again
        self.out.write(text[common:])
        self.out.flush()
        self.written = text


def prompt_text(prompt: str) -> str:
    """The prompt as text. Python hands command-line bytes that are not UTF-8 over as lone
    surrogates, which no tokenizer can encode: name the first such byte instead."""
    raw = os.fsencode(prompt)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = raw[error.start : error.start + 1].hex()
        raise ValueError(
            f"--prompt is not valid UTF-8 (byte 0x{bad} at position {error.start}); give "
            "the text in UTF-8"
        ) from None


def run_generate(args: argparse.Namespace) -> int:
    import torch

    from .generation import check_sampling_args, stream
    from .loading import load_lm_and_tokenizer

    check_sampling_args(args.temperature, args.top_k, args.top_p, args.max_new_tokens)
    from titans_seq.devices import resolve_device

    device = resolve_device(args.device)
    model, tokenizer = load_lm_and_tokenizer(args.model, map_location=device)
    model.eval()
    ids = tokenizer.encode(prompt_text(args.prompt))
    if not ids:
        if tokenizer.eos_id is None:
            raise ValueError("the prompt is empty; give some text to continue")
        ids = [tokenizer.eos_id]  # start a new document
    generator = None
    if args.seed is not None:
        generator = torch.Generator().manual_seed(args.seed)  # CPU: same tokens on any device
    out = sys.stdout
    out.write(prompt_text(args.prompt))
    out.flush()
    text = TextStream(tokenizer, out)
    prompt = torch.tensor(ids, dtype=torch.long, device=device)
    steps = stream(
        model,
        prompt,
        args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        generator=generator,
    )
    for token, _ in steps:
        token_id = int(token[0])
        if token_id == tokenizer.eos_id:
            break
        text.add(token_id)
    text.close()
    return 0
