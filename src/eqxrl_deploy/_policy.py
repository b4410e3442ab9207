"""An exported ONNX policy, run with onnxruntime and NumPy alone."""

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np


class DeployError(ValueError):
    """A policy file or an input that `eqxrl_deploy` cannot use, with the reason and
    the way out."""


def _dimensions(shape: list[Any]) -> tuple[int, ...]:
    """The per-example shape of an input: its JSON shape without the batch axis."""
    return tuple(int(size) for size in shape[1:])


class OnnxPolicy:
    """A policy written by `eqxrl.export_policy(policy, path, "onnx", env=env)`, run
    with onnxruntime: no JAX, no eqxrl.

    Calling it maps an observation to the action the environment takes (the export
    holds the observation normalizer, the network, the greedy choice, tanh squashing
    and the environment's action wrappers). A recurrent policy keeps its carry between
    calls: call [`reset`][eqxrl_deploy.OnnxPolicy.reset] at the start of every
    episode.

    **Arguments:**

    - `path`: the `.onnx` file; its description, `path` + `.json`, must be beside it.
    - `providers`: onnxruntime's execution providers (default: the CPU one).

    **Raises:**

    `DeployError` when the JSON description is missing, the file is not an ONNX
    export, or the export samples its actions (export the greedy policy,
    `algorithm.policy(state, deterministic=True)`).

    !!! example

        ```python
        import eqxrl_deploy

        policy = eqxrl_deploy.OnnxPolicy("policy.onnx")
        policy.reset()
        action = policy(observation)  # float32 [action_size]
        ```
    """

    def __init__(self, path: str | os.PathLike, providers: list[str] | None = None):
        self.path = Path(path)
        description = Path(f"{self.path}.json")
        if not self.path.is_file():
            raise DeployError(f"OnnxPolicy: no policy file at {self.path}.")
        if not description.is_file():
            raise DeployError(
                f"OnnxPolicy: no {description.name} beside {self.path}; "
                "eqxrl.export_policy writes both files: copy them together."
            )
        self.metadata: dict[str, Any] = json.loads(description.read_text())
        if self.metadata.get("format", "onnx") != "onnx":
            raise DeployError(
                f"OnnxPolicy: {self.path.name} is a {self.metadata['format']!r} "
                "export; export with format='onnx' to run it with onnxruntime."
            )
        if self.metadata.get("sampled", False):
            raise DeployError(
                f"OnnxPolicy: {self.path.name} samples its actions (it takes a "
                "`key`); export the greedy policy, algorithm.policy(state, "
                "deterministic=True)."
            )
        import onnxruntime

        self._session = onnxruntime.InferenceSession(
            str(self.path), providers=providers or ["CPUExecutionProvider"]
        )
        inputs = self.metadata["inputs"]
        self._observation_inputs = {
            entry["name"]: entry
            for entry in inputs
            if entry["name"] == "observation"
            or entry["name"].startswith("observation.")
        }
        self._mask_input = next(
            (entry for entry in inputs if entry["name"] == "action_mask"), None
        )
        self._carry_inputs = {
            entry["name"]: entry
            for entry in inputs
            if entry["name"].startswith("carry.") or entry["name"] == "carry"
        }
        self._output_names = list(self.metadata["outputs"])
        self._carry: dict[str, np.ndarray] | None = None

    @property
    def is_recurrent(self) -> bool:
        """Whether the policy keeps a carry between calls."""
        return bool(self._carry_inputs)

    @property
    def carry(self) -> dict[str, np.ndarray] | None:
        """The carry the next call feeds, by input name (`carry.<...>`, each with a
        leading batch axis); `None` before the first call or `reset`, `{}` for a
        feed-forward policy."""
        return None if self._carry is None else dict(self._carry)

    @property
    def observation_shape(self) -> tuple[int, ...]:
        """The shape of one observation (without a batch axis), for an array
        observation."""
        if "observation" not in self._observation_inputs:
            raise DeployError(
                f"OnnxPolicy: {self.path.name} takes a structured observation "
                f"({sorted(self._observation_inputs)}), not one array."
            )
        return _dimensions(self._observation_inputs["observation"]["shape"])

    @property
    def action_space(self) -> dict[str, Any]:
        """The action space, as the JSON describes it (`type`, and `shape`, `low`,
        `high` for a `Box` or `num_values` for a `Discrete`)."""
        return self.metadata["action_space"]

    def reset(self, batch_size: int = 1) -> None:
        """Start new episodes: the carry of a recurrent policy becomes the export's
        initial carry, for `batch_size` rows (a feed-forward policy has none).

        **Arguments:**

        - `batch_size`: how many observations each later call passes (1 for one
          unbatched observation).
        """
        self._carry = {
            name: np.broadcast_to(
                np.asarray(self.metadata["initial_carry"][name], entry["dtype"]),
                (batch_size, *_dimensions(entry["shape"])),
            ).copy()
            for name, entry in self._carry_inputs.items()
        }

    def _observation_feed(self, observation: Any) -> tuple[dict[str, Any], bool, int]:
        """The observation inputs by name, whether the call was batched, the batch
        size."""
        if "observation" in self._observation_inputs:
            arrays = {"observation": observation}
        elif isinstance(observation, Mapping):
            arrays = {f"observation.{key}": value for key, value in observation.items()}
            names = sorted(self._observation_inputs)
            if sorted(arrays) != names:
                raise DeployError(
                    f"OnnxPolicy: {self.path.name} takes observation keys "
                    f"{[name.removeprefix('observation.') for name in names]}, not "
                    f"{sorted(observation)}."
                )
        else:
            raise DeployError(
                f"OnnxPolicy: {self.path.name} takes a structured observation: pass "
                "a dict from its keys "
                f"{[n.removeprefix('observation.') for n in self._observation_inputs]}"
                " to arrays."
            )
        feed, batched, size = {}, None, None
        for name, value in arrays.items():
            entry = self._observation_inputs[name]
            expected = _dimensions(entry["shape"])
            value = np.asarray(value, entry["dtype"])
            if value.shape == expected:
                this_batched, value = False, value[None]
            elif value.shape[1:] == expected and value.ndim == len(expected) + 1:
                this_batched = True
            else:
                raise DeployError(
                    f"OnnxPolicy: {name} has shape {value.shape}; {self.path.name} "
                    f"takes {expected} for one observation or (batch, "
                    f"{', '.join(map(str, expected))}) for a batch."
                )
            if batched is not None and (this_batched, len(value)) != (batched, size):
                raise DeployError(
                    "OnnxPolicy: the observation's leaves disagree on the batch size."
                )
            batched, size = this_batched, len(value)
            feed[name] = value
        return feed, bool(batched), int(size)

    def __call__(self, observation: Any, action_mask: Any = None) -> np.ndarray:
        """The action for one observation, or a batch of them.

        **Arguments:**

        - `observation`: one observation (the shape the export takes, e.g.
          `[observation_size]`) or a batch (`[batch, observation_size]`); a dict of
          them for a structured observation. Cast to float32.
        - `action_mask`: the valid actions (bool, with the observation's batch axis or
          without), for an export that takes one; `None` otherwise.

        **Returns:**

        The action: `[action_size]` (or `[]` for a discrete action) for one
        observation, with a leading batch axis for a batch.
        """
        feed, batched, size = self._observation_feed(observation)
        if self._mask_input is not None:
            if action_mask is None:
                raise DeployError(
                    f"OnnxPolicy: {self.path.name} takes an action mask: pass "
                    "action_mask= (bool, True for each valid action)."
                )
            mask = np.asarray(action_mask, np.bool_)
            feed["action_mask"] = mask if batched else mask[None]
        elif action_mask is not None:
            raise DeployError(
                f"OnnxPolicy: {self.path.name} was exported without an action mask; "
                "call it without action_mask."
            )
        if self.is_recurrent:
            if self._carry is None:
                self.reset(size)
            carry_size = len(next(iter(self._carry.values())))
            if carry_size != size:
                raise DeployError(
                    f"OnnxPolicy: the carry holds {carry_size} rows and the call "
                    f"passes {size} observations: call reset(batch_size={size}) "
                    "at the start of the episodes."
                )
            feed.update(self._carry)
        outputs = dict(
            zip(self._output_names, self._session.run(self._output_names, feed))
        )
        if self.is_recurrent:
            self._carry = {name: outputs["next_" + name] for name in self._carry_inputs}
        action = np.asarray(outputs["action"])
        return action if batched else action[0]
