"""The examples run end to end (with tiny settings), write what they promise (files
that `eqxrl.load_policy` and `eqxrl eval` open), and answer `--help` in the venv of
`make demo` (the `training` extra only), or say in one line which extra they need."""

import re
import sys
import tomllib
from pathlib import Path

import jax.numpy as jnp
import jax.random as jr
import pytest

import eqxrl
from eqxrl.training import main as eqxrl_main

# The examples are user code: standard dtype promotion (optax's Adam).
STANDARD_DTYPE_PROMOTION = True

ROOT = Path(__file__).parent.parent
EXAMPLES = ROOT / "examples"
EXAMPLE_NAMES = sorted(path.name for path in EXAMPLES.glob("*.py"))

# Examples that need a package of another extra, and that extra.
NEEDS_EXTRA = {
    "brax_ppo.py": "brax",
    "gymnasium_bridge_ppo.py": "gymnasium",
    "gymnax_env_ppo.py": "gymnax",
    "jaxmarl_ippo.py": "jaxmarl",
    "jumanji_ppo.py": "jumanji",
    "mappo_mpe.py": "jaxmarl",
    "purejaxrl_migration.py": "gymnax",
    "qmix_mpe.py": "jaxmarl",
    "sb3_migration.py": "gymnasium",
}
# Packages of the other extras: not in the venv of `make demo`.
OUTSIDE_TRAINING_EXTRA = (
    "brax",
    "gymnasium",
    "gymnax",
    "jaxmarl",
    "jumanji",
    "wandb",
)

NUMBER = r"([-+]?[0-9][0-9,]*(?:\.[0-9]+)?)"


def numbers(pattern: str, output: str) -> list[float]:
    """The numbers in the first match of `pattern` in `output`."""
    match = re.search(pattern, output, re.MULTILINE)
    assert match is not None, f"no match for {pattern!r} in:\n{output}"
    return [float(group.replace(",", "")) for group in match.groups()]


def eval_return(path: Path, capsys) -> float:
    """`eqxrl eval PATH` (greedy, 8 episodes): the mean return it prints."""
    assert eqxrl_main(["eval", str(path), "--episodes", "8"]) == 0
    output = capsys.readouterr().out
    assert "8 greedy episodes" in output, output
    (mean,) = numbers(rf"^  return {NUMBER} \+-", output)
    return mean


# --------------------------------------------------------------------------------------
# --help


def run_help(name: str, run_script, capsys) -> tuple[int | str | None, str]:
    """`python examples/NAME --help`, in this process: the exit code (or message) and
    what it printed."""
    with pytest.raises(SystemExit) as exit:
        run_script(EXAMPLES / name, "--help")
    return exit.value.code, capsys.readouterr().out


def flags(name: str) -> list[str]:
    """The flags the example declares."""
    source = (EXAMPLES / name).read_text()
    found = re.findall(r'add_argument\(\s*"(--[a-z][\w-]*)"', source)
    assert found, f"{name} declares no flags"
    return found


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_help_lists_the_flags(name, run_script, capsys):
    if name in NEEDS_EXTRA:
        streams = sys.stdout, sys.stderr
        pytest.importorskip(NEEDS_EXTRA[name])
        # With brax installed, importing jaxmarl resets both to the terminal's.
        sys.stdout, sys.stderr = streams
        capsys.readouterr()  # what importing it printed (MuJoCo's, under brax)
    code, output = run_help(name, run_script, capsys)
    assert code == 0 and output.startswith("usage:"), output
    for flag in flags(name):
        assert flag in output, (flag, output)


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_help_with_the_training_extra_only(name, monkeypatch, run_script, capsys):
    for module in OUTSIDE_TRAINING_EXTRA:
        monkeypatch.setitem(sys.modules, module, None)  # `import module` fails
    code, output = run_help(name, run_script, capsys)
    if name not in NEEDS_EXTRA:
        assert code == 0 and output.startswith("usage:"), output
        return
    # `SystemExit(message)`: Python prints the message to stderr and exits with 1.
    extra = NEEDS_EXTRA[name]
    assert code == f'this example needs {extra}: pip install "eqxrl[{extra}]"'


def test_training_extra_has_every_backend_of_the_training_driver():
    """`pip install "eqxrl[training]"` (what `make demo` installs) gives the Trainer and
    `eqxrl train` their progress bar, plots, GIFs and `--log tensorboard`: every
    single-purpose extra but wandb's (an account-based service) is part of it."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    training = set(extras["training"])
    for name in ("progress", "render", "plot", "tensorboard"):
        assert set(extras[name]) <= training, name


# --------------------------------------------------------------------------------------
# Runs


@pytest.mark.learning
def test_cartpole_example_learns_and_writes_a_loadable_policy(
    tmp_path, run_script, capsys
):
    output = run_script(
        EXAMPLES / "cartpole_ppo.py",
        *("--out", str(tmp_path), "--total-timesteps", "16384"),
        *("--learning-rate", "1e-3"),
    )
    # A random policy lasts about 22 steps; 32 iterations reach over 300.
    (final,) = numbers(
        rf"final return \(mean of last 10 iterations\): {NUMBER}", output
    )
    assert final > 100.0, output
    (action,) = numbers(r"greedy action at the upright state: (\d+)", output)
    assert action in (0, 1)
    for name in ("metrics.csv", "policy.eqx", "config.json", "curve.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 16384 // 512

    policy = eqxrl.load_policy(tmp_path / "policy.eqx")
    assert int(policy.act(jnp.zeros(4, jnp.float32), jr.key(0))) in (0, 1)
    assert eval_return(tmp_path / "policy.eqx", capsys) > 100.0


@pytest.mark.learning
def test_masked_example_takes_no_invalid_action_and_reaches_the_goal(
    run_script,
):
    output = run_script(
        EXAMPLES / "masked_ppo.py",
        "--total-timesteps",
        "8192",
    )
    assert "invalid actions taken: 0" in output
    first, last = numbers(rf"episode length: first {NUMBER}, last 5 {NUMBER}", output)
    assert last < first, output
    path = re.search(r"greedy path: ([URDL]+) \(reached goal: True\)", output)
    assert path is not None, output
    assert len(path.group(1)) >= 8  # the shortest path


@pytest.mark.learning
def test_pendulum_example_prints_curve(run_script):
    output = run_script(
        EXAMPLES / "pendulum_ppo.py",
        "--total-timesteps",
        "8192",
        "--seeds",
        "1",
    )
    # Pendulum's return per 200-step episode lies in [-16.3 * 200, 0].
    curve = re.findall(rf"^\s*[\d,]+ steps: return\s+{NUMBER}$", output, re.MULTILINE)
    assert len(curve) == 2, output  # 8192 // (16 envs x 256 steps) iterations
    (final,) = numbers(
        rf"final return per seed \(last 5 iterations\): \[{NUMBER}\]", output
    )
    for value in [*map(float, curve), final]:
        assert -3300.0 <= value <= 0.0, output


@pytest.mark.slow
def test_pqn_example_prints_curve_and_greedy_returns(run_script):
    output = run_script(
        EXAMPLES / "pqn_cartpole.py",
        "--total-timesteps",
        "20480",  # 10 iterations of 32 envs x 64 steps
        "--seeds",
        "2",
        "--hidden-sizes",
        "32",
    )
    curve = re.findall(rf"^\s*[\d,]+ steps: return\s+{NUMBER}$", output, re.MULTILINE)
    assert len(curve) == 10, output
    final = numbers(rf"final return per seed: \[{NUMBER}, {NUMBER}\]", output)
    greedy = numbers(
        rf"greedy return per seed \(16 episodes\): \[{NUMBER}, {NUMBER}\]", output
    )
    # CartPole's return per episode lies in [1, 500].
    for value in [*map(float, curve), *final, *greedy]:
        assert 1.0 <= value <= 500.0, output


@pytest.mark.slow
def test_td3_example_prints_curve_and_deterministic_returns(run_script):
    output = run_script(
        EXAMPLES / "td3_pendulum.py",
        *("--algo", "ddpg", "--total-timesteps", "2000", "--seeds", "2"),
        *("--hidden-sizes", "16"),
    )
    assert output.startswith("DDPG: 2 seeds x 2,000 steps"), output
    curve = re.findall(rf"^\s*[\d,]+ steps: return\s+-{NUMBER}$", output, re.MULTILINE)
    assert len(curve) == 2, output
    final = numbers(
        rf"final return per seed \(last 1,000 steps\): \[-{NUMBER}, -{NUMBER}\]",
        output,
    )
    deterministic = numbers(
        rf"deterministic return per seed \(10 episodes\): \[-{NUMBER}, -{NUMBER}\]",
        output,
    )
    # Pendulum's return per 200-step episode lies in [-3300, 0].
    for value in [*map(float, curve), *final, *deterministic]:
        assert 0.0 <= value <= 3300.0, output


@pytest.mark.learning
def test_recurrent_example_trains_evaluates_and_steps_with_the_carry(run_script):
    output = run_script(
        EXAMPLES / "recurrent_ppo.py",
        # 8 iterations: episodes end in each (a random policy's last ~22 steps).
        *("--total-timesteps", "1024", "--num-envs", "4", "--num-steps", "32"),
        "--compare",
    )
    assert "StatelessCartPole-v1: observation shape (2,)" in output  # [x, theta]
    (gru,) = numbers(rf"^GRU: .* the last 1 iterations: {NUMBER}", output)
    (feed_forward,) = numbers(rf"^feed-forward: .* iterations: {NUMBER}", output)
    (greedy,) = numbers(rf"greedy evaluation, 16 episodes: return {NUMBER}", output)
    by_hand, norm = numbers(
        rf"one episode by hand: return {NUMBER}; the carry is GRUCarry with "
        rf"\|hidden\| = {NUMBER}",
        output,
    )
    # CartPole's returns: one per step survived, at most 500.
    for value in (gru, feed_forward, greedy, by_hand):
        assert 1.0 <= value <= 500.0, output
    assert norm > 0.0, output  # the carry moved from its zero start


@pytest.mark.learning
def test_snake_example_writes_a_policy_that_eqxrl_eval_opens(
    tmp_path, run_script, capsys
):
    output = run_script(
        EXAMPLES / "snake_ppo.py",
        *("--out", str(tmp_path), "--size", "4", "--total-timesteps", "256"),
        *("--num-envs", "8", "--num-steps", "16", "--eval-games", "8"),
        *("--gif-steps", "10"),
    )
    assert "steps/s" in output
    # Food eaten per game, on a 4x4 board (at most 15).
    scores = numbers(
        rf"mean score \(food per game, 8 games\): greedy {NUMBER}, sampled {NUMBER}, "
        rf"random {NUMBER}",
        output,
    )
    assert all(0.0 <= score <= 15.0 for score in scores), output
    names = ("metrics.csv", "policy.eqx", "config.json", "learning_curve.png")
    for name in (*names, "snake.gif"):
        assert (tmp_path / name).stat().st_size > 0, name
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 256 // (8 * 16)

    # The file alone rebuilds the 4x4 game and the network.
    policy = eqxrl.load_policy(tmp_path)
    env = eqxrl.envs.make("Snake-v0", height=4, width=4)
    _, timestep = env.reset(jr.key(0))
    action = policy.act(timestep.observation, jr.key(1), timestep.action_mask)
    assert bool(timestep.action_mask[action])
    # `eqxrl eval RUN`, as after `make demo`: a return per game of -1 (lost at once)
    # plus the food eaten.
    assert -1.0 <= eval_return(tmp_path, capsys) <= 15.0


def import_jaxmarl_or_skip() -> None:
    streams = sys.stdout, sys.stderr
    pytest.importorskip("jaxmarl")
    # With brax installed, importing jaxmarl resets both to the terminal's.
    sys.stdout, sys.stderr = streams


def team_returns(output: str) -> list[float]:
    """The team returns of the training curve an MPE example prints."""
    curve = re.findall(rf"^\s*[\d,]+ steps: team return\s+{NUMBER}$", output, re.M)
    return [float(value) for value in curve]


@pytest.mark.learning
def test_mappo_example_trains_recurrent_mappo_on_mpe(run_script):
    import_jaxmarl_or_skip()
    output = run_script(
        EXAMPLES / "mappo_mpe.py",
        *("--total-timesteps", "2048", "--num-envs", "4", "--num-steps", "32"),
        *("--hidden-size", "8"),
    )
    assert "3 agents, observation (18,), global state (54,)" in output, output
    # 16 iterations of 4 worlds x 32 steps; a 25-step MPE episode scores below 0.
    curve = team_returns(output)
    assert len(curve) == 10, output
    (greedy,) = numbers(rf"greedy: team return {NUMBER} \(32 episodes\)", output)
    for value in (*curve, greedy):
        assert -1000.0 < value < 0.0, output


@pytest.mark.learning
@pytest.mark.parametrize("recurrent", [False, True], ids=["mlp", "gru"])
def test_qmix_example_trains_qmix_on_mpe(run_script, recurrent):
    import_jaxmarl_or_skip()
    output = run_script(
        EXAMPLES / "qmix_mpe.py",
        *("--total-timesteps", "2080", "--learning-starts", "416"),
        *("--batch-size", "52" if recurrent else "32", "--buffer-size", "1040"),
        *(["--recurrent"] if recurrent else []),
    )
    assert "3 agents, observation (18,), global state (54,)" in output, output
    agents = "recurrent" if recurrent else "feed-forward"
    assert f"one shared {agents} Q-network" in output, output
    # 10 iterations of 8 worlds x 26 steps, updates from the third on.
    curve = team_returns(output)
    assert len(curve) == 10, output
    (greedy,) = numbers(rf"greedy: team return {NUMBER} \(32 episodes\)", output)
    for value in (*curve, greedy):
        assert -1000.0 < value < 0.0, output
