"""What the run executes on, and a batch size that suits it."""

import os

import jax


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


def auto_num_envs() -> int:
    """A number of parallel environments that keeps this device busy without
    overflowing it: `--num-envs auto`.

    A power of two (so that the usual minibatch counts divide the batch): on CPU
    4 per core, between 4 and 64; on an accelerator 256 per GiB of device memory,
    between 256 and 4096 (512 when the memory is unknown).
    """
    device = jax.devices()[0]
    if device.platform == "cpu":
        target = 4 * _cpu_cores()
        low, high = 4, 64
    else:
        memory = _memory_bytes(device)
        target = 512 if memory is None else int(256 * memory / 2**30)
        low, high = 256, 4096
    target = min(max(target, low), high)
    return 1 << (target.bit_length() - 1)  # the largest power of two <= target
