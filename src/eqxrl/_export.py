"""A trained policy out of JAX: one batched function, written as StableHLO
(`jax.export`) or ONNX (jax2onnx), with a JSON description of its inputs and outputs
beside it.

What the file computes is what the policy does in eqxrl, end to end: the observation
normaliser, the network, the masked greedy choice (or, for StableHLO, the sample), the
tanh squashing, and the action wrappers of the environment (`ClipAction`,
`RescaleAction`: anything with a `transform_action`), so that a robot's computer hands
it raw observations and gets the actions its motors take. A recurrent policy's carry is
an explicit input and output.
"""

import dataclasses
import importlib.util
import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
from jaxtyping import Array, PRNGKeyArray, PyTree

from ._version import __version__
from .envs import AbstractEnvironment, AbstractWrapper, Box, Discrete
from .nn import AbstractPolicy

# The batch axis of every input and output: one symbolic size, chosen at run time.
_BATCH = "batch"
# StableHLO is lowered for these platforms unless told otherwise: one file runs on a
# robot's CPU and on the GPU or TPU it was trained on.
_DEFAULT_PLATFORMS = ("cpu", "cuda", "tpu")


class ExportError(ValueError):
    """A policy that cannot be exported as asked, with the reason and the way out."""


def _missing_extra(module: str) -> ExportError:
    return ExportError(
        f"export_policy(format='onnx') needs the {module!r} package: install the "
        "`export` extra, `pip install 'eqxrl[export]'` (jax2onnx and onnxruntime)."
    )


def _leaf_names(prefix: str, tree: PyTree) -> list[str]:
    """One name per leaf, `prefix` for a lone array and `prefix.key.0...` inside a
    pytree: the names a non-JAX runtime feeds and reads."""
    names = []
    for path, _ in jtu.tree_flatten_with_path(tree)[0]:
        parts = [re.sub(r"[^0-9A-Za-z_]+", "", jtu.keystr((entry,))) for entry in path]
        names.append(".".join([prefix, *[p for p in parts if p]]))
    return names


def _batched(leaf: Any, batch: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((batch, *np.shape(leaf)), jnp.result_type(leaf))


def _action_transforms(env: AbstractEnvironment) -> list[Callable[[Array], Array]]:
    """The environment's own action transforms, outermost first (the order they run
    in when it steps)."""
    transforms = []
    while True:
        transform = getattr(env, "transform_action", None)
        if callable(transform):
            transforms.append(transform)
        if not isinstance(env, AbstractWrapper):
            return transforms
        env = env.env


def _uses_key(
    step: Callable, carry: Any, observation: Any, mask: Any, key: PRNGKeyArray
) -> bool:
    """Whether the policy's action depends on its key: a sampling policy does, a
    greedy one does not (the key is then left out of the exported inputs)."""
    jaxpr = jax.make_jaxpr(lambda k: step(carry, observation, k, mask))(key)
    key_var = jaxpr.jaxpr.invars[0]
    return any(key_var is var for eqn in jaxpr.jaxpr.eqns for var in eqn.invars) or any(
        key_var is var for var in jaxpr.jaxpr.outvars
    )


@dataclasses.dataclass(frozen=True)
class _Interface:
    """The exported function's inputs and outputs, and the function itself."""

    function: Callable
    input_names: list[str]
    inputs: list[jax.ShapeDtypeStruct]
    output_names: list[str]
    sampled: bool
    metadata: dict[str, Any]


def _interface(
    policy: AbstractPolicy, env: AbstractEnvironment, batch: Any
) -> _Interface:
    if getattr(env, "num_agents", None) is not None:
        raise ExportError(
            "export_policy exports one agent's policy: pass a single-agent "
            f"environment, not {type(env).__name__} with num_agents={env.num_agents}."
        )
    _, timestep = jax.eval_shape(env.reset, jr.key(0))
    observation_spec = timestep.observation
    mask_spec = timestep.action_mask
    initial_carry = policy.initial_carry() if policy.is_recurrent else None
    transforms = _action_transforms(env)

    observation_leaves, observation_def = jtu.tree_flatten(observation_spec)
    carry_leaves, carry_def = jtu.tree_flatten(initial_carry)
    example = (
        jtu.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), observation_spec),
        None if mask_spec is None else jnp.ones(mask_spec.shape, jnp.bool_),
    )
    sampled = _uses_key(policy.step, initial_carry, *example, jr.key(0))

    def act_one(carry, observation, mask, key):
        next_carry, action = policy.step(carry, observation, key, mask)
        for transform in transforms:
            action = transform(action)
        return action, next_carry

    num_observation = len(observation_leaves)
    num_carry = len(carry_leaves)
    has_mask = mask_spec is not None

    def function(*flat):
        observation = jtu.tree_unflatten(observation_def, flat[:num_observation])
        rest = flat[num_observation:]
        mask = rest[0] if has_mask else None
        rest = rest[1:] if has_mask else rest
        carry = jtu.tree_unflatten(carry_def, rest[:num_carry])
        rest = rest[num_carry:]
        size = jtu.tree_leaves(observation)[0].shape[0]
        if sampled:
            keys = jr.split(jr.wrap_key_data(rest[0]), size)
        else:
            keys = jnp.zeros((size,), jnp.int32)  # unused: a greedy policy

        def one(carry, observation, mask, key):
            if not sampled:
                key = jr.key(0)
            return act_one(carry, observation, mask, key)

        action, next_carry = jax.vmap(one)(carry, observation, mask, keys)
        return (action, *jtu.tree_leaves(next_carry))

    inputs = [_batched(leaf, batch) for leaf in observation_leaves]
    input_names = _leaf_names("observation", observation_spec)
    if has_mask:
        inputs.append(_batched(mask_spec, batch).update(dtype=jnp.bool_))
        input_names.append("action_mask")
    carry_names = _leaf_names("carry", initial_carry) if num_carry else []
    inputs += [_batched(leaf, batch) for leaf in carry_leaves]
    input_names += carry_names
    if sampled:
        key_data = jr.key_data(jr.key(0))  # uint32[2] for the default threefry
        inputs.append(jax.ShapeDtypeStruct(key_data.shape, key_data.dtype))
        input_names.append("key")
    output_names = ["action"] + (
        _leaf_names("next_carry", initial_carry) if num_carry else []
    )
    action_space = env.action_space
    metadata = {
        "eqxrl_version": __version__,
        "inputs": [
            {"name": name, "shape": _shape_text(spec.shape), "dtype": str(spec.dtype)}
            for name, spec in zip(input_names, inputs)
        ],
        "outputs": output_names,
        "sampled": sampled,
        "recurrent": num_carry > 0,
        "initial_carry": {
            name: np.asarray(leaf).tolist()
            for name, leaf in zip(carry_names, carry_leaves)
        },
        "action_space": _describe_space(action_space),
        "action_transforms": [type(t.__self__).__name__ for t in transforms],
    }
    return _Interface(function, input_names, inputs, output_names, sampled, metadata)


def _shape_text(shape: Sequence[Any]) -> list[Any]:
    return [dim if isinstance(dim, int) else str(dim) for dim in shape]


def _describe_space(space: Any) -> dict[str, Any]:
    if isinstance(space, Discrete):
        return {"type": "Discrete", "num_values": int(space.num_values)}
    if isinstance(space, Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "low": np.asarray(space.low).tolist(),
            "high": np.asarray(space.high).tolist(),
        }
    return {"type": type(space).__name__}


def export_policy(
    policy: Any,
    path: str | os.PathLike,
    format: str = "stablehlo",
    *,
    env: AbstractEnvironment,
    platforms: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Write a trained policy as one batched function that runs without eqxrl:
    StableHLO through `jax.export`, or ONNX through jax2onnx (the `export` extra).

    The function maps a batch of raw observations (any batch size) to the actions the
    environment takes: the observation normaliser, the network, the greedy or sampled
    choice, tanh squashing, and the environment's action wrappers (`ClipAction`,
    `RescaleAction`, any wrapper with a `transform_action`) are all inside.

    Inputs, in order, each with a leading batch axis:
    `observation` (or `observation.<key>` per leaf of a structured observation),
    `action_mask` (bool, where the environment has one), `carry.<...>` (recurrent
    policies: start each episode from the JSON's `initial_carry`), and `key` (a sampling
    policy, StableHLO only: `uint32[2]` raw key data, row `i` sampled with
    `jax.random.split(key, batch)[i]`). Outputs: `action`, then `next_carry.<...>`.

    A JSON file beside the model (`path` + `.json`) lists the inputs (names, shapes,
    dtypes), the outputs, the initial carry, the action space and the eqxrl version.

    **Arguments:**

    - `policy`: `algorithm.policy(state, deterministic=True)` (greedy, what a robot
      runs) or a sampling policy; or [`load_policy`][eqxrl.load_policy]'s.
    - `path`: the file to write (`.onnx` or `.stablehlo` by convention).
    - `format`: `"stablehlo"` (default) or `"onnx"`.
    - `env`: the environment the policy was trained on (`algorithm.env`): its
      observation, action mask and action wrappers define the interface.
    - `platforms`: StableHLO's target platforms (default: cpu, cuda and tpu).

    **Returns:**

    The interface description also written as JSON.

    **Raises:**

    `ExportError` for a multi-agent environment, an unknown format, a sampling policy
    exported to ONNX (ONNX has no counter-based generator that reproduces JAX's:
    export the greedy policy, or use StableHLO), or a missing `export` extra.
    """
    if format not in ("onnx", "stablehlo"):
        raise ExportError(
            f"export_policy: format must be 'onnx' or 'stablehlo', not {format!r}."
        )
    if not isinstance(policy, AbstractPolicy):
        raise ExportError(
            "export_policy needs an eqxrl policy (algorithm.policy(state) or "
            f"eqxrl.load_policy(path)), not {type(policy).__name__}."
        )
    path = Path(path)
    if format == "stablehlo":
        (batch,) = jax.export.symbolic_shape(_BATCH)
        interface = _interface(policy, env, batch)
        exported = jax.export.export(
            jax.jit(interface.function),
            platforms=tuple(platforms or _DEFAULT_PLATFORMS),
        )(*interface.inputs)
        path.write_bytes(exported.serialize())
    else:
        for module in ("jax2onnx", "onnx"):
            if importlib.util.find_spec(module) is None:
                raise _missing_extra(module)
        (batch,) = jax.export.symbolic_shape(_BATCH)
        interface = _interface(policy, env, batch)
        if interface.sampled:
            raise ExportError(
                "export_policy(format='onnx'): this policy samples its actions, and "
                "ONNX has no generator that reproduces JAX's random keys (jax2onnx "
                "maps random bits to ONNX RandomUniform). Export the greedy policy, "
                "algorithm.policy(state, deterministic=True), or use "
                "format='stablehlo', which keeps the sample exact."
            )
        from jax2onnx import to_onnx

        to_onnx(
            interface.function,
            interface.inputs,
            model_name="eqxrl_policy",
            input_names=interface.input_names,
            output_names=interface.output_names,
            return_mode="file",
            output_path=str(path),
        )
    metadata = {"format": format, **interface.metadata}
    Path(f"{path}.json").write_text(json.dumps(metadata, indent=2))
    return metadata


class ExportedPolicy:
    """An exported policy file, run through `jax.export` (StableHLO) or onnxruntime
    (ONNX): `exported(observation=..., action_mask=..., ...)` returns the outputs by
    name, as NumPy arrays. For checking an export, and for hosts that have eqxrl; a
    robot's computer runs the ONNX file with onnxruntime alone (see the guide).

    **Arguments:**

    - `path`: the file [`export_policy`][eqxrl.export_policy] wrote (its JSON beside
      it).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        description = Path(f"{self.path}.json")
        if not description.is_file():
            raise ExportError(
                f"{self.path}: no {description.name} beside it; export_policy writes "
                "both files."
            )
        self.metadata: dict[str, Any] = json.loads(description.read_text())
        self.input_names = [entry["name"] for entry in self.metadata["inputs"]]
        self.output_names = list(self.metadata["outputs"])
        if self.metadata["format"] == "stablehlo":
            exported = jax.export.deserialize(bytearray(self.path.read_bytes()))
            self._run = lambda *inputs: exported.call(*inputs)
        else:
            if importlib.util.find_spec("onnxruntime") is None:
                raise _missing_extra("onnxruntime")
            import onnxruntime

            session = onnxruntime.InferenceSession(
                str(self.path), providers=["CPUExecutionProvider"]
            )
            self._run = lambda *inputs: session.run(
                None, dict(zip(self.input_names, inputs))
            )

    def initial_carry(self, batch_size: int) -> dict[str, np.ndarray]:
        """The carry inputs at every episode's start, for `batch_size` rows (empty for
        a feed-forward policy)."""
        shapes = {entry["name"]: entry for entry in self.metadata["inputs"]}
        return {
            name: np.broadcast_to(
                np.asarray(value, shapes[name]["dtype"]),
                (batch_size, *np.shape(value)),
            ).copy()
            for name, value in self.metadata["initial_carry"].items()
        }

    def __call__(self, **inputs: Any) -> dict[str, np.ndarray]:
        """The outputs for inputs given by name (`observation`, `action_mask`,
        `carry.<...>`, `key`: as the JSON lists them)."""
        missing = [name for name in self.input_names if name not in inputs]
        unknown = [name for name in inputs if name not in self.input_names]
        if missing or unknown:
            raise ExportError(
                f"{self.path.name} takes inputs {self.input_names}; missing "
                f"{missing}, unknown {unknown}."
            )
        dtypes = {entry["name"]: entry["dtype"] for entry in self.metadata["inputs"]}
        outputs = self._run(
            *[np.asarray(inputs[name], dtypes[name]) for name in self.input_names]
        )
        return {
            name: np.asarray(value) for name, value in zip(self.output_names, outputs)
        }


def _random_inputs(
    policy: AbstractPolicy, env: AbstractEnvironment, key: PRNGKeyArray, size: int
) -> tuple[PyTree, Any, PyTree]:
    """Observations drawn from the observation space, random action masks with at
    least one valid action, and carries perturbed from the initial one."""
    observation_key, mask_key, carry_key = jr.split(key, 3)
    observation = jax.vmap(env.observation_space.sample)(
        jr.split(observation_key, size)
    )
    _, timestep = jax.eval_shape(env.reset, jr.key(0))
    mask = None
    if timestep.action_mask is not None:
        mask = jr.bernoulli(mask_key, 0.5, (size, *timestep.action_mask.shape))
        mask = mask.at[
            jnp.arange(size), jr.randint(mask_key, (size,), 0, mask.shape[-1])
        ].set(True)
    carry = None
    if policy.is_recurrent:
        leaves, definition = jtu.tree_flatten(policy.initial_carry())
        keys = jr.split(carry_key, len(leaves))
        carry = jtu.tree_unflatten(
            definition,
            [
                leaf[None] + 0.5 * jr.normal(k, (size, *leaf.shape), leaf.dtype)
                for leaf, k in zip(leaves, keys)
            ],
        )
    return observation, mask, carry


def check_export(
    path: str | os.PathLike,
    policy: AbstractPolicy,
    env: AbstractEnvironment,
    key: PRNGKeyArray,
    num_observations: int = 10_000,
) -> float:
    """The largest difference between an exported file's actions (and next carries)
    and the policy's own, over random observations from the observation space, random
    action masks and perturbed carries.

    **Arguments:**

    - `path`: the exported file.
    - `policy`, `env`: what was exported.
    - `key`: a PRNG key for the random inputs (and for a sampling policy's key).
    - `num_observations`: how many observations, in one batch.

    **Returns:**

    The maximum absolute difference over every output.
    """
    exported = ExportedPolicy(path)
    input_key, sample_key = jr.split(key)
    observation, mask, carry = _random_inputs(policy, env, input_key, num_observations)
    transforms = _action_transforms(env)
    sampled = exported.metadata["sampled"]
    keys = (
        jr.split(sample_key, num_observations)
        if sampled
        else jnp.zeros((num_observations,), jnp.int32)
    )

    @jax.jit
    def reference(carry, observation, mask, keys):
        def one(carry, observation, mask, key):
            if not sampled:
                key = jr.key(0)
            next_carry, action = policy.step(carry, observation, key, mask)
            for transform in transforms:
                action = transform(action)
            return action, next_carry

        action, next_carry = jax.vmap(one)(carry, observation, mask, keys)
        return [action, *jtu.tree_leaves(next_carry)]

    expected = reference(carry, observation, mask, keys)
    inputs = dict(
        zip(
            exported.input_names,
            [
                *jtu.tree_leaves(observation),
                *([] if mask is None else [mask]),
                *jtu.tree_leaves(carry),
                *([jr.key_data(sample_key)] if sampled else []),
            ],
        )
    )
    outputs = exported(**inputs)
    return max(
        float(
            np.max(
                np.abs(
                    np.asarray(outputs[name], np.float64) - np.asarray(want, np.float64)
                ),
                initial=0.0,
            )
        )
        for name, want in zip(exported.output_names, expected)
    )
