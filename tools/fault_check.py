"""Fault injection: does the test suite catch deliberate bugs?

Each entry of `FAULTS` is a one-line change to eqxrl's source (an exact substring
of one line of one file under `src/`, replaced by another string) that breaks
something the library promises (PPO's surrogate, GAE's bootstrap at truncation, a
recurrent carry's reset, the replay buffer's sampling, ...), with the few fast
tests that should catch it. For each fault the runner copies `src/`, `tests/`,
`examples/`, `benchmarks/` and `pyproject.toml` to a fresh temporary folder,
applies the change there (the working tree is never touched), and runs only that
fault's tests in the copy:

    python -m pytest -x -q -p no:cacheprovider -p no:xdist <tests>

with `PYTHONPATH=<copy>/src`, which takes precedence over the virtual
environment's editable install (a plain `.pth` file pointing at the working
tree). A small pytest plugin checks, in the copy, that `eqxrl` is found inside the
copy before any test runs, and records the `eqxrl.__file__` the tests imported,
which the runner checks too: a fault can never pass because the tests read the
unmodified tree.

Results:

- `caught`: the tests failed (pytest exit status 1);
- `missed`: they passed (exit status 0): a gap in the suite;
- `error`: anything else (collection error, usage error, no tests, a timeout, or
  eqxrl imported from outside the copy): the check itself is broken;
- `stale`: the fault's `find` string no longer occurs exactly once in its file
  (the source moved on): update the entry.

Before the faults, the union of their tests runs once on an unmodified copy (the
baseline) and must pass, so that `caught` means the fault did it and not a failure
that was already there. A fault whose tests fail on the baseline is reported
`baseline-fail` and not run.

A fault marked `learning_only` is caught only by a (short) learning run, not by a
unit test. A fault with a `gap` is one the suite is known to miss (the `gap` says
what test would catch it): such faults are listed, but only run with `--gaps` or
when named with `--only`, and their `missed` does not fail the check.

Usage:

    python tools/fault_check.py                 # baseline, then every fault
    python tools/fault_check.py --list          # the faults and their tests
    python tools/fault_check.py --only NAME ... # some faults
    python tools/fault_check.py --baseline      # only the unmodified run
    python tools/fault_check.py --jobs 2 --markdown

The exit status is 0 only if the baseline passes, no entry is stale and every
fault (known gaps aside) is caught.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What a copy holds: the package, the tests, and what tests read at import
# (test_recurrent_features.py loads examples/dict_observations_ppo.py; other test
# modules run benchmarks/ scripts). pyproject.toml holds pytest's configuration.
TREES = ("src", "tests", "examples", "benchmarks")
FILES = ("pyproject.toml",)

# XLA's CPU fusion emitters off: far faster compiles of the many small programs
# the tests build (used only if this jax accepts the flag).
FAST_COMPILE_FLAG = "--xla_cpu_use_fusion_emitters=false"

PLUGIN_NAME = "_fault_check_plugin"
PLUGIN_SOURCE = '''\
"""Written by tools/fault_check.py: make sure the tests run the copy's eqxrl."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest


def _inside_copy(path):
    root = Path(os.environ["FAULT_CHECK_ROOT"]).resolve()
    return Path(path).resolve().is_relative_to(root)


def pytest_configure(config):
    # `find_spec` locates eqxrl without importing it (an import here would come
    # before the jaxtyping import hook that instruments eqxrl for the tests).
    spec = importlib.util.find_spec("eqxrl")
    origin = None if spec is None else spec.origin
    if origin is None or not _inside_copy(origin):
        pytest.exit(
            f"fault_check: eqxrl would be imported from {origin}, outside the "
            f"copy {os.environ['FAULT_CHECK_ROOT']}",
            returncode=3,
        )
    Path(os.environ["FAULT_CHECK_REPORT"]).write_text(f"found {origin}\\n")


def pytest_sessionfinish(session, exitstatus):
    # Tests that only run scripts in subprocesses (which inherit PYTHONPATH, so
    # find the same eqxrl) never import it here.
    module = sys.modules.get("eqxrl")
    location = getattr(module, "__file__", None)
    if location:
        with open(os.environ["FAULT_CHECK_REPORT"], "a") as report:
            report.write(f"imported {location}\\n")
'''


@dataclasses.dataclass(frozen=True)
class Fault:
    """One deliberate bug: replace `find` (which must occur exactly once in the
    file at `path`, relative to the repository root) by `replace`, then run
    `tests` (pytest node IDs), which should fail.

    - `why`: what the tests check that the fault breaks.
    - `learning_only`: only a learning run (however short) catches it.
    - `gap`: the suite is known to miss it; what test would catch it.
    """

    name: str
    path: str
    find: str
    replace: str
    tests: tuple[str, ...]
    why: str
    learning_only: bool = False
    gap: str = ""


FAULTS: tuple[Fault, ...] = (
    Fault(
        name="ppo-advantage-sign",
        path="src/eqxrl/algorithms/_ppo_loss.py",
        find="-jnp.minimum(ratio * advantages, clipped_ratio * advantages)",
        replace="-jnp.minimum(ratio * -advantages, clipped_ratio * -advantages)",
        tests=(
            "tests/test_masking.py::"
            "test_probe_learns_best_valid_action_never_the_masked_one",
        ),
        why="a 30-iteration masked bandit must learn its best valid action (2); "
        "with the surrogate's sign flipped PPO learns the worst",
        learning_only=True,
    ),
    Fault(
        name="gae-truncation-bootstrap",
        path="src/eqxrl/algorithms/_returns.py",
        find="deltas = rewards + gamma * not_terminated * next_values - values",
        replace="deltas = rewards + gamma * continues * next_values - values",
        tests=(
            "tests/test_returns.py::test_truncation_bootstraps_and_termination_does_not",
        ),
        why="a truncated step's advantage is r + gamma * V(final observation), "
        "a terminated step's just r",
    ),
    Fault(
        name="recurrent-carry-not-reset",
        path="src/eqxrl/nn/_carries.py",
        find="lambda c, i: jnp.where(episode_start, i, c)",
        replace="lambda c, i: c",
        tests=(
            "tests/test_recurrent_q_network.py::"
            "test_the_carry_resets_where_an_episode_starts",
        ),
        why="unroll's outputs after an episode start equal a fresh unroll from "
        "initial_carry() (reset_carry is the one reset rule of every network)",
    ),
    Fault(
        name="dqn-target-never-updated",
        path="src/eqxrl/algorithms/_q_learning.py",
        find="target_network = eqx.combine(target, static)",
        replace="target_network = target_network",
        tests=(
            "tests/test_q_learning.py::test_target_network_hard_and_soft_updates[DQN]",
        ),
        why="with tau = 1 and a copy every 2 updates the target equals the "
        "online network after training",
    ),
    Fault(
        name="replay-samples-unwritten-slots",
        path="src/eqxrl/buffers/_replay.py",
        find="jr.randint(key, shape, 0, size * self.num_envs, jnp.int32)",
        replace="jr.randint(key, shape, 0, self.capacity * self.num_envs, jnp.int32)",
        tests=(
            "tests/test_replay.py::test_sample_is_uniform_over_stored_transitions_only",
        ),
        why="20,000 samples from 10 stored transitions of a 50-row buffer are "
        "uniform over the stored ones (zero-filled rows would dominate)",
    ),
    Fault(
        name="checkpoint-drops-optimizer-state",
        path="src/eqxrl/training/_checkpoint.py",
        find="return _read_payload(checkpoint, skeleton), algorithm, checkpoint.header",
        replace=(
            # The optimizer state of a fresh start (one run's, not a batch's).
            "state = _read_payload(checkpoint, skeleton); return (eqx.tree_at("
            "lambda s: s.optimizer_state, state, "
            "algorithm.init(jr.key(0)).optimizer_state) if hasattr(state, "
            "'optimizer_state') and not batch_shape else state), algorithm, "
            "checkpoint.header"
        ),
        tests=("tests/test_pqn.py::test_resume_through_the_trainer_is_exact",),
        why="a PQN run checkpointed at iteration 6 and resumed through the Trainer "
        "ends bit for bit where the uninterrupted run does, RAdam's moments and "
        "count included (test_checkpoint.py's round trips save a fresh state, "
        "whose moments are zero anyway)",
    ),
    Fault(
        name="action-mask-ignored",
        path="src/eqxrl/distributions/_masked_categorical.py",
        find="jnp.where(action_mask, logits, jnp.finfo(logits.dtype).min)",
        replace="jnp.where(action_mask, logits, logits)",
        tests=("tests/test_distributions.py::test_masked_actions_are_never_sampled",),
        why="10,000 samples never include a masked action, whose probability is "
        "exactly zero",
    ),
    Fault(
        name="vdn-mixer-averages",
        path="src/eqxrl/multiagent/_mixers.py",
        find="return jnp.sum(q_values)",
        replace="return jnp.mean(q_values)",
        tests=(
            "tests/test_value_decomposition.py::"
            "test_vdn_team_value_is_the_sum_of_the_chosen_values",
        ),
        why="VDN's Q_tot is the sum (not the mean) over agents of each agent's "
        "own network's value of its action",
    ),
    Fault(
        name="pqn-lambda-ignored",
        path="src/eqxrl/algorithms/_returns.py",
        find="q_lambda = jnp.asarray(q_lambda, jnp.float32)",
        replace="q_lambda = jnp.asarray(0.0, jnp.float32)",
        tests=(
            "tests/test_returns.py::"
            "test_q_lambda_returns_match_numpy_at_terminated_and_truncated_steps"
            "[0-0.65]",
        ),
        why="PQN's Q(lambda) returns match a float64 NumPy recursion at "
        "lambda = 0.65 (not the one-step targets of lambda = 0)",
    ),
    Fault(
        name="mesh-envs-replicated",
        path="src/eqxrl/algorithms/_base.py",
        find="envs = ENVS_AXIS if ENVS_AXIS in mesh.axis_names else None",
        replace="envs = None",
        tests=("tests/test_sharded_checkpoint.py::test_checksums_over_a_mesh",),
        why="a PPO state placed on an ('envs',) mesh of 4 simulated devices has "
        "its environment states split over 'envs', not replicated",
    ),
    Fault(
        name="gae-shape-annotation-loosened",
        path="src/eqxrl/algorithms/_returns.py",
        find='    values: Float[Array, "num_steps num_envs"],',
        replace='    values: Float[Array, "..."],',
        tests=("tests/test_returns.py::test_gae_rejects_mismatched_shapes",),
        why="compute_gae refuses values of another shape than the rewards' with "
        "a jaxtyping error naming `values` (not a broadcasting error)",
    ),
    Fault(
        name="polyak-tau-ignored",
        path="src/eqxrl/algorithms/_off_policy.py",
        find="lambda o, t: tau * o + (1.0 - tau) * t",
        replace="lambda o, t: o",
        tests=("tests/test_sac.py::test_target_critic_polyak_averaging",),
        why="SAC's target critics stay put at tau = 0 and move only a little "
        "toward the critics at the default tau = 0.005",
    ),
    Fault(
        name="td3-policy-delay-ignored",
        path="src/eqxrl/algorithms/_td3.py",
        find="due = (update_index + 1) % self.policy_delay == 0",
        replace="due = update_index >= 0",
        tests=(
            "tests/test_td3.py::"
            "test_actor_and_targets_update_every_policy_delay_critic_updates",
        ),
        why="with policy_delay = 3 the actor and the targets move on every "
        "third critic update only",
    ),
    Fault(
        name="time-limit-terminates",
        path="src/eqxrl/envs/_wrappers.py",
        find="timestep = eqx.tree_at(lambda t: t.truncated, timestep, truncated)",
        replace=(
            "timestep = eqx.tree_at(lambda t: t.terminated, timestep, "
            "timestep.terminated | truncated)"
        ),
        tests=("tests/test_wrappers.py::test_time_limit_truncates_only",),
        why="TimeLimit sets truncated (never terminated) on the step that "
        "reaches the limit",
    ),
    Fault(
        name="episode-return-not-accumulated",
        path="src/eqxrl/envs/_wrappers.py",
        find="state.episode_return + timestep.reward,",
        replace="state.episode_return,",
        tests=(
            "tests/test_wrappers.py::test_episode_statistics_report_totals_at_episode_end",
        ),
        why="EpisodeStatistics reports each episode's return (CartPole: its "
        "length) on the step where it ends",
    ),
    Fault(
        name="environment-metrics-dropped",
        path="src/eqxrl/algorithms/_metrics.py",
        find="ENV_METRICS: dict(timestep.extras.get(ENV_METRICS, {})),",
        replace="ENV_METRICS: {},",
        tests=(
            "tests/test_domain_randomization.py::test_ppo_metrics_report_the_sampled_parameters",
            "tests/test_domain_randomization.py::test_every_algorithm_reports_the_sampled_parameters",
        ),
        why="every algorithm's metrics report the environment's own metrics (a "
        "DomainRandomization's parameters)",
    ),
    Fault(
        name="auto-reset-keeps-final-observation",
        path="src/eqxrl/envs/_wrappers.py",
        find="observation=observation,",
        replace="observation=timestep.observation,",
        tests=("tests/test_wrappers.py::test_auto_reset_keeps_final_observation",),
        why="after an episode ends AutoReset returns the fresh reset observation "
        "(the final one only in extras['final_observation'])",
    ),
    Fault(
        name="n-step-discount-power",
        path="src/eqxrl/buffers/_replay.py",
        find="gamma ** (last + 1).astype(jnp.float32)",
        replace="gamma ** last.astype(jnp.float32)",
        tests=("tests/test_replay.py::test_n_step_return_stops_at_episode_ends",),
        why="an m-step return bootstraps with gamma ** m (n_step_return's "
        "discount, by hand)",
    ),
    Fault(
        name="qmix-weights-not-monotonic",
        path="src/eqxrl/multiagent/_mixers.py",
        find="weight_1 = jnp.abs(two_layers(self.weight_1, global_state))",
        replace="weight_1 = two_layers(self.weight_1, global_state)",
        tests=(
            "tests/test_value_decomposition.py::"
            "test_qmix_mixer_is_monotonic_in_every_agent_value",
        ),
        why="dQ_tot / dQ_i >= 0 for random mixers (QMIX's hypernetwork weights "
        "taken in absolute value)",
    ),
    Fault(
        name="epsilon-schedule-frozen",
        path="src/eqxrl/algorithms/_q_learning.py",
        find="progress = jnp.clip(steps / decay_steps, 0.0, 1.0)",
        replace="progress = jnp.clip(steps / decay_steps, 0.0, 0.0)",
        tests=(
            "tests/test_q_learning.py::test_train_returns_metrics_per_iteration[DQN]",
        ),
        why="DQN's logged epsilon is 1 before learning_starts, then decreases "
        "every iteration",
    ),
    Fault(
        name="observation-statistics-not-updated",
        path="src/eqxrl/nn/_normalization.py",
        find="lambda stats, leaf: None if stats is None else stats.update(leaf),",
        replace="lambda stats, leaf: stats,",
        tests=(
            "tests/test_continuous.py::test_normalized_ppo_exports_normalizer_with_policy",
        ),
        why="after 3 iterations of normalized PPO the observation statistics "
        "have merged every observation (count > 4 * 32 * 2)",
    ),
    Fault(
        name="return-statistics-not-updated",
        path="src/eqxrl/algorithms/_normalization.py",
        find="return_statistics = return_statistics.update(returns_seen.reshape(-1))",
        replace="return_statistics = return_statistics",
        tests=(
            "tests/test_recurrent_features.py::"
            "test_normalized_observations_and_rewards_with_a_recurrent_policy",
        ),
        why="normalize_rewards merges every discounted return of the run into "
        "the return statistics (count = 3 * 4 * 16 + 1e-4)",
    ),
    Fault(
        name="dqn-gradient-clipping-ignored",
        path="src/eqxrl/algorithms/_q_learning.py",
        find="else optax.clip_by_global_norm(self.max_grad_norm)",
        replace="else optax.identity()",
        tests=(
            "tests/test_q_learning.py::"
            "test_max_grad_norm_none_trains_without_clipping[DQN]",
        ),
        why="a tight max_grad_norm (1e-4) trains to other parameters than no clipping",
    ),
    Fault(
        name="dqn-bootstraps-from-reset-observation",
        path="src/eqxrl/algorithms/_q_learning.py",
        find='next_observation=next_timestep.extras["final_observation"],',
        replace="next_observation=next_timestep.observation,",
        tests=(
            "tests/test_q_learning.py::"
            "test_truncation_bootstraps_from_the_final_observation",
        ),
        why="a truncated transition's next observation is the episode's final "
        "one, not the next episode's first",
    ),
    Fault(
        name="ppo-learning-rate-not-annealed",
        path="src/eqxrl/algorithms/_schedules.py",
        find="return decay(count // updates_per_step)",
        replace="return decay(0 * count // updates_per_step)",
        tests=("tests/test_ppo.py::test_learning_rate_anneals_linearly",),
        why="PPO's logged step size decays linearly to zero over the iterations "
        "(anneal_lr=True, the default)",
    ),
    Fault(
        name="ppo-entropy-bonus-sign",
        path="src/eqxrl/algorithms/_ppo_loss.py",
        find="value_loss - ent_coef * entropy",
        replace="value_loss + ent_coef * entropy",
        tests=(
            "tests/test_ppo.py::"
            "test_loss_is_policy_loss_plus_weighted_value_loss_minus_entropy_bonus",
        ),
        why="PPO's total loss on a hand-built 5-row minibatch is policy_loss + "
        "vf_coef * value_loss - ent_coef * entropy (a bonus, not a penalty)",
    ),
    Fault(
        name="ppo-ignores-truncation-values",
        path="src/eqxrl/algorithms/_ppo.py",
        find="return jnp.where(transitions.truncated, truncation_values, next_values)",
        replace="return next_values",
        tests=(
            "tests/test_ppo.py::"
            "test_update_bootstraps_truncated_steps_from_their_final_observation_value",
        ),
        why="the advantages and value targets PPO updates with on a rollout "
        "truncated every 3 steps are compute_gae's fed the values of the final "
        "(pre-reset) observations, not the next episode's first",
    ),
    Fault(
        name="recurrent-team-reward-summed-over-worlds",
        path="src/eqxrl/multiagent/_value_decomposition_base.py",
        find="reward=jnp.sum(next_timestep.reward, axis=-1),",
        replace="reward=jnp.sum(next_timestep.reward, axis=0),",
        tests=(
            "tests/test_recurrent_value_decomposition.py::"
            "test_the_stored_team_reward_is_each_world_s_sum_over_its_agents",
        ),
        why="a recurrent VDN stores each world's team reward, the sum over its "
        "agents (2 worlds x 2 agents whose rewards differ, so a sum over the "
        "worlds has the right shape but not the right value)",
    ),
)


# ----------------------------------------------------------------- the checks


@dataclasses.dataclass
class Outcome:
    """What one run of tests gave: `result` (caught, missed, error, stale,
    baseline-fail), the seconds it took, and a note (the end of pytest's output
    where something went wrong)."""

    fault: Fault | None
    result: str
    seconds: float = 0.0
    note: str = ""


def stale_reason(fault: Fault, root: Path = ROOT) -> str:
    """Why `fault` cannot be applied to the tree at `root` ('' if it can): its
    file is missing, or `find` does not occur exactly once in it."""
    path = root / fault.path
    if not path.is_file():
        return f"{fault.path} does not exist"
    if fault.find == fault.replace:
        return "find and replace are the same"
    if "\n" in fault.find:
        return "find spans several lines"
    count = path.read_text().count(fault.find)
    if count != 1:
        return f"find occurs {count} times in {fault.path}"
    return ""


def fast_compile_flags() -> str:
    """XLA_FLAGS for the test runs: the caller's, plus the fast-compile flag if
    this jax accepts it (an unknown flag makes XLA abort at start)."""
    existing = os.environ.get("XLA_FLAGS", "")
    if FAST_COMPILE_FLAG in existing:
        return existing
    flags = f"{existing} {FAST_COMPILE_FLAG}".strip()
    probe = subprocess.run(
        [sys.executable, "-c", "import jax; jax.devices()"],
        env={**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"},
        capture_output=True,
        timeout=300,
    )
    return flags if probe.returncode == 0 else existing


def make_copy(folder: Path) -> Path:
    """A copy of what the tests need under `folder/repo` (caches left out), and
    the plugin that checks the tests run it, under `folder/plugin`."""
    copy = folder / "repo"
    copy.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for tree in TREES:
        if (ROOT / tree).is_dir():
            shutil.copytree(ROOT / tree, copy / tree, ignore=ignore)
    for name in FILES:
        shutil.copy2(ROOT / name, copy / name)
    plugin = folder / "plugin"
    plugin.mkdir()
    (plugin / f"{PLUGIN_NAME}.py").write_text(PLUGIN_SOURCE)
    return copy


def apply_fault(copy: Path, fault: Fault) -> None:
    """Apply `fault` to the copy (its find string checked there again)."""
    reason = stale_reason(fault, copy)
    if reason:
        raise ValueError(reason)
    path = copy / fault.path
    path.write_text(path.read_text().replace(fault.find, fault.replace, 1))


def run_tests(
    tests: tuple[str, ...],
    fault: Fault | None,
    xla_flags: str,
    timeout: float,
    stop_early: bool = True,
) -> tuple[int | None, str, float]:
    """Run `tests` in a fresh copy with `fault` applied (none: the baseline).

    **Returns:**

    `(status, output, seconds)`: pytest's exit status (`None` on a timeout),
    its output, and the wall time. A run whose tests imported eqxrl from outside
    the copy gets status 3 and says so.
    """
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fault_check_") as temporary:
        folder = Path(temporary).resolve()
        copy = make_copy(folder)
        if fault is not None:
            apply_fault(copy, fault)
        report = folder / "eqxrl_file.txt"
        environment = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(copy / "src"), str(folder / "plugin")]),
            "FAULT_CHECK_ROOT": str(copy),
            "FAULT_CHECK_REPORT": str(report),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if xla_flags:
            environment["XLA_FLAGS"] = xla_flags
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        command += ["-p", "no:xdist", "-p", PLUGIN_NAME]
        if stop_early:
            command.append("-x")
        command += list(tests)
        status, output = run_in_session(command, copy, environment, timeout)
        if status is None:
            return status, output, time.monotonic() - start
        if status in (0, 1):
            problem = check_report(report, copy)
            if problem:
                status = 3
                output += f"\nfault_check: {problem}"
    return status, output, time.monotonic() - start


def run_in_session(
    command: list[str], cwd: Path, environment: dict[str, str], timeout: float
) -> tuple[int | None, str]:
    """Run `command` in a session of its own; `(exit status, output)`. On a
    timeout the whole session (pytest and the processes its tests started) is
    killed and the status is `None`."""
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(process)
        output, _ = process.communicate()
        return None, f"{output}\n(timed out after {timeout:.0f} s)"
    except BaseException:
        # Ctrl-C: the session does not get the terminal's signal; end it too.
        kill_session(process)
        process.wait()
        raise
    return process.returncode, output


def kill_session(process: subprocess.Popen) -> None:
    """Kill the session `process` leads (it and every process it started)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def check_report(report: Path, copy: Path) -> str:
    """What is wrong with the plugin's report of where eqxrl came from ('' if
    nothing): the plugin found eqxrl inside `copy` (else it did not run), and the
    tests, if they imported eqxrl in pytest's process, imported the copy's."""
    lines = report.read_text().splitlines() if report.exists() else []
    if not any(line.startswith("found ") for line in lines):
        return "the plugin that checks where eqxrl comes from did not run"
    for line in lines:
        location = line.split(" ", 1)[1]
        if not Path(location).resolve().is_relative_to(copy):
            return f"eqxrl came from {location}, outside the copy {copy}"
    return ""


def tail(text: str, lines: int = 25) -> str:
    """The last `lines` lines of `text`."""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def check_fault(fault: Fault, xla_flags: str, timeout: float) -> Outcome:
    """Apply one fault in a copy and run its tests: caught, missed or error."""
    reason = stale_reason(fault)
    if reason:
        return Outcome(fault, "stale", note=reason)
    status, output, seconds = run_tests(fault.tests, fault, xla_flags, timeout)
    if status == 1:
        return Outcome(fault, "caught", seconds, tail(output, 20))
    if status == 0:
        return Outcome(fault, "missed", seconds, tail(output, 8))
    what = "timeout" if status is None else f"pytest exit status {status}"
    return Outcome(fault, "error", seconds, f"{what}\n{tail(output)}")


def failing_tests(output: str) -> set[str]:
    """The node IDs pytest's summary reports as failed or in error."""
    pattern = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)
    return set(pattern.findall(output))


def covers(test: str, failed: str) -> bool:
    """Whether the test ID `test` names the failed node `failed` (itself, one of
    its parametrizations, or a whole file or class that holds it)."""
    return failed == test or failed.startswith((test + "[", test + "::"))


def run_baseline(
    faults: list[Fault], xla_flags: str, timeout: float
) -> tuple[Outcome, set[str]]:
    """The union of the faults' tests, once, on an unmodified copy: an outcome
    (`passed` or `baseline-fail`) and the failing node IDs."""
    tests = tuple(dict.fromkeys(test for fault in faults for test in fault.tests))
    status, output, seconds = run_tests(
        tests, None, xla_flags, timeout * max(1, len(faults)), stop_early=False
    )
    if status == 0:
        return Outcome(None, "passed", seconds), set()
    failed = failing_tests(output)
    what = "timeout" if status is None else f"pytest exit status {status}"
    note = f"{what}\n{tail(output)}"
    if status != 1 or not failed:
        # Nothing to tell the faults apart by: every fault is blocked.
        failed = set(tests)
    return Outcome(None, "baseline-fail", seconds, note), failed


# ---------------------------------------------------------------- the report


def table(rows: list[list[str]], markdown: bool) -> str:
    """`rows` (the first is the header) as a Markdown or a plain text table."""
    if markdown:
        lines = ["| " + " | ".join(rows[0]) + " |"]
        lines.append("|" + "|".join("---" for _ in rows[0]) + "|")
        for row in rows[1:]:
            cells = [cell.replace("|", "\\|") for cell in row]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


def short_test(test: str, markdown: bool) -> str:
    """A test ID without its `tests/` folder (in backquotes for Markdown)."""
    name = test.removeprefix("tests/")
    return f"`{name}`" if markdown else name


def result_label(outcome: Outcome) -> str:
    """The result column: the result, with what kind of catch or miss it is."""
    fault = outcome.fault
    label = outcome.result
    if fault is not None and fault.gap and outcome.result == "missed":
        label += " (known gap)"
    elif fault is not None and fault.gap and outcome.result == "caught":
        label += " (gap closed: drop its `gap`)"
    elif fault is not None and fault.learning_only and outcome.result == "caught":
        label += " (learning run)"
    return label


def report(outcomes: list[Outcome], markdown: bool) -> str:
    """The final table: fault, file, tests, result, seconds."""
    rows = [["fault", "file", "tests", "result", "seconds"]]
    separator = "<br>" if markdown else ", "
    for outcome in outcomes:
        fault = outcome.fault
        assert fault is not None
        file = fault.path.removeprefix("src/eqxrl/")
        rows.append(
            [
                fault.name,
                f"`{file}`" if markdown else file,
                separator.join(short_test(test, markdown) for test in fault.tests),
                result_label(outcome),
                f"{outcome.seconds:.1f}" if outcome.seconds else "-",
            ]
        )
    return table(rows, markdown)


def listing(faults: list[Fault], markdown: bool) -> str:
    """The `--list` table: each fault, its file, kind (unit test, learning run or
    known gap; STALE if its find string no longer applies), tests and why."""
    rows = [["fault", "file", "kind", "tests", "why"]]
    separator = "<br>" if markdown else ", "
    for fault in faults:
        kind = "gap" if fault.gap else "learning" if fault.learning_only else "unit"
        reason = stale_reason(fault)
        if reason:
            kind += f" STALE: {reason}"
        file = fault.path.removeprefix("src/eqxrl/")
        rows.append(
            [
                fault.name,
                f"`{file}`" if markdown else file,
                kind,
                separator.join(short_test(test, markdown) for test in fault.tests),
                fault.why + (f" [gap: {fault.gap}]" if fault.gap else ""),
            ]
        )
    return table(rows, markdown)


# ------------------------------------------------------------------ the driver


def select(names: list[str] | None, gaps: bool, skip_learning: bool) -> list[Fault]:
    """The faults to run: those named (every one, known gaps included), else every
    fault except known gaps (unless `gaps`) and learning runs (if `skip_learning`)."""
    if names:
        known = {fault.name: fault for fault in FAULTS}
        unknown = [name for name in names if name not in known]
        if unknown:
            raise SystemExit(
                f"fault_check: no fault named {', '.join(unknown)}; --list shows them."
            )
        return [known[name] for name in dict.fromkeys(names)]
    return [
        fault
        for fault in FAULTS
        if (gaps or not fault.gap) and not (skip_learning and fault.learning_only)
    ]


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run the baseline and the faults, print the report;
    the exit status (0: every fault caught, nothing stale, the baseline passes)."""
    parser = argparse.ArgumentParser(
        description="Apply deliberate one-line faults to a copy of eqxrl and check "
        "that the tests meant to catch each one fail.",
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these faults")
    parser.add_argument("--list", action="store_true", help="list faults, run nothing")
    parser.add_argument("--jobs", type=int, default=1, help="faults run in parallel")
    parser.add_argument("--markdown", action="store_true", help="Markdown tables")
    parser.add_argument(
        "--baseline", action="store_true", help="only run the tests unmodified"
    )
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the unmodified run"
    )
    parser.add_argument(
        "--gaps", action="store_true", help="also run the faults known to be missed"
    )
    parser.add_argument(
        "--skip-learning", action="store_true", help="leave out learning-run faults"
    )
    parser.add_argument(
        "--show-output",
        action="store_true",
        help="print the end of pytest's output for caught faults too",
    )
    parser.add_argument(
        "--timeout", type=float, default=1200.0, help="seconds per pytest run"
    )
    arguments = parser.parse_args(argv)
    if arguments.jobs < 1:
        parser.error("--jobs must be at least 1")
    if arguments.baseline and arguments.no_baseline:
        parser.error("--baseline and --no-baseline exclude each other")

    faults = select(arguments.only, arguments.gaps, arguments.skip_learning)
    if arguments.list:
        print(listing(faults, arguments.markdown))
        return 1 if any(stale_reason(fault) for fault in faults) else 0

    start = time.monotonic()
    outcomes: dict[str, Outcome] = {}
    runnable = []
    for fault in faults:
        reason = stale_reason(fault)
        if reason:
            outcomes[fault.name] = Outcome(fault, "stale", note=reason)
            print(f"stale: {fault.name}: {reason}", file=sys.stderr)
        else:
            runnable.append(fault)

    xla_flags = fast_compile_flags()
    print(f"XLA_FLAGS={xla_flags!r}", file=sys.stderr)
    baseline_ok = True
    if not arguments.no_baseline and runnable:
        count = len({test for fault in runnable for test in fault.tests})
        print(f"baseline: {count} tests on the unmodified copy ...", file=sys.stderr)
        baseline, failed = run_baseline(runnable, xla_flags, arguments.timeout)
        print(
            f"baseline: {baseline.result} ({baseline.seconds:.1f} s)", file=sys.stderr
        )
        if baseline.result != "passed":
            baseline_ok = False
            print(baseline.note, file=sys.stderr)
            blocked = [
                fault
                for fault in runnable
                if any(covers(test, node) for test in fault.tests for node in failed)
            ]
            for fault in blocked:
                outcomes[fault.name] = Outcome(fault, "baseline-fail")
            runnable = [fault for fault in runnable if fault not in blocked]
    if arguments.baseline:
        elapsed = time.monotonic() - start
        print(f"total wall time: {elapsed:.1f} s", file=sys.stderr)
        return 0 if baseline_ok and not outcomes else 1

    lock = threading.Lock()
    done = [0]

    def run(fault: Fault) -> Outcome:
        outcome = check_fault(fault, xla_flags, arguments.timeout)
        with lock:
            done[0] += 1
            print(
                f"[{done[0]}/{len(runnable)}] {outcome.result:7} {fault.name} "
                f"({outcome.seconds:.1f} s)",
                file=sys.stderr,
            )
            if outcome.note and (outcome.result != "caught" or arguments.show_output):
                print(textwrap.indent(outcome.note, "    "), file=sys.stderr)
        return outcome

    with concurrent.futures.ThreadPoolExecutor(arguments.jobs) as pool:
        for outcome in pool.map(run, runnable):
            assert outcome.fault is not None
            outcomes[outcome.fault.name] = outcome

    ordered = [outcomes[fault.name] for fault in faults]
    elapsed = time.monotonic() - start
    print(report(ordered, arguments.markdown))
    counts: dict[str, int] = {}
    for outcome in ordered:
        counts[outcome.result] = counts.get(outcome.result, 0) + 1
    summary = ", ".join(f"{count} {result}" for result, count in counts.items())
    print(f"\n{summary}; total wall time {elapsed:.1f} s")
    failures = [
        outcome
        for outcome in ordered
        if outcome.result != "caught"
        and not (outcome.fault and outcome.fault.gap and outcome.result == "missed")
    ]
    return 0 if baseline_ok and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
