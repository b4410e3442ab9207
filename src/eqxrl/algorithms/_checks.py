"""The contract between an algorithm's network and its environment, checked when the
algorithm is built, from shapes alone (`eqx.filter_eval_shape`: nothing runs)."""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import PRNGKeyArray

from .._shape_memo import memoized_on_shapes
from ..distributions import AbstractActionDistribution, MaskedCategorical
from ..envs import (
    AbstractEnvironment,
    AutoReset,
    Box,
    Discrete,
    check_environment,
    num_agents_of,
    unwrap,
)
from ..nn import AbstractActorCritic, AbstractQNetwork, AbstractQuantileNetwork


@memoized_on_shapes
def _example_timestep(env: AbstractEnvironment) -> Any:
    """The shapes of a timestep of `env`; of one agent's observation and action mask
    in a multi-agent environment (a leading agent axis on those), which is what an
    algorithm's network sees when the algorithm trains one agent."""
    timestep = eqx.filter_eval_shape(env.reset, jr.key(0))[1]
    if num_agents_of(env) is None:
        return timestep

    def first_agent(tree: Any) -> Any:
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), tree)

    return eqx.tree_at(
        lambda t: (t.observation, t.action_mask),
        timestep,
        (first_agent(timestep.observation), first_agent(timestep.action_mask)),
        is_leaf=lambda x: x is None,
    )


def _outputs_on_an_example(actor_critic: Any, env: AbstractEnvironment) -> Any:
    """The shapes of `actor_critic(observation, action_mask)` on an observation of
    `env` (nothing runs)."""
    timestep = _example_timestep(env)
    return eqx.filter_eval_shape(
        lambda net, observation, mask: net(observation, mask),
        actor_critic,
        timestep.observation,
        timestep.action_mask,
    )


def describe(env: AbstractEnvironment) -> str:
    """The innermost environment's class name (e.g. `CartPole`)."""
    return type(unwrap(env)[-1]).__name__


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape)


def _network_shape(
    env: AbstractEnvironment,
    make_network: Callable[[PRNGKeyArray], Any],
    network_factory: Callable[[AbstractEnvironment, PRNGKeyArray], Any] | None,
) -> tuple[str, Any]:
    """Where the network comes from (for messages) and its shapes. A user's factory
    is called directly, not through the algorithm's typed `make_network`, so that a
    wrong return type gets the explanation below rather than a bare type error."""
    if network_factory is None:
        return "the default network", eqx.filter_eval_shape(make_network, jr.key(0))
    return "network_factory", eqx.filter_eval_shape(
        lambda key: network_factory(env, key), jr.key(0)
    )


@memoized_on_shapes
def check_actor_critic(
    owner: str,
    env: AbstractEnvironment,
    make_network: Callable[[PRNGKeyArray], Any],
    network_factory: Callable[[AbstractEnvironment, PRNGKeyArray], Any] | None,
) -> AbstractActorCritic:
    """The environment keeps its contract, and the network (from `network_factory`
    if given, else `make_network`) is an actor-critic whose action distribution
    matches the action space. Returns the network's shapes (nothing runs)."""
    check_environment(env)
    source, network = _network_shape(env, make_network, network_factory)
    if not isinstance(network, AbstractActorCritic):
        raise ValueError(
            f"{owner}: {source} must return an eqxrl.nn.AbstractActorCritic, got "
            f"{type(network).__name__}."
        )
    distribution, value = _outputs_on_an_example(network, env)
    name = f"{source} ({type(network).__name__})"
    if not isinstance(distribution, AbstractActionDistribution):
        raise ValueError(
            f"{owner}: {name} must return (distribution, value) with an "
            "eqxrl.distributions.AbstractActionDistribution, got "
            f"{type(distribution).__name__}."
        )
    if _shape(value) != ():
        raise ValueError(
            f"{owner}: {name} returns a value of shape {_shape(value)} for one "
            "observation; the critic must return a scalar."
        )
    space = env.action_space
    sample = eqx.filter_eval_shape(
        lambda d, key: d.sample(key), distribution, jr.key(0)
    )
    env_name = describe(env)
    if isinstance(space, Discrete):
        if isinstance(distribution, MaskedCategorical):
            num_actions = distribution.categorical.logits.shape[-1]
            if num_actions != space.num_values:
                raise ValueError(
                    f"{owner}: {name} gives a distribution over {num_actions} "
                    f"actions, but {env_name} has the action space "
                    f"Discrete({space.num_values}); build the network with "
                    f"env.action_space.num_values = {space.num_values} actions."
                )
        if _shape(sample) != () or not jnp.issubdtype(sample.dtype, jnp.integer):
            raise ValueError(
                f"{owner}: {name} samples actions of {sample.dtype}"
                f"{list(sample.shape)}, but {env_name} has the action space "
                f"Discrete({space.num_values}), whose actions are int32 scalars."
            )
    elif isinstance(space, Box):
        if _shape(sample) != _shape(space) or not jnp.issubdtype(
            sample.dtype, jnp.floating
        ):
            raise ValueError(
                f"{owner}: {name} samples actions of {sample.dtype}"
                f"{list(sample.shape)}, but {env_name} has a Box action space of "
                f"shape {_shape(space)}; build the network with that action size."
            )
    return network


@memoized_on_shapes
def check_q_network(
    owner: str,
    env: AbstractEnvironment,
    make_network: Callable[[PRNGKeyArray], Any],
    network_factory: Callable[[AbstractEnvironment, PRNGKeyArray], Any] | None,
    quantiles: bool,
    recurrent_allowed: bool = False,
) -> None:
    """The environment keeps its contract, and the network (from `network_factory`
    if given, else `make_network`) gives one value per action of its `Discrete`
    action space; a recurrent network only where `recurrent_allowed` (a learner
    that replays sequences)."""
    check_environment(env)
    source, network = _network_shape(env, make_network, network_factory)
    expected = AbstractQuantileNetwork if quantiles else AbstractQNetwork
    if not isinstance(network, expected):
        raise ValueError(
            f"{owner}: {source} must return an eqxrl.nn.{expected.__name__}, got "
            f"{type(network).__name__}."
        )
    if network.is_recurrent and not recurrent_allowed:
        raise ValueError(
            f"{owner}: {source} returns a recurrent Q-network "
            f"({type(network).__name__}), but {owner} replays single transitions, "
            "so its memory would never be used. Give it a feed-forward network "
            "(e.g. eqxrl.nn.MLPQNetwork); for memory, train PPO with "
            "eqxrl.nn.GRUActorCritic (see the Memory page), or a team with "
            "eqxrl.multiagent.VDN / QMIX, which replay sequences."
        )
    observation = _example_timestep(env).observation
    q_values = eqx.filter_eval_shape(
        lambda net, obs, key: net.q_values(obs, key), network, observation, jr.key(0)
    )
    num_values = env.action_space.num_values
    if _shape(q_values) != (num_values,):
        raise ValueError(
            f"{owner}: {source} ({type(network).__name__}) gives Q-values of shape "
            f"{_shape(q_values)}, but {describe(env)} has the action space "
            f"Discrete({num_values}); build it with {num_values} actions "
            "(env.action_space.num_values)."
        )
    if quantiles:
        fractions = jax.ShapeDtypeStruct((3,), jnp.float32)
        quantile_values = eqx.filter_eval_shape(
            lambda net, obs, taus: net.quantile_values(obs, taus),
            network,
            observation,
            fractions,
        )
        if _shape(quantile_values) != (3, num_values):
            raise ValueError(
                f"{owner}: {source} ({type(network).__name__}) gives quantile values "
                f"of shape {_shape(quantile_values)} for 3 fractions, but needs "
                f"[num_fractions, num_actions] = (3, {num_values})."
            )


def samples_only_valid_actions(model: Any, env: AbstractEnvironment) -> bool:
    """Whether `model`'s actions lie in `env`'s action space by construction, so
    the environment's own action check can be left out of a rollout: true for a
    `Box` space (its check is the environment's clipping, if any) and for a
    `MaskedCategorical` (its number of actions was checked when the algorithm was
    built); false for another distribution over a `Discrete` space, which keeps
    the check."""
    if not isinstance(env.action_space, Discrete):
        return True
    distribution, _ = _outputs_on_an_example(model, env)
    return isinstance(distribution, MaskedCategorical)


def refuse_auto_reset(name: str, env: AbstractEnvironment) -> None:
    """A `ValueError` if `env` is already wrapped in `AutoReset`: the algorithms
    add `AutoReset` (and `EpisodeStatistics`) themselves."""
    for part in unwrap(env):
        if isinstance(part, AutoReset):
            raise ValueError(
                f"{name}: pass the environment without AutoReset; {name} adds "
                "AutoReset and EpisodeStatistics itself."
            )


def refuse_multi_agent(
    name: str,
    env: AbstractEnvironment,
    *,
    independent: bool = True,
    team: str | None = None,
) -> None:
    """A `ValueError` if `env` is a multi-agent environment: an algorithm trains one
    agent; [`Independent`][eqxrl.multiagent.Independent] trains one per agent (of
    the algorithms it supports, `independent`), and `team`, when given, names the
    multi-agent algorithm that wraps this one. Algorithms call it when asked to
    train (`init`), not at construction, so that an algorithm configured on a
    multi-agent environment can be handed to `Independent` (or `team`)."""
    num_agents = num_agents_of(env)
    if num_agents is None:
        return
    what = (
        f"{describe(env)} is a multi-agent environment ({num_agents} agents) and "
        f"{name} trains one agent."
    )
    if team is not None:
        fix = f"Train the agents as a team with {team}."
    elif independent:
        fix = (
            f"Train one {name} per agent with eqxrl.multiagent.Independent("
            f"{name.lower()}) (the command line does so: eqxrl train ENV --algo "
            f"{name.lower()})."
        )
    else:
        fix = (
            f"Independent {name} learners are not supported yet; train one DQN, "
            "IQN or PPO per agent with eqxrl.multiagent.Independent(eqxrl.IQN("
            "env=env))."
        )
    raise ValueError(f"{name}: {what} {fix}")
