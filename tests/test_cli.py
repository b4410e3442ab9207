"""The `eqxrl` command line: train / eval / plot / list, config files, and clear
messages for bad input."""

import csv
import json
import os
import re
import runpy
import sys
import tomllib
from pathlib import Path

import jax
import jax.random as jr
import pytest

import eqxrl
from eqxrl.training import _device, auto_num_envs, config_fields, main
from toy_training import RandomSearch, corridor_v0


def run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def toy_train(out, *extra):
    return [
        "train",
        "Corridor-test-v0",
        "--algo",
        "random_search",
        "--iterations",
        "12",
        "--seed",
        "3",
        "--out",
        str(out),
        "--chunk-size",
        "4",
        "--eval-episodes",
        "2",
        *extra,
    ]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished toy run (checkpoints every 5 iterations), made through the CLI."""
    out = tmp_path_factory.mktemp("cli") / "run"
    assert main(toy_train(out, "--checkpoint-every", "5", "--log", "csv,jsonl")) == 0
    return out


def test_help_lists_every_hyperparameter_with_default_and_help(capsys):
    code, out, _ = run(capsys, "train", "--help")
    assert code == 0
    text = " ".join(out.split())  # undo argparse's line wrapping
    for field in config_fields(eqxrl.PPO):
        if field.kind in ("other", "environment"):
            continue
        flag = "--" + field.name.replace("_", "-")
        assert flag in text, flag
    assert "--gamma X discount factor (default: 0.99)" in text
    assert "--anneal-lr {true,false} decay the learning rate" in text
    assert "--hidden-sizes N,N,... widths of the default MLP" in text
    assert "--num-envs N|auto" in text
    for flag in ("--total-timesteps", "--seed", "--out", "--checkpoint-every"):
        assert flag in text
    assert "--resume" in text and "--config FILE" in text
    code, out, _ = run(capsys, "train", "--algo", "random_search", "--help")
    assert "--step-size X scale of the random steps (default: 0.1)" in " ".join(
        out.split()
    )


def test_train_writes_a_run(trained, capsys):
    names = {p.name for p in trained.iterdir()}
    assert {"checkpoints", "metrics.csv", "metrics.jsonl", "policy.eqx"} <= names
    assert {"curve.png", "config.json", "summary.json", "eval.gif"} <= names
    checkpoints = sorted(p.name for p in (trained / "checkpoints").iterdir())
    assert checkpoints == [f"checkpoint-{i:09d}.eqx" for i in (5, 10, 12)]
    config = json.loads((trained / "config.json").read_text())
    assert config["seed"] == 3
    assert config["algorithm"]["fields"]["iterations"] == 12
    assert config["algorithm"]["fields"]["env"]["environment"] == "Corridor-test-v0"
    assert config["trainer"]["chunk_size"] == 4
    # Without --resume, an existing run is never overwritten.
    before = (trained / "metrics.csv").read_text()
    code, _, err = run(capsys, *toy_train(trained))
    assert code == 1 and "already holds a run" in err and "--resume" in err
    assert (trained / "metrics.csv").read_text() == before


def test_train_prints_the_device(tmp_path, capsys):
    code, _, err = run(capsys, *toy_train(tmp_path / "r", "--iterations", "4"))
    assert code == 0
    # The device and the compile time once each, the files written at the end.
    assert err.count("on cpu") == 1 and err.count("compiled in") == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("wrote ")
    for name in ("checkpoints/", "config.json", "metrics.csv", "policy.eqx"):
        assert name in last


def test_train_prints_the_last_episodes_not_nan(tmp_path, capsys):
    """Episodes end every third iteration, none in the last: the console line and
    the summary show the mean of the last episodes to end (both seeds' windows
    pooled in the summary), while metrics.csv keeps the per-iteration NaN."""
    out = tmp_path / "run"
    argv = toy_train(out, "--iterations", "7", "--episodes-every", "3")
    code, text, err = run(capsys, *argv, "--num-seeds", "2")
    assert code == 0, err
    with open(out / "metrics.csv", newline="") as file:
        records = list(csv.DictReader(file))
    ended = {
        (int(r["iteration"]), int(r["seed"])): float(r["episode_return"])
        for r in records
        if int(r["episode_count"])
    }
    assert sorted(ended) == [(3, 0), (3, 1), (6, 0), (6, 1)]
    last = [r for r in records if r["iteration"] == "7"]
    assert [r["episode_return"] for r in last] == ["nan", "nan"]
    lines = text.splitlines()
    assert lines[0] == "seed 0 | iteration 1 | 10 steps | no episode ended yet"
    seed_1 = (ended[3, 1] + ended[6, 1]) / 2
    assert lines[1] == (
        f"seed 1 | iteration 7 | 70 steps | last 4 episodes: episode_return "
        f"{seed_1:.4g}, episode_length 5"
    )
    pooled = sum(ended.values()) / 4
    assert "recent_episodes 8, recent_episode_length 5, " in lines[2]
    assert f"recent_episode_return {pooled:.4g}" in lines[2]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["recent_episodes"] == 8
    assert summary["recent_episode_return"] == pytest.approx(pooled, rel=1e-6)


def test_resume_continues_and_refuses_other_hyperparameters(tmp_path, capsys):
    out = tmp_path / "run"
    algorithm = RandomSearch(env=eqxrl.envs.make("Corridor-test-v0"), iterations=12)
    trainer = eqxrl.Trainer(
        algorithm,
        out=str(out),
        chunk_size=4,
        checkpoint_every=4,
        verbose=False,
        progress=False,
    )
    trainer.fit(seed=3, stop_at_iteration=8)
    code, _, err = run(capsys, *toy_train(out, "--step-size", "0.5", "--resume"))
    assert code == 1
    assert "another configuration: step_size: 0.1 in the file, 0.5 now" in err
    code, _, err = run(capsys, *toy_train(out, "--resume"))
    assert code == 0, err
    assert "resuming from" in err and "iteration 8" in err
    reference, _ = algorithm.train(jr.key(3))
    state, _ = eqxrl.load_checkpoint(out)
    assert (state.weights == reference.weights).all()


def test_eval_checkpoint_policy_and_gif(trained, capsys, tmp_path):
    code, out, _ = run(capsys, "eval", str(trained), "--episodes", "5", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["episodes"] == 5 and report["iteration"] == 12
    assert report["checkpoint"].endswith("checkpoint-000000012.eqx")
    assert {"return_mean", "return_std", "return_p25", "return_p75"} <= set(report)
    gif = tmp_path / "episodes.gif"
    code, out, _ = run(
        capsys,
        "eval",
        str(trained / "policy.eqx"),
        "--gif",
        str(gif),
        "--episodes",
        "3",
    )
    assert code == 0 and gif.exists()
    assert "greedy episodes" in out and "return" in out and f"wrote {gif}" in out
    assert "policy.eqx (iteration 12)" in out
    code, out, _ = run(capsys, "eval", str(trained), "--stochastic")
    assert code == 0 and "stochastic" in out


def test_eval_errors(capsys, tmp_path):
    code, _, err = run(capsys, "eval", str(tmp_path / "missing.eqx"))
    assert code == 1 and "does not exist" in err
    bad = tmp_path / "bad.eqx"
    bad.write_bytes(b"hello")
    code, _, err = run(capsys, "eval", str(bad))
    assert code == 1 and "not an eqxrl checkpoint" in err
    algorithm = RandomSearch(env=eqxrl.envs.make("BlindCorridor-test-v0"), iterations=2)
    path = eqxrl.save_checkpoint(
        tmp_path / "cp.eqx", algorithm.init(jr.key(0)), algorithm
    )
    code, _, err = run(capsys, "eval", str(path), "--gif", str(tmp_path / "x.gif"))
    # Named by the environment, not by the TimeLimit around it.
    assert code == 1 and "BlindCorridor has no render" in err
    assert "TimeLimit" not in err
    assert not (tmp_path / "x.gif").exists()
    truncated = tmp_path / "truncated.eqx"
    truncated.write_bytes(path.read_bytes()[:-40])
    code, _, err = run(capsys, "eval", str(truncated))
    assert code == 1 and "truncated" in err


def test_plot_overlays_runs(trained, capsys, tmp_path):
    out = tmp_path / "cmp.png"
    code, stdout, _ = run(
        capsys, "plot", str(trained), str(trained), "--out", str(out), "--labels", "a,b"
    )
    assert code == 0 and out.read_bytes().startswith(b"\x89PNG")
    code, _, err = run(capsys, "plot", str(tmp_path / "nothing"))
    assert code == 1 and "No metrics" in err
    code, _, err = run(capsys, "plot", str(trained), "--metric", "nope")
    assert code == 1 and "no column 'nope'" in err


@pytest.mark.slow
def test_recurrent_network_run_is_named_and_evaluates(capsys, tmp_path):
    """`--network gru` trains PPO with a GRUActorCritic; config.json and the
    checkpoints name its factory, so the run re-loads on its own, and `eqxrl eval`
    (with a GIF) acts with the policy's carry."""
    out = tmp_path / "run"
    argv = [
        "train",
        "StatelessCartPole-v1",
        "--network",
        "gru",
        "--num-envs=2",
        "--num-steps=8",
        "--total-timesteps=32",
        "--num-minibatches=1",
        "--num-epochs=1",
        "--chunk-size=2",
        "--eval-episodes=2",
        "--gif-episodes=1",
        "--log=csv",
        "--out",
        str(out),
    ]
    # optax.adam computes `b1 ** count` with an int32 count (strict promotion
    # refuses it; test_cli's other runs train the toy algorithm).
    with jax.numpy_dtype_promotion("standard"):
        code, _, err = run(capsys, *argv)
    assert code == 0, err
    named = {"callable": "eqxrl.nn._recurrent:GRUActorCritic.from_env"}
    config = json.loads((out / "config.json").read_text())
    assert config["algorithm"]["fields"]["network_factory"] == named
    header = eqxrl.training.read_checkpoint_header(out / "policy.eqx")
    assert header["config"]["fields"]["network_factory"] == named
    state, algorithm = eqxrl.load_checkpoint(out)
    assert algorithm.network_factory == eqxrl.nn.GRUActorCritic.from_env
    assert state.carry.hidden.shape == (2, 256)
    policy = eqxrl.load_policy(out)
    assert policy.is_recurrent and policy.initial_carry().hidden.shape == (256,)
    gif = tmp_path / "episodes.gif"
    # As many episodes as the run's own evaluation: the same compiled program.
    code, text, err = run(
        capsys, "eval", str(out), "--episodes", "2", "--gif", str(gif), "--json"
    )
    assert code == 0, err
    assert json.loads(text)["episodes"] == 2 and gif.exists()
    assert (out / "eval.gif").exists()


@pytest.mark.parametrize(
    "argv, status, message",
    [
        (["train", "CartPole-v1", "--gama", "0.9"], 2, "did you mean --gamma"),
        (
            ["train", "CartPole-v1", "--gamma", "abc"],
            2,
            "cannot read 'abc' as a number",
        ),
        (["train", "CartPole-v1", "--num-envs", "4.5"], 2, "as an integer"),
        (["train", "CartPole-v1", "--anneal-lr", "maybe"], 2, "true/false"),
        (["train", "CartPole-v1", "--gamma", "2"], 1, "gamma=2.0 must lie in"),
        (["train", "CartPole-v1", "--num-minibatches", "3"], 1, "not divisible"),
        (["train", "Nope-v0"], 1, "Unknown environment 'Nope-v0'"),
        (["train", "--algo", "a2c", "CartPole-v1"], 1, "Unknown algorithm 'a2c'"),
        (["train"], 2, "ENV is required"),
        (
            ["train", "CartPole-v1", "--log", "csv,mlflow"],
            1,
            "unknown backend(s) mlflow",
        ),
        (["train", "CartPole-v1", "--devices", "99"], 1, "--devices 99: there are"),
        (["train", "CartPole-v1", "--devices", "two"], 1, "a number of devices or"),
        (
            ["train", "CartPole-v1", "--devices", "1", "--split", "seeds"],
            1,
            "--split seeds needs --num-seeds",
        ),
        (["train", "CartPole-v1", "--split", "envs"], 1, "--split needs --devices"),
        (
            ["train", "CartPole-v1", "--algo", "dqn", "--network", "gru"],
            1,
            "--network gru: recurrent networks are actor-critics for PPO",
        ),
        (
            ["train", "CartPole-v1", "--network", "lstm", "--hidden-sizes", "8"],
            1,
            "--network lstm: --hidden-sizes shape the default (mlp) network only",
        ),
        (
            ["train", "CartPole-v1", "--algo", "pqn", "--network", "gru"],
            1,
            "--network gru: PQN's recurrent network (PQN-RNN) is a GRU after",
        ),
        (["train", "CartPole-v1", "--network", "rnn"], 2, "invalid choice: 'rnn'"),
        (["trian"], 2, "did you mean train"),
        (["eval"], 2, "required: checkpoint"),
    ],
)
def test_bad_input_has_clear_messages(capsys, tmp_path, argv, status, message):
    argv = [*argv, "--out", str(tmp_path / "run")] if argv[:1] == ["train"] else argv
    code, _, err = run(capsys, *argv)
    assert code == status
    assert message in err
    assert not (tmp_path / "run" / "checkpoints").exists()  # nothing was started


def test_unwritable_output_folder(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = run(capsys, *toy_train(blocker / "run"))
    assert code == 1 and "Cannot write to the output folder" in err


@pytest.mark.parametrize("suffix", [".toml", ".yaml"])
def test_config_files(capsys, tmp_path, suffix):
    if suffix == ".toml":
        text = (
            'env = "Corridor-test-v0"\nalgo = "random_search"\niterations = 6\n'
            "step-size = 0.5\n\n[random_search]\nwidths = [2, 2]\n\n[trainer]\n"
            "chunk_size = 3\n"
        )
    else:
        text = (
            "algo: random_search\niterations: 6\nstep-size: 0.5\n"
            "widths: [2, 2]\ntrainer:\n  chunk_size: 3\n"
        )
    config = tmp_path / f"run{suffix}"
    config.write_text(text)
    out = tmp_path / "run"
    env = [] if suffix == ".toml" else ["Corridor-test-v0"]  # the TOML names it
    argv = ["train", *env, "--config", str(config), "--out", str(out)]
    code, _, err = run(capsys, *argv, "--step-size", "0.25", "--eval-episodes", "1")
    assert code == 0, err
    written = json.loads((out / "config.json").read_text())
    fields = written["algorithm"]["fields"]
    assert fields["iterations"] == 6 and fields["widths"] == [2, 2]
    assert fields["step_size"] == 0.25  # the flag overrides the file
    assert written["trainer"]["chunk_size"] == 3


def test_bad_config_files(capsys, tmp_path):
    def check(text, message, suffix=".toml"):
        path = tmp_path / f"c{suffix}"
        path.write_text(text)
        code, _, err = run(
            capsys,
            "train",
            "Corridor-test-v0",
            "--config",
            str(path),
            "--out",
            str(tmp_path / "run"),
        )
        assert code == 1, err
        assert message in err

    check(
        'algo = "random_search"\nstep_sise = 1.0\n',
        "step_sise (did you mean step_size?)",
    )
    check('algo = "random_search"\niterations = "many"\n', "cannot read 'many'")
    check("iterations = [\n", "cannot be read")
    check("x = 1", "unknown format '.ini'", suffix=".ini")
    code, _, err = run(capsys, "train", "CartPole-v1", "--config", "missing.toml")
    assert code == 1 and "does not exist" in err


def _cpu_cap() -> int:
    """`num_envs="auto"`'s cap on CPU: 4 per core, between 4 and 64, a power of 2."""
    cap = min(max(4 * len(os.sched_getaffinity(0)), 4), 64)
    return 1 << (cap.bit_length() - 1)


def _chosen(err: str) -> int:
    match = re.search(r"--num-envs auto: (\d+) \(its compiled program needs", err)
    assert match, err
    return int(match.group(1))


def test_num_envs_auto_and_env_options(capsys, tmp_path):
    out = tmp_path / "run"
    code, _, err = run(
        capsys,
        *toy_train(out, "--iterations", "4"),
        "--num-envs",
        "auto",
        "--env-option",
        "max_episode_steps=7",
    )
    assert code == 0, err
    # The toy's program does not grow with num_envs: the cap fits.
    assert _chosen(err) == _cpu_cap()
    fields = json.loads((out / "config.json").read_text())["algorithm"]["fields"]
    assert fields["num_envs"] == _cpu_cap()
    assert fields["env"] == {
        "environment": "Corridor-test-v0",
        "kwargs": {"max_episode_steps": 7},
    }
    _, algorithm = eqxrl.load_checkpoint(out)
    assert algorithm.env.max_episode_steps == 7
    code, out_text, _ = run(capsys, "eval", str(out), "--json", "--episodes", "2")
    assert json.loads(out_text)["length_mean"] <= 7


def _tiny_ppo(num_envs: int) -> eqxrl.PPO:
    return eqxrl.PPO(
        env=eqxrl.envs.make("CartPole-v1"),
        num_envs=num_envs,
        num_steps=8,
        total_timesteps=64,
        hidden_sizes=(8,),
        num_minibatches=1,
        num_epochs=1,
    )


def _compiled_bytes(algorithm) -> int:
    """The device memory of `algorithm.train`, read here from `memory_analysis()`."""
    analysis = algorithm.lower(jr.key(0)).compile().compiled.memory_analysis()
    return (
        analysis.argument_size_in_bytes
        + analysis.output_size_in_bytes
        + analysis.temp_size_in_bytes
        + analysis.generated_code_size_in_bytes
        - analysis.alias_size_in_bytes
    )


@pytest.mark.slow
def test_auto_num_envs_picks_the_largest_power_of_two_that_fits(monkeypatch):
    """With the free memory between the programs of 2 and 4 environments (as
    `memory_analysis()` measures them), the pick is 2: not the cap (4), which a
    pick blind to memory would give."""
    # Each size's program is measured (compiled) once, not once per pick below:
    # the picks differ in the memory they are given, not in the programs.
    measure = _device._program_bytes
    measured = {}

    def program_bytes(algorithm, num_seeds=None):
        size = (algorithm.num_envs, num_seeds)
        if size not in measured:
            measured[size] = measure(algorithm, num_seeds)
        return measured[size]

    monkeypatch.setattr(_device, "_program_bytes", program_bytes)
    # optax.adam computes `b1 ** count` with an int32 count (strict promotion
    # refuses it).
    with jax.numpy_dtype_promotion("standard"):
        needs = {n: _compiled_bytes(_tiny_ppo(n)) for n in (2, 4)}
        assert needs[2] < needs[4]

        def pick(available, margin=1.0, max_num_envs=4):
            return auto_num_envs(
                _tiny_ppo,
                margin=margin,
                max_num_envs=max_num_envs,
                available_bytes=available,
            )

        assert pick((needs[2] + needs[4]) // 2) == 2
        assert pick(needs[2]) == 2
        assert pick(needs[4] - 1) == 2
        assert pick(needs[4]) == 4  # the cap
        assert pick(10 * needs[4]) == 4
        assert pick(10 * needs[4], max_num_envs=3) == 2  # a power of two below it
        # The margin is the fraction of the free memory a program may use.
        assert pick(2 * needs[4], margin=0.5) == 4
        assert pick(2 * needs[4] - 2, margin=0.5) == 2


def test_auto_num_envs_refuses_a_config_that_cannot_fit():
    with jax.numpy_dtype_promotion("standard"):
        need = _compiled_bytes(_tiny_ppo(1))
        with pytest.raises(ValueError) as error:
            auto_num_envs(_tiny_ppo, margin=1.0, available_bytes=need - 1)
        message = str(error.value)
        assert "\n" not in message
        assert f"({need:,} bytes)" in message  # needed
        assert f"({need - 1:,} bytes) is free on cpu" in message  # available
        assert "num_envs=1" in message
        # With the default margin (80%), exactly the program's bytes do not fit.
        with pytest.raises(ValueError, match=r"80% of it usable: margin=0\.8"):
            auto_num_envs(_tiny_ppo, available_bytes=need)
    # Candidates the algorithm refuses are skipped; when it refuses all, its error.
    with pytest.raises(ValueError, match="less than one iteration"):
        auto_num_envs(lambda n: _tiny_ppo(1024 * n), max_num_envs=4)


@pytest.mark.parametrize(
    ("bytes_of", "most_compilations"),
    [
        # Affine: the line through two sizes is exact, a third and fourth confirm.
        (lambda n: 1_000 + 100 * n, 4),
        (lambda n: 7_000 + 1_100 * n + 300 * (n > 1), 4),  # nearly affine
        (lambda n: 1_000 + 3 * n * n, 8),  # convex: guesses low
        (lambda n: 1_000 + int(500 * n**0.5), 6),  # concave: guesses high
        (lambda n: 1_000 + 100 * n if n < 16 else None, 6),  # >= 16: compile OOM
    ],
    ids=["affine", "nearly_affine", "convex", "concave", "compile_out_of_memory"],
)
def test_auto_num_envs_search_finds_what_compiling_every_size_finds(
    monkeypatch, bytes_of, most_compilations
):
    """The pick (from few compilations) is the largest power of two whose program
    fits, as compiling all of them would find."""
    compiled = []

    def program_bytes(algorithm, num_seeds=None):
        compiled.append(algorithm.num_envs)
        bytes_ = bytes_of(algorithm.num_envs)
        if bytes_ is None:
            raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while compiling")
        return bytes_

    monkeypatch.setattr(_device, "_program_bytes", program_bytes)

    def toy(num_envs):
        return RandomSearch(env=corridor_v0(), num_envs=num_envs)

    sizes = [2**i for i in range(11)]
    boundaries = [bytes_of(n) for n in sizes if bytes_of(n) is not None]
    for available in sorted({b + d for b in boundaries for d in (-1, 0, 1)}):
        compiled.clear()
        fitting = [n for n in sizes if (bytes_of(n) or available + 1) <= available]
        if not fitting:
            with pytest.raises(ValueError, match="the smallest program"):
                auto_num_envs(
                    toy, margin=1.0, max_num_envs=1024, available_bytes=available
                )
            continue
        pick = auto_num_envs(
            toy, margin=1.0, max_num_envs=1024, available_bytes=available
        )
        assert pick == max(fitting), available
        assert len(compiled) == len(set(compiled)) <= most_compilations, compiled


def test_auto_num_envs_reads_the_free_memory(monkeypatch):
    device = jax.local_devices()[0]
    assert _device._free_bytes(device) > 0  # on CPU: the host's available memory

    def toy(num_envs):
        return RandomSearch(env=corridor_v0(), iterations=2, num_envs=num_envs)

    assert auto_num_envs(toy) == _cpu_cap()
    assert auto_num_envs(toy, num_seeds=3, max_num_envs=16) == 16
    monkeypatch.setattr(_device, "_free_bytes", lambda device: None)
    with pytest.raises(ValueError, match="free memory of cpu cannot be read"):
        auto_num_envs(toy)
    assert auto_num_envs(toy, available_bytes=2**30) == _cpu_cap()


@pytest.mark.slow
def test_cli_num_envs_auto_trains_ppo(capsys, tmp_path):
    """`--num-envs auto` on CartPole PPO: 8 environments would leave
    total_timesteps=32 less than one iteration, so the pick is 4."""
    out = tmp_path / "run"
    with jax.numpy_dtype_promotion("standard"):
        code, _, err = run(
            capsys,
            "train",
            "CartPole-v1",
            "--num-envs=auto",
            "--num-steps=8",
            "--total-timesteps=32",
            "--hidden-sizes=8",
            "--num-minibatches=1",
            "--num-epochs=1",
            "--eval-episodes=1",
            "--log=csv",
            "--out",
            str(out),
        )
    assert code == 0, err
    assert _chosen(err) == min(4, _cpu_cap())
    fields = json.loads((out / "config.json").read_text())["algorithm"]["fields"]
    assert fields["num_envs"] == min(4, _cpu_cap())


def test_cli_num_envs_auto_refuses_in_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(_device, "_free_bytes", lambda device: 100)
    code, _, err = run(
        capsys, *toy_train(tmp_path / "run", "--iterations", "4"), "--num-envs=auto"
    )
    assert code == 1
    assert err.count("\n") == 1
    assert err.startswith("eqxrl train: error: num_envs='auto': the smallest program")
    assert "needs" in err and "but 100 bytes is free on cpu" in err


def test_an_algorithm_brings_its_own_flags(capsys, monkeypatch, tmp_path):
    """An option registered with an algorithm is a flag of `eqxrl train`, in its
    `--help` and applied by the option's hook, though the command line's modules
    never name it (as PPO's `--network`)."""
    from eqxrl.algorithms import _registry

    # Registered for this test only.
    monkeypatch.setattr(_registry, "_ALGORITHMS", dict(_registry._ALGORITHMS))
    monkeypatch.setattr(_registry, "_OPTIONS", dict(_registry._OPTIONS))

    def configure(value, algorithm_class, options):
        if value == "sour":
            raise ValueError(f"--flavor sour: {algorithm_class.__name__} is sweet.")
        return options

    flavor = eqxrl.algorithms.CommandLineOption(
        "--flavor",
        help="how the search tastes",
        choices=("sweet", "sour"),
        configure=configure,
    )
    eqxrl.algorithms.register_algorithm(
        "flavored_search", RandomSearch, command_line_options=(flavor,)
    )
    code, out, _ = run(capsys, "train", "--algo", "flavored_search", "--help")
    assert code == 0
    assert "--flavor {sweet,sour}" in out and "how the search tastes" in out
    argv = ["Corridor-test-v0", "--algo", "flavored_search", "--out", str(tmp_path)]
    code, _, err = run(capsys, "train", *argv, "--flavor", "sour")
    assert code == 1
    assert err == "eqxrl train: error: --flavor sour: RandomSearch is sweet.\n"


def test_list_and_entry_points(capsys, monkeypatch):
    code, out, _ = run(capsys, "list")
    assert code == 0 and "ppo" in out and "CartPole-v1" in out
    code, out, _ = run(capsys)
    assert code == 2 and "eqxrl train ENV" in out
    pyproject = tomllib.loads(
        (Path(__file__).parent.parent / "pyproject.toml").read_text()
    )
    assert pyproject["project"]["scripts"]["eqxrl"] == "eqxrl.training:main"
    monkeypatch.setattr(sys, "argv", ["eqxrl", "list"])
    monkeypatch.delitem(sys.modules, "eqxrl.__main__", raising=False)
    with pytest.raises(SystemExit) as exit:
        runpy.run_module("eqxrl", run_name="__main__")
    assert exit.value.code == 0
