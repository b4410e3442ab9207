"""What every benchmark script shares: timing, alternation, final returns, the peers'
import stand-ins and the machine's description. `benchmarks/README.md` says how a
script uses it.

The rules it keeps for every script: compile time (trace and XLA compile, timed
ahead of time with `.lower(...).compile()`) is measured apart and never enters a
rate; a comparison runs its programs side by side in one process, each once untimed
first, then alternating for `pairs` rounds with the order reversed every other round
(A B, then B A), so that machine noise and slowdowns hit every side alike; a rate is
work / wall time of a call whose outputs are ready; each round gives a speed ratio,
and the median and best ratio are what a comparison reports.
"""

import argparse
import contextlib
import importlib.util
import json
import platform
import statistics
import subprocess
import sys
import time
import types
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

# --------------------------------------------------------------------------------------
# Timing


def block(tree: Any) -> Any:
    """`tree`, once its arrays are computed (other leaves are passed over)."""
    jax.block_until_ready(eqx.filter(tree, eqx.is_array))
    return tree


def timed(function: Callable, *args: Any) -> tuple[float, Any]:
    """`(seconds, output)` of one call of `function`, its outputs ready."""
    start = time.perf_counter()
    output = block(function(*args))
    return time.perf_counter() - start, output


def compile_timed(
    function: Any, *args: Any, compiler_options: dict | None = None, **kwargs: Any
) -> tuple[Any, float]:
    """`(compiled, seconds)`: `function.lower(*args, **kwargs).compile()` (a
    `jax.jit`, an `eqx.filter_jit` or an algorithm's `lower`), tracing and XLA's
    compile timed."""
    start = time.perf_counter()
    lowered = function.lower(*args, **kwargs)
    compiled = (
        lowered.compile(compiler_options) if compiler_options else lowered.compile()
    )
    return compiled, time.perf_counter() - start


@dataclass
class Program:
    """One side of a comparison: `run(seed) -> (seconds, output)`, the `work` of a
    run in its rate's unit, the compile apart, `facts(output, seed)` read after the
    clock stops, the compiled program where there is one, and a peer's own
    `evaluate(output, seed)`."""

    run: Callable[[int], tuple[float, Any]]
    work: float
    compile_seconds: float = 0.0
    facts: Callable[[Any, int], dict] | None = None
    compiled: Any = None
    evaluate: Callable[[Any, int], float] | None = None


def compile_program(
    function: Any,
    arguments: Callable[[int], tuple],
    work: float,
    facts: Callable[[Any, int], dict] | None = None,
    compiler_options: dict | None = None,
) -> Program:
    """`function` compiled ahead of time on `arguments(0)` (timed) and run as
    `compiled(*arguments(seed))`."""
    compiled, seconds = compile_timed(
        function, *arguments(0), compiler_options=compiler_options
    )
    return Program(
        lambda seed: timed(compiled, *arguments(seed)), work, seconds, facts, compiled
    )


def train_program(
    algorithm: Any,
    work: float | None = None,
    facts: Callable[[Any, int], dict] | None = None,
    compiler_options: dict | None = None,
) -> Program:
    """`algorithm.train(key)` compiled with the algorithm's own XLA options (and
    `compiler_options`), returning the final state alone; a run's output is that
    state. `work` defaults to the run's environment steps."""
    options = {**algorithm.compiler_options, **(compiler_options or {})}
    train = eqx.filter_jit(
        lambda algorithm, key: algorithm.train(key)[0],
        compiler_options=options or None,
    )
    if work is None:
        work = algorithm.num_iterations * algorithm.steps_per_iteration
    return compile_program(train, lambda seed: (algorithm, jr.key(seed)), work, facts)


def lowered_program(
    algorithm: Any,
    work: float | None = None,
    facts: Callable[[Any, int], dict] | None = None,
) -> Program:
    """The whole run as `algorithm.train` compiles itself (`algorithm.lower(key)`,
    with its XLA options), called as `compiled(algorithm, key, True)`; a run's
    output is `(state, metrics)`. `work` defaults to the run's environment steps."""
    compiled, seconds = compile_timed(algorithm, jr.key(0))
    if work is None:
        work = algorithm.num_iterations * algorithm.steps_per_iteration

    def run(seed: int) -> tuple[float, Any]:
        return timed(compiled, algorithm, jr.key(seed), True)

    return Program(run, work, seconds, facts, compiled)


@dataclass
class Alternation:
    """What `alternate` measured: per program, each round's seconds and facts, and
    the last round's output."""

    programs: dict[str, Program]
    seconds: dict[str, list[float]] = field(default_factory=dict)
    facts: dict[str, list[dict]] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)

    def rates(self, name: str) -> list[float]:
        return [self.programs[name].work / s for s in self.seconds[name]]

    def ratios(self, name: str, peer: str) -> list[float]:
        """Each round's speed ratio `name` / `peer` (> 1: `name` is faster)."""
        return [a / b for a, b in zip(self.rates(name), self.rates(peer), strict=True)]

    def summary(self, name: str, peer: str) -> dict[str, Any]:
        ratios = self.ratios(name, peer)
        rates = {side: self.rates(side) for side in (name, peer)}
        return {
            "ratios": ratios,
            "median": statistics.median(ratios),
            "best_round": max(ratios),
            "best_vs_best": max(rates[name]) / max(rates[peer]),
            "ours_per_s": statistics.median(rates[name]),
            "peer_per_s": statistics.median(rates[peer]),
            "ours_best_per_s": max(rates[name]),
            "peer_best_per_s": max(rates[peer]),
            "ours_compile": self.programs[name].compile_seconds,
            "peer_compile": self.programs[peer].compile_seconds,
        }

    def fact(self, name: str, key: str) -> list:
        return [facts[key] for facts in self.facts[name]]


def alternate(
    programs: dict[str, Program],
    pairs: int,
    *,
    warmup: Collection[str] | None = None,
    first_seed: int = 1,
    unit: str | None = "steps/s",
) -> Alternation:
    """Each of `programs` once untimed (seed 0; `warmup`: only those named), then
    `pairs` rounds, round `i` running every program with seed `first_seed + i`,
    in the given order and reversed every other round. With a `unit`, each round
    prints a line: every program's rate, the ratio of the first two, and the facts
    that are numbers."""
    for name, program in programs.items():
        if warmup is None or name in warmup:
            program.run(0)
    names = list(programs)
    result = Alternation(programs, {n: [] for n in names}, {n: [] for n in names})
    for index in range(pairs):
        seed = first_seed + index
        for name in names if index % 2 == 0 else names[::-1]:
            program = programs[name]
            seconds, output = program.run(seed)
            result.seconds[name].append(seconds)
            result.facts[name].append(
                program.facts(output, seed) if program.facts else {}
            )
            result.outputs[name] = output
        if unit is not None:
            cells = [f"{n} {result.rates(n)[-1]:,.0f} {unit}" for n in names]
            if len(names) > 1:
                cells[-1] += f", ratio {result.ratios(names[0], names[1])[-1]:.2f}x"
            facts = [
                f"{n} {key.replace('_', ' ')} {value:.1f}"
                for n in names
                for key, value in result.facts[n][-1].items()
                if isinstance(value, (int, float))
            ]
            line = ", ".join(cells) + ("; " + ", ".join(facts) if facts else "")
            print(f"  round {seed}: {line}", flush=True)
    return result


def print_comparison(
    result: Alternation,
    ours: str = "eqxrl",
    unit: str = "steps/s",
    peers: Iterable[str] | None = None,
) -> list:
    """Per peer of `ours` in `result` (`peers`: the programs named): the median
    (best) rates, the compile times and every round's ratio with their median,
    best and best run against best run. Returns each peer's
    `Alternation.summary`."""
    summaries = []
    for peer in peers or [name for name in result.programs if name != ours]:
        s = result.summary(ours, peer)
        rounds = " ".join(f"{r:.2f}" for r in s["ratios"])
        print(
            f"  {unit} median (best): {ours} {s['ours_per_s']:,.0f} "
            f"({s['ours_best_per_s']:,.0f}), {peer} {s['peer_per_s']:,.0f} "
            f"({s['peer_best_per_s']:,.0f})\n"
            f"  compile s: {ours} {s['ours_compile']:.2f}, {peer} "
            f"{s['peer_compile']:.2f}\n"
            f"  {ours}/{peer}: per-round ratios [{rounds}]; median {s['median']:.2f}x, "
            f"best round {s['best_round']:.2f}x, best run vs best run "
            f"{s['best_vs_best']:.2f}x",
            flush=True,
        )
        summaries.append(s)
    return summaries


# --------------------------------------------------------------------------------------
# Learning runs and final returns


def final_return(returns: Any, ended: Any = None, last: int = 10) -> np.ndarray:
    """The nan-aware mean of the last `last` iterations' returns, along the last
    axis (an array of seeds gives one per seed). With `ended` (a peer's logged
    per-step returns and episode ends, iterations first), each iteration's
    return is first the mean over the episodes that ended in it."""
    returns = np.asarray(returns, np.float64)
    if ended is not None:
        ended = np.asarray(ended)
        axes = tuple(range(1, returns.ndim))
        count = ended.sum(axis=axes)
        total = np.where(ended, returns, 0.0).sum(axis=axes)
        with np.errstate(invalid="ignore", divide="ignore"):
            returns = np.where(count > 0, total / count, np.nan)
    with warnings.catch_warnings():  # a seed with no ended episode: NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(returns[..., -last:], axis=-1)


def last_part(values: Any, divisor: int = 10) -> np.ndarray:
    """`final_return` over the last `1 / divisor` of the iterations (at least one),
    along the last axis."""
    values = np.asarray(values, np.float64)
    return final_return(values, last=max(1, values.shape[-1] // divisor))


def seed_of(tree: Any, index: int) -> Any:
    """Run `index` of a tree whose arrays have the runs' axis first."""
    return jax.tree.map(lambda x: x[index] if eqx.is_array(x) else x, tree)


def train_seeds(
    algorithm: Any, num_seeds: int, key: int = 0, compiler_options: dict | None = None
) -> tuple[Any, dict, float, float]:
    """`num_seeds` runs of `algorithm` vmapped in one program (keys split from
    `jax.random.key(key)`): `(states, metrics, compile seconds, run seconds)`."""
    keys = jr.split(jr.key(key), num_seeds)
    train = eqx.filter_jit(
        lambda algorithm, keys: eqx.filter_vmap(algorithm.train)(keys),
        compiler_options=compiler_options,
    )
    compiled, compile_seconds = compile_timed(train, algorithm, keys)
    seconds, (states, metrics) = timed(compiled, algorithm, keys)
    return states, metrics, compile_seconds, seconds


def greedy_return(policy: Any, env: Any, seed: int, episodes: int, **options) -> float:
    """The mean return of `policy` over `episodes` episodes of `env`
    (`eqxrl.training.evaluate`), on keys no training run uses (`10_000 + seed`)."""
    import eqxrl  # here: `bench_check.py`'s parent process has no eqxrl of its own

    result = eqxrl.training.evaluate(
        policy, env, jr.key(10_000 + seed), num_episodes=episodes, **options
    )
    return float(np.mean(result.returns))


# --------------------------------------------------------------------------------------
# Peers


def missing(*modules: str) -> str | None:
    """Why a peer cannot run (`"missing a, b"`: those of `modules` not installed),
    or `None`."""
    absent = [name for name in modules if importlib.util.find_spec(name) is None]
    return f"missing {', '.join(absent)}" if absent else None


def _no_op(*args: Any, **kwargs: Any) -> None:
    del args, kwargs


# Modules that peers' scripts import at the top and use lazily or not at all, with
# the attributes they read at import: stood in for where not installed.
STAND_INS: dict[str, dict[str, Any]] = {
    "brax": {},
    "brax.envs": {},
    "brax.envs.wrappers": {},
    "brax.envs.wrappers.training": {"EpisodeWrapper": None, "AutoResetWrapper": None},
    "navix": {},
    "hydra": {"main": lambda **_: lambda function: function},
    "omegaconf": {"OmegaConf": None},
    "safetensors": {},
    "safetensors.flax": {"load_file": None, "save_file": None},
    "wandb": {"init": _no_op, "log": _no_op},
}


def stand_ins(*names: str) -> dict[str, types.ModuleType]:
    """Empty modules for those of `names` whose package is not installed (see
    `STAND_INS`), each submodule an attribute of its parent."""
    modules = {}
    for name in names:
        if importlib.util.find_spec(name.split(".")[0]) is None:
            modules[name] = types.ModuleType(name)
            modules[name].__dict__.update(STAND_INS[name])
    for name, module in modules.items():
        parent, _, child = name.rpartition(".")
        if parent in modules:
            setattr(modules[parent], child, module)
    return modules


def import_file(
    path: Path,
    stubs: Iterable[str] = (),
    *,
    modules: dict[str, Any] | None = None,
    patches: Iterable[tuple[str, str]] = (),
    keep: bool = False,
) -> types.ModuleType:
    """A peer's script that is not on PyPI, imported from `path` (its folder first
    on `sys.path`): `stubs` stood in for where not installed (`stand_ins`),
    `modules` put in place of others (installed or not), `patches` `(old, new)`
    made to the source in memory (each `old` must be there); `keep` leaves the
    stand-ins in `sys.modules`."""
    path = Path(path)
    if not path.exists():
        raise SystemExit(f"{path} is missing: see the script's docstring.")
    source, patches = path.read_text(), tuple(patches)
    if patches:
        print(f"  ({path.name} patched in memory: {len(patches)} replacements)")
    for old, new in patches:
        if old not in source:
            raise SystemExit(f"{path.name} no longer has {old!r}; update the patch.")
        source = source.replace(old, new)
    replaced = {**stand_ins(*stubs), **(modules or {})}
    if replaced:
        print(f"  (stood in for {sorted(replaced)} to import {path.name})")
    folder = str(path.resolve().parent)
    sys.modules.update(replaced)
    sys.path.insert(0, folder)
    try:
        module = types.ModuleType(path.stem)
        module.__file__ = str(path)
        with warnings.catch_warnings():  # their dependencies' deprecations
            warnings.simplefilter("ignore")
            exec(compile(source, str(path), "exec"), module.__dict__)
    finally:
        sys.path.remove(folder)
        if not keep:
            for name in replaced:
                sys.modules.pop(name, None)
    return module


@contextlib.contextmanager
def peer_promotion() -> Iterator[None]:
    """JAX's default rank and dtype promotion, which peers' code is written for
    (the test suite raises on both)."""
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        yield


# PureJaxRL's `ppo.py` CartPole config (`DEBUG` off: no host callback).
# fmt: off
PUREJAXRL_CONFIG = {
    "LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 500_000,
    "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1", "ANNEAL_LR": True, "DEBUG": False,
}
# fmt: on


def import_purejaxrl(path: Path, patches: Iterable[tuple[str, str]] = ()):
    """PureJaxRL's `ppo.py` (or `ppo_rnn.py`), which imports `wrappers.py` from its
    folder; that file imports brax and navix at the top, unused for gymnax's
    environments."""
    brax = ("brax", "brax.envs", "brax.envs.wrappers", "brax.envs.wrappers.training")
    return import_file(path, (*brax, "navix"), patches=patches)


def purejaxrl_program(
    module: types.ModuleType,
    config: dict,
    num_seeds: int = 1,
    compiler_options: dict | None = None,
) -> Program:
    """PureJaxRL's `make_train(config)` compiled (vmapped over `num_seeds` seeds
    beyond one); facts: the final return of what it logs, and its final training
    state."""
    config = dict(config)
    train = module.make_train(config)  # fills in NUM_UPDATES
    if num_seeds > 1:
        train = jax.vmap(train)

    def keys(seed: int) -> tuple:
        key = jr.PRNGKey(seed)
        return (key if num_seeds == 1 else jr.split(key, num_seeds),)

    def facts(out: dict, seed: int) -> dict:
        metrics = out["metric"] if "metric" in out else out["metrics"]
        returns = np.asarray(metrics["returned_episode_returns"])
        ended = np.asarray(metrics["returned_episode"])
        if num_seeds > 1:  # [seeds, iterations, ...] -> [iterations, ..., seeds]
            returns, ended = np.moveaxis(returns, 0, -1), np.moveaxis(ended, 0, -1)
        final = float(final_return(returns, ended))
        return {"final_return": final, "state": out["runner_state"][0]}

    work = num_seeds * config["NUM_UPDATES"] * config["NUM_ENVS"] * config["NUM_STEPS"]
    return compile_program(jax.jit(train), keys, int(work), facts, compiler_options)


def rejax_program(name: str, config: dict, total_timesteps: int) -> Program:
    """rejax's `name` (`"DQN"`, `"TD3"`, ...) with `config`, its periodic evaluation
    a no-op; a run's output is the final state, which `evaluate` scores with
    rejax's own evaluation (keys `10_000 + seed`)."""
    import rejax

    original = getattr(rejax, name).create(
        **{**config, "total_timesteps": total_timesteps}
    )
    algorithm = original.replace(
        eval_callback=lambda algo, ts, rng: jnp.float32(0),
        eval_freq=total_timesteps,
        skip_initial_evaluation=True,
    )
    train = jax.jit(lambda key: algorithm.train(key)[0])
    program = compile_program(train, lambda seed: (jr.key(seed),), total_timesteps)

    def evaluate(state: Any, seed: int) -> float:
        _, returns = original.eval_callback(original, state, jr.key(10_000 + seed))
        return float(np.mean(returns))

    program.evaluate = evaluate
    return program


def provide_device_put_replicated() -> None:
    """Give a jax without `jax.device_put_replicated` (gone in jax 0.10) the one
    Brax 0.14.2's trainers call: `x` stacked once per device, one shard each."""
    if hasattr(jax, "device_put_replicated"):
        return
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    def device_put_replicated(x: Any, devices: Any) -> Any:
        devices = list(devices)
        mesh = Mesh(np.array(devices), ("devices",))
        sharding = NamedSharding(mesh, PartitionSpec("devices"))
        return jax.tree.map(
            lambda leaf: jax.device_put(
                np.stack([np.asarray(leaf)] * len(devices)), sharding
            ),
            x,
        )

    jax.device_put_replicated = device_put_replicated


def brax_epochs_rate(progress: list[tuple[int, dict]], prefill: int = 0) -> dict:
    """A Brax trainer's speed from its `progress_fn` reports: the rate of epochs 3
    on (PPO's step compiles at its first call and again on the donated outputs),
    the compile time the first two epochs' time less their steps at that rate
    (`prefill`: steps that ran no updates, counted as compiling)."""
    epochs = [(s, m["training/walltime"]) for s, m in progress if "training/sps" in m]
    if len(epochs) < 3:
        raise ValueError("Brax's rate is read from its third epoch: num_evals >= 4")
    (compiled_steps, compiled_time), (last_steps, last_time) = epochs[1], epochs[-1]
    rate = (last_steps - compiled_steps) / (last_time - compiled_time)
    return {
        "steps": last_steps,
        "steps_per_second": rate,
        "compile_seconds": max(compiled_time - (compiled_steps - prefill) / rate, 0.0),
    }


# --------------------------------------------------------------------------------------
# The command line


def command_line(doc: str | None, **flags: Any) -> argparse.ArgumentParser:
    """A parser described by `doc`'s first paragraph, with a flag `--a-b` per
    keyword `a_b`, given `add_argument`'s keywords (a dict) or by its default:
    `False` a switch; a type, that type's (default `None`); a tuple, any of its
    items (default all); a list, items of its first item's type; `None`, a string;
    any other value, a value of its type."""
    result = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    for name, spec in flags.items():
        if spec is False:
            spec = {"action": "store_true"}
        elif isinstance(spec, type):
            spec = {"type": spec}
        elif isinstance(spec, tuple):
            spec = {"nargs": "+", "choices": spec, "default": list(spec)}
        elif isinstance(spec, list):
            spec = {"nargs": "+", "type": type(spec[0]), "default": spec}
        elif not isinstance(spec, dict):
            spec = {} if spec is None else {"type": type(spec), "default": spec}
        result.add_argument("--" + name.replace("_", "-"), **spec)
    return result


# --------------------------------------------------------------------------------------
# The machine, and processes of their own


def cpu_name() -> str:
    """The CPU's model name (Linux), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions(*names: str) -> dict[str, str | None]:
    """Python's version and each installed distribution's (`None`: not installed)."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def child_json(
    arguments: list[str],
    env: dict | None = None,
    prefix: str = "",
    timeout: float | None = None,
) -> Any:
    """Run `python arguments...` in a process of its own (its own JAX flags or
    interpreter) and return the JSON of its last stdout line that starts with
    `prefix`; exit with its stderr if it fails."""
    done = subprocess.run(
        [sys.executable, *arguments],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(prefix)]
    if done.returncode != 0 or not lines:
        raise SystemExit(
            f"{' '.join(arguments[:3])} failed ({done.returncode}):\n"
            f"{done.stderr[-4000:]}"
        )
    return json.loads(lines[-1].removeprefix(prefix))
