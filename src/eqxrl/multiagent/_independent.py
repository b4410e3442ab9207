from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree

from .._filters import scan_or_step
from .._random import split as random_split, uniform as random_uniform
from ..algorithms import (
    IQN,
    PPO,
    AbstractAlgorithm,
    AbstractQLearning,
    PPOState,
    QLearningState,
    ended_episodes,
    epsilon_greedy_collect,
    step_with_truncation_value,
)
from ..buffers import ReplayBuffer
from ..envs import (
    ENV_METRICS,
    AbstractEnvironment,
    Box,
    TimeLimit,
    TimeStep,
    num_agents_of,
    unwrap,
)
from ..nn import AbstractPolicy
from ._agents import (
    AbstractTeamAlgorithm,
    SharedObservations,
    agent_major,
    every_agent_with_index,
    flat_with_agent_index,
    team_episode_metrics,
    without_global_state,
)
from ._policy import IndependentPolicy, SharedPolicy

# The name of the agent axis of learners stacked one per agent, for collectives
# across agents inside their vmapped updates (`jax.lax.pmean(x, AGENT_AXIS)`).
AGENT_AXIS = "agents"


class IndependentState(eqx.Module):
    """Everything an [`Independent`][eqxrl.multiagent.Independent] run carries from
    one iteration to the next.

    **Arguments:**

    - `learners`: the agents' learning states, as the wrapped algorithm's state
      (e.g. a [`QLearningState`][eqxrl.algorithms.QLearningState]: network,
      target network, optimizer state, replay buffer, PRNG key, counters) with a
      leading `num_agents` axis on every array; one unstacked state with
      `share_parameters`. Their `env_state` is `None`, their `timestep` each
      agent's view of the latest timestep of every world.
    - `env_state`: the state of every world, `[num_envs, ...]` leaves.
    - `key`: the PRNG key of the worlds' randomness for the next iteration (the
      agents draw theirs from their own keys).
    - `iteration`: how many iterations have run (int32).
    """

    learners: PyTree
    env_state: PyTree
    key: PRNGKeyArray
    iteration: Int[Array, ""]


def _buffer_axes(buffer: ReplayBuffer, axis: int | None) -> ReplayBuffer:
    """vmap axes of a stack of replay buffers whose rows are written in step:
    `axis` for the stored transitions, none for the shared position and size (so
    that a row is written with `dynamic_update_slice`, not a scatter)."""
    axes = jtu.tree_map(lambda _: axis, buffer)
    return eqx.tree_at(lambda b: (b.position, b.size), axes, (None, None))


def _first_agent_counters(buffer: ReplayBuffer) -> ReplayBuffer:
    return eqx.tree_at(
        lambda b: (b.position, b.size), buffer, (buffer.position[0], buffer.size[0])
    )


def _every_agent_counters(buffer: ReplayBuffer, num_agents: int) -> ReplayBuffer:
    def repeat(x: Array) -> Array:
        return jnp.broadcast_to(x, (num_agents,))

    return eqx.tree_at(
        lambda b: (b.position, b.size),
        buffer,
        (repeat(buffer.position), repeat(buffer.size)),
    )


class AbstractPerAgentLearners(AbstractTeamAlgorithm[IndependentState]):
    """Learners for the agents of a multi-agent environment, one per agent stacked
    on a leading agent axis (or one shared by all agents), trained together in one
    compiled program: what [`Independent`][eqxrl.multiagent.Independent] and
    [`MAPPO`][eqxrl.multiagent.MAPPO] share (the rollout of every world with every
    agent acting, the per-agent views and layouts, the updates vmapped over agents,
    the metrics and policies).

    Subclasses declare `algorithm` (the single-agent algorithm every learner runs,
    configured on the multi-agent environment) and `share_parameters`, and may
    change what each learner reads (`learner`, `_agent_inputs`, `_views`).
    """

    algorithm: eqx.AbstractVar[AbstractAlgorithm]
    share_parameters: eqx.AbstractVar[bool]

    @property
    def one_network(self) -> bool:
        """Whether one learner serves every agent (the agents on its batch axis)
        rather than one learner per agent on the agent axis: `share_parameters`."""
        return self.share_parameters

    def _initial_learners(self, learners: PyTree) -> PyTree:
        """The learners as `init` leaves them, after each was initialized (a hook:
        as they are)."""
        return learners

    def _check_multi_agent_environment(self) -> None:
        """The algorithm's environment has several agents."""
        owner = type(self).__name__
        name = type(self.algorithm).__name__
        env = getattr(self.algorithm, "env", None)
        if not isinstance(env, AbstractEnvironment) or num_agents_of(env) is None:
            described = type(unwrap(env)[-1]).__name__ if env is not None else "None"
            raise ValueError(
                f"{owner}: {name}'s environment ({described}) has a single "
                f"agent; train {name} itself, or give it a multi-agent environment "
                "(eqxrl.envs.AbstractMultiAgentEnvironment, e.g. "
                "eqxrl.envs.make('TreasureHunt-v0'))."
            )

    def _check_sequence_minibatches(self) -> None:
        """A recurrent network learns from minibatches of whole sequences: the
        learner's columns (the worlds, or every agent of every world with
        `share_parameters`) must split evenly into `num_minibatches`."""
        learner = self.learner
        network = eqx.filter_eval_shape(learner.make_network, jax.random.key(0))
        if not network.is_recurrent:
            return
        columns = self.num_envs
        described = f"num_envs={columns} worlds"
        if self.one_network:
            columns *= self.num_agents
            described = (
                f"{columns} columns (num_envs={self.num_envs} worlds x "
                f"{self.num_agents} agents)"
            )
        if columns % learner.num_minibatches:
            raise ValueError(
                f"{type(self).__name__}: the recurrent {type(network).__name__} "
                "learns from "
                "whole sequences, in minibatches of its learner's columns: "
                f"num_minibatches={learner.num_minibatches} must divide the "
                f"{described}; choose num_minibatches among the divisors of "
                f"{columns}."
            )

    # ------------------------------------------------------------------ config
    @property
    def learner(self) -> AbstractQLearning | PPO:
        """The algorithm as each learner uses it: `algorithm` itself, or with
        `share_parameters` the algorithm on the shared network's view of the
        environment (a flattened observation and the one-hot agent index), which
        builds the shared network."""
        if not self.one_network:
            return self.algorithm
        view = SharedObservations(self.env, self.num_agents)
        return eqx.tree_at(lambda a: a.env, self.algorithm, view)

    def _agent_inputs(self, timestep: TimeStep) -> PyTree[Array]:
        """What every agent's network reads of one world's timestep (`[num_agents,
        ...]` leaves): its observation, flattened with its one-hot index when the
        agents share a network."""
        if self.one_network:
            return every_agent_with_index(timestep.observation, self.num_agents)
        return timestep.observation

    def _views(self, timestep: TimeStep) -> TimeStep:
        """The learners' views of a batch of world timesteps (without the global
        state, which independent learners do not read)."""
        timestep = without_global_state(timestep)
        if self.one_network:
            return flat_with_agent_index(timestep, self.num_agents)
        return agent_major(timestep, self.num_agents)

    # ------------------------------------------------------------------- state
    def init(self, key: PRNGKeyArray) -> IndependentState:
        reset_key, learner_key, state_key = jax.random.split(key, 3)
        env_state, timestep = jax.vmap(self.algorithm.training_env.reset)(
            jax.random.split(reset_key, self.num_envs)
        )
        views = self._views(timestep)
        learner = self.learner
        if self.one_network:
            learners = learner.init_learner(learner_key, views)
        else:
            keys = jax.random.split(learner_key, self.num_agents)
            learners = eqx.filter_vmap(learner.init_learner)(keys, views)
            learners = self._initial_learners(learners)
        return IndependentState(
            learners=learners,
            env_state=env_state,
            key=state_key,
            iteration=jnp.int32(0),
        )

    def environment_axes(self, state: IndependentState) -> PyTree[int]:
        """Worlds come first in the world states; in the learners, where the
        algorithm puts its environments (e.g. second in a replay buffer's
        `[capacity, num_envs, ...]` rows), one axis later behind the agent axis
        (with `share_parameters`, the agents are part of the environment axis)."""
        axes = jax.tree.map(lambda _: -1, state)
        # The algorithm's axes depend on its state's structure, not on shapes, so
        # a stack of states gets the axes of one.
        learner_axes = self.learner.environment_axes(state.learners)
        if not self.one_network:
            learner_axes = jax.tree.map(lambda a: a + 1 if a >= 0 else a, learner_axes)
        return eqx.tree_at(
            lambda tree: (tree.env_state, tree.learners),
            axes,
            (jax.tree.map(lambda _: 0, state.env_state), learner_axes),
        )

    def policy(
        self,
        state: IndependentState,
        deterministic: bool = False,
        agent: int | None = None,
    ) -> AbstractPolicy:
        """The agents' policy, from a training state.

        **Arguments:**

        - `state`: a training state.
        - `deterministic`: act greedily instead of exploring.
        - `agent`: `None` for the joint policy (one multi-agent observation in, one
          action per agent out), or an agent index for that agent's policy alone
          (one agent's observation in, its action out: for evaluation or export).

        **Returns:**

        An [`IndependentPolicy`][eqxrl.multiagent.IndependentPolicy] (the agents'
        policies stacked) or a [`SharedPolicy`][eqxrl.multiagent.SharedPolicy]
        with `share_parameters`; with `agent`, agent `agent`'s policy.
        """
        num_agents = self.num_agents
        if agent is not None and not (
            isinstance(agent, int) and 0 <= agent < num_agents
        ):
            raise ValueError(
                f"Independent.policy: agent={agent!r} must be an int in "
                f"[0, {num_agents})."
            )
        learner = self.learner
        if self.one_network:
            shared = learner.policy(state.learners, deterministic)
            return SharedPolicy(shared, num_agents, agent)
        if agent is not None:
            one = jax.tree.map(
                lambda x: x[agent] if eqx.is_array(x) else x, state.learners
            )
            return learner.policy(one, deterministic)
        policies = eqx.filter_vmap(lambda s: learner.policy(s, deterministic))(
            state.learners
        )
        return IndependentPolicy(policies, num_agents)

    def diverged(
        self, state: IndependentState, metrics: dict[str, Array]
    ) -> Bool[Array, ""]:
        """Whether any learner diverged (the algorithm's `diverged`, per agent)."""
        learner = self.learner
        own = {key: metrics[key] for key in self._learner_metric_names(state, metrics)}
        if self.one_network:
            return learner.diverged(state.learners, own)
        return jnp.any(eqx.filter_vmap(learner.diverged)(state.learners, own))

    def _learner_metric_names(
        self, state: IndependentState, metrics: dict[str, Array]
    ) -> list[str]:
        """The metrics of the learners' updates: not the worlds' (their episodes,
        and the environment's own metrics, which every learner's view holds)."""
        worlds = {"episode_return", "total_episode_return"}
        worlds |= {"episode_length", "episode_count"}
        worlds |= set(state.learners.timestep.extras.get(ENV_METRICS, {}))
        return [key for key in metrics if key not in worlds]

    # --------------------------------------------------------------- iteration
    def train_iteration(
        self, state: IndependentState
    ) -> tuple[IndependentState, dict[str, Array]]:
        """Step `num_envs` worlds with every agent acting (`train_frequency` times
        for DQN and IQN, `num_steps` for PPO), then run every agent's updates.

        **Returns:**

        `(state, metrics)`; see the class for the metrics.
        """
        if isinstance(self.algorithm, PPO):
            return self._policy_gradient_iteration(state)
        return self._value_based_iteration(state)

    def _for_every_agent(self, function, in_axes, out_axes=0):
        """`function` for every agent: vmapped over the agent axis, or as it is
        when the agents share one learner."""
        if self.one_network:
            return function
        return eqx.filter_vmap(
            function, in_axes=in_axes, out_axes=out_axes, axis_name=AGENT_AXIS
        )

    def _joint_action(self, action: Array) -> Array:
        """The learners' actions (`[num_agents, num_envs, ...]`, or `[num_envs *
        num_agents, ...]` when shared) as the worlds take them, `[num_envs,
        num_agents, ...]`."""
        if self.one_network:
            return action.reshape(self.num_envs, self.num_agents, *action.shape[1:])
        return jnp.swapaxes(action, 0, 1)

    def _learner_columns(self, x: Array) -> Array:
        """A per-agent quantity of every world (`[num_envs, num_agents, ...]`) as
        the learners hold it (the inverse of `_joint_action`)."""
        if self.one_network:
            return x.reshape(self.num_envs * self.num_agents, *x.shape[2:])
        return jnp.swapaxes(x, 0, 1)

    def _value_based_iteration(
        self, state: IndependentState
    ) -> tuple[IndependentState, dict[str, Array]]:
        learner = self.learner
        num_agents, num_envs = self.num_agents, self.num_envs
        num_steps = learner.train_frequency
        shared = self.one_network
        learners: QLearningState = state.learners

        agents = self._for_every_agent

        # The worlds' randomness from the run's key; each agent's from its own.
        key, step_key = random_split(state.key)
        columns = num_envs * num_agents if shared else num_envs
        shape = (num_steps, columns)

        def agent_keys(agent_key: PRNGKeyArray):
            next_key, value_key, uniform_key, sample_key, loss_key = random_split(
                agent_key, 5
            )
            return (
                next_key,
                random_split(value_key, shape),
                random_uniform(uniform_key, shape),
                sample_key,
                loss_key,
            )

        next_keys, value_keys, uniforms, sample_keys, loss_keys = agents(
            agent_keys, in_axes=0
        )(learners.key)
        step_keys = random_split(step_key, (num_steps, num_envs))
        if not shared:  # steps first, as the scan wants them
            value_keys, uniforms = (
                jnp.swapaxes(x, 0, 1) for x in (value_keys, uniforms)
            )

        buffer = learners.buffer if shared else _first_agent_counters(learners.buffer)
        buffer_axes = _buffer_axes(buffer, 0)
        act = agents(learner.act, in_axes=(0, 0, None, 0, 0))
        store = agents(
            learner.store, in_axes=(buffer_axes, 0, 0, 0), out_axes=(buffer_axes, 0)
        )
        step_worlds = jax.vmap(self.algorithm.training_env.step)

        def act_every_agent(carry, views, env_steps, value_keys, uniforms):
            action = act(learners.network, views, env_steps, value_keys, uniforms)
            return carry, action

        def step_with_joint_action(env_state, action, step_keys):
            return step_worlds(env_state, self._joint_action(action), step_keys)

        def record(buffer, views, action, timestep):
            next_views = self._views(timestep)
            buffer, statistics = store(buffer, views, action, next_views)
            episodes = ended_episodes(timestep)
            invalid = statistics.get("invalid_action")
            return buffer, next_views, (episodes, invalid)

        first_step = state.iteration * self.steps_per_iteration
        (env_state, views, buffer, _), (episodes, invalid) = epsilon_greedy_collect(
            act_every_agent,
            step_with_joint_action,
            record,
            (state.env_state, learners.timestep, buffer, None),
            (jnp.arange(num_steps, dtype=jnp.int32), value_keys, uniforms, step_keys),
            first_step,
            num_envs,
        )

        collected = (state.iteration + 1) * self.steps_per_iteration
        learning = collected >= learner.learning_starts
        # Every agent has made the same number of updates.
        num_updates = learners.num_updates if shared else learners.num_updates[0]
        learn = agents(
            learner.learn,
            in_axes=(0, 0, 0, buffer_axes, None, None, 0, 0),
            out_axes=(0, 0, 0, None, 0),
        )
        network, target_network, optimizer_state, num_updates, metrics = learn(
            learners.network,
            learners.target_network,
            learners.optimizer_state,
            buffer,
            learning,
            num_updates,
            sample_keys,
            loss_keys,
        )
        epsilon = learner.epsilon(collected - num_envs)
        learning_rate = agents(learner.current_learning_rate, in_axes=0)(
            optimizer_state
        )
        if not shared:
            buffer = _every_agent_counters(buffer, num_agents)
            num_updates = jnp.broadcast_to(num_updates, (num_agents,))
            epsilon = jnp.broadcast_to(epsilon, (num_agents,))
        metrics = {**metrics, "epsilon": epsilon, "learning_rate": learning_rate}
        if invalid is not None:  # [steps, agents, worlds] or [steps, worlds * agents]
            if shared:
                invalid = invalid.reshape(num_steps, num_envs, num_agents)
                invalid = jnp.swapaxes(invalid, 1, 2)
            count = jnp.sum(invalid, axis=(0, 2)).astype(jnp.int32)
            metrics["invalid_action_count"] = count
        metrics.update(team_episode_metrics(*episodes))

        # Through tree_at: a stack of states would fail QLearningState's
        # per-learner shape checks.
        learners = eqx.tree_at(
            lambda s: (
                s.network,
                s.target_network,
                s.optimizer_state,
                s.buffer,
                s.timestep,
                s.key,
                s.iteration,
                s.num_updates,
            ),
            learners,
            (
                network,
                target_network,
                optimizer_state,
                buffer,
                views,
                next_keys,
                learners.iteration + 1,
                num_updates,
            ),
        )
        return IndependentState(learners, env_state, key, state.iteration + 1), metrics

    def _policy_gradient_iteration(
        self, state: IndependentState
    ) -> tuple[IndependentState, dict[str, Array]]:
        """Independent PPO: roll out `num_steps` steps of `num_envs` worlds with
        every agent acting, then every agent learns from its own share of the
        rollout (PPO's `learn`, vmapped over agents)."""
        ppo: PPO = self.learner
        num_agents, num_envs, num_steps = self.num_agents, self.num_envs, ppo.num_steps
        shared = self.one_network
        agents = self._for_every_agent
        learners: PPOState = state.learners

        # The worlds' randomness from the run's key; each agent's from its own.
        key, step_key = random_split(state.key)
        columns = num_envs * num_agents if shared else num_envs

        def agent_keys(agent_key: PRNGKeyArray):
            next_key, action_key, update_key = random_split(agent_key, 3)
            return next_key, random_split(action_key, (num_steps, columns)), update_key

        next_keys, action_keys, update_keys = agents(agent_keys, in_axes=0)(
            learners.key
        )
        if not shared:  # steps first, as the scan wants them
            action_keys = jnp.swapaxes(action_keys, 0, 1)
        step_keys = random_split(step_key, (num_steps, num_envs))
        models = agents(ppo.acting_model, in_axes=0)(
            learners.model, learners.observation_statistics
        )

        def step_world(env_state, action, key, world_carry):
            def truncation_values(final: TimeStep) -> Float[Array, " num_agents"]:
                # Each agent's value of its own final observation, for one world
                # whose episode was truncated (PPO's bootstrap), read with the
                # agent's carry (recurrent networks).
                views = self._agent_inputs(final)
                if shared:
                    return jax.vmap(models.step_value)(world_carry, views)
                return eqx.filter_vmap(lambda m, c, o: m.step_value(c, o))(
                    models, world_carry, views
                )

            return step_with_truncation_value(
                self.env, truncation_values, env_state, action, key
            )

        step_worlds = jax.vmap(step_world)
        act = agents(ppo.act, in_axes=(0, 0, 0, 0))
        record = agents(ppo.transition, in_axes=0)
        # Recurrent networks: the carries each agent's first step reads.
        segment_carry = agents(ppo.starting_carries, in_axes=(0, 0, 0))(
            learners.model, learners.carry, learners.timestep
        )

        def step(carry, inputs):
            env_state, views, network_carry = carry
            action_keys, step_keys = inputs
            network_carry, stored_action, action, log_prob, value = act(
                models, views, action_keys, network_carry
            )
            env_state, timestep, truncation = step_worlds(
                env_state,
                self._joint_action(action),
                step_keys,
                jax.tree.map(self._joint_action, network_carry),
            )
            truncation = self._learner_columns(truncation)
            next_views = self._views(timestep)
            transition = record(views, stored_action, log_prob, value, next_views)
            return (env_state, next_views, network_carry), (
                transition,
                truncation,
                ended_episodes(timestep),
            )

        one_model = (
            models
            if shared
            else jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, models)
        )
        with ppo.rollout_context(one_model, columns):
            (env_state, views, carry), (transitions, truncation, episode) = (
                scan_or_step(
                    step,
                    (state.env_state, learners.timestep, learners.carry),
                    (action_keys, step_keys),
                )
            )
        if not shared:  # [steps, agents, ...] to each agent's [steps, ...]
            transitions, truncation = jax.tree.map(
                lambda x: jnp.swapaxes(x, 0, 1), (transitions, truncation)
            )

        # Through tree_at: a stack of states would fail PPOState's per-learner
        # shape checks.
        learners = eqx.tree_at(
            lambda s: (s.timestep, s.key, s.carry),
            learners,
            (views, next_keys, carry),
            is_leaf=lambda x: x is None,
        )
        learn = agents(ppo.learn, in_axes=(0, 0, 0, 0, 0))
        learners, metrics = learn(
            learners, transitions, truncation, update_keys, segment_carry
        )

        # Episodes are the worlds' (learn's are each agent's view of them).
        metrics.update(team_episode_metrics(*episode))
        if shared and "invalid_action_count" in metrics:
            # Per agent, as independent learners count them (learn's is the total).
            valid = jnp.take_along_axis(
                transitions.action_mask, transitions.action[..., None], axis=-1
            )[..., 0]
            invalid = ~valid.reshape(num_steps, num_envs, num_agents)
            count = jnp.sum(invalid, axis=(0, 1)).astype(jnp.int32)
            metrics["invalid_action_count"] = count
        return IndependentState(learners, env_state, key, state.iteration + 1), metrics


class Independent(AbstractPerAgentLearners):
    """Independent learners: one copy of a single-agent algorithm per agent of a
    multi-agent environment, all trained in one compiled program.

    `algorithm` is a value-based algorithm ([`DQN`][eqxrl.DQN],
    [`IQN`][eqxrl.IQN]) or [`PPO`][eqxrl.PPO] (independent PPO, "IPPO"),
    configured on the multi-agent environment (its spaces describe one agent, see
    [multi-agent environments][multi-agent]); its hyperparameters apply to every
    agent. Each agent gets its own network, optimizer state, replay buffer or
    running statistics, exploration schedule and PRNG key, stored as one stacked
    Equinox module with a leading agent axis
    ([`IndependentState`][eqxrl.multiagent.IndependentState]`.learners`).

    An iteration steps `num_envs` worlds (`train_frequency` times for DQN and IQN,
    `num_steps` times for PPO): every agent acts on its own observation (the
    agents' acting vmapped), the worlds step with the joint action, every agent
    records its own transition; then every agent runs its updates (vmapped over
    agents: DQN's and IQN's gradient steps on its replay buffer, PPO's epochs on its
    own share of the rollout). An agent's randomness comes from its own key only,
    so agent `i` learns exactly what it would learn alone with the same keys and
    the same co-players' actions.

    With `share_parameters`, one network serves every agent instead: each agent's
    observation is flattened with its one-hot agent index appended (a `Box`
    observation space is needed), the agents are the network's batch (`num_envs *
    num_agents` columns of one replay buffer or rollout), and one learner runs its
    updates over the transitions of all agents (the usual "parameter-shared IPPO"
    of JaxMARL's baselines, plus the agent index).

    **Arguments:**

    - `algorithm`: the single-agent algorithm, configured on the multi-agent
      environment (`algorithm.env`).
    - `share_parameters`: one network for all agents, the agent index as an input.

    Metrics per iteration: `episode_return` (`[num_agents]`: each agent's mean
    return over the episodes that ended), `total_episode_return` (their sum, the
    team's return), `episode_length` and `episode_count`, and the algorithm's own
    metrics (`loss`, `q_value`, `epsilon`, `learning_rate`; PPO's losses,
    `entropy`, `approx_kl`, ...), per agent (`[num_agents]`) or of the shared
    learner (scalars).

    !!! example

        ```python
        env = eqxrl.envs.make("TreasureHunt-v0")
        iqn = eqxrl.IQN(env=env, num_envs=16, total_timesteps=200_000)
        learners = eqxrl.multiagent.Independent(iqn)
        state, metrics = learners.train(jax.random.key(0))
        metrics["episode_return"].shape  # (num_iterations, 2)
        policy = learners.policy(state, deterministic=True)  # every agent
        policy_0 = learners.policy(state, deterministic=True, agent=0)
        ```
    """

    algorithm: AbstractAlgorithm
    share_parameters: bool = eqx.field(static=True, default=False)

    @classmethod
    def from_sorrel(
        cls,
        env: AbstractEnvironment,
        *,
        num_epochs: int = 1000,
        num_envs: int = 1,
        share_parameters: bool = False,
        **overrides: Any,
    ) -> "Independent":
        """Independent IQN learners with the agents of Sorrel's `treasurehunt` example
        (Sorrel 1.6.0's `iRainbowModel` as `treasurehunt/env.py` configures it).

        Every agent has its own IQN: a 250-unit ReLU layer on the flattened stacked
        views, a cosine embedding of 64 features, then noisy layers (independent
        Gaussian noise, `sigma_init` 0.017, none when acting): a hidden one of 250 units
        and a dueling head; 12 fractions for acting, for the prediction and for the
        target; the quantile Huber loss with `kappa` 1 averaged over all fraction pairs
        (`quantile_loss="mean"`); double-Q 1-step targets with `gamma` 0.99; Adam
        (2.5e-4, eps 1e-8) after clipping the gradient norm to 1; soft target updates
        with `tau` 0.001 after every update plus a copy every 200 updates; a replay
        buffer of 1,024 transitions per world; minibatches of 64; epsilon-greedy from
        0.6, multiplied by 0.9995 after every epoch (no floor), from the first step.

        Sorrel's schedule is an epoch (one episode of the environment's time limit,
        100 turns) then one gradient step per agent: here one iteration steps every
        world through one episode (`train_frequency` = the time limit) and each agent
        takes one gradient step. With `num_envs` worlds an iteration holds `num_envs`
        epochs and still one step per agent (raise `gradient_steps` to keep Sorrel's
        ratio).

        What differs from Sorrel: minibatches are drawn with replacement; the
        observation is the environment's frame stack (Sorrel's own, see
        [`TreasureHunt`][eqxrl.envs.TreasureHunt]), stored whole in the replay buffer
        with the next one, so no transition straddles two epochs (Sorrel's buffer
        masks those out of the loss); episodes end by truncation, which bootstraps, as
        Sorrel's never-done transitions do.

        **Arguments:**

        - `env`: the multi-agent environment with its time limit, e.g.
          `eqxrl.envs.make("TreasureHunt-v0")`.
        - `num_epochs`: episodes per world (iterations) of the run; Sorrel's 1,000.
        - `num_envs`: worlds stepped in parallel (Sorrel: one).
        - `share_parameters`: one network for all agents (see
          [`Independent`][eqxrl.multiagent.Independent]).
        - `**overrides`: any other [`IQN`][eqxrl.IQN] argument, replacing the above.

        **Returns:**

        The [`Independent`][eqxrl.multiagent.Independent] learners.

        !!! example

            ```python
            env = eqxrl.envs.make("TreasureHunt-v0")
            learners = eqxrl.multiagent.Independent.from_sorrel(env)
            state, metrics = learners.train(jax.random.key(0))
            metrics["total_episode_return"]  # per epoch, both agents together
            ```
        """
        turns = None
        for inner in unwrap(env):
            if isinstance(inner, TimeLimit):
                turns = inner.max_episode_steps
                break
        if turns is None:
            raise ValueError(
                "Independent.from_sorrel: the environment has no TimeLimit, so an "
                "epoch has no length; wrap it in eqxrl.envs.TimeLimit(env, turns) "
                "(make adds one)."
            )
        settings: dict[str, Any] = dict(
            num_envs=num_envs,
            total_timesteps=num_epochs * turns * num_envs,
            train_frequency=turns,
            gradient_steps=1,
            buffer_size=1024 * num_envs,
            learning_starts=0,
            batch_size=64,
            n_step=1,
            target_update_interval=1,
            tau=0.001,
            target_copy_interval=200,
            double_q=True,
            learning_rate=2.5e-4,
            adam_eps=1e-8,
            max_grad_norm=1.0,
            gamma=0.99,
            exploration_initial_eps=0.6,
            exploration_final_eps=0.0,
            exploration_decay=0.9995,
            hidden_sizes=(250,),
            head_sizes=(250,),
            num_cosines=64,
            num_quantiles=12,
            num_target_quantiles=12,
            num_acting_quantiles=12,
            kappa=1.0,
            quantile_loss="mean",
            dueling=True,
            noisy=True,
            sigma_init=0.017,
        )
        settings.update(overrides)
        return cls(IQN(env=env, **settings), share_parameters=share_parameters)

    def __check_init__(self):
        if not isinstance(self.algorithm, AbstractAlgorithm):
            raise ValueError(
                "Independent: algorithm must be an eqxrl algorithm (e.g. eqxrl.IQN("
                f"env=env)), got {type(self.algorithm).__name__}."
            )
        name = type(self.algorithm).__name__
        if not isinstance(self.algorithm, AbstractQLearning | PPO):
            team = (
                " A cooperative team of PQN agents trains with "
                "eqxrl.multiagent.PQNVDN(pqn) (eqxrl train ENV --algo pqn --mixer "
                "vdn)."
                if name == "PQN"
                else ""
            )
            raise ValueError(
                f"Independent: {name} is not supported yet; independent learners "
                f"are eqxrl.DQN, eqxrl.IQN and eqxrl.PPO.{team}"
            )
        self._check_multi_agent_environment()
        env = self.env
        if self.share_parameters and not isinstance(env.observation_space, Box):
            raise ValueError(
                "Independent: share_parameters appends the agent index to a "
                "flattened observation, which needs a Box observation space; this "
                f"one is {type(env.observation_space).__name__}."
            )
        if isinstance(self.algorithm, PPO):
            self._check_sequence_minibatches()
        else:
            network = eqx.filter_eval_shape(
                self.learner.make_network, jax.random.key(0)
            )
            if network.is_recurrent:
                raise ValueError(
                    f"Independent: {name}'s network ({type(network).__name__}) is "
                    f"recurrent, but independent {name} learners replay single "
                    "transitions, so its memory would never be used. Give it a "
                    "feed-forward network, or train the team with "
                    "eqxrl.multiagent.VDN / QMIX, which replay sequences."
                )
