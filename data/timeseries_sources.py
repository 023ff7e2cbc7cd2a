"""Registry entries of the long-horizon forecasting benchmarks (ETT, Weather, ECL, Traffic,
Exchange, ILI).

The URLs are the canonical public copies the field trains on: the ETDataset repository for
ETT, and the Time-Series-Library (THUML) dataset bundle on Hugging Face for the files that
Autoformer's authors first shared on Google Drive (Weather, ECL, Traffic, Exchange, ILI) and
as a second source for ETT. The md5 is of the uncompressed CSV; the ETT and Weather
checksums are those of the files in the offline mirror. No published checksum of the ECL,
Traffic, Exchange and ILI benchmark copies was found, so theirs are None (a download is then
kept with a warning that prints its md5 and records it in `<file>.md5` beside it, which
`verify=True` checks later; it can be pinned here once a trusted copy is in hand).
"""

from __future__ import annotations

from functools import partial

from .frames import read_csv_frame
from .registry import DatasetEntry, register_dataset

ETDATASET = "https://raw.githubusercontent.com/zhouhaoyi/ETDataset/main/ETT-small"
TSLIB = "https://huggingface.co/datasets/thuml/Time-Series-Library/resolve/main"

# every benchmark file has a "date" column and the target "OT" (moved last when not already)
read_benchmark_csv = partial(read_csv_frame, date_column="date", target="OT")

_ETT_MD5 = {
    "ETTh1": "8381763947c85f4be6ac456c508460d6",
    "ETTh2": "51a229a3fc13579dd939364fefe9c7ab",
    "ETTm1": "82d6bd89109c63d075d99c1077b33f38",
    "ETTm2": "7687e47825335860bf58bccb31be0c56",
}

for _name, _md5 in _ETT_MD5.items():
    _hourly = _name.startswith("ETTh")
    register_dataset(
        DatasetEntry(
            name=_name,
            file=f"timeseries/{_name}.csv.gz",
            urls=(f"{ETDATASET}/{_name}.csv", f"{TSLIB}/ETT-small/{_name}.csv"),
            md5=_md5,
            loader=read_benchmark_csv,
            protocol="ett_hour" if _hourly else "ett_15min",
            alternate_files=(f"ETT-small/{_name}.csv",),
            info={
                "rows": 17420 if _hourly else 69680,
                "variables": 7,
                "frequency": "1h" if _hourly else "15min",
                "target": "OT",
                "span": "2016-07-01 to 2018-06-26",
                "license": "CC BY-ND 4.0",
                "reference": "Zhou et al., Informer, AAAI 2021",
            },
        )
    )

register_dataset(
    DatasetEntry(
        name="Weather",
        file="timeseries/weather.csv.gz",
        urls=(f"{TSLIB}/weather/weather.csv",),
        md5="2e79e5e4c921d3542684c4a34c6748b4",
        # the benchmark file repeats the 2020-05-12 06:00 row; every published result keeps
        # it (52696 rows), so the loader must too
        loader=partial(read_benchmark_csv, duplicates="keep"),
        protocol="custom",
        alternate_files=("weather/weather.csv",),
        info={
            "rows": 52696,
            "variables": 21,
            "frequency": "10min",
            "target": "OT",
            "span": "2020-01-01 00:10 to 2021-01-01 00:00 (one repeated row, one 100-min gap)",
            "origin": "https://www.bgc-jena.mpg.de/wetter/ (Max Planck Institute, Jena)",
            "reference": "Wu et al., Autoformer, NeurIPS 2021",
        },
    )
)


def register_unverified_tslib(
    name: str, path: str, info: dict, aliases: tuple[str, ...] = ()
) -> None:
    """Register a Time-Series-Library benchmark file that has no published checksum (md5
    None) and the usual layout (a date column, the target "OT"): `path` is its place in the
    bundle ("<folder>/<file>.csv"), found as such in a data folder too; the mirror file is
    `timeseries/<file>.csv.gz`."""
    register_dataset(
        DatasetEntry(
            name=name,
            file=f"timeseries/{path.rsplit('/', 1)[-1]}.gz",
            urls=(f"{TSLIB}/{path}",),
            md5=None,
            loader=read_benchmark_csv,
            protocol="custom",
            aliases=aliases,
            alternate_files=(path,),
            info={"target": "OT", "reference": "Wu et al., Autoformer, NeurIPS 2021", **info},
        )
    )


register_unverified_tslib(
    "ECL",
    "electricity/electricity.csv",
    {
        "rows": 26304,
        "variables": 321,
        "frequency": "1h",
        "origin": "https://archive.ics.uci.edu/dataset/321/electricityloaddiagrams20112014",
        "reference": "Wu et al., Autoformer, NeurIPS 2021 (321 clients, hourly)",
    },
    aliases=("electricity",),
)
register_unverified_tslib(
    "Traffic",
    "traffic/traffic.csv",
    {
        "rows": 17544,
        "variables": 862,
        "frequency": "1h",
        "origin": "https://pems.dot.ca.gov/ (Caltrans PeMS road occupancy, 2015-2016)",
    },
)
register_unverified_tslib(
    "Exchange",
    "exchange_rate/exchange_rate.csv",
    {
        "rows": 7588,
        "variables": 8,
        "frequency": "1D",
        "span": "1990-01-01 to 2010-10-10 (daily rates of eight currencies against the USD)",
        "reference": "Lai et al., LSTNet, SIGIR 2018; Wu et al., Autoformer, NeurIPS 2021",
    },
    aliases=("exchange_rate",),
)
register_unverified_tslib(
    "ILI",
    "illness/national_illness.csv",
    {
        "rows": 966,
        "variables": 7,
        "frequency": "7D",
        "span": "2002-01-01 to 2020-06-30 (weekly influenza-like illness counts and shares)",
        "origin": "https://gis.cdc.gov/grasp/fluview/fluportaldashboard.html (CDC ILINet)",
    },
    aliases=("illness", "national_illness"),
)
