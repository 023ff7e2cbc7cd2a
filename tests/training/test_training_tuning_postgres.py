"""Two tuning workers share one study on a real PostgreSQL server started by the test.

The server is a throw-away cluster (initdb + pg_ctl) in a temporary folder on a free
localhost port, run as a non-root user because PostgreSQL refuses to run as root. The test is
skipped, with the reason, only when the PostgreSQL server binaries are not installed
(Debian/Ubuntu: `apt-get install -y postgresql`).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import optuna
import psycopg2  # noqa: F401  (the driver behind postgresql:// URLs; part of the test extras)
import pytest
from optuna.trial import TrialState
from training_helpers import cli_command, subprocess_env, tiny_raw, write_recipe

from titans_seq.tuning.study import make_storage

TRIALS_PER_WORKER = 3


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def postgres_url():
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip(
            "PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install postgresql"
        )
    prefix: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="titans_pg_"))
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the server as")
        os.chown(root, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    data, port = root / "data", _free_port()

    def run(*cmd):
        subprocess.run([*prefix, *cmd], check=True, capture_output=True, timeout=120)

    run(str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    run(
        str(bin_dir / "pg_ctl"),
        "-D",
        str(data),
        "-o",
        options,
        "-l",
        str(root / "log"),
        "-w",
        "-t",
        "60",
        "start",
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            timeout=120,
        )
        shutil.rmtree(root, ignore_errors=True)


def test_two_workers_share_one_study_without_lost_or_duplicated_trials(tmp_path, postgres_url):
    raw = tiny_raw(tmp_path / "unused", train={"max_steps": 10}, eval={"every": 5})
    raw["search_space"] = {"optim.lr": {"type": "float", "low": 1e-3, "high": 3e-2, "log": True}}
    recipe = write_recipe(tmp_path / "recipe.yaml", raw)
    workers = [
        subprocess.Popen(
            cli_command(
                "tune",
                str(recipe),
                "--trials",
                str(TRIALS_PER_WORKER),
                "--storage",
                postgres_url,
                "--study",
                "shared",
                "--out-dir",
                str(tmp_path / f"w{i}"),
                "--no-plots",
            ),
            env=subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [w.communicate(timeout=300)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], "\n".join(outputs)

    # a driver-less postgresql:// URL works whichever driver (psycopg 3 or 2) is installed
    study = optuna.load_study(study_name="shared", storage=make_storage(postgres_url))
    trials = study.get_trials()
    assert sorted(t.number for t in trials) == list(range(2 * TRIALS_PER_WORKER))
    # finished, one way or the other (the default median pruner may stop poor trials)
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials), trials
    assert len({t.user_attrs["worker"] for t in trials}) == 2  # both workers ran trials
    run_dirs = [Path(t.user_attrs["run_dir"]) for t in trials]
    assert len(set(run_dirs)) == len(run_dirs)
    assert all((d / "eval_log.csv").is_file() for d in run_dirs)
    # every worker exported the best recipe of the whole study
    for i in range(2):
        assert "best value" in outputs[i]
        assert (tmp_path / f"w{i}" / "best_recipe.yaml").is_file()
        assert not (tmp_path / f"w{i}" / "study.db").exists()
