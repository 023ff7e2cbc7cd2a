"""Every Python block of README.md and docs/*.md runs as written.

The blocks of one file run in order in one fresh process and share its namespace (a guide
builds on its earlier blocks), in an empty working folder, offline, with the data mirror as
`$TITANS_SEQ_DATA`. A block whose first line is `# requires: NAME` runs only where NAME
imports ("cuda": where a GPU is present); the test says which blocks it skipped.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from process_helpers import subprocess_env

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

RUNNER = r"""
import contextlib, importlib.util, io, json, sys, traceback
blocks = json.loads(sys.stdin.read())
namespace = {"__name__": "__docs__"}
skipped = []
for block in blocks:
    first = block["code"].splitlines()[0] if block["code"].strip() else ""
    if first.startswith("# requires:"):
        need = first.split(":", 1)[1].strip()
        if need == "cuda":
            import torch
            ok = torch.cuda.is_available()
        else:
            ok = importlib.util.find_spec(need) is not None
        if not ok:
            skipped.append(f"line {block['line']} ({need})")
            continue
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(block["code"], f"{block['file']}:{block['line']}", "exec"), namespace)
    except BaseException:
        print(f"block at {block['file']} line {block['line']} failed:", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
print(json.dumps({"skipped": skipped}))
"""


def blocks_of(path: Path) -> list[dict]:
    text = path.read_text()
    return [
        {"file": path.name, "line": text[: m.start()].count("\n") + 2, "code": m.group(1)}
        for m in BLOCK.finditer(text)
    ]


def run_document(path: Path, folder: Path) -> tuple[Path, subprocess.CompletedProcess]:
    folder.mkdir()
    env = subprocess_env(TITANS_SEQ_OFFLINE="1", MPLBACKEND="Agg")
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps(blocks_of(path)),
        capture_output=True,
        text=True,
        cwd=folder,
        env=env,
        timeout=900,
    )
    return path, proc


def test_the_python_blocks_of_every_document_run(tmp_path):
    """One process per document, two side by side (the test waits on them, not the CPU)."""
    documents = [p for p in DOCS if blocks_of(p)]
    assert {p.name for p in documents} >= {"README.md", "forecasting.md", "lm.md"}
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda p: run_document(p, tmp_path / p.stem), documents))
    failures = [f"{path.name}:\n{proc.stderr[-3000:]}" for path, proc in results if proc.returncode]
    assert not failures, "\n\n".join(failures)
    for path, proc in results:
        skipped = json.loads(proc.stdout.strip().splitlines()[-1])["skipped"]
        if skipped:
            print(f"{path.name}: skipped blocks at {', '.join(skipped)}")
