"""Every benchmark script runs end to end, at its smallest settings, and prints its
figures; and the benchmarks use eqxrl's public API only.

Nothing is timed or compared here (the machine running the tests is shared): a run
only has to finish and print a positive, finite number where the script prints its
measurement.

The scripts run in this process, as `python benchmarks/<name>.py <arguments>` would
run them (to share imports: a fresh interpreter costs seconds), under the test
suite's rank checks and with warnings as errors. None sets JAX flags of its own;
the two that need processes of their own (`scaling.py`'s device counts,
`snake_memory.py`'s memory figures) start them themselves.
"""

import ast
import json
import math
import re
import sys
from pathlib import Path

import pytest

# The benchmarks are user code: standard dtype promotion (optax's Adam, gymnax).
STANDARD_DTYPE_PROMOTION = True

ROOT = Path(__file__).parent.parent
BENCHMARKS = ROOT / "benchmarks"

NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?)"

# Per script: the arguments of a run of seconds (the same code paths as `make bench`,
# with tiny sizes), the figures it must print (a regular expression per figure, its
# group a number) and the packages it needs beyond the dev venv's.
SMOKE_RUNS = {
    "bench_check.py": (
        # Against HEAD (a CI clone has no upstream), toy sizes, one pair.
        # (One workload: the others are the smoke runs of the scripts it imports.)
        # Over 10 s: two fresh interpreters (the tree's and the base's), each
        # importing JAX and compiling Snake's loop, are what the script compares.
        ["--base", "HEAD", "--quick", "--pairs", "1", "--repeats", "1"]
        + ["--workloads", "snake"],
        [rf"^\s*snake\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}x\s+{NUMBER}x"],
        [],
    ),
    "env_throughput.py": (
        ["--num-envs", "64", "--steps", "100", "--repeats", "1", "--min-work", "1000"],
        [rf"^\s*64\s+100\s+{NUMBER}\s+{NUMBER}\s"],  # best and median steps/s
        [],
    ),
    "ppo_cartpole.py": (
        # One seed and vmapped seeds (`wide` is `contract` with other numbers).
        ["--configs", "contract", "seeds8", "--total-timesteps", "4096"]
        + ["--repeats", "1"],
        [
            rf"^\s*{name}\s+\d+\s+\d+ x \d+\s+\d+\s+{NUMBER}\s"  # median steps/s
            for name in ("contract", "seeds8")
        ],
        [],
    ),
    "trainer_overhead.py": (
        ["--total-timesteps", "2048", "--rounds", "1"],  # 4 iterations
        [
            rf"compile train:\s+{NUMBER} s",
            r"warm-up train\s+bit-identical to train: True",
            rf"warm-up trainer16\s+bit-identical to train: True \(chunk program "
            rf"compiled in {NUMBER} s\)",
            rf"warm-up trainer64\s+bit-identical to train: True \(chunk program "
            rf"compiled in {NUMBER} s\)",
            r"warm-up trainer16\+files\s+bit-identical to train: True",
        ]
        + [
            rf"^\s*{name}\s+median\s+{NUMBER}\s+best"
            for name in ("train", "trainer16", "trainer64", r"trainer16\+files")
        ],
        [],
    ),
    "gymnasium_bridge.py": (
        ["--pairs", "1", "--num-envs", "2", "--rollout-steps", "64"]
        + ["--iterations", "1"],
        [
            rf"plain Python loop over gymnasium CartPole-v1: {NUMBER} steps/s",
            rf"\[env: .*\n.*bridge .*median\s+{NUMBER} steps/s",
            rf"\[env: .*\n.*\n.*pure JAX \(make\) .*median\s+{NUMBER} steps/s",
            rf"\[ppo: .*\n.*bridge .*median\s+{NUMBER} steps/s",
            rf"\[ppo: .*\n.*\n.*pure JAX \(make\) .*median\s+{NUMBER} steps/s",
        ],
        ["gymnasium"],
    ),
    "snake.py": (
        # --smoke: 64 steps per environment loop, PPO timed once over one iteration.
        ["--sizes", "6", "--num-envs", "64", "--pairs", "1", "--ppo-size", "6"]
        + ["--policies", "mlp", "--smoke"],
        [
            rf"6x6 N=\s*64: eqxrl\s+{NUMBER} M steps/s",
            rf"PPO\s+mlp 6x6, .*:\s+{NUMBER} steps/s",
        ],
        [],
    ),
    "value_based.py": (
        ["--parts", "buffer", "defaults", "--capacities", "1000", "--seeds", "1"]
        # DQN and IQN at their defaults, 15 updates past learning_starts (10,000).
        + ["--defaults-steps", "10240"],
        [
            # add in scan (may round to 0.00), add donated, add copied, sample
            # 1-step and 3-step (microseconds), in place
            rf"^\s*1,000\s+\S+\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+True",
            rf"DQN: compile {NUMBER} s, run \S+ s, {NUMBER} steps/s",
            rf"IQN: compile {NUMBER} s, run \S+ s, {NUMBER} steps/s",
        ],
        [],
    ),
    "snake_memory.py": (
        # Over 10 s: a fresh interpreter per dtype (what the memory figures need),
        # each compiling PPO's CNN iteration.
        ["--size", "6", "--num-envs", "64", "--num-steps", "16"]
        + ["--num-minibatches", "4"],
        [
            rf"{dtype}: formula .* = \s*{NUMBER} MiB \| stacked Transition\s+{NUMBER} "
            rf"MiB \| XLA scratch for one iteration\s+{NUMBER} MiB"
            for dtype in ("float32", "uint8")
        ],
        [],
    ),
    "scaling.py": (
        # One part (each compiles its own programs); the others share its code.
        ["--parts", "overhead", "--pairs", "1", "--num-envs", "4"]
        + ["--total-timesteps", "1024"],
        [rf"sharded speed / one-device speed: median {NUMBER}x best {NUMBER}x"],
        [],
    ),
    "brax_trainers.py": (
        ["--quick"],  # one round of PPO and SAC on inverted_pendulum, toy sizes
        [
            rf"{algo} inverted_pendulum: steps/s median eqxrl {NUMBER}, Brax {NUMBER}"
            for algo in ("ppo", "sac")
        ],
        ["brax"],  # with provide_device_put_replicated on jax >= 0.10
    ),
    "multiagent.py": (
        # Every part at toy sizes: 2 epochs of Sorrel's experiment (1 seed), one
        # scaling row, one loop row (the same compiled program as that row), a
        # 256x256 matrix product. Over 10 s: the parts' programs are Sorrel's
        # networks at Sorrel's sizes (the FLOP count checked below), and the loop's
        # are its own (jitted act, store and learn: what the loop part compares).
        ["--epochs", "2", "--seeds", "1", "--worlds", "1", "--agents", "2"]
        + ["--matmul-size", "256"]
        + ["--steps", "2", "--iterations", "1", "--loop-agents", "2"]
        + ["--loop-iterations", "1"],
        [
            rf"sorrel experiment: .* run {NUMBER} s \({NUMBER} s per 1000 epochs\), "
            rf"{NUMBER}x faster",
            rf"sorrel arithmetic: XLA counts {NUMBER} TFLOP per 1000 epochs; this run "
            rf"sustained {NUMBER} GFLOP/s, 50x Sorrel needs {NUMBER} GFLOP/s, a "
            rf"256x256 matrix product here runs at {NUMBER} GFLOP/s",
            rf"sorrel learning curve: 1 seed\(s\) vmapped, compile {NUMBER} s, run "
            rf"{NUMBER} s",
            rf"^\s*1\s+2\s+{NUMBER}\s+{NUMBER}$",  # agent-steps/s, compile s
            rf"^\s*2\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}x$",  # fused, loop, speed-up
            # Without a JaxMARL clone, the cooperative parts say why they skip.
            r"mappo: skipped \((?:missing .*|no --jaxmarl-dir)\)",
            r"vdn: skipped \((?:missing .*|no --jaxmarl-dir)\)",
            r"qmix: skipped \((?:missing .*|no --jaxmarl-dir)\)",
        ],
        [],
    ),
    "peers.py": (
        ["--skip-ppo", "--env-pairs", "1", "--num-envs", "64", "--env-steps", "100"]
        + ["--min-work", "1000"],
        [rf"steps/s median \(best\): eqxrl {NUMBER} \({NUMBER}\), gymnax {NUMBER}"],
        ["gymnax", "rejax"],
    ),
    "recurrent.py": (
        # The learning bars' code at one iteration (the speed part needs
        # PureJaxRL's files, fetched outside the repository). Over 10 s: the two
        # programs compared, GRU and feed-forward PPO.
        ["learning", "--seeds", "1", "--tasks", "StatelessCartPole-v1"]
        + ["--total-timesteps", "4096"],
        [
            rf"{network}: mean return over the last 1 iterations per seed "
            rf"\[{NUMBER}\]"
            for network in ("gru", "feed-forward")
        ],
        [],
    ),
    "program_hashes.py": (
        # Lowers one configuration's program (and the evaluation program), and builds
        # every configuration: their programs are built by the algorithms' own tests
        # (test_ppo, test_continuous, test_snake, test_masking, test_multiagent,
        # test_q_learning, test_sac, test_td3, test_pqn, test_recurrent, test_mappo,
        # test_value_decomposition, test_recurrent_value_decomposition,
        # test_evaluation).
        ["--save", "/dev/null", "--configs", "ppo_cartpole"],
        [rf"^{NUMBER} programs hashed"],
        [],
    ),
    # gpu.py's rows, at their smallest sizes on the CPU (peers where installed), so
    # that the script the GPU runs cannot rot: in three runs, since every row
    # compiles programs of its own (over 10 s in all; a failure names its rows).
    # Row 1 compiles 5 programs: each seed count plain (the profiles trace those, at
    # smoke sizes) and with command buffers, and throw=False.
    "gpu.py ppo_cartpole memory": (
        ["--smoke", "--rows", "ppo_cartpole", "memory"],
        [
            rf"^\| ppo_cartpole \| {program} \| {NUMBER} env steps \|"
            for program in (
                "PPO CartPole, PureJaxRL's config, 1 seed",
                r"PPO CartPole, PureJaxRL's config, 1 seed; eqxrl with "
                r"throw=False \(no divergence check\)",
                "PPO CartPole, 4 seeds vmapped",
                "PPO CartPole, 4 seeds vmapped; eqxrl with command buffers",
            )
        ]
        + [
            # Row 1's kernel profiles (XLA's CPU thunks, off the GPU).
            rf"^\| PPO CartPole, 4 seeds vmapped, 2 iterations traced \| eqxrl \| "
            rf"{NUMBER} \| {NUMBER} \|",
            # The memory table: XLA's total for a program, in MiB.
            rf"^\| PPO CartPole, PureJaxRL's config, 1 seed \| .* \| {NUMBER} \|$",
        ],
        [],
    ),
    "gpu.py snake value_based treasure_hunt brax": (
        # One size per row (a second only changes sizes; multiagent.py's smoke run
        # trains Sorrel's one-world experiment), without command buffers (row 1's
        # run prints those): 4 programs, the largest Sorrel's learners for 4 worlds
        # (each row's sizes are in the labels checked).
        ["--smoke", "--no-command-buffers"]
        + ["--rows", "snake", "value_based", "treasure_hunt", "brax"],
        [
            rf"^\| {row} \| {program} \| {NUMBER} {unit} \|"
            for row, program, unit in (
                ("snake", "Snake 12x12, 8 envs x 8 steps", "env steps"),
                (
                    "value_based",
                    "DQN CartPole, rejax's settings, 200 steps",
                    "env steps",
                ),
                (
                    "value_based",
                    "IQN CartPole, rejax's settings, 200 steps",
                    "env steps",
                ),
                ("treasure_hunt", r"Sorrel's experiment, 4 world\(s\) .*", "epochs"),
            )
        ]
        + [r"^\| brax \| .* \| skipped: "],
        [],
    ),
    "gpu.py pqn_headline tricks": (
        ["--smoke", "--rows", "pqn_headline", "tricks"],
        [
            rf"^\| tricks \| {program}: .* \| {NUMBER} env steps \|"
            for program in ("PPO CartPole, PureJaxRL's config", "Snake 8 envs")
        ]
        + [
            r"^pqn_headline: seconds to a greedy 475 on CartPole-v1, .*: median PQN ",
        ],
        [],
    ),
    "pqn.py": (
        # Without purejaxql's file the speed part times eqxrl alone; the headline
        # part at one chunk of 16k steps, PQN's side (DQN at its defaults compiles
        # for minutes under the suite's --xla_cpu_use_fusion_emitters=false);
        # MinAtar Breakout's speed and learning paths at one iteration each.
        # Over 10 s: four programs (CartPole's train and train_iterations, MinAtar's
        # train, one seed and vmapped) and the greedy evaluations.
        ["--parts", "speed", "headline", "minatar"]
        + ["--steps", "4096", "--pairs", "1", "--seeds", "1"]
        + ["--headline-steps", "16384", "--headline-algorithms", "PQN"]
        + ["--minatar-speed-steps", "4096", "--minatar-steps", "4096"],
        [
            rf"CartPole, .*\n.*\n  eqxrl: compile {NUMBER} s, {NUMBER} steps/s",
            rf"seed 0 PQN: \D*{NUMBER}",
            rf"Breakout-MinAtar, .*\n.*\n  eqxrl: compile {NUMBER} s, {NUMBER} steps/s",
            # Returns may be zero after one iteration: their format only.
            rf"  eqxrl: mean -?[0-9.]+ \(seeds -?[0-9.]+\); {NUMBER} s",
            r"eqxrl greedy \(32 episodes each\): -?[0-9]+\.[0-9]+$",
        ],
        ["gymnax"],
    ),
    "td3.py": (
        # Without rejax (the dev venv) the peers part says it is skipped; TD3 and
        # DDPG at their defaults (learning from step 300) for 400 steps x 2 seeds.
        ["--smoke"],
        [
            rf"TD3 at its defaults on Pendulum-v1, .* \({NUMBER} steps/s\)",
            rf"DDPG at its defaults on Pendulum-v1, .* \({NUMBER} steps/s\)",
            rf"last 200 steps per seed: -{NUMBER}, -{NUMBER}; above -250",
        ],
        [],
    ),
    "sim_to_sim.py": (
        # Toy training, one episode each side; the NumPy ports are checked first.
        ["--smoke"],
        [rf"^ratio {NUMBER} \(bar"],
        ["mujoco", "mujoco_playground", "jax2onnx", "onnxruntime"],
    ),
    "randomization.py": (
        # One round at toy sizes (Brax and Playground: .venv-brax, .venv-robot).
        ["--quick"],
        [rf"steps/s ratio median {NUMBER}x \(best {NUMBER}x\)"],
        ["brax", "mujoco_playground"],
    ),
    "randomization_seeds.py": (
        # Two seeds per arm at toy sizes (Brax and Playground: .venv-robot).
        ["--quick"],
        [
            rf"^{arm}: solved \d+ of 2 \(\d+%\), mean {NUMBER}$"
            for arm in ("brax", "eqxrl", "eqxrl-statistics-after")
        ],
        ["brax", "mujoco_playground"],
    ),
    "sorrel_parity.py": (
        # Sorrel needs Python >= 3.12: runs in .venv-sorrel, skipped elsewhere.
        ["--configs", "default", "--episodes", "1", "--turns", "10"]
        + ["--spawn-samples", "0"],
        [rf"parity: {NUMBER} turns compared, every check equal"],
        ["sorrel"],
    ),
}


# A script's smoke run is named by the script, or by the script and its part where
# it has several runs.
def script_of(run: str) -> str:
    """The benchmark script a smoke run runs."""
    return run.split(" ")[0]


def make_bench_scripts() -> list[str]:
    """The scripts the Makefile's `bench` target runs, in order."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^bench:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert recipe is not None, "no bench target in the Makefile"
    return re.findall(r"benchmarks/(\w+\.py)", recipe.group(1))


def figures(pattern: str, output: str) -> list[float]:
    """The numbers in the first match of `pattern` in `output`."""
    match = re.search(pattern, output, re.MULTILINE)
    assert match is not None, f"no match for {pattern!r} in:\n{output}"
    return [float(group.replace(",", "")) for group in match.groups()]


def test_every_benchmark_has_a_smoke_run():
    # `_harness.py` is no script: every script's smoke run runs it.
    scripts = sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name[0] != "_")
    assert scripts == sorted({script_of(run) for run in SMOKE_RUNS})
    assert set(make_bench_scripts()) <= set(SMOKE_RUNS)


@pytest.mark.parametrize(
    "script", sorted({script_of(run) for run in SMOKE_RUNS} | {"_harness.py"})
)
def test_benchmarks_use_public_api_only(script):
    """No `eqxrl._x` module and no `obj._x` attribute (a script's own `self._x`
    aside): private names change without notice, and a benchmark that reaches into
    them stops working (as `trainer_overhead.py` once did)."""
    tree = ast.parse((BENCHMARKS / script).read_text())
    private = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                private.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [alias.name for alias in node.names]
            parts = [part for name in names for part in name.split(".")]
            if node.module.split(".")[0] == "eqxrl" and any(map(_is_private, parts)):
                private.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "eqxrl" and any(
                    map(_is_private, alias.name.split("."))
                ):
                    private.append(f"line {node.lineno}: import {alias.name}")
    assert not private, f"{script} uses private names: {private}"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


@pytest.mark.benchmark
@pytest.mark.parametrize("run", sorted(SMOKE_RUNS))
def test_benchmark_runs_and_prints_its_figures(run, monkeypatch, run_script):
    """`make bench`'s scripts, `snake_memory.py`, and `peers.py` where its peers are
    installed (`make bench-peers`)."""
    arguments, patterns, needs = SMOKE_RUNS[run]
    script = script_of(run)
    for module in needs:
        pytest.importorskip(module)
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "path", [str(BENCHMARKS), *sys.path])
    output = run_script(BENCHMARKS / script, *arguments)
    for pattern in patterns:
        for number in figures(pattern, output):
            assert math.isfinite(number) and number > 0, (pattern, output)
    if script == "snake_memory.py":
        # What the script is for: uint8 storage makes the rollout smaller.
        (_, float32_rollout, _), (_, uint8_rollout, _) = (
            figures(pattern, output) for pattern in patterns
        )
        assert uint8_rollout < float32_rollout
    if script == "sim_to_sim.py":
        # The ports agree with Playground, and the replay ran without JAX.
        (path,) = re.findall(r"^written to (\S+sim_to_sim\.json)", output, re.M)
        result = json.loads(Path(path).read_text())
        assert result["port_check"]["observation_error"] <= 1e-5
        assert result["port_check"]["reward_error"] <= 1e-5
        assert result["host_mujoco"]["jax_imported"] is False
        assert len(result["host_mujoco"]["returns"]) == 1
        assert 0 < result["host_mujoco"]["mean"] <= 50  # rewards lie in [0, 1]
    if script == "gpu.py":
        # Every row asked for is in the JSON, none failed, and a tricks row compares.
        (path,) = re.findall(r"^wrote (\S+gpu\.json) and", output, re.MULTILINE)
        report = json.loads(Path(path).read_text())
        rows = {result["row"] for result in report["results"]}
        asked = set(arguments[arguments.index("--rows") + 1 :])
        assert rows == asked | ({"profile"} if "ppo_cartpole" in asked else set())
        assert not [r for r in report["results"] if "error" in r], report
        assert all(
            r["ratio_median"] > 0 for r in report["results"] if r["row"] == "tricks"
        )
        profiles = [r["profiles"] for r in report["results"] if r["row"] == "profile"]
        if "ppo_cartpole" in asked:
            assert len(profiles) == 2, profiles
            assert all(p["eqxrl"]["kernels"] > 0 for p in profiles), profiles
        assert report["device"].startswith("cpu")
    if script == "multiagent.py":
        # Sorrel's networks at Sorrel's sizes, whatever the run's length: acting
        # about 2.1 MFLOP per agent and turn, an update about 0.7 GFLOP per agent.
        tera_flops = figures(patterns[1], output)[0]
        assert 1.6 < tera_flops < 2.1, output


def test_harness_alternates_sides_and_keeps_compile_time_apart(monkeypatch):
    """Every side once untimed, then rounds in alternating order (A B, then B A);
    rates come from the timed runs alone, never from the compile."""
    monkeypatch.setattr(sys, "path", [str(BENCHMARKS), *sys.path])
    import _harness

    runs = []

    def program(name: str, seconds: float) -> _harness.Program:
        def run(seed):
            runs.append((name, seed))
            return seconds, seed

        return _harness.Program(run, 10.0, 99.0, lambda out, seed: {"out": out})

    programs = {"ours": program("ours", 1.0), "peer": program("peer", 2.0)}
    result = _harness.alternate(programs, 3, unit=None)
    assert runs == [("ours", 0), ("peer", 0)] + [
        ("ours", 1), ("peer", 1), ("peer", 2), ("ours", 2), ("ours", 3), ("peer", 3)
    ]  # fmt: skip
    assert result.rates("ours") == [10.0] * 3
    assert result.ratios("ours", "peer") == [2.0] * 3
    assert result.fact("peer", "out") == [1, 2, 3]
    summary = result.summary("ours", "peer")
    assert (summary["median"], summary["ours_compile"]) == (2.0, 99.0)
