"""Every example in `examples/` of the adapter and migration docs runs, with tiny
settings, as `python examples/<name>.py <arguments>` would run it (in this process, to
share imports, under the test suite's rank and dtype checks)."""

import runpy
import sys
from pathlib import Path

import pytest

# The examples train with optax's Adam and call gymnax, both written for standard
# dtype promotion.
STANDARD_DTYPE_PROMOTION = True

EXAMPLES = Path(__file__).parent.parent / "examples"

CASES = {
    "custom_env.py": (
        ["--total-timesteps", "1024", "--num-envs", "8", "--num-steps", "32"]
        + ["--seeds", "1"],
        ["observation (50,)", "seed 0: return"],
    ),
    "gymnax_env_ppo.py": (
        ["--total-timesteps", "1024", "--num-envs", "4", "--num-steps", "64"],
        ["step API 1.0 (six values)", "iterations   1-"],
    ),
    "gymnasium_bridge_ppo.py": (
        ["--total-timesteps", "512", "--num-envs", "4", "--num-steps", "64"]
        + ["--eval-episodes", "1"],
        ["on the host", "greedy episode 0: return"],
    ),
    "purejaxrl_migration.py": (
        ["--total-timesteps", "1024", "--seeds", "1"],
        ["PPO on gymnax CartPole-v1", "PureJaxRL-style loop", "with gravity 20"],
    ),
    "sb3_migration.py": (
        ["--total-timesteps", "1024", "--eval-episodes", "1"],
        ["ep_rew_mean", "greedy episode 0: return"],
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_example_runs(name, monkeypatch, capsys):
    arguments, expected = CASES[name]
    if name != "custom_env.py":
        pytest.importorskip("gymnasium")
    if "gymnax" in name or "purejaxrl" in name:
        pytest.importorskip("gymnax")
    monkeypatch.setattr(sys, "argv", [str(EXAMPLES / name), *arguments])
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    output = capsys.readouterr().out
    for text in expected:
        assert text in output, output
