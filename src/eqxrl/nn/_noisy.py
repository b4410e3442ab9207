import math
from typing import TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from .._random import split as random_split, uniform as random_uniform

Network = TypeVar("Network")


class NoisyLinear(eqx.Module):
    """A linear layer with learned, independent Gaussian noise on every weight and
    bias (noisy networks, Fortunato et al., 2018), as Sorrel's `NoisyLinear`.

    The layer holds means (`weight`, `bias`) and noise scales (`sigma_weight`,
    `sigma_bias`). Called directly it is the mean layer, `x @ weight.T + bias`: what
    acting and evaluation use (Sorrel acts in PyTorch's eval mode, without noise).
    [`sample_noise`][eqxrl.nn.sample_noise] draws one noisy version of every
    `NoisyLinear` in a network, `weight + sigma_weight * eps` with standard normal
    `eps` (and the same for the bias), for a loss to use; gradients reach both the
    means and the scales through it.

    **Arguments:**

    - `in_features`: inputs of the layer.
    - `out_features`: outputs of the layer.
    - `sigma_init`: the initial noise scale of every weight and bias (Sorrel's
      default 0.017, not scaled by the fan-in).
    - `key`: a PRNG key for the means, uniform in `+-sqrt(3 / in_features)` (as
      Sorrel's).

    !!! example

        ```python
        layer = eqxrl.nn.NoisyLinear(4, 2, key=jax.random.key(0))
        mean = layer(jnp.ones(4))  # no noise
        noisy = eqxrl.nn.sample_noise(layer, jax.random.key(1))(jnp.ones(4))
        ```
    """

    weight: Float[Array, "out_features in_features"]
    bias: Float[Array, " out_features"]
    sigma_weight: Float[Array, "out_features in_features"]
    sigma_bias: Float[Array, " out_features"]

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        sigma_init: Float[ArrayLike, ""] = 0.017,
        key: PRNGKeyArray,
    ):
        for name, value in (
            ("in_features", in_features),
            ("out_features", out_features),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"NoisyLinear: {name}={value!r} must be a positive int."
                )
        bound = math.sqrt(3.0 / in_features)
        weight_key, bias_key = jr.split(key)
        shape = (out_features, in_features)
        self.weight = jr.uniform(weight_key, shape, jnp.float32, -bound, bound)
        self.bias = jr.uniform(bias_key, (out_features,), jnp.float32, -bound, bound)
        sigma = jnp.asarray(sigma_init, jnp.float32)
        self.sigma_weight = jnp.full(shape, sigma, jnp.float32)
        self.sigma_bias = jnp.full((out_features,), sigma, jnp.float32)

    def __check_init__(self):
        if self.sigma_weight.shape != self.weight.shape:
            raise ValueError(
                f"NoisyLinear: sigma_weight has shape {self.sigma_weight.shape}, "
                f"weight {self.weight.shape}; they must match."
            )

    @property
    def in_features(self) -> int:
        """Inputs of the layer."""
        return self.weight.shape[1]

    @property
    def out_features(self) -> int:
        """Outputs of the layer."""
        return self.weight.shape[0]

    def __call__(
        self, x: Float[Array, " in_features"]
    ) -> Float[Array, " out_features"]:
        """The mean layer (no noise) on one input vector."""
        return self.weight @ x + self.bias

    def noisy(self, key: PRNGKeyArray) -> "NoisyLinear":
        """This layer with one draw of its noise added to the means (the scales are
        kept, so the draw can be differentiated with respect to both).

        **Arguments:**

        - `key`: a PRNG key.

        **Returns:**

        A `NoisyLinear` whose `weight` and `bias` are `weight + sigma_weight * eps`
        and `bias + sigma_bias * eps'`, with `eps`, `eps'` standard normal.
        """
        weight_key, bias_key = random_split(key)
        # Computed once: without the barrier XLA fuses the noise's hash and erfinv
        # into the consumers of the weights, recomputing them per use (a noisy IQN
        # update on Sorrel's settings ran 2x slower).
        weight_noise, bias_noise = jax.lax.optimization_barrier(
            (_normal(weight_key, self.weight.shape), _normal(bias_key, self.bias.shape))
        )
        return eqx.tree_at(
            lambda layer: (layer.weight, layer.bias),
            self,
            (
                self.weight + self.sigma_weight * weight_noise,
                self.bias + self.sigma_bias * bias_noise,
            ),
        )


def _normal(key: PRNGKeyArray, shape: tuple[int, ...]) -> Float[Array, "..."]:
    """`jax.random.normal(key, shape)` (the same numbers for threefry keys), with the
    hash computed inline (`eqxrl._random`): XLA's rolled threefry loop made the
    noise most of a noisy IQN's compile time."""
    low = float(np.nextafter(np.float32(-1.0), np.float32(0.0)))
    u = random_uniform(key, shape, minval=low, maxval=1.0)
    return jnp.float32(np.sqrt(2.0)) * jax.scipy.special.erfinv(u)


def _is_noisy(node: object) -> bool:
    return isinstance(node, NoisyLinear)


def has_noisy_layers(network: object) -> bool:
    """Whether a network (any pytree) holds a [`NoisyLinear`][eqxrl.nn.NoisyLinear]
    layer (decided from its structure: nothing runs).

    **Arguments:**

    - `network`: the network.
    """
    return any(_is_noisy(leaf) for leaf in jtu.tree_leaves(network, is_leaf=_is_noisy))


def sample_noise(network: Network, key: PRNGKeyArray) -> Network:
    """`network` with one draw of noise in every
    [`NoisyLinear`][eqxrl.nn.NoisyLinear] layer (each layer its own key), the rest
    unchanged; without noisy layers, `network` itself.

    One draw serves a whole batch: vmap the noisy network over examples, as a
    PyTorch noisy layer samples once per forward pass. Differentiable with respect
    to the means and the noise scales.

    **Arguments:**

    - `network`: the network (any pytree).
    - `key`: a PRNG key.

    **Returns:**

    The network with noisy weights, of the same structure.
    """
    leaves, treedef = jtu.tree_flatten(network, is_leaf=_is_noisy)
    noisy = [index for index, leaf in enumerate(leaves) if _is_noisy(leaf)]
    if not noisy:
        return network
    keys = jr.split(key, len(noisy))
    for layer_key, index in zip(keys, noisy):
        leaves[index] = leaves[index].noisy(layer_key)
    return jtu.tree_unflatten(treedef, leaves)
