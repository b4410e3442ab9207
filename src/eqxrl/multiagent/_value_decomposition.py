"""Cooperative value decomposition: per-agent Q-networks whose chosen-action values a
mixer combines into the team's value, trained end to end on the team reward from one
replay buffer of joint transitions (VDN: a sum; QMIX: a monotonic mixing network
conditioned on the global state). VDN and QMIX with their JaxMARL presets; their
shared loop is `_value_decomposition_base.py`'s, their mixers `_mixers.py`'s."""

import math
from typing import ClassVar

import equinox as eqx
from jaxtyping import Array, Float, PRNGKeyArray

from .._config import in_range
from .._deprecation import warn_renamed
from ..algorithms import DQN, AbstractAlgorithm
from ..envs import AbstractEnvironment
from ..nn import GRUQNetwork

# The names this module defined before it was split stay importable from it (a saved
# config names a class by its module).
from ._mixers import (
    AbstractMixer as AbstractMixer,
    MonotonicMixer as MonotonicMixer,
    SumMixer as SumMixer,
)
from ._team_q_learning import AbstractTeamQLearning as AbstractTeamQLearning
from ._value_decomposition_base import (
    AbstractValueDecomposition as AbstractValueDecomposition,
    ValueDecompositionState as ValueDecompositionState,
)

# What JaxMARL's Q-learning baselines on MPE share (`config/alg/vdn_ff_mpe.yaml`,
# `ql_rnn_mpe.yaml`): one update per iteration from 10k steps on, the squared loss,
# a target copy every 200 updates, epsilon from 1 to 0.05 over the first 10% of the
# run, learning rate 0.005 decayed linearly, gradient norm clipped to 25, `gamma`
# 0.9, and MPE's time limit ending the episode (its one `done` flag): with
# bootstrapping through it, VDN's team return at 2M steps fell to -93.6 from -76.4
# (4 seeds; see `benchmarks/README.md`).
_JAXMARL_MPE_Q_LEARNING = dict(
    total_timesteps=10_000_000,
    exploration_initial_eps=1.0,
    exploration_final_eps=0.05,
    exploration_fraction=0.1,
    max_grad_norm=25.0,
    target_update_interval=200,
    tau=1.0,
    gradient_steps=1,
    learning_rate=0.005,
    anneal_lr=True,
    learning_starts=10_000,
    gamma=0.9,
    n_step=1,
    huber_delta=math.inf,
    bootstrap_on_truncation=False,
)


class VDN(AbstractValueDecomposition):
    """Value decomposition networks (Sunehag et al., 2018): cooperative agents whose
    team value is the sum of their own, `Q_tot = sum_i Q_i(o_i, a_i)`, trained
    end to end on the team reward.

    `algorithm` is an [`eqxrl.DQN`][eqxrl.DQN] configured on the multi-agent
    environment: its replay buffer, n-step returns, exploration schedule, target
    updates (`target_update_interval`, Polyak `tau`), `double_q`, optimizer (Adam,
    `max_grad_norm`, `anneal_lr`), `huber_delta`, `learning_starts`,
    `gradient_steps`, `batch_size` and agent network (`hidden_sizes`, `dueling`,
    `network_factory`) apply to the team. An iteration steps `num_envs` worlds
    `train_frequency` times, every agent acting epsilon-greedily on its own
    observation (only valid actions where the environment gives action masks);
    one replay buffer keeps the joint transitions (every agent's observation,
    action mask and action, the team reward, termination and truncation, which
    happen to every agent at once); each update regresses `Q_tot` of the stored
    joint action on `r + discount * Q_tot'(s', a')` with the target networks, where
    each agent's `a'_i` is its greedy valid action (chosen by the online network
    with `double_q`, by the target network otherwise). The **team reward** `r` is
    the sum of the agents' rewards (what JaxMARL's `CTRolloutManager` uses for
    MPE); a truncated episode bootstraps from its final observation, a terminated
    one does not.

    By default the agents share one network, each agent's flattened observation
    with its one-hot agent index appended (JaxMARL's default); with
    `share_parameters=False` every agent has its own (stacked on a leading agent
    axis).

    With a recurrent agent network (`network_factory=eqxrl.nn.GRUQNetwork.from_env`,
    any [`AbstractRecurrentQNetwork`][eqxrl.nn.AbstractRecurrentQNetwork]) the
    agents keep a carry per world (`ValueDecompositionState.carry`), the buffer
    keeps every world's steps of an iteration as a sequence with the carry it
    started from, and updates unroll the agents through sampled sequences
    ([`sequence_loss`][eqxrl.multiagent.AbstractValueDecomposition.sequence_loss];
    one-step targets, `batch_size` counted in steps and a multiple of
    `train_frequency`).

    **Arguments:**

    - `algorithm`: the DQN, configured on the multi-agent environment.
    - `share_parameters`: one network for all agents (the agent index as an input).

    Metrics per iteration: `episode_return` (`[num_agents]`),
    `total_episode_return` (the team's return), `episode_length`,
    `episode_count`, `loss`, `q_value` (mean `Q_tot`), `epsilon`,
    `learning_rate`. [`VDN.from_jaxmarl`][eqxrl.multiagent.VDN.from_jaxmarl] builds it
    with JaxMARL's `vdn_ff_mpe.yaml` settings.

    !!! example

        ```python
        env = eqxrl.envs.make("TreasureHunt-v0")
        vdn = eqxrl.multiagent.VDN(eqxrl.DQN(env=env, total_timesteps=200_000))
        state, metrics = vdn.train(jax.random.key(0))
        metrics["total_episode_return"]  # [num_iterations]
        policy = vdn.policy(state, deterministic=True)  # every agent
        ```
    """

    # Typed as any algorithm so that another one gets `_check`'s explanation.
    algorithm: AbstractAlgorithm
    share_parameters: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        self._check()

    def make_mixer(self, key: PRNGKeyArray) -> SumMixer:
        """A [`SumMixer`][eqxrl.multiagent.SumMixer] (no parameters)."""
        del key
        return SumMixer()

    @classmethod
    def from_jaxmarl(
        cls, env: AbstractEnvironment, *, share_parameters: bool = True, **overrides
    ) -> "VDN":
        """VDN with the settings of JaxMARL's `baselines/QLearning/vdn_ff.py` on
        MPE (`config/alg/vdn_ff_mpe.yaml`): 32 worlds stepped 16 times per
        iteration, 10M steps, a buffer of 100k transitions, minibatches of 32, one
        update per iteration from 10k steps on, `gamma` 0.9, the plain `max` target
        (no double Q) and the squared loss, a target copy every 200 updates,
        epsilon from 1 to 0.05 over the first 10% of the run, learning rate 0.005
        decayed linearly, gradient norm clipped to 25, and no bootstrap at MPE's
        time limit (`bootstrap_on_truncation=False`, as JaxMARL's single `done`
        flag).

        What differs: JaxMARL's optimizer is RAdam (here DQN's Adam); its agent
        network with `NUM_LAYERS: 2` has no hidden layer (one linear layer from the
        observation and agent index to the action values), which `hidden_sizes=()`
        reproduces; its epsilon decays from the first iteration, DQN's is 1 until
        `learning_starts`.

        **Arguments:**

        - `env`: the multi-agent environment (not auto-resetting).
        - `share_parameters`: one network for all agents (JaxMARL's).
        - `**overrides`: DQN fields to change (e.g. `total_timesteps`).
        """
        settings = dict(
            _JAXMARL_MPE_Q_LEARNING,
            num_envs=32,
            train_frequency=16,
            buffer_size=100_000,
            batch_size=32,
            hidden_sizes=(),
            double_q=False,
        )
        dqn = DQN(env=env, **{**settings, **overrides})
        return cls(dqn, share_parameters=share_parameters)

    @classmethod
    def jaxmarl(cls, *args, **kwargs) -> "VDN":
        """Deprecated: [`VDN.from_jaxmarl`][eqxrl.multiagent.VDN.from_jaxmarl]."""
        warn_renamed(
            "eqxrl.multiagent.VDN.jaxmarl", "eqxrl.multiagent.VDN.from_jaxmarl"
        )
        return cls.from_jaxmarl(*args, **kwargs)


class QMIX(AbstractValueDecomposition):
    """QMIX (Rashid et al., 2018): cooperative agents whose team value is a
    monotonic function of their own values, mixed by a network whose weights
    hypernetworks compute from the global state
    ([`MonotonicMixer`][eqxrl.multiagent.MonotonicMixer]). Monotonicity makes the
    agents' own greedy actions the team's greedy joint action, so the agents act
    on their own observations (decentralized execution) while the mixer learns
    from the world's state (centralized training).

    The loop is [`VDN`][eqxrl.multiagent.VDN]'s (read it for the replay buffer of
    joint transitions, the team reward and the targets) with this mixer, the target
    mixer in the target. The **global state** is the environment's
    (`timestep.extras["global_state"]`, declared by its
    [`global_state_space`][eqxrl.envs.AbstractMultiAgentEnvironment.global_state_space]),
    flattened; for an environment that declares none, every agent's observation
    flattened and concatenated (what JaxMARL's `CTRolloutManager` gives for MPE).
    It is stored in the replay buffer with each transition (that of the final step
    for the next observation of an episode's last step).

    **Arguments:**

    - `algorithm`: the DQN, configured on the multi-agent environment.
    - `share_parameters`: one network for all agents (the agent index as an input).
    - `embedding_size`: the mixing network's hidden width (JaxMARL: 32).
    - `hypernet_hidden_size`: the hypernetworks' hidden width (JaxMARL: 128).
    - `init_scale`: the gain of the mixer's orthogonal initial weights (JaxMARL:
      0.001).

    Metrics as [`VDN`][eqxrl.multiagent.VDN]'s.
    [`QMIX.from_jaxmarl`][eqxrl.multiagent.QMIX.from_jaxmarl] builds it with JaxMARL's
    `ql_rnn_mpe.yaml` settings (with a feed-forward agent network).

    !!! example

        ```python
        env = eqxrl.envs.make("TreasureHunt-v0")  # declares a global state
        qmix = eqxrl.multiagent.QMIX(eqxrl.DQN(env=env, total_timesteps=200_000))
        state, metrics = qmix.train(jax.random.key(0))
        ```
    """

    reads_global_state: ClassVar[bool] = True

    # Typed as any algorithm so that another one gets `_check`'s explanation.
    algorithm: AbstractAlgorithm
    share_parameters: bool = eqx.field(static=True, default=True)
    embedding_size: int = eqx.field(static=True, default=32)
    hypernet_hidden_size: int = eqx.field(static=True, default=128)
    init_scale: Float[Array, ""] = eqx.field(
        default=0.001, converter=in_range("init_scale", 0.0, math.inf, finite=True)
    )

    def __check_init__(self):
        self._check()
        for name in ("embedding_size", "hypernet_hidden_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"QMIX: {name}={value!r} must be a positive int.")

    def make_mixer(self, key: PRNGKeyArray) -> MonotonicMixer:
        """A [`MonotonicMixer`][eqxrl.multiagent.MonotonicMixer] on the global
        state."""
        return MonotonicMixer(
            self.num_agents,
            self.state_size,
            embedding_size=self.embedding_size,
            hypernet_hidden_size=self.hypernet_hidden_size,
            init_scale=self.init_scale,
            key=key,
        )

    @classmethod
    def from_jaxmarl(
        cls,
        env: AbstractEnvironment,
        *,
        share_parameters: bool = True,
        recurrent: bool = False,
        **overrides,
    ) -> "QMIX":
        """QMIX with the settings of JaxMARL's `baselines/QLearning/qmix_rnn.py`
        on MPE (`config/alg/ql_rnn_mpe.yaml`): 8 worlds stepped 26 times per
        iteration, 10M steps, a buffer of 5,000 episodes of 26 steps (130,000
        transitions), minibatches of 32 episodes (832 transitions), one update per
        iteration from 10k steps on, `gamma` 0.9, double-Q targets
        and the squared loss, a target copy every 200 updates, epsilon from 1 to
        0.05 over the first 10% of the run, learning rate 0.005 decayed linearly,
        gradient norm clipped to 25, agent width 64, a mixer of 32 / 128 / 0.001,
        and no bootstrap at MPE's time limit (`bootstrap_on_truncation=False`, as
        JaxMARL's single `done` flag).

        With `recurrent=True`, JaxMARL's agents: Dense 64 + ReLU, GRU 64, a linear
        head ([`GRUQNetwork`][eqxrl.nn.GRUQNetwork] at its defaults), trained on
        the stored sequences of 26 steps (minibatches of 32); JaxMARL resets every
        world at each iteration so that its sequences are whole episodes from a
        zero carry, while here the worlds run on and each sequence starts from the
        carry its first step was read with (MPE's 25-step episodes drift across
        the 26-step chunks). Without it (the default), two ReLU layers of 64 on
        minibatches of transitions.

        What differs besides: JaxMARL's optimizer is RAdam (here Adam); its epsilon
        decays from the first iteration, DQN's is 1 until `learning_starts`.

        **Arguments:**

        - `env`: the multi-agent environment (not auto-resetting).
        - `share_parameters`: one network for all agents (JaxMARL's).
        - `recurrent`: JaxMARL's recurrent agents (above).
        - `**overrides`: DQN fields to change (e.g. `total_timesteps`).
        """
        settings = dict(
            _JAXMARL_MPE_Q_LEARNING,
            num_envs=8,
            train_frequency=26,
            buffer_size=5_000 * 26,
            batch_size=32 * 26,
            hidden_sizes=(64, 64),
            double_q=True,
        )
        if recurrent:
            settings["network_factory"] = GRUQNetwork.from_env
        dqn = DQN(env=env, **{**settings, **overrides})
        return cls(dqn, share_parameters=share_parameters)

    @classmethod
    def jaxmarl(cls, *args, **kwargs) -> "QMIX":
        """Deprecated: [`QMIX.from_jaxmarl`][eqxrl.multiagent.QMIX.from_jaxmarl]."""
        warn_renamed(
            "eqxrl.multiagent.QMIX.jaxmarl", "eqxrl.multiagent.QMIX.from_jaxmarl"
        )
        return cls.from_jaxmarl(*args, **kwargs)
