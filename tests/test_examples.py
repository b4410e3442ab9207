"""The examples run end to end (with tiny settings) and write what they promise."""

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


def run_example(name: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.slow
def test_cartpole_example_writes_outputs(tmp_path):
    output = run_example(
        "cartpole_ppo.py", "--out", str(tmp_path), "--total-timesteps", "4096"
    )
    assert "final return" in output
    for name in ("metrics.csv", "policy.eqx", "config.json"):
        assert (tmp_path / name).stat().st_size > 0, name
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 4096 // 512


@pytest.mark.slow
def test_masked_example_takes_no_invalid_action():
    output = run_example("masked_ppo.py", "--total-timesteps", "8192")
    assert "invalid actions taken: 0" in output


@pytest.mark.slow
def test_pendulum_example_prints_curve():
    output = run_example("pendulum_ppo.py", "--total-timesteps", "8192", "--seeds", "1")
    assert "final return per seed" in output


@pytest.mark.slow
def test_snake_example_writes_outputs(tmp_path):
    output = run_example(
        "snake_ppo.py",
        *("--out", str(tmp_path), "--size", "4", "--total-timesteps", "2048"),
        *("--num-envs", "16", "--eval-games", "8", "--gif-steps", "10"),
    )
    assert "mean score" in output and "steps/s" in output
    names = ("metrics.csv", "policy.eqx", "config.json", "learning_curve.png")
    for name in (*names, "snake.gif"):
        assert (tmp_path / name).stat().st_size > 0, name
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 2048 // (16 * 64)
