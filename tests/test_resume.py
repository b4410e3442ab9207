"""Exact resume of PPO across processes, including after SIGKILL.

The reference is an uninterrupted run in this process. The other runs happen in
subprocesses that share a persistent compilation cache (so only the first of them
compiles), and resume through the `eqxrl` command line.
"""

import csv
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest

import eqxrl
from eqxrl.training._checkpoint import list_checkpoints
from toy_training import kill_after_two_checkpoints

# optax.adam computes `b1 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True

pytestmark = pytest.mark.subprocess

SRC = Path(__file__).parent.parent / "src"
SEED = 5
CHECKPOINT_EVERY = 2
PPO_OPTIONS = dict(
    num_envs=2,
    num_steps=16,
    total_timesteps=2 * 16 * 16,  # 16 iterations
    num_epochs=2,
    num_minibatches=2,
    hidden_sizes=(8,),
)
CLI_FLAGS = [
    "--num-envs=2",
    "--num-steps=16",
    "--total-timesteps=512",
    "--num-epochs=2",
    "--num-minibatches=2",
    "--hidden-sizes=8",
    "--chunk-size=4",
    f"--checkpoint-every={CHECKPOINT_EVERY}",
    "--eval-episodes=2",
    "--gif-episodes=0",
    f"--seed={SEED}",
]


def make_ppo():
    return eqxrl.PPO(env=eqxrl.envs.make("CartPole-v1"), **PPO_OPTIONS)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("jax-cache")


def environment(cache):
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]),
        JAX_COMPILATION_CACHE_DIR=str(cache),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        JAX_PLATFORMS="cpu",
    )
    return env


def cli(cache, out, *extra, env_id="CartPole-v1", flags=CLI_FLAGS):
    command = [sys.executable, "-m", "eqxrl", "train", env_id, *flags]
    return subprocess.run(
        [*command, "--out", str(out), *extra],
        env=environment(cache),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def reference():
    """The uninterrupted run, in this process."""
    trainer = eqxrl.Trainer(
        make_ppo(), chunk_size=4, eval_episodes=2, verbose=False, progress=False
    )
    state, metrics = trainer.fit(seed=SEED)
    assert int(state.iteration) == 16
    return state, metrics


def assert_same_parameters(state, reference_state):
    # Everything: parameters, Adam moments and count, env states, key, counter.
    a = jax.tree.leaves(eqx.filter(state, eqx.is_array))
    b = jax.tree.leaves(eqx.filter(reference_state, eqx.is_array))
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def csv_iterations(path):
    with open(path, newline="") as file:
        return [int(row["iteration"]) for row in csv.DictReader(file)]


def test_save_then_resume_in_a_new_process_is_exact(tmp_path, cache, reference):
    out = tmp_path / "run"
    trainer = eqxrl.Trainer(
        make_ppo(),
        out=str(out),
        chunk_size=4,
        checkpoint_every=CHECKPOINT_EVERY,
        eval_episodes=2,
        verbose=False,
        progress=False,
    )
    _, first = trainer.fit(seed=SEED, stop_at_iteration=6)
    assert [i for i, _ in list_checkpoints(out / "checkpoints")][-1] == 6
    result = cli(cache, out, "--resume")
    assert result.returncode == 0, result.stderr
    assert "resuming from" in result.stderr and "iteration 6" in result.stderr
    state, _ = eqxrl.load_checkpoint(out)
    assert int(state.iteration) == 16
    assert_same_parameters(state, reference[0])
    assert csv_iterations(out / "metrics.csv") == list(range(1, 17))
    np.testing.assert_array_equal(first["total_loss"], reference[1]["total_loss"][:6])
    assert (out / "policy.eqx").exists() and (out / "curve.png").exists()


# SIGKILL mid-run, then a resume: of a recurrent policy, whose training state holds
# every environment's GRU carry besides what a feed-forward one holds, and the
# resumed run must continue from the carries, not from fresh ones. (A feed-forward
# PPO run killed and resumed, its curriculum included, is in test_curriculum.py.)
RECURRENT_OPTIONS = dict(
    num_envs=2,
    num_steps=16,
    total_timesteps=2 * 16 * 8,  # 8 iterations
    num_epochs=1,
    num_minibatches=2,
)
RECURRENT_FLAGS = [
    "--network=gru",
    "--num-envs=2",
    "--num-steps=16",
    "--total-timesteps=256",
    "--num-epochs=1",
    "--num-minibatches=2",
    "--chunk-size=2",
    f"--checkpoint-every={CHECKPOINT_EVERY}",
    "--eval-episodes=2",
    "--gif-episodes=0",
    f"--seed={SEED}",
]
KILLED_RECURRENT_RUN = textwrap.dedent(
    """
    import sys, time
    import eqxrl
    from eqxrl.training import CSVLogger, AbstractLogger

    class Slow(AbstractLogger):
        def log(self, row):
            pass
        def flush(self):
            time.sleep(0.4)

    out = sys.argv[1]
    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("StatelessCartPole-v1"),
        network_factory=eqxrl.nn.GRUActorCritic.from_env,
        **{options},
    )
    trainer = eqxrl.Trainer(
        ppo, out=out, chunk_size=2, checkpoint_every={every}, eval_episodes=2,
        loggers=(CSVLogger(out + "/metrics.csv"), Slow()), progress=False,
    )
    trainer.fit(seed={seed})
    """
).format(options=repr(RECURRENT_OPTIONS), every=CHECKPOINT_EVERY, seed=SEED)


def test_sigkill_then_resume_of_a_recurrent_run_is_exact_hidden_states_included(
    tmp_path, cache
):
    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("StatelessCartPole-v1"),
        network_factory=eqxrl.nn.GRUActorCritic.from_env,
        **RECURRENT_OPTIONS,
    )
    trainer = eqxrl.Trainer(
        ppo, chunk_size=2, eval_episodes=2, verbose=False, progress=False
    )
    reference, _ = trainer.fit(seed=SEED)
    assert int(reference.iteration) == 8
    # Mid-episode carries: a resume from fresh ones would differ.
    assert np.any(np.asarray(reference.carry.hidden) != 0)

    out = tmp_path / "killed"
    out.mkdir()
    kill_after_two_checkpoints(KILLED_RECURRENT_RUN, out, environment(cache))
    saved = [i for i, _ in list_checkpoints(out / "checkpoints")]
    assert 8 not in saved and not (out / "policy.eqx").exists()  # killed mid-run
    logged = csv_iterations(out / "metrics.csv")
    # At most one checkpoint interval is lost.
    assert max(logged) - saved[-1] <= CHECKPOINT_EVERY

    result = cli(
        cache, out, "--resume", env_id="StatelessCartPole-v1", flags=RECURRENT_FLAGS
    )
    assert result.returncode == 0, result.stderr
    assert f"iteration {saved[-1]}" in result.stderr
    state, algorithm = eqxrl.load_checkpoint(out)
    assert algorithm.network_factory == eqxrl.nn.GRUActorCritic.from_env
    assert int(state.iteration) == 8
    np.testing.assert_array_equal(state.carry.hidden, reference.carry.hidden)
    assert_same_parameters(state, reference)
    # Rows logged after the checkpoint by the killed run were dropped, then redone.
    assert csv_iterations(out / "metrics.csv") == list(range(1, 9))
    assert eqxrl.load_policy(out / "policy.eqx").is_recurrent
