"""Curriculum: resets read a difficulty that advances with each environment's
successes inside the compiled loop, survives auto-resets, and resumes exactly
(after SIGKILL too)."""

import os
import re
import runpy
import textwrap
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.envs import (
    ENV_METRICS,
    AutoReset,
    CartPole,
    Curriculum,
    CurriculumProgress,
    EpisodeStatistics,
    TimeLimit,
)
from eqxrl.training._checkpoint import list_checkpoints
from toy_training import kill_after_two_checkpoints

# PPO runs optax's Adam (a float raised to an int32 count).
STANDARD_DTYPE_PROMOTION = True

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "examples" / "curriculum_cartpole.py"
EXAMPLE_FUNCTIONS = runpy.run_path(str(EXAMPLE))
reset_fn = EXAMPLE_FUNCTIONS["reset_fn"]  # initial range +-(0.05 + 0.15 difficulty)
make_env = EXAMPLE_FUNCTIONS["make_env"]

TINY_PPO = dict(
    num_envs=4,
    num_steps=32,
    total_timesteps=4 * 32 * 8,  # 8 iterations
    num_epochs=1,
    num_minibatches=2,
    hidden_sizes=(8,),
)
SEED = 3


def curriculum_of(state) -> CurriculumProgress:
    """The curriculum progress inside a training or wrapper state."""
    found = [
        leaf
        for leaf in jax.tree.leaves(
            state, is_leaf=lambda x: isinstance(x, CurriculumProgress)
        )
        if isinstance(leaf, CurriculumProgress)
    ]
    (progress,) = found
    return progress


def test_reset_reads_the_difficulty():
    keys = jr.split(jr.key(0), 256)
    for difficulty, bound in ((0.0, 0.05), (1.0, 0.2)):
        env = Curriculum(
            TimeLimit(CartPole(), 10), reset_fn, initial_difficulty=difficulty
        )
        states, timesteps = jax.vmap(env.reset)(keys)
        physics = np.abs(np.asarray(states.env_state.env_state.physics))
        assert physics.max() <= bound and physics.max() > 0.9 * bound
        np.testing.assert_array_equal(
            timesteps.extras[ENV_METRICS]["curriculum/difficulty"],
            np.full(256, difficulty, np.float32),
        )
        progress = curriculum_of(states)
        assert progress.episode_count.tolist() == [0] * 256


def run_episodes(env, num_steps):
    """`num_steps` alternating pushes through `AutoReset`, in one compiled scan: the
    curriculum progress after every step."""

    @eqx.filter_jit
    def run(env, key):
        state, _ = env.reset(key)

        def body(state, inputs):
            action, key = inputs
            state, _ = env.step(state, action, key)
            return state, curriculum_of(state)

        actions = jnp.arange(num_steps, dtype=jnp.int32) % 2
        keys = jr.split(jr.fold_in(key, 1), num_steps)
        return jax.lax.scan(body, state, (actions, keys))[1]

    return run(env, jr.key(0))


@pytest.mark.parametrize("lazy_reset", [True, False])
def test_difficulty_advances_with_successes_and_survives_auto_resets(lazy_reset):
    """Episodes of 3 steps (a pole does not fall in 3), all successes; every 2
    episodes the difficulty grows by 0.25. With the CPU's lazy reset (a `lax.cond`)
    and with the reset computed at every step and selected (as off the CPU)."""
    curriculum = Curriculum(
        TimeLimit(CartPole(), 3),
        reset_fn,
        window=2,
        success_threshold=1.0,
        increment=0.25,
    )
    with eqxrl.algorithms.cpu_speed_tricks(lazy_reset):
        progress = run_episodes(AutoReset(EpisodeStatistics(curriculum)), 12)
    expected = [0.0] * 5 + [0.25] * 6 + [0.5]
    np.testing.assert_array_equal(progress.difficulty, np.float32(expected))
    assert progress.step_count.tolist() == list(range(1, 13))
    assert progress.episode_count.tolist() == [0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4]
    assert progress.success_count.tolist() == progress.episode_count.tolist()
    assert progress.window_episodes.tolist() == [0, 0, 1, 1, 1, 0] * 2


def test_composes_with_domain_randomization():
    """Parameters resampled every episode around a curriculum that keeps its
    progress, through every wrapper in between."""

    def sample_fn(key):
        return {"gravity": jr.uniform(key, (), minval=5.0, maxval=15.0)}

    curriculum = Curriculum(
        TimeLimit(CartPole(), 3),
        reset_fn,
        window=2,
        success_threshold=1.0,
        increment=0.25,
    )
    env = AutoReset(
        EpisodeStatistics(eqxrl.envs.DomainRandomization(curriculum, sample_fn))
    )

    @eqx.filter_jit
    def run(env, key):
        state, _ = env.reset(key)

        def body(state, inputs):
            action, key = inputs
            state, timestep = env.step(state, action, key)
            return state, timestep.extras[ENV_METRICS]

        actions = jnp.arange(12, dtype=jnp.int32) % 2
        keys = jr.split(jr.fold_in(key, 1), 12)
        return jax.lax.scan(body, state, (actions, keys))

    state, metrics = run(env, jr.key(0))
    assert float(curriculum_of(state).difficulty) == 0.5
    gravity = np.asarray(metrics["domain_parameters/gravity"])
    # One draw per 3-step episode (extras of an episode's last step are its own).
    assert len(np.unique(gravity)) == 4
    assert (gravity[0::3] == gravity[2::3]).all()
    difficulty = np.asarray(metrics["curriculum/difficulty"])
    np.testing.assert_array_equal(difficulty[[4, 5, 11]], np.float32([0, 0.25, 0.5]))


def test_no_advance_without_successes():
    curriculum = Curriculum(
        TimeLimit(CartPole(), 3),
        reset_fn,
        success_fn=lambda timestep: jnp.bool_(False),
        window=1,
        success_threshold=0.5,
    )
    progress = run_episodes(AutoReset(curriculum), 12)
    assert progress.difficulty.tolist() == [0.0] * 12
    assert progress.episode_count[-1] == 4 and progress.success_count[-1] == 0


def test_configuration_errors_say_what_is_valid():
    with pytest.raises(ValueError, match="window=0 must be an int of at least 1"):
        Curriculum(CartPole(), reset_fn, window=0)
    with pytest.raises(ValueError, match="success_threshold"):
        Curriculum(CartPole(), reset_fn, success_threshold=1.5)
    with pytest.raises(ValueError, match="initial_difficulty"):
        Curriculum(CartPole(), reset_fn, initial_difficulty=-0.1)


def test_check_environment_accepts_it():
    eqxrl.envs.check_environment(make_env(10))


def test_difficulty_advances_inside_one_compiled_train():
    traces = []

    def counting_reset_fn(cartpole, key, progress):
        traces.append(None)  # runs only while tracing
        return reset_fn(cartpole, key, progress)

    env = Curriculum(
        TimeLimit(CartPole(), 10),
        counting_reset_fn,
        window=2,
        success_threshold=0.5,
        increment=0.1,
    )
    ppo = eqxrl.PPO(env=env, **TINY_PPO)

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def train(ppo, key):
        return ppo.train(key)

    state, metrics = train(ppo, jr.key(0))
    traced = len(traces)
    other_state, _ = train(ppo, jr.key(1))
    assert len(traces) == traced > 0  # one trace for two runs
    difficulty = np.asarray(metrics["curriculum/difficulty"])
    assert difficulty.shape == (8,)
    assert difficulty[0] < difficulty[-1] and (np.diff(difficulty) >= 0).all()
    for final in (state, other_state):
        progress = curriculum_of(final.env_state)
        assert (np.asarray(progress.difficulty) > 0).all()
        assert progress.step_count.tolist() == [8 * 32] * 4


def assert_same_state(state, reference):
    a = jax.tree.leaves(eqx.filter(state, eqx.is_array))
    b = jax.tree.leaves(eqx.filter(reference, eqx.is_array))
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jr.key_data(x), jr.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def make_ppo():
    return eqxrl.PPO(env=make_env(10), **TINY_PPO)


def make_trainer(out=None):
    return eqxrl.Trainer(
        make_ppo(),
        out=None if out is None else str(out),
        chunk_size=2,
        checkpoint_every=2,
        eval_episodes=0,
        verbose=False,
        progress=False,
    )


@pytest.fixture(scope="module")
def reference():
    """An uninterrupted run: the final state and every iteration's metrics."""
    state, metrics = make_trainer().fit(seed=SEED)
    difficulty = metrics["curriculum/difficulty"]
    # The curriculum moves during the run, so a resume must restore it.
    assert 0 < difficulty[3] < difficulty[-1]
    return state, metrics


@pytest.mark.slow
def test_stop_then_resume_is_bit_exact_curriculum_included(tmp_path, reference):
    out = tmp_path / "run"
    _, first = make_trainer(out).fit(seed=SEED, stop_at_iteration=4)
    state, rest = make_trainer(out).fit(seed=SEED, resume=True)
    assert_same_state(state, reference[0])
    np.testing.assert_array_equal(
        curriculum_of(state.env_state).difficulty,
        curriculum_of(reference[0].env_state).difficulty,
    )
    for name, values in reference[1].items():
        np.testing.assert_array_equal(
            np.concatenate([first[name], rest[name]]), values, err_msg=name
        )


KILLED_RUN = textwrap.dedent(
    """
    import runpy, sys, time
    import eqxrl
    from eqxrl.training import CSVLogger, AbstractLogger

    class Slow(AbstractLogger):
        # Slow enough between chunks that the parent can kill mid-run.
        def log(self, row):
            pass
        def flush(self):
            time.sleep(0.5)

    out = sys.argv[1]
    make_env = runpy.run_path({example!r})["make_env"]
    ppo = eqxrl.PPO(env=make_env(10), **{options!r})
    trainer = eqxrl.Trainer(
        ppo, out=out, chunk_size=2, checkpoint_every=2, eval_episodes=0,
        loggers=(CSVLogger(out + "/metrics.csv"), Slow()), progress=False,
    )
    trainer.fit(seed={seed})
    """
).format(example=str(EXAMPLE), options=TINY_PPO, seed=SEED)


@pytest.mark.subprocess
def test_sigkill_then_resume_is_bit_exact_curriculum_included(tmp_path, reference):
    out = tmp_path / "killed"
    out.mkdir()
    environment = dict(os.environ)
    environment.update(
        PYTHONPATH=os.pathsep.join(
            [str(ROOT / "src"), environment.get("PYTHONPATH", "")]
        ),
        JAX_PLATFORMS="cpu",
    )
    kill_after_two_checkpoints(KILLED_RUN, out, environment)
    saved = [iteration for iteration, _ in list_checkpoints(out / "checkpoints")]
    assert 8 not in saved and not (out / "policy.eqx").exists()  # killed mid-run

    state, rest = make_trainer(out).fit(seed=SEED, resume=True)
    assert_same_state(state, reference[0])
    resumed_from = 8 - len(rest["curriculum/difficulty"])
    assert resumed_from == saved[-1]
    for name, values in reference[1].items():
        np.testing.assert_array_equal(rest[name], values[resumed_from:], err_msg=name)
    # The CSV holds every iteration once, the killed run's rows after the
    # checkpoint dropped and redone.
    logged = eqxrl.training.read_metrics(out)
    assert logged["iteration"].tolist() == list(range(1, 9))
    np.testing.assert_allclose(
        logged["curriculum/difficulty"], reference[1]["curriculum/difficulty"]
    )


def test_example_runs_and_the_difficulty_grows(run_script):
    output = run_script(
        EXAMPLE,
        "--total-timesteps",
        "8192",
        "--num-envs",
        "8",
        "--num-steps",
        "64",
        "--max-episode-steps",
        "20",
    )
    curve = re.findall(r"steps: difficulty ([0-9.]+), return", output)
    assert len(curve) >= 2, output
    assert float(curve[-1]) > float(curve[0]), output
    final = re.search(r"final difficulty per environment: (.*)$", output, re.M)
    assert final is not None, output
    values = [float(value) for value in final.group(1).split()]
    assert len(values) == 8 and max(values) > 0.0, output
