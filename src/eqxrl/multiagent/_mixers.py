"""Mixers for cooperative value decomposition: how the agents' values of their
chosen actions combine into the team's value (VDN: a sum; QMIX: a monotonic mixing
network conditioned on the global state)."""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from ..nn import orthogonal_matrices


class AbstractMixer(eqx.Module):
    """Combines the agents' values of their chosen actions into the team's value
    `Q_tot`, for one world (value decomposition: [`VDN`][eqxrl.multiagent.VDN],
    [`QMIX`][eqxrl.multiagent.QMIX])."""

    @abc.abstractmethod
    def __call__(
        self,
        q_values: Float[Array, " num_agents"],
        global_state: Float[Array, " state_size"] | None,
    ) -> Float[Array, ""]:
        """The team's value from each agent's value (and the global state, for
        mixers that read it)."""


class SumMixer(AbstractMixer):
    """VDN's mixer (Sunehag et al., 2018): `Q_tot` is the sum of the agents'
    values. It has no parameters and ignores the global state."""

    def __call__(
        self,
        q_values: Float[Array, " num_agents"],
        global_state: Float[Array, " state_size"] | None = None,
    ) -> Float[Array, ""]:
        del global_state
        return jnp.sum(q_values)


def _zero_bias_linear(weight: Float[Array, "out_size in_size"]) -> eqx.nn.Linear:
    out_size, in_size = weight.shape
    layer = eqx.nn.Linear(in_size, out_size, key=jr.key(0))
    return eqx.tree_at(
        lambda linear: (linear.weight, linear.bias),
        layer,
        (weight, jnp.zeros(out_size, jnp.float32)),
    )


class MonotonicMixer(AbstractMixer):
    """QMIX's mixing network (Rashid et al., 2018): a two-layer network from the
    agents' values to `Q_tot` whose weights and biases are produced by hypernetworks
    reading the global state. The weights are taken in absolute value, so `Q_tot`
    never decreases when one agent's value increases (`dQ_tot / dQ_i >= 0`): the
    agents' greedy actions are the team's greedy joint action.

    As JaxMARL's `qmix_rnn.py`: the first layer's weights (`[num_agents,
    embedding_size]`) and the second's (`[embedding_size]`) come from two-layer
    ReLU hypernetworks with `hypernet_hidden_size` hidden units, the first bias
    from one linear layer, the second (a scalar) from a two-layer ReLU network with
    `embedding_size` hidden units; the hidden layer is an ELU. Every layer starts
    orthogonal with gain `init_scale`, its bias at zero.

    **Arguments:**

    - `num_agents`: the number of agents.
    - `state_size`: the number of entries of the (flattened) global state.
    - `embedding_size`: the mixing network's hidden width (JaxMARL: 32).
    - `hypernet_hidden_size`: the hypernetworks' hidden width (JaxMARL: 128).
    - `init_scale`: the gain of the orthogonal initial weights (JaxMARL: 0.001).
    - `key`: a PRNG key for the initial weights.
    """

    weight_1: tuple[eqx.nn.Linear, eqx.nn.Linear]
    bias_1: eqx.nn.Linear
    weight_2: tuple[eqx.nn.Linear, eqx.nn.Linear]
    bias_2: tuple[eqx.nn.Linear, eqx.nn.Linear]
    num_agents: int = eqx.field(static=True)
    embedding_size: int = eqx.field(static=True)

    def __init__(
        self,
        num_agents: int,
        state_size: int,
        *,
        embedding_size: int = 32,
        hypernet_hidden_size: int = 128,
        init_scale: float | Float[Array, ""] = 0.001,
        key: PRNGKeyArray,
    ):
        for name, value in (
            ("num_agents", num_agents),
            ("state_size", state_size),
            ("embedding_size", embedding_size),
            ("hypernet_hidden_size", hypernet_hidden_size),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"MonotonicMixer: {name}={value!r} must be a positive int."
                )
        hidden, embedding = hypernet_hidden_size, embedding_size
        shapes = [
            (hidden, state_size),
            (embedding * num_agents, hidden),
            (embedding, state_size),
            (hidden, state_size),
            (embedding, hidden),
            (embedding, state_size),
            (1, embedding),
        ]
        weights = orthogonal_matrices(key, shapes, [1.0] * len(shapes))
        layers = [
            _zero_bias_linear(jnp.asarray(init_scale, jnp.float32) * w) for w in weights
        ]
        self.weight_1 = (layers[0], layers[1])
        self.bias_1 = layers[2]
        self.weight_2 = (layers[3], layers[4])
        self.bias_2 = (layers[5], layers[6])
        self.num_agents = num_agents
        self.embedding_size = embedding_size

    def __call__(
        self,
        q_values: Float[Array, " num_agents"],
        global_state: Float[Array, " state_size"] | None,
    ) -> Float[Array, ""]:
        if global_state is None:
            raise ValueError(
                "MonotonicMixer: QMIX's mixer reads the global state; got None."
            )

        def two_layers(layers, x):
            return layers[1](jax.nn.relu(layers[0](x)))

        weight_1 = jnp.abs(two_layers(self.weight_1, global_state))
        weight_1 = weight_1.reshape(self.num_agents, self.embedding_size)
        hidden = jax.nn.elu(q_values @ weight_1 + self.bias_1(global_state))
        weight_2 = jnp.abs(two_layers(self.weight_2, global_state))
        return hidden @ weight_2 + two_layers(self.bias_2, global_state)[0]
