"""What the run executes on, and a batch size that suits it."""

import os
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax

from ..algorithms import AbstractAlgorithm

# Cap on `num_envs="auto"` on an accelerator (on CPU: 4 per core, at most 64).
_ACCELERATOR_MAX_NUM_ENVS = 65_536


def _cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _memory_bytes(device: jax.Device) -> int | None:
    try:
        stats = device.memory_stats()
    except Exception:
        return None
    if not stats:
        return None
    return stats.get("bytes_limit") or stats.get("bytes_reservable_limit")


def describe_devices() -> str:
    """One line naming the devices JAX runs on, e.g. `cpu (2 cores)` or
    `gpu: 8 x NVIDIA A100-SXM4-40GB, 39.4 GiB each`."""
    devices = jax.devices()
    device = devices[0]
    if device.platform == "cpu":
        return f"cpu ({_cpu_cores()} cores, {len(devices)} JAX device(s))"
    text = f"{device.platform}: {len(devices)} x {device.device_kind}"
    memory = _memory_bytes(device)
    if memory:
        text += f", {memory / 2**30:.1f} GiB each"
    return text


# --------------------------------------------------------------------------------------
# num_envs="auto"
# --------------------------------------------------------------------------------------


def _host_free_bytes() -> int | None:
    """The host's available memory: `MemAvailable` of `/proc/meminfo` (or the free
    pages of `os.sysconf`), less where a cgroup (v2) memory limit is tighter."""
    free = None
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    free = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if free is None:
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            return None
    try:  # a container's limit (cgroup v2): "max" when there is none
        with open("/sys/fs/cgroup/memory.max") as limit_file:
            limit = limit_file.read().strip()
        with open("/sys/fs/cgroup/memory.current") as current_file:
            current = int(current_file.read().strip())
        if limit != "max":
            free = min(free, max(int(limit) - current, 0))
    except (OSError, ValueError):
        pass
    return free


def _free_bytes(device: jax.Device) -> int | None:
    """The memory free for a new program on `device`: on an accelerator
    `bytes_limit - bytes_in_use` of `device.memory_stats()`; on CPU the host's
    available memory. `None` where it cannot be read."""
    try:
        stats = device.memory_stats()
    except Exception:
        stats = None
    if stats and stats.get("bytes_limit"):
        return max(int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)), 0)
    if device.platform == "cpu":
        return _host_free_bytes()
    return None


def _where(device: jax.Device) -> str:
    if device.platform == "cpu":
        return "cpu"
    return f"{device.platform} ({device.device_kind})"


def _bytes(count: int) -> str:
    """`3.2 GiB (3,435,973,837 bytes)`."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:.1f} {unit} ({count:,} bytes)"
    return f"{count:,} bytes"


def _train_runs(algorithm: AbstractAlgorithm, keys: Any) -> Any:
    return eqx.filter_vmap(lambda key: algorithm.train(key))(keys)


def _program_bytes(algorithm: AbstractAlgorithm, num_seeds: int | None = None) -> int:
    """The device memory of `algorithm.train`'s compiled program, from XLA's
    `memory_analysis()`: arguments + outputs + temporaries + generated code, less
    the outputs that reuse an argument's buffer. Compiled ahead of time with the
    algorithm's `compiler_options` (nothing runs).

    **Arguments:**

    - `algorithm`: the algorithm.
    - `num_seeds`: `None` for one run, or the number of runs vmapped as one
      program (`train_seeds`, the Trainer's `num_seeds`).

    **Returns:**

    The bytes, an int.
    """
    key = jax.random.key(0)
    if num_seeds is None:
        lowered = algorithm.lower(key)
    else:
        # As the Trainer compiles its seeds: vmapped, with the compiler options.
        train_runs: Any = eqx.filter_jit(
            _train_runs, compiler_options=algorithm.compiler_options or None
        )
        lowered = train_runs.lower(algorithm, jax.random.split(key, num_seeds))
    compiled = lowered.compile()
    analysis = getattr(compiled, "compiled", compiled).memory_analysis()
    if analysis is None:
        raise ValueError(
            f"num_envs='auto': XLA gives no memory analysis of compiled programs on "
            f"{jax.default_backend()}; give a number of environments instead."
        )
    return int(
        analysis.argument_size_in_bytes
        + analysis.output_size_in_bytes
        + analysis.temp_size_in_bytes
        + analysis.generated_code_size_in_bytes
        - analysis.alias_size_in_bytes
    )


def _out_of_memory(error: Exception) -> bool:
    text = str(error)
    return "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()


class _Pick(NamedTuple):
    num_envs: int
    needed_bytes: int
    available_bytes: int
    usable_bytes: int
    where: str


def _pick_num_envs(
    make_algorithm: Callable[[int], AbstractAlgorithm],
    *,
    margin: float = 0.8,
    max_num_envs: int | None = None,
    available_bytes: int | None = None,
    num_seeds: int | None = None,
) -> _Pick:
    """`auto_num_envs`, with the bytes behind the choice (for the CLI's message)."""
    if not 0 < margin <= 1:
        raise ValueError(f"num_envs='auto': margin={margin} must be in (0, 1].")
    device = jax.local_devices()[0]
    where = _where(device)
    if max_num_envs is None:
        if device.platform == "cpu":
            max_num_envs = min(max(4 * _cpu_cores(), 4), 64)
        else:
            max_num_envs = _ACCELERATOR_MAX_NUM_ENVS
    if max_num_envs < 1:
        raise ValueError(f"num_envs='auto': max_num_envs={max_num_envs} must be >= 1.")
    if available_bytes is None:
        available_bytes = _free_bytes(device)
        if available_bytes is None:
            how = "" if device.platform == "cpu" else " (memory_stats() has no limit)"
            raise ValueError(
                f"num_envs='auto': the free memory of {where} cannot be read{how}; "
                "give a number of environments instead, or pass available_bytes."
            )
    usable = int(margin * available_bytes)

    # The powers of two up to max_num_envs that make a valid algorithm: too few
    # environments can break a divisibility rule, too many can leave
    # total_timesteps less than one iteration.
    algorithms: dict[int, AbstractAlgorithm] = {}
    first_error: ValueError | None = None
    count = 1
    while count <= max_num_envs:
        try:
            algorithms[count] = make_algorithm(count)
        except ValueError as error:
            first_error = first_error or error
        count *= 2
    if not algorithms:
        assert first_error is not None
        raise first_error
    candidates = sorted(algorithms)

    needed: dict[int, int | None] = {}  # None: its compilation ran out of memory

    def need(count: int) -> int | None:
        if count not in needed:
            try:
                needed[count] = _program_bytes(algorithms[count], num_seeds)
            except Exception as error:
                if not _out_of_memory(error):
                    raise
                needed[count] = None
        return needed[count]

    def fits(count: int) -> bool:
        bytes_ = need(count)
        return bytes_ is not None and bytes_ <= usable

    def pick(count: int) -> _Pick:
        return _Pick(count, needed[count] or 0, available_bytes, usable, where)

    high, low = candidates[-1], candidates[0]
    if fits(high):  # the usual case on CPU: one compilation
        return pick(high)
    if not fits(low):
        seeds = f" x {num_seeds} seeds" if num_seeds is not None else ""
        free = f"{_bytes(available_bytes)} is free on {where}"
        if margin < 1:
            free += f" ({margin:.0%} of it usable: margin={margin})"
        low_bytes = needed[low]
        if low_bytes is None:
            raise ValueError(
                f"num_envs='auto': compiling the smallest program (num_envs={low}"
                f"{seeds}) ran out of memory; {free}."
            )
        raise ValueError(
            f"num_envs='auto': the smallest program (num_envs={low}{seeds}) needs "
            f"{_bytes(low_bytes)} but {free}."
        )
    # Between the smallest (fits) and the largest (does not): memory is close to
    # affine in num_envs, so the line through the compiled sizes that bracket the
    # answer guesses it; compiling the guess and then its neighbour usually
    # settles it (4 compilations in all). After two guesses in a row that moved
    # the same end of the bracket (memory far from affine), the next bisects. The
    # pick is the largest power of two that fits, memory growing with num_envs.
    fit, fail = 0, len(candidates) - 1  # indices: candidates[fit] fits, [fail] not
    moved: list[str] = []  # which end each compilation moved
    while fail - fit > 1:
        guess = (fit + fail) // 2
        fail_bytes = needed[candidates[fail]]
        stalled = moved[-2:] in (["fit", "fit"], ["fail", "fail"])
        if fail_bytes is not None and not stalled:
            x0, y0 = candidates[fit], needed[candidates[fit]] or 0
            slope = (fail_bytes - y0) / (candidates[fail] - x0)
            guess = fit + 1
            for index in range(fit + 1, fail):
                if y0 + slope * (candidates[index] - x0) <= usable:
                    guess = index
        if fits(candidates[guess]):
            fit = guess
            moved.append("fit")
        else:
            fail = guess
            moved.append("fail")
        if stalled:
            moved.append("bisected")
    return pick(candidates[fit])


def auto_num_envs(
    make_algorithm: Callable[[int], AbstractAlgorithm],
    *,
    margin: float = 0.8,
    max_num_envs: int | None = None,
    available_bytes: int | None = None,
    num_seeds: int | None = None,
) -> int:
    """The number of parallel environments of `num_envs="auto"` (`eqxrl train
    --num-envs auto`): the largest power of two (so that the usual minibatch
    counts divide the batch) whose compiled training program fits the device's
    free memory, with a margin.

    Each candidate's `train` is compiled ahead of time (nothing runs) and its
    memory read from XLA's `memory_analysis()`: arguments + outputs +
    temporaries + generated code, less aliased buffers. Memory is close to affine
    in `num_envs`, so a few compilations suffice (four, typically): the largest
    candidate first (on CPU it usually fits: one compilation), then the smallest,
    then guesses on the line through the sizes that bracket the answer, each
    checked by compiling it. A compilation that runs out of memory counts as not
    fitting. Candidates whose algorithm refuses to be built (a `ValueError`, e.g.
    `total_timesteps` less than one iteration) are skipped.

    The program measured is one device's: with `num_seeds`, the seeds vmapped as
    one program; a mesh that splits the run over devices needs less per device
    than this estimate. The Trainer's state and evaluation need a little more
    than the program: the margin leaves room for them.

    **Arguments:**

    - `make_algorithm`: builds the algorithm to train for a given `num_envs`, e.g.
      `lambda n: eqxrl.PPO(env=env, num_envs=n)` (with any wrapper, such as
      `eqxrl.multiagent.MAPPO`, around it).
    - `margin`: the fraction of the free memory a program may use, in (0, 1].
    - `max_num_envs`: the largest candidate (rounded down to a power of two). By
      default on CPU 4 per core, between 4 and 64 (more environments than that
      only add time per iteration there); on an accelerator 65,536.
    - `available_bytes`: the free memory; by default read from the device: on an
      accelerator `bytes_limit - bytes_in_use` of `device.memory_stats()`, on CPU
      the host's available memory (`/proc/meminfo`, a cgroup limit,
      `os.sysconf`). Where it cannot be read, a `ValueError` says so.
    - `num_seeds`: `None` for one run, or the number of runs trained together as
      one program (the Trainer's `num_seeds`, `train_seeds`).

    **Returns:**

    The number of environments, a power of two between 1 and `max_num_envs`.
    Raises a `ValueError`, one line naming the bytes needed and the bytes
    available, when not even the smallest candidate fits.

    !!! example

        ```python
        env = eqxrl.envs.make("CartPole-v1")
        num_envs = auto_num_envs(lambda n: eqxrl.PPO(env=env, num_envs=n))
        ppo = eqxrl.PPO(env=env, num_envs=num_envs)
        ```
    """
    return _pick_num_envs(
        make_algorithm,
        margin=margin,
        max_num_envs=max_num_envs,
        available_bytes=available_bytes,
        num_seeds=num_seeds,
    ).num_envs
