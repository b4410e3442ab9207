"""PQN-VDN: cooperative agents whose summed Q-values are trained with PQN's Q(lambda)
on the team reward, from vectorized rollouts, without replay buffer or target
network (purejaxql's `pqn_vdn_rnn_jaxmarl.py`)."""

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree

from ..algorithms import (
    PQN,
    AbstractAlgorithm,
)
from ..envs import (
    AbstractEnvironment,
    AutoReset,
    EpisodeStatistics,
    TimeStep,
)
from ..nn import (
    AbstractPolicy,
    AbstractQNetwork,
    epsilon_greedy_action,
    greedy_action,
)
from ._agents import team_episode_metrics
from ._mixers import SumMixer
from ._team_q_learning import AbstractTeamQLearning


class PQNVDNState(eqx.Module):
    """Everything a [`PQNVDN`][eqxrl.multiagent.PQNVDN] run carries from one
    iteration to the next.

    **Fields:**

    - `agents`: the agents' Q-network: one network shared by every agent (the
      one-hot agent index appended to each observation), or with
      `share_parameters=False` one per agent stacked on a leading agent axis (the
      only networks: there is no target network).
    - `optimizer_state`: its optimizer's state (the wrapped PQN's optimizer).
    - `env_state`, `timestep`: the `num_envs` worlds (leading axis) and their
      latest timestep.
    - `key`: the PRNG key of the next iteration.
    - `iteration`: completed iterations (int32), which the exploration schedule
      reads.
    - `carry`: with recurrent agents, every agent's carry in every world
      (`[num_envs, num_agents, ...]` leaves) as the latest step left it (reset
      where `timestep` starts an episode, when the next step reads it); `None`
      for feed-forward agents.
    """

    agents: AbstractQNetwork
    optimizer_state: PyTree
    env_state: PyTree
    timestep: TimeStep
    key: PRNGKeyArray
    iteration: Int[Array, ""]
    carry: PyTree[Array] | None = None


class PQNVDNRollout(eqx.Module):
    """What a step of the worlds saw, did and got, and the team's greedy values its
    targets bootstrap from; `[num_envs, ...]` leaves for one step, stacked to
    `[num_steps, num_envs, ...]` over a rollout. The fields of PQN's
    [`PQNRollout`][eqxrl.algorithms.PQNRollout], the actions with an agents axis.

    **Fields:**

    - `observation`, `action_mask`: every agent's observation (`[..., num_agents,
      ...]` leaves) and valid actions.
    - `action`: every agent's epsilon-greedy action (int32).
    - `reward`: the team reward, the sum of the agents' rewards.
    - `terminated`, `truncated`: how the step ended the episode (for every agent
      at once).
    - `value`: the team's greedy value when acting: the sum over agents of each
      agent's greedy valid value `max_a Q_i(o_i, a)`.
    - `truncation_value`: where the step truncated an episode, the team's greedy
      value of the episode's final observation (zero elsewhere).
    - `extras`: the episode statistics
      ([`episode_statistics`][eqxrl.algorithms.episode_statistics]:
      `episode_return` per agent).
    - `episode_start`: with recurrent agents, whether `observation` is the first
      of an episode (the agents read it with their initial carries), else `None`.
    """

    observation: PyTree[Array]
    action_mask: Bool[Array, "*batch num_agents num_actions"] | None
    action: Int[Array, "*batch num_agents"]
    reward: Float[Array, "*batch"]
    terminated: Bool[Array, "*batch"]
    truncated: Bool[Array, "*batch"]
    value: Float[Array, "*batch"]
    truncation_value: Float[Array, "*batch"]
    extras: dict[str, Array | dict[str, Array]]
    episode_start: Bool[Array, "*batch"] | None = None


class PQNVDN(AbstractTeamQLearning[PQNVDNState]):
    """PQN-VDN (Gallici et al., 2024; purejaxql's `pqn_vdn_rnn_jaxmarl.py`):
    cooperative agents whose team value is the sum of their own, `Q_tot = sum_i
    Q_i(o_i, a_i)` (VDN's [`SumMixer`][eqxrl.multiagent.SumMixer]), trained with
    [`PQN`][eqxrl.PQN]'s loop on the team reward: no replay buffer, no target
    network.

    `algorithm` is an [`eqxrl.PQN`][eqxrl.PQN] configured on the multi-agent
    environment: its rollout schedule (`num_envs` worlds, `num_steps`,
    `total_timesteps`), `num_epochs` x `num_minibatches`, optimizer (global-norm
    clipping, RAdam, `learning_rate`, `anneal_lr`), `gamma`, `q_lambda`,
    `reward_scale`, exploration schedule and agent network (`hidden_sizes`,
    `layer_norm`, `network_factory`) apply to the team. One iteration:

    1. step `num_envs` worlds `num_steps` times, every agent acting
       epsilon-greedily on its own observation (only valid actions where the
       environment gives action masks), keeping the team's greedy value of each
       step: the sum over agents of each agent's greedy valid value;
    2. compute PQN's Q(lambda) targets
       ([`compute_q_lambda_returns`][eqxrl.algorithms.compute_q_lambda_returns])
       on the team: the **team reward** `r` (the sum of the agents' rewards, as
       [`VDN`][eqxrl.multiagent.VDN]), times `reward_scale`, bootstrapped from
       the team's greedy value; a terminated episode bootstraps from nothing, a
       truncated one from the team's greedy value of its final observation;
    3. take `num_epochs` passes of `num_minibatches` shuffled minibatches of the
       rollout's world steps, each a gradient step on
       `mean((sum_i Q_i(o_i, a_i) - target)^2)`
       ([`loss`][eqxrl.multiagent.PQNVDN.loss]).

    By default the agents share one network, each agent's flattened observation
    with its one-hot agent index appended; with `share_parameters=False` every
    agent has its own (stacked on a leading agent axis).

    **Recurrent agents.** With a recurrent agent network (`network_factory=
    eqxrl.nn.GRUQNetwork.from_env`, any
    [`AbstractRecurrentQNetwork`][eqxrl.nn.AbstractRecurrentQNetwork]), as
    PQN-RNN: every agent keeps a carry in every world (`PQNVDNState.carry`),
    reset where an episode starts; minibatches are whole worlds' sequences
    (`num_minibatches` must divide `num_envs`), unrolled from the carries the
    rollout started with, and every gradient step recomputes the team's
    Q(lambda) targets from the unrolled values, gradients stopped
    ([`sequence_loss`][eqxrl.multiagent.PQNVDN.sequence_loss]), as purejaxql
    does. As in PQN-RNN, the last step bootstraps from the observation after the
    rollout, and purejaxql's memory window and previous-action input are not
    reproduced.

    **Arguments:**

    - `algorithm`: the PQN, configured on the multi-agent environment.
    - `share_parameters`: one network for all agents (the agent index as an input).

    Metrics per iteration: `episode_return` (`[num_agents]`),
    `total_episode_return` (the team's return), `episode_length`,
    `episode_count`, `td_loss`, `q_value` (mean `Q_tot` of the actions taken),
    `epsilon`, `learning_rate`.

    !!! example

        ```python
        env = eqxrl.envs.make("TreasureHunt-v0")
        pqn_vdn = eqxrl.multiagent.PQNVDN(
            eqxrl.PQN(env=env, num_envs=16, num_steps=32, total_timesteps=200_000)
        )
        state, metrics = pqn_vdn.train(jax.random.key(0))
        metrics["total_episode_return"]  # [num_iterations]
        policy = pqn_vdn.policy(state, deterministic=True)  # every agent

        # GRU agents, one each.
        pqn_vdn_rnn = eqxrl.multiagent.PQNVDN(
            eqxrl.PQN(env=env, network_factory=eqxrl.nn.GRUQNetwork.from_env),
            share_parameters=False,
        )
        ```
    """

    # Typed as any algorithm so that another one gets the explanation below.
    algorithm: AbstractAlgorithm
    share_parameters: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        if not isinstance(self.algorithm, PQN):
            raise ValueError(
                "PQNVDN: algorithm must be an eqxrl.PQN configured on the "
                "multi-agent environment (its rollout, epochs, exploration and "
                f"optimizer settings apply), got {type(self.algorithm).__name__}. "
                "For DQN's agents, use eqxrl.multiagent.VDN."
            )
        self._check_team()

    @property
    def training_env(self) -> AbstractEnvironment:
        """The worlds as they are stepped: `AutoReset(EpisodeStatistics(env))`."""
        return AutoReset(EpisodeStatistics(self.env))

    # ------------------------------------------------------------ team values
    def greedy_team_value(
        self,
        agents: AbstractQNetwork,
        observation: PyTree[Array],
        action_mask: Bool[Array, "num_agents num_actions"] | None,
    ) -> Float[Array, ""]:
        """The team's greedy value in one world, what its targets bootstrap from:
        the sum over agents of each agent's value of its greedy valid action,
        `sum_i max_{a valid} Q_i(o_i, a)`.

        **Arguments:**

        - `agents`: the agents' network (as `PQNVDNState.agents`).
        - `observation`: every agent's observation (`[num_agents, ...]` leaves).
        - `action_mask`: every agent's valid actions, or `None` (all valid).
        """
        q_values = self.agent_q_values(agents, observation, jr.key(0))
        return _greedy_team_value(q_values, action_mask)

    def q_lambda_targets(
        self,
        rollout: PQNVDNRollout,
        last_value: Float[Array, " num_envs"],
    ) -> Float[Array, "num_steps num_envs"]:
        """The team's Q(lambda) targets over a rollout: PQN's
        ([`compute_q_lambda_returns`][eqxrl.algorithms.compute_q_lambda_returns])
        on the team reward times `reward_scale`, each step bootstrapping from the
        team's greedy value of the next step's observation (`last_value`, that of
        the observation after the rollout, for the last step), of its final
        observation where it truncated an episode, and from nothing where it
        terminated one.

        **Arguments:**

        - `rollout`: the rollout (`[num_steps, num_envs, ...]` leaves).
        - `last_value`: the team's greedy value of each world's observation after
          the rollout.
        """
        pqn: PQN = self.algorithm  # pyright: ignore[reportAssignmentType]
        return pqn.q_lambda_targets(rollout, last_value)

    def loss(
        self,
        agents: AbstractQNetwork,
        observation: PyTree[Array],
        action: Int[Array, "batch num_agents"],
        target: Float[Array, " batch"],
    ) -> tuple[Float[Array, ""], dict[str, Array]]:
        """`mean((Q_tot - target)^2)` over a minibatch of world steps, where
        `Q_tot = sum_i Q_i(o_i, a_i)` is the sum of the agents' values of the
        actions they took (purejaxql's loss, without PQN's factor 0.5), and the
        mean `Q_tot` (`q_value`).

        **Arguments:**

        - `agents`: the agents' network.
        - `observation`: every agent's observation in each world step (`[batch,
          num_agents, ...]` leaves).
        - `action`: every agent's action (int32).
        - `target`: the team's Q(lambda) target of each world step.
        """
        mixer = SumMixer()

        def one(observation: PyTree[Array], action: Int[Array, " num_agents"]):
            q_total, _ = self.team_value(
                agents, mixer, observation, None, action, jr.key(0)
            )
            return q_total

        q_total = jax.vmap(one)(observation, action)
        loss = jnp.mean(jnp.square(q_total - target))
        return loss, {"td_loss": loss, "q_value": jnp.mean(q_total)}

    def sequence_loss(
        self,
        agents: AbstractQNetwork,
        carry: PyTree[Array],
        sequences: PQNVDNRollout,
        next_timestep: TimeStep,
    ) -> tuple[Float[Array, ""], dict[str, Array]]:
        """The loss of recurrent agents on a minibatch of whole worlds' sequences:
        `mean((Q_tot - target)^2)` over their steps, and the mean `Q_tot`
        (`q_value`).

        Every agent unrolls each sequence from its carry, reset where an episode
        starts, one step past its end (the observation after the rollout). As
        purejaxql, the team's Q(lambda) targets
        ([`q_lambda_targets`][eqxrl.multiagent.PQNVDN.q_lambda_targets]'s
        recursion) come from these unrolled values, gradients stopped: the team's
        greedy value of the next step's observation, or where a step truncated an
        episode that of its final observation stored by the rollout.

        **Arguments:**

        - `agents`: the recurrent agents' network.
        - `carry`: every agent's carry each sequence's first observation was read
          with (before any reset), `[n, num_agents, ...]` leaves.
        - `sequences`: a rollout's steps, worlds first (`[n, num_steps, ...]`
          leaves), with `episode_start`.
        - `next_timestep`: each world's timestep after the rollout (`[n, ...]`
          leaves).
        """
        pqn: PQN = self.algorithm  # pyright: ignore[reportAssignmentType]

        def with_next(steps: Array, after: Array) -> Array:
            return jnp.concatenate([steps, after[None]])

        def one(carry, sequence: PQNVDNRollout, after: TimeStep):
            observations = jtu.tree_map(
                with_next, sequence.observation, after.observation
            )
            start = with_next(
                sequence.episode_start,  # pyright: ignore[reportArgumentType]
                after.terminated | after.truncated,
            )
            mask = jtu.tree_map(with_next, sequence.action_mask, after.action_mask)
            # [num_steps + 1, num_agents, num_actions]
            q_values = jnp.swapaxes(
                self.agent_unroll(agents, carry, observations, start), 0, 1
            )
            greedy = jax.vmap(_greedy_team_value)(lax.stop_gradient(q_values), mask)
            next_values = jnp.where(
                sequence.truncated, sequence.truncation_value, greedy[1:]
            )
            taken = sequence.action[..., None]
            chosen = jnp.take_along_axis(q_values[:-1], taken, axis=-1)[..., 0]
            return jax.vmap(SumMixer())(chosen), next_values

        q_total, next_values = jax.vmap(one)(carry, sequences, next_timestep)
        targets = pqn.sequence_targets(sequences, next_values)
        loss = jnp.mean(jnp.square(q_total - targets))
        return loss, {"td_loss": loss, "q_value": jnp.mean(q_total)}

    # ------------------------------------------------------------------ state
    def init(self, key: PRNGKeyArray) -> PQNVDNState:
        """PQN's first state ([`first_state`][eqxrl.PQN.first_state]) of the
        agents' network."""
        pqn: PQN = self.algorithm  # pyright: ignore[reportAssignmentType]
        return pqn.first_state(
            PQNVDNState, self.make_network, self.agent_initial_carry, key
        )

    def environment_axes(self, state: PQNVDNState) -> PyTree[int]:
        """Worlds come first in the world states, the timesteps and recurrent
        agents' carries."""
        axes = super().environment_axes(state)
        if state.carry is None:
            return axes
        return eqx.tree_at(
            lambda tree: tree.carry, axes, jtu.tree_map(lambda _: 0, state.carry)
        )

    def policy(self, state: PQNVDNState, deterministic: bool = False) -> AbstractPolicy:
        """The agents' joint policy (one multi-agent observation in, one action per
        agent out; each agent reads its own observation): greedy
        (`deterministic`) or epsilon-greedy with the exploration rate of `state`'s
        iteration.

        **Returns:**

        A [`SharedPolicy`][eqxrl.multiagent.SharedPolicy] around the shared
        network, or with `share_parameters=False` an
        [`IndependentPolicy`][eqxrl.multiagent.IndependentPolicy].
        """
        pqn: PQN = self.algorithm  # pyright: ignore[reportAssignmentType]
        epsilon = jnp.float32(0.0) if deterministic else pqn.epsilon(state.iteration)
        return self.joint_policy(state.agents, epsilon)

    # -------------------------------------------------------------- iteration
    def train_iteration(
        self, state: PQNVDNState
    ) -> tuple[PQNVDNState, dict[str, Array]]:
        """PQN's iteration ([`PQN.iteration`][eqxrl.PQN.iteration]) of the team:
        one rollout of `num_steps` x `num_envs` world steps
        ([`collect`][eqxrl.multiagent.PQNVDN.collect]), the team's Q(lambda)
        targets, then `num_epochs` x `num_minibatches` gradient steps on the team
        [`loss`][eqxrl.multiagent.PQNVDN.loss] (with recurrent agents, on whole
        worlds' sequences, the targets recomputed by each step:
        [`sequence_loss`][eqxrl.multiagent.PQNVDN.sequence_loss]).

        **Returns:**

        `(state, metrics)`: `episode_return` (`[num_agents]`, each agent's mean
        return over the episodes that ended, NaN when none did),
        `total_episode_return` (their sum, the team's return), `episode_length`,
        `episode_count`, `td_loss` and `q_value` (means over the minibatch
        updates), `epsilon`, `learning_rate`.
        """
        pqn: PQN = self.algorithm  # pyright: ignore[reportAssignmentType]
        return pqn.iteration(state, state.agents, self)

    def collect(
        self, state: PQNVDNState, epsilon: Float[Array, ""], key: PRNGKeyArray
    ) -> tuple[PyTree, TimeStep, PyTree[Array] | None, PQNVDNRollout]:
        """`num_steps` epsilon-greedy steps of every world (PQN's
        [`rollout`][eqxrl.PQN.rollout] with the team's values): the worlds' states
        and timesteps after them, recurrent agents' carries after them (`None` for
        feed-forward agents), and the rollout (the team reward, and the team's
        greedy value of each step and of the final observation of each truncated
        episode). Every agent acts on its own observation, with its own uniform
        draw."""
        pqn: PQN = self.algorithm  # pyright: ignore[reportAssignmentType]
        agents = state.agents

        def values(carry: PyTree[Array] | None, observation: PyTree[Array]):
            if carry is None:
                return None, self.agent_q_values(agents, observation, jr.key(0))
            return self.agent_step(agents, carry, observation)

        return pqn.rollout(
            state,
            epsilon,
            key,
            values=values,
            initial_carry=lambda: self.agent_initial_carry(agents),
            greedy_value=_greedy_team_value,
            choose=jax.vmap(epsilon_greedy_action, in_axes=(0, 0, None, 0)),
            uniform_shape=(self.num_agents,),
            team_reward=lambda reward: jnp.sum(reward, axis=-1),
            rollout_type=PQNVDNRollout,
        )

    def greedy_values(
        self, agents: AbstractQNetwork, timestep: TimeStep
    ) -> Float[Array, " num_envs"]:
        """The team's greedy value
        ([`greedy_team_value`][eqxrl.multiagent.PQNVDN.greedy_team_value]) of
        every world's observation."""
        return jax.vmap(self.greedy_team_value, in_axes=(None, 0, 0))(
            agents, timestep.observation, timestep.action_mask
        )

    def episode_metrics(
        self, done: Bool[Array, "num_steps num_envs"], extras: dict[str, PyTree]
    ) -> dict[str, Array]:
        """The team's episode metrics: each agent's mean return
        (`episode_return`), the team's (`total_episode_return`), `episode_length`
        and `episode_count`, of the episodes that ended."""
        return team_episode_metrics(done, extras)


def _greedy_team_value(
    q_values: Float[Array, "num_agents num_actions"],
    action_mask: Bool[Array, "num_agents num_actions"] | None,
) -> Float[Array, ""]:
    """The sum over agents of each agent's value of its greedy valid action."""
    actions = jax.vmap(greedy_action)(q_values, action_mask)
    chosen = jnp.take_along_axis(q_values, actions[:, None], axis=1)[:, 0]
    return SumMixer()(chosen)
