from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, PRNGKeyArray

from ..distributions import MaskedCategorical
from ._actor_critic import AbstractActorCritic
from ._cnn import _policy_and_value_heads


class TransformerBlock(eqx.Module):
    """A pre-norm transformer block on a sequence of tokens `[num_tokens, d_model]`:
    `x + attention(norm(x))`, then `x + mlp(norm(x))` (GELU MLP).

    **Arguments:**

    - `d_model`: token width.
    - `num_heads`: attention heads (must divide `d_model`).
    - `mlp_size`: hidden width of the MLP.
    - `key`: a PRNG key for the initial weights.
    """

    attention_norm: eqx.nn.LayerNorm
    attention: eqx.nn.MultiheadAttention
    mlp_norm: eqx.nn.LayerNorm
    mlp_in: eqx.nn.Linear
    mlp_out: eqx.nn.Linear

    def __init__(self, d_model: int, num_heads: int, mlp_size: int, *, key):
        attention_key, in_key, out_key = jr.split(key, 3)
        self.attention_norm = eqx.nn.LayerNorm(d_model)
        self.attention = eqx.nn.MultiheadAttention(
            num_heads,
            d_model,
            use_query_bias=True,
            use_key_bias=True,
            use_value_bias=True,
            use_output_bias=True,
            key=attention_key,
        )
        self.mlp_norm = eqx.nn.LayerNorm(d_model)
        self.mlp_in = eqx.nn.Linear(d_model, mlp_size, key=in_key)
        self.mlp_out = eqx.nn.Linear(mlp_size, d_model, key=out_key)

    def __call__(
        self, tokens: Float[Array, "num_tokens d_model"]
    ) -> Float[Array, "num_tokens d_model"]:
        normed = jax.vmap(self.attention_norm)(tokens)
        tokens = tokens + self.attention(normed, normed, normed)
        normed = jax.vmap(self.mlp_norm)(tokens)
        hidden = jax.nn.gelu(jax.vmap(self.mlp_in)(normed))
        return tokens + jax.vmap(self.mlp_out)(hidden)


class GridTransformerActorCritic(AbstractActorCritic):
    """A transformer actor-critic for grid observations `[height, width, C]`.

    Every cell is a token: its `C` features are embedded linearly and a learned
    positional embedding (one vector per cell) is added. `num_layers` pre-norm blocks
    (multi-head self-attention and a GELU MLP, each in a residual branch) follow, then
    a final layer norm and mean pooling over cells. A linear policy head (masked logits
    through [`MaskedCategorical`][eqxrl.distributions.MaskedCategorical]) and a linear
    value head read the pooled vector; they are orthogonal with gains 0.01 and 1.

    It scales as `num_cells**2 * d_model` per layer: on a CPU the
    [`CNNActorCritic`][eqxrl.nn.CNNActorCritic] trains several times faster.

    **Arguments:**

    - `observation_shape`: `(height, width, channels)` of one observation.
    - `num_actions`: number of discrete actions.
    - `d_model`: token width (default 64).
    - `num_layers`: transformer blocks (default 2).
    - `num_heads`: attention heads per block (default 4; must divide `d_model`).
    - `mlp_size`: hidden width of each block's MLP (default `4 * d_model`).
    - `key`: a PRNG key for the initial weights.

    !!! example

        ```python
        network = eqxrl.nn.GridTransformerActorCritic((10, 10, 3), 4, key=key)
        distribution, value = network(jnp.zeros((10, 10, 3)))
        ```
    """

    embedding: eqx.nn.Linear
    positional_embedding: Float[Array, "num_cells d_model"]
    blocks: list[TransformerBlock]
    final_norm: eqx.nn.LayerNorm
    actor: eqx.nn.Linear
    critic: eqx.nn.Linear

    @classmethod
    def from_env(cls, env: Any, key: PRNGKeyArray) -> "GridTransformerActorCritic":
        """The network with default sizes for an environment's grid observations
        and discrete actions: a `network_factory` for PPO that checkpoints, configs
        and `eqxrl eval` can name (a lambda cannot be rebuilt from a file).

        **Arguments:**

        - `env`: an environment with `[height, width, channels]` observations and a
          `Discrete` action space.
        - `key`: a PRNG key for the initial weights.
        """
        return cls(env.observation_space.shape, env.action_space.num_values, key=key)

    def __init__(
        self,
        observation_shape: Sequence[int],
        num_actions: int,
        *,
        d_model: int = 64,
        num_layers: int = 2,
        num_heads: int = 4,
        mlp_size: int | None = None,
        key: PRNGKeyArray,
    ):
        if len(observation_shape) != 3 or min(observation_shape) < 1:
            raise ValueError(
                "GridTransformerActorCritic: observation_shape must be (height, "
                f"width, channels) with positive entries, got "
                f"{tuple(observation_shape)}."
            )
        if min(num_actions, d_model, num_layers, num_heads) < 1:
            raise ValueError(
                "GridTransformerActorCritic: num_actions, d_model, num_layers and "
                "num_heads must be positive."
            )
        if d_model % num_heads:
            raise ValueError(
                f"GridTransformerActorCritic: num_heads={num_heads} must divide "
                f"d_model={d_model}."
            )
        height, width, channels = observation_shape
        mlp_size = 4 * d_model if mlp_size is None else mlp_size
        embedding_key, position_key, heads_key, *block_keys = jr.split(
            key, 3 + num_layers
        )
        self.embedding = eqx.nn.Linear(channels, d_model, key=embedding_key)
        self.positional_embedding = 0.02 * jr.normal(
            position_key, (height * width, d_model), jnp.float32
        )
        self.blocks = [
            TransformerBlock(d_model, num_heads, mlp_size, key=block_key)
            for block_key in block_keys
        ]
        self.final_norm = eqx.nn.LayerNorm(d_model)
        self.actor, self.critic = _policy_and_value_heads(
            heads_key, d_model, num_actions
        )

    def _features(
        self, observation: Float[Array, "height width channels"]
    ) -> Float[Array, " d_model"]:
        cells = observation.astype(jnp.float32).reshape(-1, observation.shape[-1])
        tokens = jax.vmap(self.embedding)(cells) + self.positional_embedding
        for block in self.blocks:
            tokens = block(tokens)
        return self.final_norm(jnp.mean(tokens, axis=0))

    def __call__(
        self,
        observation: Float[Array, "height width channels"],
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> tuple[MaskedCategorical, Float[Array, ""]]:
        features = self._features(observation)
        return MaskedCategorical(self.actor(features), action_mask), self.critic(
            features
        )[0]

    def value(
        self, observation: Float[Array, "height width channels"]
    ) -> Float[Array, ""]:
        return self.critic(self._features(observation))[0]
