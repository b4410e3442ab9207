"""Value decomposition's shared base: per-agent Q-networks whose chosen-action
values a mixer combines into the team's value, trained end to end on the team reward
in the off-policy iteration with DQN's schedule and updates, from one replay buffer
of joint transitions (of sequences, for recurrent agents)."""

import abc
import dataclasses
import math
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree

from ..algorithms import (
    DQN,
    AbstractAlgorithm,
    AbstractOffPolicyIteration,
    bootstrap_action_value,
    ended_episodes,
    epsilon_greedy_collect,
    epsilon_greedy_draws,
    huber_loss,
)
from ..buffers import ReplayBuffer, ReplaySample, ReplaySequence, ReplayTransition
from ..envs import (
    AbstractEnvironment,
    AutoReset,
    EpisodeStatistics,
    TimeStep,
    global_state_space_of,
)
from ..nn import (
    AbstractPolicy,
    AbstractQNetwork,
    epsilon_greedy_action,
    reset_carry,
    sequence_batch_hint,
)
from ._agents import team_episode_metrics
from ._joint_view import _JointObservation, _JointView
from ._mixers import AbstractMixer
from ._team_q_learning import AbstractTeamQLearning


class ValueDecompositionState(eqx.Module):
    """Everything a [`VDN`][eqxrl.multiagent.VDN] or [`QMIX`][eqxrl.multiagent.QMIX]
    run carries from one iteration to the next.

    **Arguments:**

    - `agents`: the agents' Q-network: one network shared by every agent (the
      one-hot agent index appended to each observation), or with
      `share_parameters=False` one per agent stacked on a leading agent axis.
    - `mixer`: the mixer ([`SumMixer`][eqxrl.multiagent.SumMixer] for VDN,
      [`MonotonicMixer`][eqxrl.multiagent.MonotonicMixer] for QMIX).
    - `target_agents`, `target_mixer`: their slowly updated copies, for targets.
    - `optimizer_state`: optax state of the optimizer of agents and mixer together.
    - `buffer`: the replay buffer of joint transitions (every agent's observation,
      action mask and action, the global state, the team reward), one column per
      world; with recurrent agents, of
      [`ReplaySequence`][eqxrl.buffers.ReplaySequence]s (each world's steps of one
      iteration).
    - `env_state`: the state of every world, `[num_envs, ...]` leaves.
    - `timestep`: the latest timestep of every world.
    - `key`: the PRNG key for the next iteration.
    - `iteration`: how many iterations have run (int32).
    - `num_updates`: how many gradient steps have run (int32).
    - `carry`: with recurrent agents, every agent's carry in every world
      (`[num_envs, num_agents, ...]` leaves), as the last step left it; `None`
      for feed-forward agents.
    """

    agents: AbstractQNetwork
    mixer: AbstractMixer
    target_agents: AbstractQNetwork
    target_mixer: AbstractMixer
    optimizer_state: PyTree
    buffer: ReplayBuffer
    env_state: PyTree
    timestep: TimeStep
    key: PRNGKeyArray
    iteration: Int[Array, ""]
    num_updates: Int[Array, ""]
    carry: PyTree[Array] | None = None


class AbstractValueDecomposition(
    AbstractTeamQLearning[ValueDecompositionState],
    AbstractOffPolicyIteration[ValueDecompositionState],
):
    """What [`VDN`][eqxrl.multiagent.VDN] and [`QMIX`][eqxrl.multiagent.QMIX]
    share: per-agent Q-networks, a mixer, and DQN's off-policy iteration
    ([`AbstractOffPolicyIteration`][eqxrl.algorithms.AbstractOffPolicyIteration],
    with the DQN's schedule) on the team's joint transitions: `collect` steps the
    worlds with every agent acting, `update` trains agents and mixer together.
    Subclasses give the mixer (`make_mixer`)."""

    # Whether the mixer reads the global state (stored in the replay buffer).
    reads_global_state: ClassVar[bool] = False

    algorithm: eqx.AbstractVar[AbstractAlgorithm]
    share_parameters: eqx.AbstractVar[bool]

    def _check(self) -> None:
        name = type(self).__name__
        if not isinstance(self.algorithm, DQN):
            raise ValueError(
                f"{name}: algorithm must be an eqxrl.DQN configured on the "
                "multi-agent environment (its replay, exploration, target and "
                f"optimizer settings apply), got {type(self.algorithm).__name__}."
            )
        self._check_team()
        if self.recurrent:
            dqn = self.algorithm
            if dqn.n_step != 1:
                raise ValueError(
                    f"{name}: recurrent agents learn from sequences with one-step "
                    f"targets; n_step={dqn.n_step} is not supported with them "
                    "(set n_step=1)."
                )
            if dqn.batch_size % dqn.train_frequency:
                sequences = max(1, dqn.batch_size // dqn.train_frequency)
                raise ValueError(
                    f"{name}: recurrent agents replay sequences of train_frequency="
                    f"{dqn.train_frequency} steps, so batch_size={dqn.batch_size} "
                    "(counted in steps) must be a multiple of it; e.g. batch_size="
                    f"{sequences * dqn.train_frequency}."
                )
            if dqn.buffer_size < dqn.num_envs * dqn.train_frequency:
                raise ValueError(
                    f"{name}: buffer_size={dqn.buffer_size} holds less than one "
                    f"iteration's sequences (num_envs * train_frequency = "
                    f"{dqn.num_envs * dqn.train_frequency} steps)."
                )

    # ------------------------------------------------------------------ config
    @property
    def learning_starts(self) -> int:
        """World steps collected before the first update (the algorithm's)."""
        return self.algorithm.learning_starts

    @abc.abstractmethod
    def make_mixer(self, key: PRNGKeyArray) -> AbstractMixer:
        """The initial mixer (the target mixer starts as a copy of it)."""

    @property
    def training_env(self) -> AbstractEnvironment:
        """The worlds as they are stepped: automatic resets, episode statistics, and
        the joint observation (observations, action masks and, for mixers that read
        it, the global state) that the replay buffer stores."""
        joint = _JointView(self.env, self.reads_global_state)
        return AutoReset(EpisodeStatistics(joint))

    @property
    def state_size(self) -> int:
        """Entries of the flattened global state the mixer reads: the environment's
        `global_state_space` (see [`GLOBAL_STATE`][eqxrl.envs.GLOBAL_STATE]), or
        when it declares none every agent's observation concatenated."""
        space = global_state_space_of(self.env)
        if space is not None:
            return math.prod(space.shape)
        observation = eqx.filter_eval_shape(self.env.reset, jr.key(0))[1].observation
        return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(observation))

    def loss(
        self,
        networks: tuple[AbstractQNetwork, AbstractMixer],
        target_networks: tuple[AbstractQNetwork, AbstractMixer],
        batch: ReplaySample,
        key: PRNGKeyArray,
    ) -> tuple[Float[Array, ""], dict[str, Array]]:
        """Mean Huber loss (DQN's `huber_delta`) between `Q_tot` of the stored
        joint action and the target `r + discount * Q_tot'(s', a')`: the target
        mixer on the target agents' values of the agents' greedy valid actions at
        the next observation, chosen by the online agents with `double_q` (else by
        the target agents). `r` is the team reward (the sum of the agents'
        rewards) over up to `n_step` steps; `discount` is zero after a termination
        and not after a truncation.

        **Returns:**

        `(loss, {"loss": ..., "q_value": mean Q_tot})`.
        """
        agents, mixer = networks
        target_agents, target_mixer = target_networks
        frozen = jax.lax.stop_gradient(agents)

        def one(observation: _JointObservation, action, next_observation):
            q_total, _ = self.team_value(
                agents,
                mixer,
                observation.observation,
                observation.global_state,
                action,
                key,
            )
            next_observation = jax.lax.stop_gradient(next_observation)
            next_target = self.agent_q_values(
                target_agents, next_observation.observation, key
            )
            next_online = (
                self.agent_q_values(frozen, next_observation.observation, key)
                if self.algorithm.double_q
                else next_target
            )
            next_values = jax.vmap(bootstrap_action_value)(
                next_target, next_online, next_observation.action_mask
            )
            next_total = target_mixer(next_values, next_observation.global_state)
            return q_total, next_total

        q_total, next_total = jax.vmap(one)(
            batch.observation, batch.action, batch.next_observation
        )
        target = jax.lax.stop_gradient(batch.reward + batch.discount * next_total)
        loss = jnp.mean(huber_loss(q_total - target, self.algorithm.huber_delta))
        return loss, {"loss": loss, "q_value": jnp.mean(q_total)}

    def sequence_loss(
        self,
        networks: tuple[AbstractQNetwork, AbstractMixer],
        target_networks: tuple[AbstractQNetwork, AbstractMixer],
        batch: ReplaySequence,
        key: PRNGKeyArray,
    ) -> tuple[Float[Array, ""], dict[str, Array]]:
        """`loss` for recurrent agents, on a minibatch of stored sequences: the
        online and the target agents unroll each sequence from its stored carry
        (resetting at episode starts), and every step's `Q_tot` regresses on `r +
        discount * Q_tot'` with the next step's values in the sequence (the chunk's
        last step has its next observation stored with it). A truncated step
        (kept as such with `bootstrap_on_truncation=True`) has no target in the
        sequence (its next observation is the next episode's) and is left out of
        the mean.

        **Returns:**

        `(loss, {"loss": ..., "q_value": mean Q_tot})`.
        """
        del key
        dqn = self.algorithm
        agents, mixer = networks
        target_agents, target_mixer = target_networks

        def one(sequence: ReplaySequence):
            joint: _JointObservation = sequence.observation
            start = sequence.episode_start
            q = self.agent_unroll(agents, sequence.carry, joint.observation, start)
            q_target = jax.lax.stop_gradient(
                self.agent_unroll(
                    target_agents, sequence.carry, joint.observation, start
                )
            )
            num_steps = sequence.reward.shape[0]
            taken = jnp.swapaxes(sequence.action, 0, 1)[..., None]
            chosen = jnp.take_along_axis(q[:, :num_steps], taken, axis=2)[..., 0]
            next_online = jax.lax.stop_gradient(q[:, 1:]) if dqn.double_q else None
            next_target = q_target[:, 1:]
            next_mask = (
                None
                if joint.action_mask is None
                else jnp.swapaxes(joint.action_mask[1:], 0, 1)
            )
            per_step = jax.vmap(bootstrap_action_value)
            next_values = jax.vmap(per_step)(
                next_target,
                next_target if next_online is None else next_online,
                next_mask,
            )
            states = joint.global_state
            q_total = jax.vmap(mixer)(
                jnp.swapaxes(chosen, 0, 1), None if states is None else states[:-1]
            )
            next_total = jax.vmap(target_mixer)(
                jnp.swapaxes(next_values, 0, 1), None if states is None else states[1:]
            )
            discount = jnp.where(sequence.terminated, 0.0, dqn.gamma)
            target = jax.lax.stop_gradient(sequence.reward + discount * next_total)
            weight = jnp.where(
                sequence.truncated & ~sequence.terminated, 0.0, 1.0
            ).astype(jnp.float32)
            return q_total, target, weight

        # The agents' loops run over every sequence of the minibatch, and over
        # every agent with the shared network (a CPU speed hint).
        sequences = batch.reward.shape[0] * (
            self.num_agents if self.share_parameters else 1
        )
        with sequence_batch_hint(sequences):
            q_total, target, weight = jax.vmap(one)(batch)
        errors = huber_loss(q_total - target, dqn.huber_delta)
        loss = jnp.sum(weight * errors) / jnp.maximum(jnp.sum(weight), 1.0)
        return loss, {"loss": loss, "q_value": jnp.mean(q_total)}

    # ------------------------------------------------------------------ state
    def _transition(
        self,
        timestep: TimeStep,
        action: Int[Array, " num_agents"],
        next_timestep: TimeStep,
    ) -> ReplayTransition:
        return ReplayTransition(
            observation=timestep.observation,
            action=action,
            # The team reward, as JaxMARL's CTRolloutManager builds MPE's.
            reward=jnp.sum(next_timestep.reward),
            **self.algorithm.episode_ends(next_timestep),
            next_observation=next_timestep.extras["final_observation"],
        )

    def _step_record(
        self,
        timestep: TimeStep,
        action: Int[Array, "num_envs num_agents"],
        next_timestep: TimeStep,
    ) -> dict[str, Any]:
        """What a recurrent team keeps of one step of every world for its
        sequences: the observation read, whether it began an episode, the joint
        action, the team reward and the episode ends."""
        return dict(
            observation=timestep.observation,
            episode_start=timestep.terminated | timestep.truncated,
            action=action,
            reward=jnp.sum(next_timestep.reward, axis=-1),
            **self.algorithm.episode_ends(next_timestep),
        )

    def _sequences(
        self, steps: dict[str, Any], last: TimeStep, carry: PyTree[Array]
    ) -> ReplaySequence:
        """Every world's chunk of an iteration (`_step_record`s stacked,
        `[num_steps, num_envs, ...]`, in; `[num_envs, ...]` sequences out): the
        observation after the last step (`last`'s, a new episode's first after
        an automatic reset) closes the chunk, and `carry` is what the agents held
        before the first step (an observation after an ended step starts an
        episode: the carry resets before reading it)."""

        def close(steps: Array, after: Array) -> Array:
            return jnp.concatenate([steps, after[None]])

        observation = jax.tree.map(close, steps["observation"], last.observation)
        start = close(steps["episode_start"], last.terminated | last.truncated)
        # One world's sequence at a time (a sequence's shapes are checked), the
        # worlds second in the steps' arrays.
        one_world = jax.vmap(ReplaySequence, in_axes=(1, 1, 1, 1, 1, 1, 0))
        return one_world(
            observation,
            steps["action"],
            steps["reward"],
            steps["terminated"],
            steps["truncated"],
            start,
            carry,
        )

    def init(self, key: PRNGKeyArray) -> ValueDecompositionState:
        agents_key, mixer_key, reset_key, state_key = jr.split(key, 4)
        agents = self.make_network(agents_key)
        mixer = self.make_mixer(mixer_key)
        optimizer_state = self.algorithm.make_optimizer().init(
            eqx.filter((agents, mixer), eqx.is_array)
        )
        env_state, timestep = jax.vmap(self.training_env.reset)(
            jr.split(reset_key, self.num_envs)
        )
        action = jnp.zeros((self.num_envs, self.num_agents), jnp.int32)
        carry = None
        if self.recurrent:
            dqn = self.algorithm
            world_carry = self.agent_initial_carry(agents)
            carry = jax.tree.map(
                lambda x: jnp.broadcast_to(x, (self.num_envs, *x.shape)), world_carry
            )
            num_steps = dqn.train_frequency
            steps = jax.tree.map(
                lambda x: jnp.broadcast_to(x, (num_steps, *x.shape)),
                self._step_record(timestep, action, timestep),
            )
            example = self._sequences(steps, timestep, carry)
            capacity = dqn.buffer_size // (self.num_envs * num_steps)
        else:
            example = jax.vmap(self._transition)(timestep, action, timestep)
            capacity = self.algorithm.buffer_capacity
        buffer = ReplayBuffer.empty(example, capacity)
        return ValueDecompositionState(
            agents=agents,
            mixer=mixer,
            target_agents=agents,
            target_mixer=mixer,
            optimizer_state=optimizer_state,
            buffer=buffer,
            env_state=env_state,
            timestep=timestep,
            key=state_key,
            iteration=jnp.int32(0),
            num_updates=jnp.int32(0),
            carry=carry,
        )

    def environment_axes(self, state: ValueDecompositionState) -> PyTree[int]:
        """Worlds come first in the world states, timesteps and carries, and second
        in the replay buffer's `[capacity, num_envs, ...]` rows."""
        axes = eqx.tree_at(
            lambda tree: tree.buffer.transitions,
            super().environment_axes(state),
            jax.tree.map(lambda _: 1, state.buffer.transitions),
        )
        if state.carry is None:
            return axes
        return eqx.tree_at(
            lambda tree: tree.carry, axes, jax.tree.map(lambda _: 0, state.carry)
        )

    def diverged(
        self, state: ValueDecompositionState, metrics: dict[str, Array]
    ) -> Bool[Array, ""]:
        """Whether the loss is NaN or infinite on an iteration with updates (NaN by
        design before `learning_starts`)."""
        return (state.num_updates > 0) & ~jnp.isfinite(metrics["loss"])

    def policy(
        self, state: ValueDecompositionState, deterministic: bool = False
    ) -> AbstractPolicy:
        """The agents' joint policy (one multi-agent observation in, one action per
        agent out; decentralized: each agent reads its own observation, never the
        global state): greedy (`deterministic`) or epsilon-greedy with the
        exploration rate reached at `state`.

        **Returns:**

        A [`SharedPolicy`][eqxrl.multiagent.SharedPolicy] around the shared
        network, or with `share_parameters=False` an
        [`IndependentPolicy`][eqxrl.multiagent.IndependentPolicy].
        """
        epsilon = (
            jnp.float32(0.0)
            if deterministic
            else self.algorithm.epsilon(state.iteration * self.steps_per_iteration)
        )
        return self.joint_policy(state.agents, epsilon)

    # -------------------------------------------------------------- iteration
    def _act(
        self,
        agents: AbstractQNetwork,
        epsilon: Float[Array, ""],
        timestep: TimeStep,
        value_key: PRNGKeyArray,
        uniforms: Float[Array, " num_agents"],
    ) -> Int[Array, " num_agents"]:
        """One world's epsilon-greedy joint action (each agent exploring on its own
        uniform number; only valid actions)."""
        q_values = self.agent_q_values(
            agents, timestep.observation.observation, value_key
        )
        choose = jax.vmap(epsilon_greedy_action, in_axes=(0, 0, None, 0))
        return choose(q_values, uniforms, epsilon, timestep.action_mask)

    def _act_recurrent(
        self,
        agents: AbstractQNetwork,
        carry: PyTree[Array],
        epsilon: Float[Array, ""],
        timestep: TimeStep,
        uniforms: Float[Array, " num_agents"],
    ) -> tuple[PyTree[Array], Int[Array, " num_agents"]]:
        """`_act` for recurrent agents in one world: each reads its observation
        with its carry (reset first if the observation starts an episode);
        `(next_carry, joint_action)`."""
        start = timestep.terminated | timestep.truncated
        carry = reset_carry(carry, self.agent_initial_carry(agents), start)
        carry, q_values = self.agent_step(
            agents, carry, timestep.observation.observation
        )
        choose = jax.vmap(epsilon_greedy_action, in_axes=(0, 0, None, 0))
        return carry, choose(q_values, uniforms, epsilon, timestep.action_mask)

    def collect(
        self,
        state: ValueDecompositionState,
        value_key: PRNGKeyArray,
        uniform_key: PRNGKeyArray,
        step_key: PRNGKeyArray,
    ) -> tuple[ValueDecompositionState, tuple[Bool[Array, "..."], dict], dict]:
        """Step `num_envs` worlds `train_frequency` times with every agent acting
        epsilon-greedily
        ([`epsilon_greedy_collect`][eqxrl.algorithms.epsilon_greedy_collect];
        `value_key` draws the sampled values of a distributional network), and
        store the joint transitions: each step's, or with recurrent agents every
        world's steps of the iteration as one sequence with the carry it started
        from. See
        [`AbstractOffPolicyIteration.collect`][eqxrl.algorithms.AbstractOffPolicyIteration.collect]
        for what it returns (no other per-step statistics)."""
        dqn = self.algorithm
        recurrent = state.carry is not None
        act = eqx.filter_vmap(self._act, in_axes=(None, None, 0, 0, 0))
        act_recurrent = eqx.filter_vmap(
            self._act_recurrent, in_axes=(None, 0, None, 0, 0)
        )

        def act_in_every_world(agent_carry, timestep, env_steps, value_keys, uniforms):
            epsilon = dqn.epsilon(env_steps)
            if recurrent:
                return act_recurrent(
                    state.agents, agent_carry, epsilon, timestep, uniforms
                )
            action = act(state.agents, epsilon, timestep, value_keys, uniforms)
            return agent_carry, action

        def record(buffer, timestep, action, next_timestep):
            if recurrent:  # the iteration's chunks are stored after the loop
                step = self._step_record(timestep, action, next_timestep)
            else:
                step = None
                buffer = buffer.add(
                    jax.vmap(self._transition)(timestep, action, next_timestep)
                )
            return buffer, next_timestep, (ended_episodes(next_timestep), step)

        first_step = state.iteration * self.steps_per_iteration
        (env_state, timestep, buffer, carry), (episode, steps) = epsilon_greedy_collect(
            act_in_every_world,
            jax.vmap(self.training_env.step),
            record,
            (state.env_state, state.timestep, state.buffer, state.carry),
            epsilon_greedy_draws(
                value_key,
                uniform_key,
                step_key,
                dqn.train_frequency,
                self.num_envs,
                uniform_shape=(self.num_agents,),
            ),
            first_step,
            self.num_envs,
        )
        if recurrent:
            buffer = buffer.add(self._sequences(steps, timestep, state.carry))
        state = dataclasses.replace(
            state, env_state=env_state, timestep=timestep, buffer=buffer, carry=carry
        )
        return state, episode, {}

    def update(
        self,
        state: ValueDecompositionState,
        learning: Bool[Array, ""],
        sample_key: PRNGKeyArray,
        loss_key: PRNGKeyArray,
    ) -> tuple[ValueDecompositionState, dict[str, Array]]:
        """If `learning`, DQN's `gradient_steps` updates
        ([`learn`][eqxrl.algorithms.AbstractQLearning.learn]) of agents and mixer
        together, on the `loss` (with recurrent agents the `sequence_loss` of
        replayed sequences, `batch_size // train_frequency` per minibatch).

        **Returns:**

        `(state, statistics)`: `loss` and `q_value` (mean `Q_tot`), means over the
        updates, NaN when not `learning`.
        """
        dqn = self.algorithm
        replay = (
            dict(
                loss=self.sequence_loss,
                gather=ReplayBuffer.gather_sequences,
                batch_size=dqn.batch_size // dqn.train_frequency,
            )
            if state.carry is not None
            else dict(loss=self.loss)
        )
        networks, targets, optimizer_state, num_updates, statistics = dqn.learn(
            (state.agents, state.mixer),
            (state.target_agents, state.target_mixer),
            state.optimizer_state,
            state.buffer,
            learning,
            state.num_updates,
            sample_key,
            loss_key,
            **replay,
        )
        state = dataclasses.replace(
            state,
            agents=networks[0],
            mixer=networks[1],
            target_agents=targets[0],
            target_mixer=targets[1],
            optimizer_state=optimizer_state,
            num_updates=num_updates,
        )
        return state, statistics

    def episode_metrics(
        self, done: Bool[Array, "steps num_envs"], statistics: dict[str, Any]
    ) -> dict[str, Array]:
        """The team's episodes: `episode_return` (`[num_agents]`, each agent's
        mean return over the episodes that ended, NaN when none did),
        `total_episode_return` (their sum, the team's return), `episode_length`,
        `episode_count` and the worlds' own metrics."""
        return team_episode_metrics(done, statistics)

    def iteration_metrics(
        self,
        state: ValueDecompositionState,
        collected: Int[Array, ""],
        statistics: dict[str, Array],
    ) -> dict[str, Array]:
        """`epsilon` (of the iteration's last step) and `learning_rate`."""
        dqn = self.algorithm
        return {
            "epsilon": dqn.epsilon(collected - self.num_envs),
            "learning_rate": dqn.current_learning_rate(state.optimizer_state),
        }
