"""Sampling from a `TitansLM` with its streaming state.

The prompt [B, T] is consumed in one forward call; then each step feeds the single token just
chosen together with the state, so a step costs one token's compute and the state holds what
the mixers keep (constant for lmm/mag/mal/swa, growing with the stream for full attention,
whose state is a key/value cache).

Choosing the next token from the logits of the last position:
  * temperature 0: greedy (argmax; the first maximum on ties);
  * otherwise logits / temperature, then the top-k filter (keep the k largest logits), then
    the top-p (nucleus) filter (keep the smallest set of most probable tokens whose
    probability sums to at least p, computed after top-k), then one draw from the
    renormalized distribution with `torch.multinomial` and the given `torch.Generator`
    (same generator seed and inputs -> same tokens).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch


def check_sampling_args(
    temperature: float, top_k: int | None, top_p: float | None, max_new_tokens: int | None = None
) -> None:
    """Raise ValueError naming the first invalid sampling argument."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
    if not temperature >= 0:  # also rejects NaN
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a positive integer or None, got {top_k!r}")
    if top_p is not None and (
        isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1
    ):
        raise ValueError(f"top_p must be in (0, 1] or None, got {top_p!r}")
    n = max_new_tokens
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """logits [B, V] -> the same with all but the k largest of each row set to -inf.

    Exactly min(k, V) entries survive per row (ties at the k-th value are broken by
    `torch.topk`'s order)."""
    if k >= logits.shape[-1]:
        return logits
    keep = torch.topk(logits, k, dim=-1).indices
    mask = torch.ones_like(logits, dtype=torch.bool).scatter_(-1, keep, False)
    return logits.masked_fill(mask, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """logits [B, V] -> the same with everything outside the nucleus set to -inf.

    The nucleus is the smallest set of most probable tokens whose probabilities sum to at
    least p: sorted by probability, a token is kept when the mass strictly before it is
    below p (so the most probable token is always kept, and p = 1 keeps every token of
    nonzero probability)."""
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits.float(), dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs
    drop_sorted = mass_before >= p
    drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def next_token(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """logits [B, V] of the last position -> chosen ids [B] (int64)."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = torch.softmax(logits, dim=-1)
    if generator is not None and generator.device != probs.device:
        # sample where the generator lives, so one seed gives the same tokens on any device
        return torch.multinomial(probs.to(generator.device), 1, generator=generator)[:, 0].to(
            logits.device
        )
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def as_prompt(prompt_tokens, device: torch.device) -> tuple[torch.Tensor, bool]:
    """A prompt [T] or [B, T] (tensor or nested lists of ints) -> ([B, T] int64, was 1-D)."""
    tokens = torch.as_tensor(prompt_tokens, device=device)
    if tokens.numel() == 0:
        raise ValueError(
            "the prompt is empty: give at least one token (e.g. an end-of-text or newline id)"
        )
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise ValueError(f"prompt tokens must be integer ids, got dtype {tokens.dtype}")
    if tokens.dim() not in (1, 2):
        raise ValueError(f"prompt must have shape [T] or [B, T], got {tuple(tokens.shape)}")
    single = tokens.dim() == 1
    return (tokens[None] if single else tokens).long(), single


@torch.no_grad()
def stream(
    model,
    prompt_tokens,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    state=None,
) -> Iterator[tuple[torch.Tensor, list]]:
    """Yield (next ids [B], state after the step that produced them) max_new_tokens times.

    The state yielded with a token is the state after the forward call whose logits chose it
    (the token itself is consumed by the next step's call). `state` continues an existing
    stream: the prompt is then appended to it.
    """
    check_sampling_args(temperature, top_k, top_p, max_new_tokens)
    device = next(model.parameters()).device
    tokens, _ = as_prompt(prompt_tokens, device)
    if max_new_tokens == 0:
        return
    logits, state = model(tokens, state)
    for step in range(max_new_tokens):
        ids = next_token(logits[:, -1], temperature, top_k, top_p, generator)
        yield ids, state
        if step + 1 < max_new_tokens:
            logits, state = model(ids[:, None], state)


def ragged_prompts(prompt_tokens) -> list[torch.Tensor] | None:
    """The prompts as a list of 1-D int64 tensors when `prompt_tokens` is a list of prompts
    of different lengths, else None (one prompt, or a rectangular batch)."""
    if not isinstance(prompt_tokens, (list, tuple)) or not prompt_tokens:
        return None
    if not all(isinstance(p, (list, tuple, torch.Tensor)) for p in prompt_tokens):
        return None
    prompts = [torch.as_tensor(p) for p in prompt_tokens]
    if any(p.dim() != 1 for p in prompts):
        raise ValueError("a list of prompts holds 1-D prompts (token ids), one per sequence")
    if len({p.shape[0] for p in prompts}) == 1:
        return None
    for p in prompts:
        as_prompt(p, p.device)  # the same checks as one prompt (not empty, integer ids)
    return [p.long() for p in prompts]


@torch.no_grad()
def generate(
    model,
    prompt_tokens,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_id: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor | list[torch.Tensor]:
    """Prompt [T] or [B, T] -> prompt + continuation, [T + n] or [B, T + n] (int64).

    n = max_new_tokens, or fewer when `eos_id` is given and every sequence has produced it;
    a sequence that produced `eos_id` is padded with `eos_id` until the others finish.
    A list of prompts of different lengths is one batch too (`generate_ragged`); it gives a
    list of [T_b + n_b] sequences.
    """
    check_sampling_args(temperature, top_k, top_p, max_new_tokens)
    if eos_id is not None and (isinstance(eos_id, bool) or not isinstance(eos_id, int)):
        raise ValueError(f"eos_id must be an integer id or None, got {eos_id!r}")
    prompts = ragged_prompts(prompt_tokens)
    if prompts is not None:
        return generate_ragged(
            model, prompts, max_new_tokens, temperature, top_k, top_p, eos_id, generator
        )
    device = next(model.parameters()).device
    tokens, single = as_prompt(prompt_tokens, device)
    pieces = [tokens]
    finished = torch.zeros(tokens.shape[0], dtype=torch.bool, device=device)
    for ids, _ in stream(model, tokens, max_new_tokens, temperature, top_k, top_p, generator):
        if eos_id is not None:
            ids = ids.masked_fill(finished, eos_id)
            finished |= ids == eos_id
        pieces.append(ids[:, None])
        if eos_id is not None and bool(finished.all()):
            break
    out = torch.cat(pieces, dim=1)
    return out[0] if single else out


@torch.no_grad()
def generate_ragged(
    model,
    prompts: list[torch.Tensor],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_id: int | None = None,
    generator: torch.Generator | None = None,
) -> list[torch.Tensor]:
    """Prompts of different lengths ([T_b] each) in one batch -> [T_b + n_b] each.

    Every row advances one position per step, so the rows' states stay aligned (chunk
    boundaries sit at the same positions): the common prefix of length min T_b is consumed
    in one call; after that a row still inside its prompt is fed its own next prompt token
    and the others their sampled token. A row stops after `max_new_tokens` new tokens or
    after `eos_id` (kept). Greedy decoding gives each row what it gets alone; sampling
    draws for every row at every step, so the draws of a seeded `generator` depend on the
    whole batch.
    """
    check_sampling_args(temperature, top_k, top_p, max_new_tokens)
    device = next(model.parameters()).device
    lengths = torch.tensor([p.shape[0] for p in prompts], device=device)
    padded = torch.zeros(len(prompts), int(lengths.max()), dtype=torch.long, device=device)
    for row, prompt in enumerate(prompts):
        padded[row, : prompt.shape[0]] = prompt.to(device)
    new = [[] for _ in prompts]
    done = torch.full((len(prompts),), max_new_tokens == 0, device=device)
    position = int(lengths.min())
    logits, state = model(padded[:, :position], None)
    while not bool(done.all()):
        sampled = next_token(logits[:, -1], temperature, top_k, top_p, generator)
        in_prompt = position < lengths
        forced = padded[:, min(position, padded.shape[1] - 1)]
        ids = torch.where(in_prompt, forced, sampled)
        for row in torch.nonzero(~in_prompt & ~done).flatten().tolist():
            new[row].append(int(ids[row]))
            if len(new[row]) == max_new_tokens or (eos_id is not None and new[row][-1] == eos_id):
                done[row] = True
        if bool(done.all()):
            break
        logits, state = model(ids[:, None], state)
        position += 1
    return [
        torch.cat([p.to(device), torch.tensor(n, dtype=torch.long, device=device)])
        for p, n in zip(prompts, new)
    ]
