"""The hostile probe's cases for the forecaster's inputs, its adapters and saved folders.

`benchmarks/hostile_probe.py` runs them beside its own groups: "inputs" (covariates,
panels, timestamps and numbers as users' files write them), "adapters" (sktime and darts,
each skipped without its library), "saved" (forecaster, DNA classifier, language model and
Hugging Face folders that were edited, swapped, cut short or lost their manifest) and
"options" (the command line's numeric options and messages). Most error cases say what
their message must name (`Case.says`), so that a message about a neighbouring cause counts
as misleading.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd


def _probe():
    import hostile_probe  # the probe's Case and helpers (this module is imported by it)

    return hostile_probe


def hourly_long(lengths=(60, 45), plan=True) -> pd.DataFrame:
    frames = []
    for i, n in enumerate(lengths):
        t = np.arange(n)
        body = {
            "unique_id": f"s{i}",
            "ds": pd.date_range("2024-01-01", periods=n, freq="h"),
            "y": np.sin(t / 3 + i),
        }
        if plan:
            body["plan"] = np.cos(t / 5)
        frames.append(pd.DataFrame(body))
    return pd.concat(frames, ignore_index=True)


# --------------------------------------------------------------------------------- inputs


def input_cases(tmp: Path) -> list:
    p = _probe()
    Case, forecaster, series = p.Case, p.forecaster, p.series
    wide = series(120, 2)
    ints = hourly_long(plan=False).assign(ds=lambda f: f.groupby("unique_id").cumcount())
    text_y = hourly_long(plan=False).astype({"y": object})
    text_y.loc[text_y.index[-2], "y"] = "n/a"
    mixed_zones = hourly_long(plan=False).astype({"ds": str})
    mixed_zones.loc[:4, "ds"] = mixed_zones.loc[:4, "ds"] + "+02:00"
    two_zones = hourly_long(plan=False)  # Berlin's local time across the change to summer time
    local = pd.DatetimeIndex(two_zones["ds"]).tz_localize("UTC").tz_convert("Europe/Berlin")
    two_zones["ds"] = (local + pd.Timedelta(days=89)).strftime("%Y-%m-%d %H:%M:%S%z")
    stamps = pd.date_range("2024-01-01", periods=40, freq="h").strftime("%Y-%m-%d %H:%M")
    european = tmp / "thousands.csv"
    european.write_text(
        "date;load\n" + "".join(f"{d};{i + 1}.{7 * i:03d},5\n" for i, d in enumerate(stamps))
    )

    def tz_futr():
        f = forecaster(futr_exog_list=["plan"]).fit(hourly_long())
        rows = []
        for uid, one in f.series_.items():
            after = pd.date_range(one.tail.index[-1], periods=5, freq="h")[1:]
            rows.append(pd.DataFrame({"unique_id": uid, "ds": after.tz_localize("UTC"), "plan": 0}))
        return f.predict(futr_df=pd.concat(rows))

    def read_thousands():
        from titans_seq.data import load_timeseries

        return load_timeseries(european)

    return [
        Case(
            "inputs",
            "duplicated timestamps in a wide frame",
            lambda: forecaster().fit(pd.concat([wide, wide.iloc[:1]])),
            says=r"(?s)^(?!.*duplicates=).*aggregate",
        ),
        Case(
            "inputs",
            "a long frame with 'value' instead of 'y'",
            lambda: forecaster().fit(hourly_long(plan=False).rename(columns={"y": "value"})),
            says=r"lacks \['y'\]",
        ),
        Case(
            "inputs",
            "text in one series of a long frame",
            lambda: forecaster().fit(text_y),
            says=r"(?s)'n/a'(?!.*date column)",
        ),
        Case(
            "inputs",
            "integer steps with a gap, missing='ffill'",
            lambda: forecaster(missing="ffill").fit(ints.drop(index=[10])).predict(),
            "ok",
            lambda out: out.shape == (8, 3),
        ),
        Case(
            "inputs",
            "integer steps with a gap, missing='error'",
            lambda: forecaster().fit(ints.drop(index=[10])),
            says="missing='ffill'",
        ),
        Case(
            "inputs",
            "integer steps of 5",
            lambda: forecaster().fit(ints.assign(ds=ints.ds * 5)).predict(),
            "ok",
            lambda out: out[out.unique_id == "s0"].ds.tolist() == [300, 305, 310, 315],
        ),
        Case("inputs", "futr_df in another time zone", tz_futr, says="time zone"),
        Case(
            "inputs",
            "ds mixing a time zone and none",
            lambda: forecaster().fit(mixed_zones),
            says="with a time zone .* and without",
        ),
        Case(
            "inputs",
            "ds with two UTC offsets (daylight saving), read as UTC",
            lambda: forecaster().fit(two_zones).predict(),
            "ok",
            lambda out: str(out.ds.dt.tz) == "UTC" and out.shape == (8, 3),
        ),
        Case(
            "inputs",
            "numbers with thousands separators and decimal commas",
            read_thousands,
            "ok",
            lambda frame: frame["load"].iloc[3] == 4021.5,
        ),
    ]


# ------------------------------------------------------------------------------- adapters


def adapter_cases(tmp: Path) -> list:
    p = _probe()
    Case, forecaster = p.Case, p.forecaster
    cases = []
    index = pd.date_range("2024-01-01", periods=80, freq="h")
    if importlib.util.find_spec("sktime") is not None:
        from titans_seq.domains.forecasting.sktime_forecaster import TitansSktimeForecaster

        y = pd.DataFrame({"y": np.sin(np.arange(80) / 4)}, index=index)
        X = pd.DataFrame({"plan": np.cos(np.arange(80) / 5), "load": np.arange(80) / 80}, index)
        panel_index = pd.MultiIndex.from_product([["a", "b"], index[:60]])
        yp = pd.DataFrame({"y": np.sin(np.arange(120) / 4)}, index=panel_index)
        Xp = pd.DataFrame({"plan": np.cos(np.arange(120) / 5)}, index=panel_index)
        only_a = pd.DataFrame(
            {"plan": np.zeros(4)}, index=pd.MultiIndex.from_product([["a"], index[60:64]])
        )

        def sk(**options):
            return TitansSktimeForecaster(forecaster(**options))

        fitted = {}

        def with_x():
            if "x" not in fitted:
                fitted["x"] = sk().fit(y[:60], X=X[:60], fh=[1, 2])
            return fitted["x"]

        cases += [
            Case(
                "adapters",
                "sktime: hist_exog_list names a column X lacks",
                lambda: sk(hist_exog_list=["temp"]).fit(y, X=X, fh=[1]),
                says=r"\['temp'\]",
            ),
            Case(
                "adapters",
                "sktime: hist_exog_list without X",
                lambda: sk(hist_exog_list=["load"]).fit(y, fh=[1]),
                says="no X",
            ),
            Case(
                "adapters",
                "sktime: X renamed at predict",
                lambda: with_x().predict(X=X.iloc[60:64].rename(columns={"plan": "plan2"})),
                says=r"\['plan'\]",
            ),
            Case(
                "adapters",
                "sktime: panel X without one instance",
                lambda: sk().fit(yp, X=Xp, fh=[1, 2]).predict(X=only_a),
                says=r"\['b'\]",
            ),
            Case(  # sktime's own refusal of a capability the forecaster's tags deny
                "adapters",
                "sktime: in-sample steps",
                lambda: with_x().predict(fh=[0, 1], X=X.iloc[59:64]),
                says="in.sample",
                clean=(NotImplementedError,),
            ),
        ]
    if importlib.util.find_spec("darts") is not None:
        from darts import TimeSeries

        from titans_seq.domains.forecasting.darts_model import TitansDartsModel

        one = TimeSeries.from_times_and_values(index, np.sin(np.arange(80) / 4))
        many = [
            TimeSeries.from_times_and_values(
                index, np.sin(np.arange(80) / 4 + i)
            ).with_static_covariates(pd.DataFrame({"size": [float(i)]}))
            for i in range(3)
        ]
        past = TimeSeries.from_times_and_values(index, np.cos(np.arange(80) / 3))
        fitted = {}

        def dm():
            if "one" not in fitted:
                fitted["one"] = TitansDartsModel(forecaster()).fit(one)
            return fitted["one"]

        def unverified_folder():
            folder = tmp / "darts_model"
            dm().save(folder)
            (folder / "model_manifest.json").unlink()
            return TitansDartsModel.load(folder)

        cases += [
            Case("adapters", "darts: predict(-3)", lambda: dm().predict(-3), says=r"\bn\b"),
            Case("adapters", "darts: predict(0)", lambda: dm().predict(0), says=r"\bn\b"),
            Case(
                "adapters",
                "darts: num_samples=0",
                lambda: dm().predict(2, num_samples=0),
                says="num_samples",
            ),
            Case(
                "adapters",
                "darts: a series without the static covariates of fit",
                lambda: TitansDartsModel(forecaster()).fit(many).predict(3, series=one),
                says="static covariate",
            ),
            Case(
                "adapters",
                "darts: no past covariates at predict",
                lambda: (
                    TitansDartsModel(forecaster())
                    .fit(one, past_covariates=past)
                    .predict(3, series=one)
                ),
                says="(?i)past",
            ),
            Case(
                "adapters",
                "darts: a saved folder without its manifest",
                unverified_folder,
                says="manifest",
            ),
        ]
    return cases


# ---------------------------------------------------------------------------------- saved


def saved_cases(tmp: Path) -> list:
    p = _probe()
    Case, forecaster, dna, series = p.Case, p.forecaster, p.dna, p.series
    from titans_seq.domains.forecasting import TitansForecaster
    from titans_seq.domains.genomics import DNAClassifier

    made = {}

    def base(name, build):
        if name not in made:
            folder = tmp / f"base_{name}"
            build().save(folder)
            made[name] = folder
        return made[name]

    def forecaster_folder(name="h4", horizon=4):
        return base(name, lambda: forecaster(horizon=horizon).fit(series(120, 2)))

    def copy(source, manifest=False):
        folder = tmp / f"copy_{len(list(tmp.glob('copy_*')))}"
        shutil.copytree(source, folder)
        if not manifest:
            (folder / "model_manifest.json").unlink()
        return folder

    def edited(change, config="forecaster.json", source=None):
        folder = copy(source or forecaster_folder())
        path = folder / config
        meta = json.loads(path.read_text())
        change(meta)
        path.write_text(json.dumps(meta))
        return folder

    def load_forecaster(folder):
        return TitansForecaster.load(folder, allow_unverified=True)

    def swapped():
        folder = copy(forecaster_folder())
        shutil.copy(forecaster_folder("h8", 8) / "model.safetensors", folder)
        return load_forecaster(folder)

    def cut_series(meta):
        meta["series"][0]["target"] = meta["series"][0]["target"][:-2]

    def other_loss(meta):
        meta["params"]["loss"] = "mse" if meta["chosen"]["loss"] == "mae" else "mae"

    def dna_folder():
        return base("dna", lambda: dna().fit(p.DNA, p.LABELS))

    def add_class(meta):
        meta["classes"].append("extra")

    def lm_folder():
        def build():
            from titans_seq.domains.lm import TitansLM

            return TitansLM(vocab_size=32, dim=16, depth=1, heads=1)

        return base("lm", build)

    def lm_unverified():
        from titans_seq.domains.lm import TitansLM

        return TitansLM.load(copy(lm_folder()))

    def hf_other_mixer():
        from transformers import AutoModelForCausalLM

        from titans_seq.domains.lm import TitansLM
        from titans_seq.domains.lm.hf import TitansForCausalLM

        folder = tmp / "hf"
        TitansForCausalLM.from_titans(TitansLM.load(lm_folder())).save_pretrained(folder)
        config = json.loads((folder / "config.json").read_text())
        config["mixer"], config["mixer_options"] = "attention", {}
        (folder / "config.json").write_text(json.dumps(config))
        return AutoModelForCausalLM.from_pretrained(folder)

    cases = [
        Case(
            "saved",
            "forecaster: manifest removed",
            lambda: TitansForecaster.load(copy(forecaster_folder())),
            says="allow_unverified",
        ),
        Case(
            "saved",
            "forecaster: manifest removed, lookback edited",
            lambda: load_forecaster(edited(lambda m: m["params"].update(lookback=32))),
            says="lookback",
        ),
        Case(
            "saved",
            "forecaster: manifest removed, horizon edited",
            lambda: load_forecaster(edited(lambda m: m["params"].update(horizon=8))),
            says="horizon",
        ),
        Case(
            "saved",
            "forecaster: manifest removed, baseline weight edited",
            lambda: load_forecaster(edited(lambda m: m["baseline"].update(weight=-1))),
            says="baseline weight -1",
        ),
        Case(
            "saved",
            "forecaster: manifest removed, dim edited",
            lambda: load_forecaster(edited(lambda m: m["params"].update(dim=16))),
            says="dim",
        ),
        Case(
            "saved",
            "forecaster: manifest removed, loss edited",
            lambda: load_forecaster(edited(other_loss)),
            says="loss",
        ),
        Case(
            "saved",
            "forecaster: manifest removed, refit_epochs edited",
            lambda: load_forecaster(edited(lambda m: m.update(refit_epochs="all"))),
            says="refit_epochs",
        ),
        Case(
            "saved",
            "forecaster: manifest removed, another model's weights",
            swapped,
            says="head.weight",
        ),
        Case(
            "saved",
            "forecaster: manifest removed, a saved series cut short",
            lambda: load_forecaster(edited(cut_series)),
            says="series 0: 'target'",
        ),
        Case(
            "saved",
            "DNA classifier: manifest removed",
            lambda: DNAClassifier.load(copy(dna_folder())),
            says="allow_unverified",
        ),
        Case(
            "saved",
            "DNA classifier: manifest removed, a class added",
            lambda: DNAClassifier.load(
                edited(add_class, "dna_classifier.json", dna_folder()), allow_unverified=True
            ),
            says="classes",
        ),
        Case(
            "saved",
            "DNA classifier: manifest removed, member edited",
            lambda: DNAClassifier.load(
                edited(lambda m: m.update(member="forest"), "dna_classifier.json", dna_folder()),
                allow_unverified=True,
            ),
            says="member 'forest'",
        ),
        Case(
            "saved",
            "DNA classifier: manifest removed, the length model's arrays removed",
            lambda: DNAClassifier.load(
                edited(
                    lambda m: m.update(member="length", baseline_model={}),
                    "dna_classifier.json",
                    dna_folder(),
                ),
                allow_unverified=True,
            ),
            says="baseline_model",
        ),
        Case("saved", "language model: manifest removed", lm_unverified, says="manifest"),
    ]
    if importlib.util.find_spec("transformers") is not None:
        cases.append(
            Case(
                "saved",
                "Hugging Face folder: config.json names another mixer",
                hf_other_mixer,
                says="config.json",
            )
        )
    return cases


# -------------------------------------------------------------------------------- options


def option_cases(tmp: Path) -> list:
    p = _probe()
    Case, cli_error = p.Case, p.cli_error
    csv = tmp / "wide.csv"
    p.series(120, 2).to_csv(csv)
    long_csv = tmp / "long.csv"
    hourly_long(plan=False).rename(columns={"y": "value"}).to_csv(long_csv, index=False)
    forecast = ["forecast", "--data", str(csv), "--out", str(tmp / "f.csv")]
    cases = [
        (option, value, ["forecast", "--data", str(csv), option, value])
        for option, value in [
            ("--train-rows", "-5"),
            ("--train-rows", "0"),
            ("--horizon", "0"),
            ("--lookback", "-3"),
            ("--epochs", "0"),
            ("--batch-size", "-1"),
            ("--lr", "nan"),
            ("--lr", "0"),
            ("--seed", "-1"),
            ("--baseline", "1.5"),
            ("--baseline", "seasonal"),
        ]
    ]
    cases += [
        ("--top-p", "1.5", ["generate", "--model", "m", "--prompt", "x", "--top-p", "1.5"]),
        (
            "--temperature",
            "-1",
            ["generate", "--model", "m", "--prompt", "x", "--temperature", "-1"],
        ),
        ("--trials", "-2", ["tune", "synthetic/tiny", "--trials", "-2"]),
        ("--timeout", "0", ["tune", "synthetic/tiny", "--trials", "1", "--timeout", "0"]),
        (
            "--val-fraction",
            "1",
            ["prepare-text", "x", "--out", "y", "--val-fraction", "1"],
        ),
    ]
    out = [
        Case("options", f"{option} {value}", cli_error(*argv), says=f"argument {option}:")
        for option, value, argv in cases
    ]
    out += [
        Case(
            "options",
            "model.mixer=nope",
            cli_error("train", "synthetic/tiny", "model.mixer=nope", "--print-config"),
            says=r"model: unknown mixer 'nope'",
        ),
        Case(
            "options",
            "memory.operand_precision=fp16",
            cli_error(
                "train",
                "synthetic/tiny",
                "model.mixer_options.memory.operand_precision=fp16",
                "--print-config",
            ),  # fmt: skip
            says=r"operand_precision must be one of \['fp32', 'tf32', 'bf16'\], got 'fp16'",
        ),
        Case(
            "options",
            "streams.bptt=0",
            cli_error("train", "lm/long_documents_lmm", "streams.bptt=0", "--print-config"),
            says=r"streams.bptt must be an integer >= 1, got 0",
        ),
        Case(
            "options",
            "streams.curriculum that shrinks",
            cli_error(
                "train",
                "lm/long_documents_lmm",
                "streams.curriculum=[[0, 4], [100, 2]]",
                "--print-config",
            ),  # fmt: skip
            says=r"streams.curriculum must grow",
        ),
        Case(
            "options",
            "streams on a task without carried state",
            cli_error("train", "synthetic/tiny", "streams.segments=4", "--print-config"),
            says=r"task 'associative_recall' does not train with carried state",
        ),
        Case(
            "options",
            "forecast: a long file with 'value' instead of 'y'",
            cli_error("forecast", "--data", str(long_csv), "--out", str(tmp / "g.csv")),
            says=r"lacks \['y'\]",
        ),
        Case(
            "options",
            "forecast: --train-rows 50",
            lambda: p.cli(
                *forecast,
                "--train-rows",
                "50",
                "--horizon",
                "4",
                "--lookback",
                "16",
                "--epochs",
                "1",
                "--quiet",
            ),
            "ok",
            lambda result: result[0] == 0,
        ),
    ]
    return out
