"""Bad and awkward inputs, damaged files and faults across the Python API and the CLI.

    python benchmarks/hostile_probe.py                 # every case, a table, exit 1 on a bad one
    python benchmarks/hostile_probe.py --json probe.json --only cli

Each case either expects a clear error (an exception the package raises for its user: a
`UserError`, `ValueError`, `TypeError` or `OSError` with a message; a `KeyError` or
`RuntimeError` only as a `UserError`, since pandas and torch raise those for their own
internals; on the command line exit code 2 and one line, no traceback) or expects to work,
with a check of its result. A case may also say what its message must name (`says`, a
regular expression): the real cause, not a neighbouring one. Outcomes:

* `ok`: as expected;
* `traceback`: an exception of another kind (a bug's), or a command that printed a traceback;
* `silent`: an error was expected and none came (a wrong result accepted);
* `misleading`: the error came, but its message does not name what `says` asks for;
* `failed`: a case expected to work raised, or its check did not hold.

The cases run in this process on tiny models (a couple of minutes on 2 CPU cores); files go
to a temporary folder. The data mirror (`$TITANS_SEQ_DATA`) is used where a case needs a
registered dataset.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gzip
import io
import json
import os
import re
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import hostile_cases
import numpy as np
import pandas as pd
import torch

CLEAN_ERRORS = (ValueError, TypeError, OSError)


@dataclasses.dataclass
class Case:
    group: str
    name: str
    run: Callable[[], object]
    expect: str = "error"  # "error" or "ok"
    check: Callable[[object], bool] | None = None  # for "ok": the result holds
    says: str | None = None  # for "error": a regular expression its message must match
    clean: tuple = ()  # further exception types that are a clear error here


@dataclasses.dataclass
class Outcome:
    group: str
    name: str
    outcome: str
    detail: str
    seconds: float


# ----------------------------------------------------------------------------- helpers


def cli(*argv: str) -> tuple[int, str]:
    """Run `titans-seq ARGV` in this process: (exit code, stderr). A traceback the command
    lets through is returned as its text with code -1."""
    from titans_seq.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(list(argv))
        except SystemExit as exit_:  # argparse
            code = exit_.code if isinstance(exit_.code, int) else 2
        except BaseException:
            return -1, traceback.format_exc()
    return code, err.getvalue()


def cli_error(*argv: str):
    """A case body: the command must exit 2 with one line on stderr (argparse's usage lines
    allowed), never a traceback."""

    def run():
        code, err = cli(*argv)
        if code == -1 or "Traceback" in err:
            raise _Traceback(err.strip().splitlines()[-1] if err.strip() else "traceback")
        if code == 0:
            raise _Silent(f"exit code 0 for {' '.join(argv)}")
        if code != 2:
            raise _Traceback(f"exit code {code}: {err.strip()[-200:]}")
        return ValueError(err.strip().splitlines()[-1])

    return run


class _Traceback(Exception):
    pass


class _Silent(Exception):
    pass


def series(n=200, channels=2, freq="h") -> pd.DataFrame:
    t = np.arange(n)[:, None]
    values = np.sin(2 * np.pi * t / 12 + np.arange(channels)) + 0.01 * t
    index = pd.date_range("2024-01-01", periods=n, freq=freq, name="date")
    return pd.DataFrame(values, index=index, columns=[f"c{i}" for i in range(channels)])


TINY_FORECASTER = dict(
    lookback=16,
    horizon=4,
    dim=8,
    depth=1,
    heads=1,
    patch_len=4,
    stride=4,
    max_epochs=1,
    device="cpu",
    random_state=0,
    mixer_options={"chunk_size": 4},
)
TINY_DNA = dict(dim=8, depth=1, heads=1, max_epochs=1, device="cpu", random_state=0)
DNA = ["ACGTACGTAA", "GGCCGGCCGC", "ACGTTTAAAT", "GGGCCCGCGC", "ATATATATAT", "GCGCGCGGCC"]
LABELS = ["at", "gc", "at", "gc", "at", "gc"]


def forecaster(**options):
    from titans_seq.domains.forecasting import TitansForecaster

    return TitansForecaster(**{**TINY_FORECASTER, **options})


def dna(**options):
    from titans_seq.domains.genomics import DNAClassifier

    return DNAClassifier(**{**TINY_DNA, **options})


# ------------------------------------------------------------------------------- cases


def mixer_cases() -> list[Case]:
    import titans_seq as ts

    cases = []
    for name in ts.list_mixers():

        def build(name=name):
            return ts.build_mixer(name, dim=16, heads=2)

        def nan_at(t, name=name, value=float("nan")):
            x = torch.randn(2, 24, 16)
            x[1, t, 3] = value
            return build(name)(x)

        def other_state(name=name):
            _, state = ts.build_mixer("swa" if name != "swa" else "lmm", dim=16, heads=2)(
                torch.randn(1, 5, 16)
            )
            return build(name)(torch.randn(1, 5, 16), state)

        def batch_mismatch(name=name):
            mixer = build(name)
            _, state = mixer(torch.randn(2, 5, 16))
            return mixer(torch.randn(3, 5, 16), state)

        def fp16_grads(name=name):
            mixer = build(name)
            x = torch.randn(2, 20, 16)
            x[0, 10:] = 0
            x.requires_grad_()
            with torch.autocast("cpu", dtype=torch.float16):
                y, _ = mixer(x)
            y.float().square().mean().backward()
            return all(
                torch.isfinite(p.grad).all() for p in mixer.parameters() if p.grad is not None
            )

        def bf16_stream(name=name):
            mixer = build(name)
            x = torch.randn(2, 40, 16)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                _, state = mixer(x[:, :23])
                y, _ = mixer(x[:, 23:], state)
            return bool(torch.isfinite(y).all())

        cases += [
            Case("mixer", f"{name}: rank-2 input", lambda b=build: b()(torch.randn(5, 16))),
            Case("mixer", f"{name}: wrong width", lambda b=build: b()(torch.randn(1, 5, 17))),
            Case("mixer", f"{name}: empty sequence", lambda b=build: b()(torch.randn(1, 0, 16))),
            Case(
                "mixer", f"{name}: integer input", lambda b=build: b()(torch.ones(1, 5, 16).long())
            ),
            Case("mixer", f"{name}: NaN at t=13", lambda f=nan_at: f(13)),
            Case("mixer", f"{name}: inf at t=0", lambda f=nan_at: f(0, value=float("inf"))),
            Case("mixer", f"{name}: another mixer's state", other_state),
            Case("mixer", f"{name}: state of another batch size", batch_mismatch),
            Case("mixer", f"{name}: fp16 autocast, padded rows", fp16_grads, "ok", bool),
            Case("mixer", f"{name}: bf16 autocast streaming", bf16_stream, "ok", bool),
        ]
    cases.append(
        Case("mixer", "unknown mixer name", lambda: ts.build_mixer("transformer-xl", dim=16))
    )
    cases.append(
        Case("mixer", "unknown option", lambda: ts.build_mixer("lmm", dim=16, chunk_sise=4))
    )
    return cases


def forecaster_cases(tmp: Path) -> list[Case]:
    frame = series()
    bad_params = [
        ("patch_len", 0),
        ("stride", 0),
        ("stride", -2),
        ("lookback", 0),
        ("horizon", 0),
        ("dim", 0),
        ("heads", 3),
        ("max_epochs", 0),
        ("batch_size", 0),
        ("patience", -1),
        ("learning_rate", float("nan")),
        ("learning_rate", -1.0),
        ("validation_fraction", 1.0),
        ("quantiles", (0.1, 1.2)),
        ("quantiles", (0.5, 0.5)),
        ("mixer", "rnn"),
        ("missing", "guess"),
        ("mixer_options", {"chunk_sise": 4}),
    ]
    cases = [
        Case("forecaster", f"{k}={v!r}", lambda k=k, v=v: forecaster(**{k: v}).fit(frame))
        for k, v in bad_params
    ]
    with_nan = frame.copy()
    with_nan.iloc[50, 1] = np.nan
    gapped = frame.drop(frame.index[40:45])
    irregular = frame.copy()
    irregular.index = frame.index + pd.to_timedelta(
        np.random.default_rng(0).integers(0, 50, 200), "min"
    )
    text = frame.astype(object)
    text.iloc[3, 0] = "n/a"
    cases += [
        Case("forecaster", "NaN with missing='error'", lambda: forecaster().fit(with_nan)),
        Case(
            "forecaster",
            "NaN with missing='interpolate'",
            lambda: forecaster(missing="interpolate").fit(with_nan).predict(),
            "ok",
            lambda out: bool(np.isfinite(out.to_numpy()).all()),
        ),
        Case("forecaster", "gaps in the timestamps", lambda: forecaster().fit(gapped)),
        Case(
            "forecaster",
            "gaps filled with missing='ffill'",
            lambda: forecaster(missing="ffill").fit(gapped).predict(),
            "ok",
            lambda out: out.shape == (4, 2),
        ),
        Case("forecaster", "irregular timestamps", lambda: forecaster().fit(irregular)),
        Case("forecaster", "a text value", lambda: forecaster().fit(text)),
        Case("forecaster", "too short for one window", lambda: forecaster().fit(frame.iloc[:10])),
        Case("forecaster", "empty frame", lambda: forecaster().fit(frame.iloc[:0])),
        Case("forecaster", "no columns", lambda: forecaster().fit(frame[[]])),
        Case(
            "forecaster",
            "duplicated column names",
            lambda: forecaster().fit(frame.set_axis(["a", "a"], axis=1)),
        ),
        Case(
            "forecaster",
            "1 and '1' as column names",
            lambda: forecaster().fit(frame.set_axis([1, "1"], axis=1)),
        ),
        Case(
            "forecaster",
            "duplicated timestamps",
            lambda: forecaster().fit(pd.concat([frame.iloc[:100], frame.iloc[99:]])),
        ),
        Case("forecaster", "decreasing timestamps", lambda: forecaster().fit(frame.iloc[::-1])),
        Case("forecaster", "a 3-D array", lambda: forecaster().fit(np.zeros((50, 2, 2)))),
        Case("forecaster", "predict before fit", lambda: forecaster().predict()),
        Case(
            "forecaster",
            "NumPy integer parameters",
            lambda: forecaster(lookback=np.int64(16), patch_len=np.int64(4)).fit(frame).predict(),
            "ok",
            lambda out: out.shape == (4, 2),
        ),
        Case(
            "forecaster",
            "a plain array [T, C]",
            lambda: forecaster().fit(frame.to_numpy()).predict(),
            "ok",
            lambda out: out.shape == (4, 2),
        ),
    ]

    fitted = {}

    def fit_once():
        if "f" not in fitted:
            fitted["f"] = forecaster().fit(frame)
        return fitted["f"]

    def saved(edit):
        folder = tmp / f"forecaster_{len(list(tmp.glob('forecaster_*')))}"
        fit_once().save(folder)
        edit(folder)
        from titans_seq.domains.forecasting import TitansForecaster

        return TitansForecaster.load(folder)

    def edit_json(folder, change):
        path = folder / "forecaster.json"
        meta = json.loads(path.read_text())
        change(meta)
        path.write_text(json.dumps(meta))

    cases += [
        Case(
            "forecaster",
            "predict with other columns",
            lambda: fit_once().predict(frame.set_axis(["x", "y"], axis=1)),
        ),
        Case(
            "forecaster", "predict with a short context", lambda: fit_once().predict(frame.iloc[:5])
        ),
        Case(
            "forecaster",
            "save + load round trip",
            lambda: saved(lambda f: None).predict(),
            "ok",
            lambda out: np.allclose(out.to_numpy(), fit_once().predict().to_numpy()),
        ),
        Case(
            "forecaster",
            "edited scaler in the saved JSON",
            lambda: saved(
                lambda f: edit_json(
                    f, lambda m: m["series"][0]["scaler"]["target"]["mean"].__setitem__(0, 9.0)
                )
            ),
        ),
        Case(
            "forecaster",
            "truncated weights",
            lambda: saved(
                lambda f: (f / "model.safetensors").write_bytes(
                    (f / "model.safetensors").read_bytes()[:100]
                )
            ),
        ),
        Case(
            "forecaster",
            "JSON not JSON",
            lambda: saved(lambda f: (f / "forecaster.json").write_text("{")),
        ),
        Case(
            "forecaster",
            "manifest removed and JSON damaged",
            lambda: saved(
                lambda f: (
                    (f / "model_manifest.json").unlink(),
                    (f / "forecaster.json").write_text("{"),
                )
            ),
        ),
        Case(
            "forecaster",
            "load a folder that is not a model",
            lambda: saved(lambda f: [p.unlink() for p in f.iterdir()]),
        ),
    ]
    return cases


def long_frame(lengths=(60, 45, 30), plan=True) -> pd.DataFrame:
    """Series of different lengths in neuralforecast's long layout, rows shuffled."""
    rng = np.random.default_rng(0)
    frames = []
    for i, n in enumerate(lengths):
        t = np.arange(n)
        body = {"unique_id": f"s{i}", "ds": pd.date_range("2024-01-01", periods=n, freq="h"),
                "y": np.sin(t / 3 + i) + i, "load": np.cos(t / 5)}  # fmt: skip
        if plan:
            body["plan"] = rng.standard_normal(n)
        frames.append(pd.DataFrame(body))
    return pd.concat(frames).sample(frac=1.0, random_state=0).reset_index(drop=True)


def panel_cases(tmp: Path) -> list[Case]:
    lists = dict(hist_exog_list=["load"], futr_exog_list=["plan"])
    frame = long_frame()
    static = pd.DataFrame({"unique_id": ["s0", "s1", "s2"], "size": [1.0, 2.0, 3.0]})
    fitted = {}

    def fit_once():
        if "f" not in fitted:
            fitted["f"] = forecaster(**lists).fit(frame)
        return fitted["f"]

    def plans(drop_last=False, value=0.0):
        rows = []
        for uid, one in fit_once().series_.items():
            stamps = pd.date_range(one.tail.index[-1], periods=5, freq="h")[1:]
            rows.append(pd.DataFrame({"unique_id": uid, "ds": stamps, "plan": value}))
        out = pd.concat(rows)
        return out.iloc[:-1] if drop_last else out

    duplicated = pd.concat([frame, frame.iloc[:1]])
    nan_cov = frame.assign(load=frame.load.where(frame.index != 5))
    text_ds = frame.astype({"ds": object})
    text_ds.loc[3, "ds"] = "yesterday"
    no_id = frame.astype({"unique_id": object})
    no_id.loc[2, "unique_id"] = None
    ints = frame.assign(ds=frame.groupby("unique_id").cumcount())
    return [
        Case(
            "panel",
            "a long frame, rows unordered",
            lambda: fit_once().predict(futr_df=plans()),
            "ok",
            lambda out: out.shape == (12, 3),
        ),  # fmt: skip
        Case("panel", "a column no list names", lambda: forecaster().fit(frame)),
        Case(
            "panel",
            "a series shorter than horizon + min context",
            lambda: forecaster(**lists).fit(long_frame((60, 6))),
        ),  # fmt: skip
        Case(
            "panel",
            "a short series (left-padded)",
            lambda: (
                forecaster(hist_exog_list=["load"]).fit(long_frame((60, 12), plan=False)).predict()
            ),
            "ok",
            lambda out: out.shape == (8, 3) and bool(np.isfinite(out.TitansForecaster).all()),
        ),  # fmt: skip
        Case(
            "panel", "a duplicated (unique_id, ds) row", lambda: forecaster(**lists).fit(duplicated)
        ),
        Case("panel", "NaN in a historical covariate", lambda: forecaster(**lists).fit(nan_cov)),
        Case("panel", "a ds value that is not a date", lambda: forecaster(**lists).fit(text_ds)),
        Case("panel", "a row without unique_id", lambda: forecaster(**lists).fit(no_id)),
        Case(
            "panel",
            "calendar with integer time steps",
            lambda: forecaster(**lists, calendar="auto").fit(ints),
        ),  # fmt: skip
        Case("panel", "predict without futr_df", lambda: fit_once().predict()),
        Case("panel", "futr_df one step short", lambda: fit_once().predict(futr_df=plans(True))),
        Case("panel", "futr_df with NaN", lambda: fit_once().predict(futr_df=plans(value=np.nan))),
        Case(
            "panel", "an unknown series id", lambda: fit_once().predict(futr_df=plans(), ids=["x"])
        ),
        Case(
            "panel",
            "a column in two lists",
            lambda: forecaster(hist_exog_list=["load"], futr_exog_list=["load"]).fit(frame),
        ),  # fmt: skip
        Case(
            "panel",
            "stat_exog_list without static_df",
            lambda: forecaster(**lists, stat_exog_list=["size"]).fit(frame),
        ),  # fmt: skip
        Case(
            "panel",
            "static_df without a series",
            lambda: forecaster(**lists, stat_exog_list=["size"]).fit(
                frame, static_df=static.iloc[:2]
            ),
        ),  # fmt: skip
        Case(
            "panel",
            "static_df with text",
            lambda: forecaster(**lists, stat_exog_list=["size"]).fit(
                frame, static_df=static.astype({"size": object}).assign(size="big")
            ),
        ),  # fmt: skip
        Case(
            "panel",
            "a wide frame's X not named as covariates",
            lambda: forecaster().fit(series(), X=series().set_axis(["x0", "x1"], axis=1)),
        ),  # fmt: skip
        Case(
            "panel",
            "a covariate list naming an absent column",
            lambda: forecaster(hist_exog_list=["temp"]).fit(series()),
        ),  # fmt: skip
    ]


def dna_cases(tmp: Path) -> list[Case]:
    fasta_gz = tmp / "cut.fa.gz"
    data = gzip.compress(b"".join(b">s%d label=a\nACGTACGTAGCTAGCATCG\n" % i for i in range(3000)))
    fasta_gz.write_bytes(data[: len(data) // 2])
    (tmp / "empty.fa").write_text("")
    (tmp / "junk.fa").write_text("this is not fasta\n")
    cases = [
        Case("dna", f"{k}={v!r}", lambda k=k, v=v: dna(**{k: v}).fit(DNA, LABELS))
        for k, v in [
            ("max_len", 0),
            ("dim", 0),
            ("rc_mode", "both"),
            ("architecture", "rnn"),
            ("batch_size", 0),
            ("learning_rate", 0.0),
            ("patience", 1.5),
            ("validation_fraction", 2.0),
            ("mixer", "gru"),
            ("baselines", "kmer"),
        ]
    ]
    cases += [
        Case("dna", "labels 1 and 'a' mixed", lambda: dna().fit(DNA, [1, "a"] * 3)),
        Case("dna", "a NaN label", lambda: dna().fit(DNA, [1.0, np.nan] * 3)),
        Case("dna", "a None label", lambda: dna().fit(DNA, ["a", None] * 3)),
        Case("dna", "continuous labels", lambda: dna().fit(DNA, [0.5, 1.5] * 3)),
        Case("dna", "one class", lambda: dna().fit(DNA, ["a"] * 6)),
        Case("dna", "fewer labels than sequences", lambda: dna().fit(DNA, LABELS[:4])),
        Case(
            "dna",
            "unknown letters, strict",
            lambda: dna(strict=True).fit(DNA[:-1] + ["ACGZ"], LABELS),
        ),
        Case("dna", "an empty sequence", lambda: dna().fit(DNA[:-1] + [""], LABELS)),
        Case("dna", "no sequences", lambda: dna().fit([], [])),
        Case("dna", "a truncated .fa.gz", lambda: dna().fit(str(fasta_gz), None)),
        Case("dna", "an empty FASTA file", lambda: dna().fit(str(tmp / "empty.fa"), None)),
        Case("dna", "text that is not FASTA", lambda: dna().fit(str(tmp / "junk.fa"), None)),
        Case("dna", "a missing FASTA file", lambda: dna().fit(str(tmp / "nope.fa"), None)),
        Case(
            "dna",
            "integer labels come back as integers",
            lambda: dna().fit(DNA, [1, 2] * 3).predict(DNA),
            "ok",
            lambda out: all(isinstance(v.item(), int) for v in out),
        ),
    ]

    def edited(change):
        from titans_seq.domains.genomics import DNAClassifier

        folder = tmp / f"dna_{len(list(tmp.glob('dna_*')))}"
        dna().fit(DNA, LABELS).save(folder)
        change(folder)
        return DNAClassifier.load(folder)

    def reverse_classes(folder):
        path = folder / "dna_classifier.json"
        meta = json.loads(path.read_text())
        meta["classes"].reverse()
        path.write_text(json.dumps(meta))

    def weights_of_another_fit(folder):
        donor = tmp / "donor"
        dna(random_state=1).fit(DNA, LABELS).save(donor)
        (folder / "model.safetensors").write_bytes((donor / "model.safetensors").read_bytes())

    cases += [
        Case("dna", "classes reversed in the saved JSON", lambda: edited(reverse_classes)),
        Case("dna", "weights of another fit", lambda: edited(weights_of_another_fit)),
    ]
    return cases


def data_cases(tmp: Path) -> list[Case]:
    from titans_seq import data as tsd

    csv = gzip.compress(
        b"date,a\n" + b"".join(b"2020-01-01 %02d:00:00,%d\n" % (i % 24, i) for i in range(3000))
    )
    (tmp / "cut.csv.gz").write_bytes(csv[: len(csv) // 2])
    (tmp / "empty.csv").write_text("")
    return [
        Case("data", "unknown dataset", lambda: tsd.load_timeseries("ETTh9")),
        Case("data", "missing CSV", lambda: tsd.load_timeseries(tmp / "nope.csv")),
        Case("data", "truncated CSV gzip", lambda: tsd.load_timeseries(tmp / "cut.csv.gz")),
        Case("data", "empty CSV", lambda: tsd.load_timeseries(tmp / "empty.csv")),
        Case(
            "data",
            "ETTh1 from the mirror, verified",
            lambda: tsd.load_timeseries("ETTh1"),
            "ok",
            lambda frame: frame.shape == (17420, 7),
        ),
        Case(
            "data",
            "lookback longer than the data",
            lambda: tsd.forecast_splits("ETTh1", lookback=20000, horizon=96),
        ),
        Case("data", "unknown features mode", lambda: tsd.forecast_splits("ETTh1", features="X")),
    ]


def cli_cases(tmp: Path) -> list[Case]:
    recipe = tmp / "recipe.yaml"
    recipe.write_text("name: probe\ntask: associative_recall\ntrain: {max_steps: 2}\n")
    (tmp / "bad.yaml").write_text("name: [unclosed\n")
    (tmp / "file").write_text("")
    cases = [
        ("unknown recipe", ["train", "synthetic/nope"]),
        ("YAML that does not parse", ["train", str(tmp / "bad.yaml")]),
        ("unknown override key", ["train", "synthetic/tiny", "optim.lrr=1"]),
        ("override without '='", ["train", "synthetic/tiny", "optim.lr"]),
        ("optim.lr=nan, --print-config", ["train", "lm/tiny", "optim.lr=nan", "--print-config"]),
        (
            "data.seq_len=0, --print-config",
            ["train", "lm/tiny", "data.seq_len=0", "--print-config"],
        ),
        (
            "model.preset=huge, --print-config",
            ["train", "lm/tiny", "model.preset=huge", "--print-config"],
        ),
        (
            "eval.metric=accuracy for an LM",
            ["train", "lm/tiny", "eval.metric=accuracy", "--print-config"],
        ),
        ("train.batch_size=0", ["train", "synthetic/tiny", "train.batch_size=0", "--print-config"]),
        (
            "--resume without a checkpoint",
            ["train", "synthetic/tiny", f"train.out_dir={tmp / 'fresh'}", "--resume"],
        ),
        (
            "--resume of a missing folder",
            ["train", "synthetic/tiny", "--resume", str(tmp / "nope")],
        ),
        (
            "train into a folder that is a file",
            ["train", "synthetic/tiny", f"train.out_dir={tmp / 'file'}"],
        ),
        ("forecast: unknown dataset", ["forecast", "--data", "ETTh9"]),
        ("forecast: quantiles 0.1,abc", ["forecast", "--data", "ETTh1", "--quantiles", "0.1,abc"]),
        ("forecast: quantile 1.5", ["forecast", "--data", "ETTh1", "--quantiles", "0.5,1.5"]),
        ("forecast: --out is a folder", ["forecast", "--data", "ETTh1", "--out", str(tmp)]),
        (
            "forecast: --out under a file",
            ["forecast", "--data", "ETTh1", "--out", str(tmp / "file" / "f.csv")],
        ),
        (
            "classify: missing model",
            ["classify", "--model", str(tmp / "nope"), "--fasta", str(tmp / "x.fa")],
        ),
        ("generate: missing model", ["generate", "--model", str(tmp / "nope"), "--prompt", "hi"]),
        (
            "tune: storage not a URL",
            ["tune", "synthetic/tiny", "--trials", "1", "--storage", "notaurl"],
        ),
        (
            "tune: port not a number",
            ["tune", "synthetic/tiny", "--trials", "1", "--storage", "postgresql://u:p@h:x/db"],
        ),
        (
            "tune: nobody listening",
            [
                "tune",
                "synthetic/tiny",
                "--trials",
                "1",
                "--storage",
                "postgresql://u:p@127.0.0.1:1/db",
            ],
        ),
        (
            "tune: study name with '..'",
            ["tune", "synthetic/tiny", "--trials", "1", "--study", "../../x"],
        ),
        ("tune: zero trials", ["tune", "synthetic/tiny", "--trials", "0"]),
        ("inspect-memory: missing run", ["inspect-memory", str(tmp / "nope")]),
        (
            "train.trackers: unknown tracker",
            ["train", "synthetic/tiny", "train.trackers=[neptune]", "--print-config"],
        ),
        (
            "train.trackers: MLflow store it cannot open",
            [
                "train",
                "synthetic/tiny",
                "train.trackers=[mlflow]",
                "train.mlflow_uri=nonsense://user:secret@host/x",
                f"train.out_dir={tmp / 'tracked'}",
            ],
        ),
        (
            "train.trackers: corrupt trackers.json",
            ["train", "synthetic/tiny", "train.trackers=[mlflow]", f"train.out_dir={tmp / 'ids'}"],
        ),
    ]
    (tmp / "ids").mkdir(exist_ok=True)
    (tmp / "ids" / "trackers.json").write_text("{not json")
    out = [Case("cli", name, cli_error(*argv)) for name, argv in cases]

    def overrides_after_resume():
        run = tmp / "resumed"
        base = ["train", str(recipe), f"train.out_dir={run}"]
        first, err = cli(*base)
        second, err2 = cli(*base, "--resume", "train.max_steps=4")
        return first, second, err + err2

    out.append(
        Case(
            "cli",
            "override after --resume",
            overrides_after_resume,
            "ok",
            lambda r: r[0] == 0 and r[1] == 0,
        )
    )
    return out


GROUPS = {
    "mixer": lambda tmp: mixer_cases(),
    "forecaster": forecaster_cases,
    "panel": panel_cases,
    "dna": dna_cases,
    "data": data_cases,
    "cli": cli_cases,
    "inputs": hostile_cases.input_cases,
    "adapters": hostile_cases.adapter_cases,
    "saved": hostile_cases.saved_cases,
    "options": hostile_cases.option_cases,
}


def run_case(case: Case) -> Outcome:
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            result = case.run()
            raised = None
        except (_Traceback, _Silent) as marker:
            kind = "traceback" if isinstance(marker, _Traceback) else "silent"
            return Outcome(
                case.group, case.name, kind, str(marker)[:200], time.perf_counter() - start
            )
        except BaseException as error:  # noqa: BLE001 - classifying is the point
            raised = error
    seconds = time.perf_counter() - start
    if case.expect == "error":
        if raised is None:
            if isinstance(result, Exception):  # a CLI case: its one-line error
                if case.says and not re.search(case.says, str(result)):
                    return Outcome(case.group, case.name, "misleading", str(result)[:200], seconds)
                return Outcome(case.group, case.name, "ok", str(result)[:200], seconds)
            return Outcome(case.group, case.name, "silent", "no error", seconds)
        from titans_seq.errors import UserError

        kinds = (*CLEAN_ERRORS, UserError, *case.clean)
        clean = isinstance(raised, kinds) and str(raised).strip()
        detail = f"{type(raised).__name__}: {str(raised).splitlines()[0] if str(raised) else ''}"
        if not clean:
            return Outcome(case.group, case.name, "traceback", detail[:200], seconds)
        if case.says and not re.search(case.says, str(raised), flags=re.S):
            return Outcome(case.group, case.name, "misleading", detail[:200], seconds)
        return Outcome(case.group, case.name, "ok", detail[:200], seconds)
    if raised is not None:
        return Outcome(
            case.group, case.name, "failed", f"{type(raised).__name__}: {raised}"[:200], seconds
        )
    good = case.check is None or bool(case.check(result))
    return Outcome(
        case.group, case.name, "ok" if good else "failed", "" if good else "check failed", seconds
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--only", nargs="+", choices=list(GROUPS), default=list(GROUPS))
    p.add_argument("--json", help="write every outcome here")
    args = p.parse_args(argv)
    mirror = Path(__file__).resolve().parents[2] / "shared" / "data"
    if "TITANS_SEQ_DATA" not in os.environ and mirror.is_dir():  # as the tests do
        os.environ["TITANS_SEQ_DATA"] = str(mirror)
    outcomes = []
    home = os.getcwd()
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        os.chdir(tmp)  # what a command writes by default (runs/...) stays in the scratch
        try:
            for group in args.only:
                folder = tmp / group
                folder.mkdir()
                for case in GROUPS[group](folder):
                    outcome = run_case(case)
                    outcomes.append(outcome)
                    mark = "" if outcome.outcome == "ok" else f"  <-- {outcome.outcome.upper()}"
                    print(f"[{group}] {case.name}: {outcome.detail[:110]}{mark}", flush=True)
        finally:
            os.chdir(home)
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.outcome] = counts.get(o.outcome, 0) + 1
    print(f"\n{len(outcomes)} cases: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    if args.json:
        Path(args.json).write_text(json.dumps([dataclasses.asdict(o) for o in outcomes], indent=1))
    return 0 if set(counts) <= {"ok"} else 1


if __name__ == "__main__":
    sys.exit(main())
