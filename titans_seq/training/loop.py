"""The one explicit training loop shared by every domain.

    result = train(load_config("synthetic/tiny"))

Read top to bottom, `Trainer.fit` is the whole algorithm: draw this process's share of the
global batch, run `grad_accum` micro-batches (gradients synchronised on the last one only),
unscale + clip, AdamW step, schedule step, then log / evaluate / checkpoint on their periods.
With a recipe's `streams:` section each micro-batch is a batch of streams read segment by
segment with the state carried (`streams.py`). Everything domain-specific comes from the
task (`titans_seq.training.tasks`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import did_you_mean
from ..ops.lmm.tiering import load_tier_states, plan_compilation, tier_states
from . import distributed as dist_utils
from .checkpoint import (
    CheckpointError,
    atomic_write_text,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    save_weights,
    strict_json,
)
from .compilation import TrainingForward, compile_errors, should_compile
from .config import ConfigError, RunConfig, config_changes
from .cpu_threads import cpu_threads
from .divergence import TrainingDiverged, divergence_hint, is_finite
from .logs import RunLogger, peak_flops
from .optim import WarmupCosine, build_optimizer, build_scheduler
from .plots import plot_learning_curves
from .reproducibility import (
    restore_deterministic,
    rng_state,
    seed_everything,
    set_deterministic,
    set_rng_state,
)
from .run_files import BEST_WEIGHTS, CHECKPOINT_DIR, RUN_CONFIG, load_initial_weights
from .run_lock import RunLock
from .sampling import ShardedSampler, eval_batches, split_micro_batches
from .streams import IGNORE_INDEX, StreamTraining, max_segments
from .tasks import Task, fetch_batch, get_task
from .tasks.base import example_lengths
from .trackers import check_trackers, open_trackers
from .weight_average import WeightAverage

EvalHook = Callable[[int, dict[str, float]], None]


@dataclasses.dataclass
class TrainResult:
    """What a finished (or early-stopped) run reports; also written to `summary.json`."""

    run_dir: Path
    step: int
    stopped_early: bool
    best_step: int | None
    best_metric: float | None
    last_eval: dict[str, float]
    history: list[dict[str, float]]


@dataclasses.dataclass
class EarlyStopping:
    """Tracks the best validation metric; `bad_evals` counts evaluations since it improved."""

    mode: str
    patience: int
    min_delta: float
    best: float | None = None
    best_step: int | None = None
    bad_evals: int = 0

    def update(self, value: float, step: int) -> bool:
        """Record an evaluation; True when it is a new best."""
        if math.isnan(value):
            improved = False
        elif self.best is None:
            improved = True
        elif self.mode == "min":
            improved = value < self.best - self.min_delta
        else:
            improved = value > self.best + self.min_delta
        if improved:
            self.best, self.best_step, self.bad_evals = value, step, 0
        else:
            self.bad_evals += 1
        return improved

    @property
    def should_stop(self) -> bool:
        return self.patience > 0 and self.bad_evals >= self.patience

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_step": self.best_step, "bad_evals": self.bad_evals}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.best_step = state["best"], state["best_step"]
        self.bad_evals = state["bad_evals"]


def train(
    cfg: RunConfig,
    resume: bool | str | Path = False,
    hooks: Sequence[EvalHook] = (),
    task: Task | None = None,
    quiet: bool = False,
) -> TrainResult:
    """Train `cfg` to completion (one process, or one of several under torchrun).

    resume: False starts a new run (refusing a run folder that already holds checkpoints);
        True continues from the newest checkpoint of the run folder; a path continues from
        that checkpoint folder.
    hooks: called as `hook(step, val_metrics)` after every evaluation, on every process
        (e.g. Optuna pruning raises from there).
    task: a task instance to use instead of looking `cfg.task` up in the registry (the
        scikit-learn estimators train on in-memory data this way).
    quiet: print nothing (no progress bar, no evaluation lines); the logs are still written
        (the estimators train quietly unless `verbose=True`).
    """
    trainer = Trainer(cfg, hooks=hooks, task=task, quiet=quiet)
    try:
        trainer.setup(resume)
        return trainer.fit()
    finally:
        trainer.close()


class Trainer:
    """State of one run; `train()` is the usual entry point."""

    def __init__(
        self,
        cfg: RunConfig,
        hooks: Sequence[EvalHook] = (),
        task: Task | None = None,
        quiet: bool = False,
    ):
        self.cfg = cfg
        self.quiet = quiet
        self.hooks = list(hooks)
        self.task = task if task is not None else get_task(cfg.task)
        self.run_dir = cfg.run_dir()
        self.ckpt_dir = self.run_dir / CHECKPOINT_DIR
        self.logger: RunLogger | None = None
        self.lock = RunLock(self.run_dir)  # held by the main process from setup to close
        self._exit = contextlib.ExitStack()  # what setup entered and close leaves
        self._deterministic_before: tuple[bool, bool, bool] | None = None
        self.ctx: dist_utils.DistContext | None = None
        self.step = 0
        self.history: list[dict[str, float]] = []
        self.loss_window = {"sum": 0.0, "steps": 0}  # mean train loss since the last log
        self.skipped_steps = 0  # steps skipped for a non-finite loss/gradient (skip_nonfinite)

    # ------------------------------------------------------------------------------ setup
    def setup(self, resume: bool | str | Path) -> None:
        cfg = self.cfg
        check_trackers(cfg.train)  # a missing package stops the run before any work
        self.ctx = ctx = dist_utils.setup(cfg.train.device)
        if ctx.is_main:  # before anything reads or writes the folder
            self.lock.acquire()
        _, thread_note = self._exit.enter_context(cpu_threads(cfg.train.threads, ctx.device))
        self._exit.enter_context(matmul_precision(cfg.train.float32_matmul_precision))
        if cfg.train.batch_size % (ctx.world_size * cfg.train.grad_accum):
            raise ValueError(
                f"train.batch_size ({cfg.train.batch_size}) must be divisible by the number "
                f"of processes x train.grad_accum ({ctx.world_size} x {cfg.train.grad_accum})"
            )
        checkpoint = self._find_checkpoint(resume)

        self._deterministic_before = set_deterministic(cfg.train.deterministic)
        seed_everything(cfg.train.seed)  # same initial weights on every process
        model = self.task.build_model(cfg).to(ctx.device)
        if checkpoint is None and cfg.train.init_from:
            # only a new run starts from them: a resumed run's checkpoint holds its weights
            load_initial_weights(model, cfg.train.init_from)
        self.raw_model = model
        self.train_set, self.val_set = self.task.build_datasets(cfg)
        self.model = dist_utils.wrap_model(model, ctx, cfg.train.distributed)
        self.average = self._weight_average()
        self.optimizer = build_optimizer(model, cfg.optim)
        self.scheduler = build_scheduler(self.optimizer, cfg.optim, cfg.train.max_steps)
        self.autocast_dtype, use_scaler = _precision(cfg.train.precision, ctx.device)
        # model-FLOPs utilization needs both; either missing means no MFU column
        self.flops_per_token = self.task.flops_per_token(model, cfg)
        self.peak_flops = peak_flops(cfg.train.peak_flops, ctx.device, self.autocast_dtype)
        self.scaler = torch.amp.GradScaler(ctx.device.type) if use_scaler else None
        self.sampler = ShardedSampler(
            len(self.train_set),
            cfg.train.batch_size,
            ctx.rank,
            ctx.world_size,
            cfg.train.seed,
            lengths=example_lengths(self.train_set),
        )
        self.early = EarlyStopping(cfg.eval.mode, cfg.eval.patience, cfg.eval.min_delta)
        self.streams = self._stream_training(model)
        # dropout & co. draw different masks on different processes
        seed_everything(cfg.train.seed + 7919 * ctx.rank)

        if checkpoint is not None:
            self._restore(checkpoint)
        remaining = cfg.train.max_steps - self.step
        sharded = cfg.train.distributed == "fsdp" and ctx.world_size > 1
        # carried-state steps call the bare model segment by segment (streams.py)
        compiled = should_compile(cfg.train.compile, ctx.device, remaining, sharded)
        self.forward = TrainingForward(self.model, compiled and self.streams is None)
        if ctx.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.run_dir / RUN_CONFIG, cfg.to_yaml())
            self.logger = RunLogger(
                self.run_dir,
                total_steps=cfg.train.max_steps,
                start_step=self.step,
                progress=cfg.train.progress and not self.quiet,
                trackers=open_trackers(self.run_dir, cfg.train, cfg.name, cfg.to_dict()),
                quiet=self.quiet,
            )
            if checkpoint is not None:
                self.logger.message(f"resumed from {checkpoint} at step {self.step}")
            if thread_note:
                self.logger.message(thread_note)
            if self.forward.compiled:
                self.logger.message("training steps under torch.compile (train.compile)")
            if self.streams is not None:
                segments = max_segments(cfg.streams)
                self.logger.message(
                    f"streams of up to {segments} segments of {self.streams.segment_length} "
                    "tokens, the state carried from segment to segment"
                )

    def _weight_average(self) -> WeightAverage | None:
        """The average of the trained weights a run with `optim.ema_decay` evaluates and
        keeps, starting from the weights the model has now."""
        decay = self.cfg.optim.ema_decay
        return None if decay is None else WeightAverage(self.raw_model, decay)

    def _stream_training(self, model: torch.nn.Module) -> StreamTraining | None:
        """The carried-state training of a recipe with a `streams:` section, else None."""
        streams = self.cfg.streams
        if not streams.enabled:
            return None
        bidirectional = [
            name
            for name, module in model.named_modules()
            if getattr(module, "bidirectional", False)
        ]
        if bidirectional:
            raise ConfigError(
                f"streams: the model's {bidirectional[0] or 'backbone'} is bidirectional and "
                "keeps no state to carry from one segment to the next; use a causal model"
            )
        return StreamTraining(streams, self.task.segment_length(self.cfg), self.cfg.train.seed)

    def _find_checkpoint(self, resume: bool | str | Path) -> Path | None:
        if resume is False or resume is None:
            # checking on every rank is fine: they all see the same file system or none has it
            if latest_checkpoint(self.ckpt_dir) is not None:
                raise FileExistsError(
                    f"run folder {self.run_dir} already holds checkpoints: resume it "
                    f"(`titans-seq train ... --resume`) or choose another train.out_dir"
                )
            return None
        if resume is True:
            found = latest_checkpoint(self.ckpt_dir)
            if found is None:
                raise CheckpointError(f"nothing to resume: no checkpoint in {self.ckpt_dir}")
            return found
        return Path(resume)

    def _restore(self, path: Path) -> None:
        ckpt = load_checkpoint(path)
        self._warn_config_changes(ckpt.config)
        state = ckpt.training_state
        dist_utils.load_model_state_dict(self.model, ckpt.model_state)
        self.average = self._weight_average()  # from the checkpoint's weights, unless saved
        if self.average is not None and state.get("weight_average"):
            self.average.load_state_dict(state["weight_average"])
        dist_utils.load_optimizer_state_dict(self.model, self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self._apply_optim_config()
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.sampler.load_state_dict(state["sampler"])
        self.early.load_state_dict(state["early_stopping"])
        self.history = state["history"]
        self.loss_window = state["loss_window"]
        self.skipped_steps = state.get("skipped_steps", 0)
        load_tier_states(dist_utils.unwrap(self.model), state.get("memory_tiers", {}))
        self._restore_streams(state.get("streams"), path)
        rngs = state["rng"]
        if len(rngs) != self.ctx.world_size:
            if self.ctx.is_main:
                warnings.warn(
                    f"checkpoint {path} was written by {len(rngs)} process(es), this run has "
                    f"{self.ctx.world_size}: random streams restart (data order is unaffected)",
                    stacklevel=2,
                )
        else:
            set_rng_state(rngs[self.ctx.rank], self.ctx.device)
        self.step = ckpt.step

    def _restore_streams(self, saved: list | None, path: Path) -> None:
        """Each process continues its own streams from the states the checkpoint holds."""
        if self.streams is None or not saved:
            return
        if len(saved) != self.ctx.world_size:
            if self.ctx.is_main:
                warnings.warn(
                    f"checkpoint {path} holds the streams of {len(saved)} process(es), this "
                    f"run has {self.ctx.world_size}: the streams start from fresh states",
                    stacklevel=3,
                )
            return
        self.streams.load_state_dict(saved[self.ctx.rank], self.ctx.device)

    def _apply_optim_config(self) -> None:
        """After a restore, the current `optim` section wins over the checkpoint's.

        Loading restores the saved hyper-parameters and schedule (including its horizon),
        which would silently ignore e.g. a longer `train.max_steps` on resume. Re-deriving
        them from the config changes nothing when the config is unchanged (same floats), and
        otherwise continues with the new values from the current step.
        """
        opt = self.cfg.optim
        schedule = WarmupCosine(opt.warmup_steps, self.cfg.train.max_steps, opt.min_lr_ratio)
        self.scheduler.lr_lambdas = [schedule] * len(self.optimizer.param_groups)
        self.scheduler.base_lrs = [opt.lr] * len(self.optimizer.param_groups)
        factor = schedule(self.scheduler.last_epoch)
        for group in self.optimizer.param_groups:
            group["initial_lr"] = opt.lr
            group["lr"] = opt.lr * factor
            group["weight_decay"] = opt.weight_decay if group["decay"] else 0.0
            group["betas"] = tuple(opt.betas)
            group["eps"] = opt.eps

    def _warn_config_changes(self, saved: dict[str, Any]) -> None:
        changed = config_changes(saved, self.cfg.to_dict())
        if changed and self.ctx.is_main:
            warnings.warn(
                "resuming with a configuration that differs from the checkpoint's: "
                + "; ".join(changed),
                stacklevel=3,
            )

    # -------------------------------------------------------------------------------- fit
    def fit(self) -> TrainResult:
        cfg = self.cfg
        stopped_early = self.early.should_stop
        # throughput counters restart with the process; the loss window is checkpointed so
        # that the first logged loss after a resume averages the same steps as without it
        examples, tokens, window_start = 0, 0, time.perf_counter()
        # memory layers under backend "auto" on a CPU compile their steps from the start
        # when the run is long enough to pay for it (ops/lmm/tiering.py)
        remaining_calls = max(cfg.train.max_steps - self.step, 0) * cfg.train.grad_accum
        if self.streams is not None:  # one call per segment
            remaining_calls = self.streams.remaining_calls(
                self.step, cfg.train.max_steps, cfg.train.grad_accum
            )
        plan_compilation(self.raw_model, remaining_calls)

        while self.step < cfg.train.max_steps and not stopped_early:
            loss, step_tokens = self.train_step()
            self.step += 1
            if loss is not None:  # None: a skipped non-finite step (train.skip_nonfinite)
                self.loss_window["sum"] += float(loss)
                self.loss_window["steps"] += 1
            examples += cfg.train.batch_size
            tokens += step_tokens
            if self.logger:
                self.logger.advance()

            last = self.step == cfg.train.max_steps
            if self.step % cfg.train.log_every == 0 or last:
                elapsed = time.perf_counter() - window_start
                self._log_train(examples, tokens, elapsed)
                examples, tokens, window_start = 0, 0, time.perf_counter()
            if self.step % cfg.eval.every == 0 or last:
                self.evaluate_and_track()
                stopped_early = self.early.should_stop
                if stopped_early and self.logger:
                    self.logger.message(
                        f"early stopping at step {self.step}: val {cfg.eval.metric} has not "
                        f"improved for {self.early.bad_evals} evaluations"
                    )
            if self.step % cfg.train.checkpoint_every == 0 or last or stopped_early:
                self.save()
        return self._finish(stopped_early)

    def train_step(self) -> tuple[torch.Tensor | None, int]:
        """One optimizer step; returns (mean loss over the global batch, local token count).

        A non-finite loss or gradient norm raises `TrainingDiverged`, or, within the
        `train.skip_nonfinite` budget, skips the optimizer step and returns loss None.
        """
        cfg, ctx = self.cfg, self.ctx
        self.model.train()
        micro_batches = split_micro_batches(self.sampler.next_local_batch(), cfg.train.grad_accum)
        if self.streams is None:
            loss_sum, tokens = self._micro_batches(micro_batches)
        else:
            loss_sum, tokens = self._stream_micro_batches(micro_batches)

        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        clip = cfg.optim.grad_clip if cfg.optim.grad_clip is not None else math.inf
        self.last_grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        # the same global values on every process (all-reduced loss, synchronised gradients),
        # so every process takes the same branch below
        mean = dist_utils.all_reduce_sum(loss_sum / len(micro_batches), ctx) / ctx.world_size
        mean = mean.cpu()
        if not self._step_is_finite(float(mean), self.last_grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            if self.scaler is not None:
                self.scaler.update()  # lowers the loss scale, as a skipped fp16 step would
            self.scheduler.step()
            return None, tokens
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        if self.average is not None:
            self.average.update(self.raw_model)
        return mean, tokens

    def _micro_batches(self, micro_batches) -> tuple[torch.Tensor, int]:
        """Forward and backward of each micro-batch (gradients synchronised on the last);
        returns (summed micro-batch mean losses, local token count)."""
        ctx = self.ctx
        loss_sum = torch.zeros((), device=ctx.device, dtype=torch.float64)
        tokens = 0
        for i, indices in enumerate(micro_batches):
            batch = batch_to_device(fetch_batch(self.train_set, indices), ctx.device)
            tokens += self.task.count_tokens(batch) or 0
            sync = i == len(micro_batches) - 1
            with dist_utils.gradient_sync(self.model, sync), self._autocast():
                loss = self._training_loss(batch)
            scaled = loss / len(micro_batches)
            (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            loss_sum += loss.detach().double()
        return loss_sum, tokens

    def _stream_micro_batches(self, micro_batches) -> tuple[torch.Tensor, int]:
        """The micro-batches of a carried-state step, each a batch of streams read segment by
        segment (`streams.py`); returns (summed micro-batch mean losses, scored tokens).

        The segments go through the bare model, several calls per backward, and the
        gradients of all processes are averaged once at the end (what DDP does for one
        call per backward)."""
        streams, ctx = self.streams, self.ctx
        count = streams.segments(self.step)
        length = count * streams.segment_length
        loss_sum = torch.zeros((), device=ctx.device, dtype=torch.float64)
        tokens = 0

        def backward(loss: torch.Tensor) -> None:
            scaled = loss / len(micro_batches)
            (self.scaler.scale(scaled) if self.scaler else scaled).backward()

        for slot, indices in enumerate(micro_batches):
            batch = self.task.stream_batch(self.train_set, indices, length)
            scored = int((batch["targets"] != IGNORE_INDEX).sum())  # on the host: no sync
            batch = batch_to_device(batch, ctx.device)
            tokens += scored
            state = streams.start_state(self.step, slot, batch["inputs"].shape[0])
            loss, final = streams.run(
                self.task, self.raw_model, batch, state, backward, self._autocast, scored
            )
            if streams.config.state_passing > 0:
                streams.passed[slot] = final
            loss_sum += loss
        dist_utils.average_gradients(self.raw_model, ctx)
        return loss_sum, tokens

    def _training_loss(self, batch) -> torch.Tensor:
        """The task's loss on one micro-batch through the training forward; a compilation
        that fails falls back to the eager model for this and every later step."""
        if self.forward.compiled:
            try:
                return self.task.loss(self.forward.model, batch)[0]
            except compile_errors() as error:
                self.forward.fall_back(error)
        return self.task.loss(self.forward.model, batch)[0]

    def _step_is_finite(self, loss: float, grad_norm: torch.Tensor) -> bool:
        """False for a step to skip; raises TrainingDiverged when the budget is spent.

        Under fp16 loss scaling an overflowing gradient is routine (the scaler skips that
        step and lowers the scale), so only a non-finite loss counts there.
        """
        if hasattr(grad_norm, "full_tensor"):  # FSDP2 returns a DTensor
            grad_norm = grad_norm.full_tensor()
        norm = float(grad_norm)
        loss_ok = is_finite(loss)
        if loss_ok and (is_finite(norm) or self.scaler is not None):
            return True
        step = self.step + 1
        if self.skipped_steps < self.cfg.train.skip_nonfinite:
            self.skipped_steps += 1
            if self.logger:
                self.logger.message(
                    f"step {step}: non-finite {'loss' if not loss_ok else 'gradient'} "
                    f"(loss {loss:.4g}, gradient norm {norm:.4g}): step skipped "
                    f"({self.skipped_steps} of at most {self.cfg.train.skip_nonfinite})"
                )
            return False
        cfg = self.cfg
        raise TrainingDiverged(
            step,
            "loss" if not loss_ok else "gradient",
            loss,
            norm,
            divergence_hint(cfg.optim.lr, cfg.optim.grad_clip, self.autocast_dtype is not None)
            + self._last_checkpoint_note(),
        )

    def _last_checkpoint_note(self) -> str:
        last = latest_checkpoint(self.ckpt_dir) if self.ctx.is_main else None
        return "" if last is None else f" The last checkpoint before it is {last}."

    def _log_train(self, examples: int, tokens: int, elapsed: float) -> None:
        tokens = int(dist_utils.all_reduce_sum(torch.tensor(tokens), self.ctx))
        loss = self.loss_window["sum"] / self.loss_window["steps"]
        self.loss_window = {"sum": 0.0, "steps": 0}
        grad_norm = self.last_grad_norm
        if hasattr(grad_norm, "full_tensor"):  # FSDP2 returns a DTensor: a collective
            grad_norm = grad_norm.full_tensor()
        if self.logger is None:
            return
        values = {
            "loss": loss,
            "lr": self.scheduler.get_last_lr()[0],
            "grad_norm": float(grad_norm),
            "examples_per_s": examples / max(elapsed, 1e-9),
        }
        if tokens:
            values["tokens_per_s"] = tokens / max(elapsed, 1e-9)
            if self.flops_per_token and self.peak_flops:
                # achieved model FLOP/s of all processes over the peak of all their devices
                achieved = values["tokens_per_s"] * self.flops_per_token
                values["mfu"] = achieved / (self.peak_flops * self.ctx.world_size)
        self.logger.train(self.step, values)

    # --------------------------------------------------------------------------- evaluate
    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Validation metrics, exact global means over the validation examples."""
        cfg, ctx = self.cfg, self.ctx
        self.model.eval()
        # a DDP forward outside of training would wait for a backward; use the bare module
        model = self.raw_model if not dist_utils.is_sharded(self.model) else self.model
        if self.average is not None:
            model = self.average.module
            model.eval()
        batch_size = cfg.eval.batch_size or cfg.train.batch_size
        sums: dict[str, list[float]] = {}
        for indices in eval_batches(
            len(self.val_set),
            batch_size,
            ctx.rank,
            ctx.world_size,
            cfg.eval.max_batches,
            lengths=example_lengths(self.val_set),
        ):
            batch = batch_to_device(fetch_batch(self.val_set, indices), ctx.device)
            with self._autocast():
                metrics = self.task.evaluate_batch(model, batch)
            for name, (total, count) in metrics.items():
                acc = sums.setdefault(name, [0.0, 0.0])
                acc[0] += float(total)
                acc[1] += float(count)
        names = sorted(sums)
        # every rank must take part in the reduction, even one that saw no batch
        names = dist_utils.broadcast_object(names, ctx)
        packed = torch.tensor([sums.get(n, [0.0, 0.0]) for n in names], dtype=torch.float64)
        packed = dist_utils.all_reduce_sum(packed, ctx).cpu()
        means = {n: (s / c if c else math.nan) for n, (s, c) in zip(names, packed.tolist())}
        return self.task.finalize_metrics(means)

    def evaluate_and_track(self) -> dict[str, float]:
        metrics = self.evaluate()
        key = self.cfg.eval.metric
        if key not in metrics:
            raise ConfigError(
                f"eval.metric is {key!r}{did_you_mean(key, metrics)} but task {self.cfg.task!r} "
                f"reports only {sorted(metrics)}"
            )
        if not is_finite(metrics[key]):
            # a NaN validation metric would never count as an improvement: the run would go
            # on without a best model (and an estimator would find none to load)
            cfg = self.cfg
            raise TrainingDiverged(
                self.step,
                f"validation {key}",
                metrics.get("loss", metrics[key]),
                None,
                divergence_hint(cfg.optim.lr, cfg.optim.grad_clip, self.autocast_dtype is not None)
                + self._last_checkpoint_note(),
            )
        improved = self.early.update(metrics[key], self.step)
        self.history.append({"step": self.step, **metrics})
        if improved:
            if self.average is not None:  # the weights evaluated
                state = self.average.module.state_dict()
            else:
                state = dist_utils.model_state_dict(self.model)  # collective under FSDP
            if self.ctx.is_main:
                save_weights(
                    self.run_dir / BEST_WEIGHTS,
                    state,
                    {"step": self.step, "metric": key, "value": metrics[key]},
                )
        if self.logger:
            self.logger.eval(self.step, metrics)
        for hook in self.hooks:
            hook(self.step, metrics)
        return metrics

    # ------------------------------------------------------------------------ checkpoints
    def save(self) -> Path | None:
        """Checkpoint on rank 0; every rank takes part (the state gathers are collectives)."""
        model_state = dist_utils.model_state_dict(self.model)
        optim_state = dist_utils.optimizer_state_dict(self.model, self.optimizer)
        rngs = dist_utils.all_gather_objects(rng_state(self.ctx.device), self.ctx)
        streams = None
        if self.streams is not None:  # every process's own streams
            streams = dist_utils.all_gather_objects(self.streams.state_dict(), self.ctx)
        path = None
        if self.ctx.is_main:
            training_state = {
                "optimizer": optim_state,
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler else None,
                "sampler": self.sampler.state_dict(),
                "early_stopping": self.early.state_dict(),
                "history": self.history,
                "loss_window": self.loss_window,
                "skipped_steps": self.skipped_steps,
                # where each memory layer stands between eager and compiled steps, so that a
                # resumed run switches at the step the uninterrupted one did
                "memory_tiers": tier_states(dist_utils.unwrap(self.model)),
                "rng": rngs,
                "streams": streams,
                "world_size": self.ctx.world_size,
                "weight_average": self.average.state_dict() if self.average else None,
            }
            path = save_checkpoint(
                self.ckpt_dir,
                self.step,
                model_state,
                training_state,
                self.cfg.to_dict(),
                keep=self.cfg.train.keep_checkpoints,
            )
        dist_utils.barrier(self.ctx)  # nobody races ahead of a checkpoint being written
        return path

    # ----------------------------------------------------------------------------- finish
    def _finish(self, stopped_early: bool) -> TrainResult:
        result = TrainResult(
            run_dir=self.run_dir,
            step=self.step,
            stopped_early=stopped_early,
            best_step=self.early.best_step,
            best_metric=self.early.best,
            last_eval={
                k: v for k, v in (self.history[-1] if self.history else {}).items() if k != "step"
            },
            history=self.history,
        )
        if self.ctx.is_main:
            summary = dataclasses.asdict(result) | {"run_dir": str(self.run_dir)}
            summary["metric"] = self.cfg.eval.metric
            summary["skipped_steps"] = self.skipped_steps
            atomic_write_text(self.run_dir / "summary.json", strict_json(summary, indent=1))
            if self.cfg.train.plot:
                plot_learning_curves(self.run_dir)
            self.task.on_train_end(self.cfg, self.run_dir)
        return result

    def close(self) -> None:
        if self.logger is not None:
            self.logger.close()
        self._exit.close()
        self.lock.release()
        if self._deterministic_before is not None:
            restore_deterministic(self._deterministic_before)
        if self.ctx is not None:
            dist_utils.teardown(self.ctx)

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.ctx.device.type, dtype=self.autocast_dtype)


@contextlib.contextmanager
def matmul_precision(value: str | None):
    """`torch.set_float32_matmul_precision(value)` for the block, the previous setting
    restored after it; None changes nothing."""
    before = torch.get_float32_matmul_precision()
    if value is not None:
        torch.set_float32_matmul_precision(value)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def _precision(precision: str, device: torch.device) -> tuple[torch.dtype | None, bool]:
    """(autocast dtype or None for fp32, whether fp16 loss scaling is needed)."""
    if precision == "auto":
        if device.type != "cuda":
            return None, False
        precision = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if precision == "fp32":
        return None, False
    if precision == "bf16":
        return torch.bfloat16, False
    if device.type != "cuda":
        raise ValueError("train.precision=fp16 needs a CUDA device; use bf16 or fp32 on CPU")
    return torch.float16, True


def batch_to_device(batch: Any, device: torch.device) -> Any:
    """A batch (a tensor or a nested dict/list/tuple of tensors) on `device`."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: batch_to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(batch_to_device(v, device) for v in batch)
    return batch
