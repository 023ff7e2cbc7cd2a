"""The command line's numeric argument types: the number, or argparse's error for it."""

import argparse

import pytest

from titans_seq import cli_types


@pytest.mark.parametrize(
    "kind, good, bad",
    [
        (cli_types.positive_int, {"1": 1, "64": 64}, ["0", "-5", "1.5", "x"]),
        (cli_types.positive_int_or_auto, {"auto": "auto", "96": 96}, ["0", "Auto", "x"]),
        (cli_types.non_negative_int, {"0": 0, "7": 7}, ["-1", "2.0", ""]),
        (cli_types.positive_float, {"1e-3": 1e-3, "2": 2.0}, ["0", "-0.1", "nan", "inf", "x"]),
        (cli_types.positive_float_or_auto, {"auto": "auto", "3e-3": 3e-3}, ["0", "AUTO", "nan"]),
        (cli_types.non_negative_float, {"0": 0.0, "0.7": 0.7}, ["-1e-9", "nan"]),
        (cli_types.fraction_below_one, {"0": 0.0, "0.25": 0.25}, ["1", "-0.1", "1.5"]),
        (cli_types.probability_mass, {"1": 1.0, "0.9": 0.9}, ["0", "1.01", "-1"]),
    ],
)
def test_numbers_in_range_pass_and_the_rest_are_refused(kind, good, bad):
    for text, value in good.items():
        assert kind(text) == value
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError):
            kind(text)


def test_the_message_names_the_option():
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--train-rows", type=cli_types.positive_int)
    with pytest.raises(argparse.ArgumentError, match="argument --train-rows: must be a positive"):
        parser.parse_args(["--train-rows", "-5"])
