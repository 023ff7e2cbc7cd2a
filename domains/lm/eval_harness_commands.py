"""CLI subcommand `titans-seq lm-eval`: lm-evaluation-harness with the TitansLM model.

Everything after `lm-eval` goes to the harness's own command line (`lm_eval run ...`), with
`--model titans-seq` added when no model is named, so any harness task runs on a saved model:

    titans-seq lm-eval --model_args pretrained=runs/lm --tasks wikitext --device cpu
"""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "lm-eval",
        help="run lm-evaluation-harness tasks on a saved language model",
        description=(
            "Run lm-evaluation-harness (the lm-eval extra) with the titans-seq model: the "
            "remaining arguments are the harness's (--model_args pretrained=DIR --tasks ...)."
        ),
        add_help=False,
    )
    p.set_defaults(handler=run_lm_eval, forward_unknown_args=True)


def run_lm_eval(args: argparse.Namespace) -> int:
    try:
        from lm_eval.__main__ import cli_evaluate

        from . import lm_eval_adapter  # noqa: F401  (registers the "titans-seq" model)
    except ImportError:
        print(
            "titans-seq lm-eval needs lm_eval: pip install 'titans-seq[lm-eval]'", file=sys.stderr
        )
        return 2
    harness_args = list(args.forwarded_args)
    if {"-h", "--help"} & set(harness_args):
        # the harness's help below shows its own defaults; this command's differ in one
        print(
            "titans-seq lm-eval: lm-evaluation-harness's `lm_eval run` with --model titans-seq "
            "unless another model is named (the harness's help below says 'default: hf'); "
            "pass the saved model as --model_args pretrained=DIR.\n"
        )
    if "--model" not in harness_args and not any(a.startswith("--model=") for a in harness_args):
        harness_args = ["--model", "titans-seq", *harness_args]
    if harness_args[:1] != ["run"] and harness_args[:1] not in (["ls"], ["validate"]):
        harness_args = ["run", *harness_args]
    sys.argv = ["lm-eval", *harness_args]
    cli_evaluate()
    return 0
