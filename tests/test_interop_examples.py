"""Every example in `examples/` of the adapter and migration docs runs, with small
settings, as `python examples/<name>.py <arguments>` would run it (in this process, to
share imports, under the test suite's rank and dtype checks), and does what it says:
trains (a return above what a random policy gets), or shows what it promises."""

import re
from pathlib import Path

import numpy as np
import pytest

# The examples train with optax's Adam and call gymnax, both written for standard
# dtype promotion.
STANDARD_DTYPE_PROMOTION = True

EXAMPLES = Path(__file__).parent.parent / "examples"

NUMBER = r"([-+]?[0-9][0-9,]*(?:\.[0-9]+)?)"


def numbers(pattern: str, output: str) -> list[float]:
    """The number of every match of `pattern` (one group) in `output`."""
    found = re.findall(pattern, output)
    assert found, f"no match for {pattern!r} in:\n{output}"
    return [float(text.replace(",", "")) for text in found]


def check_custom_env(output: str) -> None:
    # Catch: a random policy scores about -0.6; 16k steps learn to catch most balls.
    assert "observation (50,)" in output
    (first,), (last,) = (
        numbers(rf"seed 0: return {NUMBER} \(first iterations\)", output),
        numbers(rf"\(first iterations\) -> {NUMBER}", output),
    )
    assert first < 0.0 < last, output


def check_gymnax_env_ppo(output: str) -> None:
    assert "step API 1.0 (six values)" in output
    assert "PPO: 4,096 steps" in output
    # CartPole: a random policy lasts about 22 steps.
    windows = numbers(rf"iterations +\d+- *\d+: return +{NUMBER}", output)
    assert len(windows) == 5 and windows[-1] > 60.0, output


def check_gymnasium_bridge_ppo(output: str) -> None:
    assert "on the host" in output and "PPO: 4,096 steps" in output
    # The trained policy, in a plain gymnasium loop.
    greedy = numbers(rf"greedy episode \d+: return {NUMBER}", output)
    assert len(greedy) == 2 and np.mean(greedy) > 60.0, output


def check_purejaxrl_migration(output: str) -> None:
    assert "PPO on gymnax CartPole-v1: 1 seeds, 1,024 steps" in output
    # PureJaxRL's metrics layout: [seeds, iterations] (1,024 steps of 4 x 128).
    assert "metrics are arrays of shape [seeds, iterations]: (1, 2)" in output
    (train_return,) = numbers(rf"per seed: \[{NUMBER}\]", output)
    assert 8.0 <= train_return <= 500.0, output
    # Random episodes of eqxrl's CartPole in gymnax-style code, then with heavier
    # gravity through the gymnax params: the pole falls sooner.
    (length,) = numbers(rf"random episodes, mean length {NUMBER} steps", output)
    (heavy,) = numbers(rf"with gravity 20: mean length {NUMBER} steps", output)
    assert 8.0 <= heavy < length <= 100.0, output


def check_sb3_migration(output: str) -> None:
    assert "PPO: 4,096 steps" in output
    (train_return,) = numbers(rf"ep_rew_mean.*iterations {NUMBER}", output)
    greedy = numbers(rf"greedy episode \d+: return {NUMBER}", output)
    # SB3's tuned settings learn fast: well above a random policy's ~22.
    assert train_return > 25.0 and np.mean(greedy) > 50.0, output


CASES = {
    "custom_env.py": (
        ["--total-timesteps", "16384", "--num-envs", "8", "--num-steps", "32"]
        + ["--seeds", "1"],
        check_custom_env,
    ),
    "gymnax_env_ppo.py": (
        ["--total-timesteps", "4096", "--num-envs", "4", "--num-steps", "64"],
        check_gymnax_env_ppo,
    ),
    "gymnasium_bridge_ppo.py": (
        ["--total-timesteps", "4096", "--num-envs", "4", "--num-steps", "64"]
        + ["--eval-episodes", "2"],
        check_gymnasium_bridge_ppo,
    ),
    "purejaxrl_migration.py": (
        ["--total-timesteps", "1024", "--seeds", "1"],
        check_purejaxrl_migration,
    ),
    "sb3_migration.py": (
        ["--total-timesteps", "4096", "--eval-episodes", "2"],
        check_sb3_migration,
    ),
}


@pytest.mark.learning
@pytest.mark.parametrize("name", sorted(CASES))
def test_example_runs(name, run_script):
    arguments, check = CASES[name]
    if name != "custom_env.py":
        pytest.importorskip("gymnasium")
    if "gymnax" in name or "purejaxrl" in name:
        pytest.importorskip("gymnax")
    check(run_script(EXAMPLES / name, *arguments))
