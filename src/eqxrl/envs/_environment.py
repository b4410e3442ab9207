import abc
import inspect
from typing import Any, Generic, TypeVar

import equinox as eqx
import jax
from jaxtyping import Array, PRNGKeyArray, PyTree, UInt8

from ._spaces import AbstractSpace, Box
from ._types import TimeStep

StateT = TypeVar("StateT")

GLOBAL_STATE = "global_state"
"""The `TimeStep.extras` key of a multi-agent environment's global state (see
[`AbstractMultiAgentEnvironment.global_state_space`][eqxrl.envs.AbstractMultiAgentEnvironment.global_state_space])."""

FINAL_GLOBAL_STATE = "final_global_state"
"""The `TimeStep.extras` key where [`AutoReset`][eqxrl.envs.AutoReset] keeps the
global state of the step that ended an episode (`extras["global_state"]` is then
the new episode's), as it keeps `final_observation`."""

ENV_METRICS = "env_metrics"
"""The `TimeStep.extras` key of an environment's own metrics: a dict from names to
float32 scalars that [`PPO`][eqxrl.PPO], [`SAC`][eqxrl.SAC], [`TD3`][eqxrl.TD3],
[`DQN`][eqxrl.DQN] and [`IQN`][eqxrl.IQN] average over each iteration (every step of
every environment) into their metrics under the same names (PQN and the multi-agent
learners do not read it yet).
[`DomainRandomization`][eqxrl.envs.DomainRandomization] puts the sampled
parameters there (`"domain_parameters/gravity"`, ...) and
[`Curriculum`][eqxrl.envs.Curriculum] its difficulty (`"curriculum/difficulty"`).
A wrapper that adds entries keeps those already there; like every extras key, it
exists from `reset` on."""


class AbstractEnvironment(eqx.Module, Generic[StateT]):
    """A pure-JAX environment: one environment, pure functions, no auto-reset.

    Subclasses hold their parameters as fields (physics constants as arrays, so a
    `jax.vmap` over an environment with batched fields randomizes the domain) and
    implement `reset`, `step` and the two spaces. Batch them with `jax.vmap`; end
    episodes with [`AutoReset`][eqxrl.envs.AutoReset] when a trainer needs it.
    [`check_environment`][eqxrl.envs.check_environment] checks that an
    implementation keeps the contract (the algorithms run it when they are built).
    Environments in which several agents act are
    [`AbstractMultiAgentEnvironment`][eqxrl.envs.AbstractMultiAgentEnvironment]s.

    `jax.jit(env.step)` and `jax.jit(env.reset)` work as with gymnax: the
    environment is hashed by identity and its array fields are compiled in as
    constants. `eqx.filter_jit` (or passing the environment as an argument) keeps
    them as inputs instead, so that one compilation serves environments that differ
    only in their array fields.

    !!! example

        ```python
        env = eqxrl.envs.make("CartPole-v1")
        state, timestep = env.reset(jax.random.key(0))
        state, timestep = env.step(state, jnp.int32(1), jax.random.key(1))
        ```
    """

    def __hash__(self) -> int:
        # Equinox hashes a module by its fields, and array fields are unhashable;
        # `jax.jit(env.step)` hashes the bound method, hence the environment.
        # Identity is a valid hash: equal-but-distinct environments only miss
        # each other's compilation cache. An environment with traced fields (one
        # passed into a compiled function) stays unhashable: JAX's caches compare
        # keys of equal hash, and comparing traced fields has no Python answer.
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(self)):
            raise TypeError(
                f"{type(self).__name__} with traced fields is not hashable: inside "
                "a compiled function, call its methods directly or through "
                "eqx.filter_jit rather than jax.jit."
            )
        return id(self)

    @abc.abstractmethod
    def reset(self, key: PRNGKeyArray) -> tuple[StateT, TimeStep]:
        """Start an episode.

        **Arguments:**

        - `key`: a PRNG key for the initial state.

        **Returns:**

        `(state, timestep)`, with `timestep.reward` zero and both flags `False`.
        """

    @abc.abstractmethod
    def step(
        self, state: StateT, action: PyTree[Any], key: PRNGKeyArray
    ) -> tuple[StateT, TimeStep]:
        """Advance one step.

        **Arguments:**

        - `state`: the state returned by the previous `reset` or `step`.
        - `action`: one action from `action_space`.
        - `key`: a PRNG key for any randomness of the transition.

        **Returns:**

        `(next_state, timestep)`. Stepping an episode that has ended is allowed but
        its result is unspecified: reset it (or wrap in `AutoReset`).
        """

    def restart(self, state: StateT, key: PRNGKeyArray) -> tuple[StateT, TimeStep]:
        """Start a new episode after the one in `state` has ended.

        [`AutoReset`][eqxrl.envs.AutoReset] calls this rather than `reset`, so that
        what outlives an episode (a [`Curriculum`][eqxrl.envs.Curriculum]'s
        progress) can be read from the ended episode's state and kept. The default
        is `reset(key)`: most environments keep nothing across episodes;
        wrappers forward it to the environment they wrap
        ([`AbstractWrapper.restart`][eqxrl.envs.AbstractWrapper.restart]).

        **Arguments:**

        - `state`: the state of the step that ended the episode.
        - `key`: a PRNG key for the initial state.

        **Returns:**

        `(state, timestep)`, as `reset` returns them.
        """
        del state
        return self.reset(key)

    def render(self, state: StateT) -> UInt8[Array, "height width 3"]:
        """Draw a state as an RGB image, in pure `jax.numpy` (optional).

        Environments that implement it can be watched: `eqxrl eval RUN --gif`, the
        [`Trainer`][eqxrl.Trainer]'s `eval.gif`,
        [`record_episodes`][eqxrl.training.record_episodes]. Implementations are
        jit- and vmap-able (`jax.vmap(env.render)(states)` draws a batch of frames
        inside a compiled program). The default raises `NotImplementedError`.

        **Arguments:**

        - `state`: a state returned by `reset` or `step`.

        **Returns:**

        uint8 `[height, width, 3]`.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not implement render(state), so there is "
            "nothing to draw."
        )

    @property
    @abc.abstractmethod
    def observation_space(self) -> AbstractSpace:
        """The space observations come from."""

    @property
    @abc.abstractmethod
    def action_space(self) -> AbstractSpace:
        """The space actions come from."""


class AbstractWrapper(AbstractEnvironment[StateT]):
    """An environment built around another one, changing part of its behaviour.

    Wrappers compose, e.g. `AutoReset(EpisodeStatistics(TimeLimit(env, 500)))`.
    The spaces are those of the wrapped environment unless a wrapper overrides them;
    `render` draws the wrapped environment's state (found with `inner_state`);
    `num_agents` is the wrapped multi-agent environment's.
    """

    env: eqx.AbstractVar[AbstractEnvironment]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A dataclass field cannot replace the inherited `num_agents` property (the
        # instance could not be built: "property has no setter"), so say so where
        # the class is written.
        if "num_agents" in inspect.get_annotations(cls):
            raise TypeError(
                f"{cls.__name__} declares num_agents as a field, but wrappers "
                "inherit it as a property from AbstractWrapper. A wrapper that "
                "changes the number of agents overrides it with a property: "
                "`@property def num_agents(self) -> int: ...`."
            )

    def inner_state(self, state: PyTree) -> PyTree:
        """The wrapped environment's state inside this wrapper's state.

        The default is the state itself, for wrappers that keep the wrapped state
        as it is; wrappers that hold more (a step count, statistics) override it.
        """
        return state

    def restart(self, state: PyTree, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        """This wrapper's `reset`, with the wrapped environment restarted from its
        part of `state` (found with `inner_state`) instead of reset.

        So a wrapper needs no code of its own for
        [`restart`][eqxrl.envs.AbstractEnvironment.restart] to reach the
        environments it wraps: `AutoReset(EpisodeStatistics(Curriculum(env)))`
        restarts the curriculum through `EpisodeStatistics`. When no environment
        inside overrides `restart`, it is `reset(key)` itself.
        """
        if not any(_keeps_progress(inner) for inner in unwrap(self.env)):
            return self.reset(key)
        restarting = _Restarting(self.env, self.inner_state(state))
        return eqx.tree_at(lambda wrapper: wrapper.env, self, restarting).reset(key)

    def render(self, state: PyTree) -> UInt8[Array, "height width 3"]:
        """The wrapped environment's drawing of the inner state."""
        return self.env.render(self.inner_state(state))

    @property
    def observation_space(self) -> AbstractSpace:
        """The wrapped environment's observation space."""
        return self.env.observation_space

    @property
    def action_space(self) -> AbstractSpace:
        """The wrapped environment's action space."""
        return self.env.action_space

    @property
    def num_agents(self) -> int:
        """The number of agents of the multi-agent environment inside, so that
        `eqxrl.envs.make("TreasureHunt-v0").num_agents` answers through the
        `TimeLimit` around it.

        Wrappers forward this one static fact explicitly, the way they forward the
        spaces, and nothing else (no `__getattr__`: an attribute of the wrapped
        environment is reached with [`unwrap`][eqxrl.envs.unwrap]). Around a
        single-agent environment it raises `AttributeError` naming
        [`num_agents_of`][eqxrl.envs.num_agents_of], which answers for every
        environment (`None` for a single-agent one); `hasattr(env, "num_agents")`
        is then `False`. A wrapper that changes the number of agents overrides this
        property and is an
        [`AbstractMultiAgentEnvironment`][eqxrl.envs.AbstractMultiAgentEnvironment]
        too, so that `num_agents_of` finds it.

        **Returns:**

        The wrapped environment's `num_agents` (a Python int).
        """
        num_agents = num_agents_of(self.env)
        if num_agents is None:
            raise AttributeError(
                f"{type(self).__name__} wraps a single-agent environment "
                f"({type(unwrap(self)[-1]).__name__}), which has no num_agents. "
                "eqxrl.envs.num_agents_of(env) answers for any environment, "
                "wrapped or not: None for a single-agent one."
            )
        return num_agents


def _keeps_progress(env: AbstractEnvironment) -> bool:
    """Whether `env` has a `restart` of its own (one that is not `reset`)."""
    return type(env).restart not in (
        AbstractEnvironment.restart,
        AbstractWrapper.restart,
    )


class _Restarting(AbstractWrapper):
    """An environment whose `reset` restarts it from `state` (what
    `AbstractWrapper.restart` puts in place of the wrapped environment while it
    calls the wrapper's own `reset`)."""

    env: AbstractEnvironment
    state: PyTree

    def reset(self, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        return self.env.restart(self.state, key)

    def step(self, state: PyTree, action, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        return self.env.step(state, action, key)


class AbstractMultiAgentEnvironment(AbstractEnvironment[StateT]):
    """An environment in which `num_agents` agents act at every step.

    The interface of [`AbstractEnvironment`][eqxrl.envs.AbstractEnvironment], with an
    agent axis wherever something is per agent:

    - `step(state, action, key)` takes one action per agent: `action` has a leading
      `num_agents` axis (int32 `[num_agents]` for a `Discrete` action space);
    - `reset` and `step` return a [`TimeStep`][eqxrl.envs.TimeStep] whose
      `observation` leaves, `reward` (float32 `[num_agents]`) and `action_mask`
      (bool `[num_agents, num_actions]`, or `None`) have a leading `num_agents`
      axis, while `terminated` and `truncated` stay bool scalars: an episode ends
      for every agent at once;
    - `observation_space` and `action_space` describe one agent (every agent has the
      same spaces);
    - an environment that declares a global state (a
      [`global_state_space`][eqxrl.envs.AbstractMultiAgentEnvironment.global_state_space]
      other than `None`) puts it in every timestep as
      `timestep.extras["global_state"]` (the key is
      [`GLOBAL_STATE`][eqxrl.envs.GLOBAL_STATE]): one float32 array of that space's
      shape about the whole world, with no agent axis. Centralized critics and
      mixers ([`MAPPO`][eqxrl.multiagent.MAPPO]) read it.

    Subclasses declare `num_agents` (a field or a property: a Python int, since it
    sets shapes). The wrappers ([`TimeLimit`][eqxrl.envs.TimeLimit],
    [`AutoReset`][eqxrl.envs.AutoReset],
    [`EpisodeStatistics`][eqxrl.envs.EpisodeStatistics], which then counts one
    return per agent) work unchanged, and forward `num_agents`
    ([`AbstractWrapper.num_agents`][eqxrl.envs.AbstractWrapper.num_agents]);
    [`num_agents_of`][eqxrl.envs.num_agents_of] answers for any environment, `None`
    for a single-agent one.
    [`check_environment`][eqxrl.envs.check_environment] checks the shapes above.
    See [multi-agent environments][multi-agent].

    !!! example

        ```python
        env = eqxrl.envs.TreasureHunt()  # num_agents=2
        state, timestep = env.reset(jax.random.key(0))
        timestep.reward.shape  # (2,)
        actions = jnp.array([0, 3], jnp.int32)  # agent 0 up, agent 1 right
        state, timestep = env.step(state, actions, jax.random.key(1))
        ```
    """

    num_agents: eqx.AbstractVar[int]

    @property
    def global_state_space(self) -> Box | None:
        """The space of the global state this environment puts in
        `timestep.extras["global_state"]`, or `None` (the default) when it declares
        none.

        The global state describes the whole world for centralized training (a
        critic or a mixer that sees more than any one agent), so it has no agent
        axis: float32 of `global_state_space.shape`. Override this property to
        declare one; [`check_environment`][eqxrl.envs.check_environment] checks the
        extras entry against it, and
        [`global_state_space_of`][eqxrl.envs.global_state_space_of] finds it through
        wrappers.
        """
        return None


def num_agents_of(env: AbstractEnvironment) -> int | None:
    """How many agents act in `env`, looking through wrappers; `None` for a
    single-agent environment.

    The first multi-agent environment
    ([`AbstractMultiAgentEnvironment`][eqxrl.envs.AbstractMultiAgentEnvironment]) in
    the chain from `env` inwards ([`unwrap`][eqxrl.envs.unwrap]) answers, so a
    wrapper that changes the number of agents declares it by being one.

    **Arguments:**

    - `env`: an environment, wrapped or not.

    **Returns:**

    Its `num_agents` (a Python int), or `None` when no environment in the chain is
    multi-agent.

    !!! example

        ```python
        eqxrl.envs.num_agents_of(eqxrl.envs.make("TreasureHunt-v0"))  # 2
        eqxrl.envs.num_agents_of(eqxrl.envs.make("CartPole-v1"))  # None
        ```
    """
    for inner in unwrap(env):
        if isinstance(inner, AbstractMultiAgentEnvironment):
            return inner.num_agents
    return None


def global_state_space_of(env: AbstractEnvironment) -> Box | None:
    """The global state's space of a multi-agent environment, looking through
    wrappers; `None` when it declares none or has a single agent.

    The first multi-agent environment in the chain from `env` inwards answers (as
    for [`num_agents_of`][eqxrl.envs.num_agents_of]).

    **Arguments:**

    - `env`: an environment, wrapped or not.

    **Returns:**

    Its `global_state_space` (a `Box`), or `None`.

    !!! example

        ```python
        env = eqxrl.envs.make("TreasureHunt-v0")
        eqxrl.envs.global_state_space_of(env).shape  # (21, 21, 3): the whole grid
        ```
    """
    for inner in unwrap(env):
        if isinstance(inner, AbstractMultiAgentEnvironment):
            return inner.global_state_space
    return None


def unwrap(env: AbstractEnvironment) -> list[AbstractEnvironment]:
    """The chain of environments from `env` down to the innermost one."""
    chain = [env]
    while isinstance(chain[-1], AbstractWrapper):
        chain.append(chain[-1].env)
    return chain
