"""The built wheel contains the mapped namespaces (domains/, data/, recipes/) and imports them."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAPPED = ("titans_seq.domains", "titans_seq.data", "titans_seq.recipes")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # build from a copy: an in-tree build leaves build/ and titans_seq.egg-info/ in the
    # checkout, and that metadata would shadow the installed package's entry points
    source = tmp_path_factory.mktemp("source") / "titans-seq"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "*.egg-info", "runs", "__pycache__", ".ruff_cache"
        ),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (path,) = out.glob("titans_seq-*.whl")
    return path


def test_wheel_contains_every_package_and_recipe(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in ("titans_seq", *MAPPED):
        assert package.replace(".", "/") + "/__init__.py" in names, package
    for yaml in (ROOT / "recipes").rglob("*.yaml"):
        assert "titans_seq/recipes/" + yaml.relative_to(ROOT / "recipes").as_posix() in names
    # every sub-package of the source tree made it into the wheel
    for folder, package in (
        ("titans_seq", "titans_seq"),
        ("domains", "titans_seq/domains"),
        ("data", "titans_seq/data"),
        ("recipes", "titans_seq/recipes"),
    ):
        for init in (ROOT / folder).rglob("__init__.py"):
            assert f"{package}/{init.relative_to(ROOT / folder).as_posix()}" in names


def test_wheel_declares_the_tasks_commands_and_recipes(wheel):
    archive = zipfile.ZipFile(wheel)
    (entry_points,) = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = archive.read(entry_points).decode()
    for group in ("titans_seq.tasks", "titans_seq.commands", "titans_seq.recipe_dirs"):
        assert f"[{group}]" in text, group
    assert "lm = titans_seq.domains.lm.tasks.lm:LMTask" in text


def test_installed_wheel_imports_the_mapped_namespaces(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    code = (
        "import titans_seq, " + ", ".join(MAPPED) + "\n"
        "print(titans_seq.__file__)\n"
        "print(sorted(titans_seq.list_mixers()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    first_line = out.stdout.splitlines()[0]
    assert first_line.startswith(str(target)), f"imported from {first_line}, not from the wheel"
    assert "lmm" in out.stdout
