"""Recurrent PPO: the rollout's log-probabilities and values are exactly what the
update recomputes (episode boundaries inside the segment, terminated and
truncated, seeds vmapped), and a task that only counting solves is solved."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import pytest
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

import eqxrl
from eqxrl._random import permutation, split
from eqxrl.envs import AbstractEnvironment, Box, Discrete, TimeLimit, TimeStep
from jaxpr_walk import equations

STANDARD_DTYPE_PROMOTION = True  # optax's Adam runs here


class CountingState(eqx.Module):
    step_count: Int[Array, ""]
    length: Int[Array, ""]


class Counting(AbstractEnvironment[CountingState]):
    """Press 1 at the episode's first three steps and 0 after (+1 when right);
    the observation is always the same, and episodes last a random 4 to 8 steps.
    Only a policy that counts the steps since its episode began can be right at
    every step, and only if its memory starts afresh with each episode (whose
    start it cannot see)."""

    @property
    def observation_space(self) -> Box:
        return Box(low=jnp.zeros(1), high=jnp.ones(1))

    @property
    def action_space(self) -> Discrete:
        return Discrete(2)

    def _timestep(self, reward, terminated) -> TimeStep:
        return TimeStep(
            observation=jnp.zeros(1, jnp.float32),
            reward=reward,
            terminated=terminated,
            truncated=jnp.array(False),
        )

    def reset(self, key: PRNGKeyArray) -> tuple[CountingState, TimeStep]:
        length = jr.randint(key, (), 4, 9, jnp.int32)
        state = CountingState(jnp.int32(0), length)
        return state, self._timestep(jnp.float32(0.0), jnp.array(False))

    def step(
        self, state: CountingState, action: Int[ArrayLike, ""], key: PRNGKeyArray
    ) -> tuple[CountingState, TimeStep]:
        correct = action == (state.step_count < 3)
        step_count = state.step_count + 1
        state = CountingState(step_count.astype(jnp.int32), state.length)
        reward: Float[Array, ""] = correct.astype(jnp.float32)
        return state, self._timestep(reward, step_count >= state.length)


def counting_env() -> AbstractEnvironment:
    # Episodes of 7 or 8 steps are truncated at 6: both kinds of boundary.
    return TimeLimit(Counting(), max_episode_steps=6)


def first_update_outputs(ppo: eqxrl.PPO, key: PRNGKeyArray):
    """One rollout, then what the first minibatch of the first epoch recomputes:
    `(recorded, recomputed, flags)` with `[num_steps, minibatch]` log-probs and
    values, as `train_iteration` and `learn` order their keys."""
    state = ppo.init(key)
    _, collect_key, update_key = split(state.key, 3)
    _, transitions, _, _ = ppo.rollout(state, collect_key)
    segment_carry = ppo.starting_carries(state.model, state.carry, state.timestep)
    zeros = jnp.zeros_like(transitions.reward)
    sequences, _, _ = ppo._sequences(transitions, zeros, zeros)
    epoch_key = split(update_key, ppo.num_epochs)[0]
    order = permutation(epoch_key, ppo.num_envs)
    indices = order.reshape(ppo.num_minibatches, -1)[0]
    minibatch = jax.tree.map(lambda x: x[:, indices], sequences)
    carry = jax.tree.map(lambda x: x[indices], segment_carry)
    network = ppo.acting_model(state.model, state.observation_statistics)
    log_prob, _, _, value = ppo.replay(network, carry, minibatch)
    recorded = (minibatch.log_prob, minibatch.value)
    flags = (minibatch.terminated, minibatch.truncated)
    return recorded, (log_prob, value), flags


def sharp_network(network, env, key):
    """The network with its policy head scaled up: at the default gain (0.01) the
    initial log-probabilities barely depend on the carry, so a carry bug would
    move them by about 1e-7, under the tolerance."""
    model = network.from_env(env, key, hidden_size=32)
    return eqx.tree_at(lambda m: m.actor[-1].weight, model, model.actor[-1].weight * 30)


def recurrent_ppo(
    env, network=eqxrl.nn.GRUActorCritic, sharp=True, **options
) -> eqxrl.PPO:
    if sharp:
        factory = functools.partial(sharp_network, network)
    else:
        factory = functools.partial(network.from_env, hidden_size=32)
    arguments = dict(num_envs=8, num_steps=48, num_minibatches=4, num_epochs=2)
    arguments.update(options)
    arguments.setdefault("total_timesteps", arguments["num_envs"] * 48)
    return eqxrl.PPO(env=env, network_factory=factory, **arguments)


def test_recomputed_log_probs_and_values_equal_the_rollouts():
    # An LSTM here; a GRU (with observation normalization) under vmap below, and
    # without normalization in the check that sees a carry not reset.
    ppo = recurrent_ppo(counting_env(), eqxrl.nn.LSTMActorCritic)
    recorded, recomputed, (terminated, truncated) = eqx.filter_jit(
        first_update_outputs
    )(ppo, jr.key(1))
    # Boundaries of both kinds inside the segment, where a carry that is not
    # reset (or reset one step off) would change every later output.
    assert int(jnp.sum(terminated[:-1])) > 0 and int(jnp.sum(truncated[:-1])) > 0
    for ours, theirs in zip(recomputed, recorded):
        assert float(jnp.max(jnp.abs(ours - theirs))) <= 1e-6


def test_exact_under_vmap_over_8_seeds_with_normalized_observations():
    # The normalizer the replay reads must be the rollout's (frozen within the
    # iteration), as must the carries.
    ppo = recurrent_ppo(counting_env(), normalize_observations=True)
    keys = jr.split(jr.key(2), 8)
    recorded, recomputed, (terminated, _) = eqx.filter_jit(
        eqx.filter_vmap(first_update_outputs, in_axes=(None, 0))
    )(ppo, keys)
    assert recorded[0].shape == (8, 48, 2)
    assert bool(jnp.all(jnp.sum(terminated, axis=(1, 2)) > 0))
    for ours, theirs in zip(recomputed, recorded):
        assert float(jnp.max(jnp.abs(ours - theirs))) <= 1e-6


def test_the_check_sees_a_carry_that_is_not_reset():
    """The exactness check fails when the replay ignores episode starts (so the
    tests above would catch a reset-alignment bug)."""
    ppo = recurrent_ppo(counting_env())

    def without_resets(ppo, key):
        original = ppo._sequences

        def sequences(*args):
            transitions, advantages, returns = original(*args)
            extras = dict(transitions.extras)
            extras["episode_start"] = jnp.zeros_like(extras["episode_start"])
            return eqx.tree_at(lambda t: t.extras, transitions, extras), *args[1:]

        object.__setattr__(ppo, "_sequences", sequences)
        try:
            return first_update_outputs(ppo, key)
        finally:
            object.__delattr__(ppo, "_sequences")

    recorded, recomputed, _ = jax.jit(lambda key: without_resets(ppo, key))(jr.key(1))
    for ours, theirs in zip(recomputed, recorded):  # log-probs and values
        assert float(jnp.max(jnp.abs(ours - theirs))) > 1e-4


def counting_success(ppo: eqxrl.PPO, state, key, num_episodes=64) -> Array:
    """Greedy episodes of the counting task: whether each got every step right."""
    policy = ppo.policy(state, deterministic=True)
    env = counting_env()

    def episode(key):
        reset_key, key = jr.split(key)
        env_state, timestep = env.reset(reset_key)

        def step(carry, step_key):
            env_state, timestep, network_carry, done, all_right = carry
            network_carry, action = policy.step(
                network_carry, timestep.observation, step_key
            )
            env_state, next_timestep = env.step(env_state, action, step_key)
            right = next_timestep.reward == 1.0
            all_right = all_right & (done | right)
            done = done | next_timestep.terminated | next_timestep.truncated
            return (env_state, next_timestep, network_carry, done, all_right), None

        initial = (env_state, timestep, policy.initial_carry(), False, True)
        final, _ = jax.lax.scan(step, initial, jr.split(key, 8))
        return final[-1]

    return jax.jit(jax.vmap(episode))(jr.split(key, num_episodes))


def seed_states(states, num_seeds):
    return [
        jax.tree.map(lambda x: x[seed] if eqx.is_array(x) else x, states)
        for seed in range(num_seeds)
    ]


@pytest.mark.learning
def test_counting_task_is_solved_by_a_gru_and_not_without_memory():
    """3 seeds vmapped in one program each: the GRU gets every greedy episode right
    on at least 2 of them (all 3 do, from 8k steps on); the same runs without
    memory get no episode right on any."""
    options = dict(
        num_envs=16,
        num_steps=32,
        total_timesteps=16_384,
        num_minibatches=2,
        num_epochs=4,
        learning_rate=1e-3,
    )
    keys = jr.split(jr.key(0), 3)
    ppo = recurrent_ppo(counting_env(), sharp=False, **options)
    states, _ = eqx.filter_jit(eqx.filter_vmap(ppo.train))(keys)
    solved = [
        bool(jnp.all(counting_success(ppo, state, jr.key(3))))
        for state in seed_states(states, 3)
    ]
    assert sum(solved) >= 2, solved
    # Without memory: one constant greedy action (the observation never changes).
    feed_forward = eqxrl.PPO(env=counting_env(), **options)
    states, _ = eqx.filter_jit(eqx.filter_vmap(feed_forward.train))(keys)
    for state in seed_states(states, 3):
        assert not bool(jnp.any(counting_success(feed_forward, state, jr.key(3))))


@pytest.mark.parametrize(
    "speed_tricks, num_sequences, unroll, gate_width",
    [
        # The CPU rule: one step per loop iteration for a single sequence
        # (recurrent PPO at PureJaxRL's config), 2 for a few or when unknown, and
        # the loop reads each gate's inputs as its own array.
        (None, None, 2, 8),
        (None, 1, 1, 8),
        (None, 2, 2, 8),
        (None, 63, 2, 8),
        # Many sequences: the plain loop again (recurrent QMIX's 96).
        (None, 64, 1, 8),
        # Elsewhere (the tricks off): 4 steps, the gates' inputs one array.
        (False, None, 4, 24),
        (False, 1, 4, 24),
    ],
)
def test_sequence_loop_s_unroll_and_gate_inputs_follow_the_cpu_rule(
    speed_tricks, num_sequences, unroll, gate_width
):
    network = eqxrl.nn.GRUActorCritic(
        Box(low=-1.0, high=1.0, shape=(3,)), Discrete(2), hidden_size=8, key=jr.key(0)
    )
    starts = jnp.zeros(9, bool)
    with (
        eqxrl.algorithms.cpu_speed_tricks(speed_tricks),
        eqxrl.nn.sequence_batch_hint(num_sequences),
    ):
        jaxpr = jax.make_jaxpr(
            lambda o: network.unroll(network.initial_carry(), o, starts)
        )(jnp.zeros((9, 3)))
    scans = [e for e in equations(jaxpr) if e.primitive.name == "scan"]
    assert [e.params["unroll"] for e in scans] == [unroll]
    (scan,) = scans
    first_xs = scan.params["num_consts"] + scan.params["num_carry"]
    gate_inputs = [v.aval.shape for v in scan.invars[first_xs:] if v.aval.ndim == 2]
    assert gate_inputs and all(shape == (9, gate_width) for shape in gate_inputs)


def asymmetric_sequence(network_type):
    """A recurrent network whose actor and critic have a core each, a 7-step
    sequence of observations with two episode starts, and a carry to start from
    that is not the initial one."""
    space = eqxrl.envs.Dict(
        {
            "policy": Box(low=-1.0, high=1.0, shape=(3,)),
            "privileged": Box(low=-1.0, high=1.0, shape=(4,)),
        }
    )
    network_class = {
        "gru": eqxrl.nn.GRUActorCritic,
        "lstm": eqxrl.nn.LSTMActorCritic,
    }[network_type]
    network = network_class(
        space,
        Discrete(2),
        hidden_size=8,
        encoder_sizes=(6,),
        actor_keys=("policy",),
        critic_keys=("privileged",),
        key=jr.key(0),
    )
    num_steps = 7
    keys = jr.split(jr.key(1), 2)
    observations = {
        "policy": jr.normal(keys[0], (num_steps, 3)),
        "privileged": jr.normal(keys[1], (num_steps, 4)),
    }
    episode_start = jnp.array([True, False, False, True, False, False, False])
    start_carry = jax.tree.map(lambda x: x + 0.5, network.initial_carry())
    return network, observations, episode_start, start_carry


def equinox_step(core, carry, observation):
    features = core.encode(observation)
    if isinstance(core.cell, eqx.nn.LSTMCell):
        hidden, cell = core.cell(features, (carry.hidden, carry.cell))
        return eqxrl.nn.LSTMCarry(hidden=hidden, cell=cell)
    return eqxrl.nn.GRUCarry(hidden=core.cell(features, carry.hidden))


@pytest.mark.parametrize("speed_tricks", [None, False])
@pytest.mark.parametrize("num_sequences", [None, 1])
@pytest.mark.parametrize("network_type", ["gru", "lstm"])
def test_unroll_is_equinox_s_cell_step_by_step(
    network_type, num_sequences, speed_tricks
):
    # The unroll computes the cells' input projections for the whole sequence
    # before its loop; its hidden states must still be what eqx.nn.GRUCell /
    # eqx.nn.LSTMCell give one step at a time, resets included, for the actor's
    # and the critic's cores of an asymmetric network.
    network, observations, episode_start, start_carry = asymmetric_sequence(
        network_type
    )
    num_steps = 7

    # Equinox's cells and the network's `step`, one observation at a time.
    expected, stepped_values = [], []
    carry = stepped = start_carry
    for t in range(num_steps):
        if episode_start[t]:
            carry = stepped = network.initial_carry()
        observation = jax.tree.map(lambda x: x[t], observations)
        carry = eqxrl.nn.ActorCriticCarry(
            actor=equinox_step(network.actor_core, carry.actor, observation),
            critic=equinox_step(network.critic_core, carry.critic, observation),
        )
        expected.append(carry)
        stepped, _, value = network.step(stepped, observation)
        assert jnp.allclose(stepped.actor.hidden, carry.actor.hidden, atol=1e-6)
        assert jnp.allclose(stepped.critic.hidden, carry.critic.hidden, atol=1e-6)
        stepped_values.append(value)

    # Unrolled 2 steps (4 with the tricks off), or 1; the gates split or not.
    with (
        eqxrl.algorithms.cpu_speed_tricks(speed_tricks),
        eqxrl.nn.sequence_batch_hint(num_sequences),
    ):
        final_carry, _, values = network.unroll(
            start_carry, observations, episode_start
        )
    assert jnp.allclose(final_carry.actor.hidden, expected[-1].actor.hidden, atol=1e-6)
    assert jnp.allclose(
        final_carry.critic.hidden, expected[-1].critic.hidden, atol=1e-6
    )
    if network_type == "lstm":
        assert jnp.allclose(
            final_carry.critic.cell, expected[-1].critic.cell, atol=1e-6
        )
    assert jnp.allclose(values, jnp.stack(stepped_values), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(
    "initial_carry, network_type, speed_tricks",
    [
        ("zeros", "gru", None),
        ("zeros", "gru", False),
        ("zeros", "lstm", None),
        ("zeros", "lstm", False),
        # The initial carry's gradient flows back the same way with the tricks on
        # or off (their loops differ, and are compared above): one each.
        ("from_parameters", "gru", None),
        ("from_parameters", "lstm", False),
    ],
)
def test_unroll_s_gradient_is_backpropagation_through_equinox_s_cells(
    network_type, speed_tricks, initial_carry, monkeypatch
):
    # The unroll's own backward pass (the recurrent weights' gradients taken out
    # of the loop) against JAX's autodiff of Equinox's cells stepped in Python:
    # the gradients of every parameter and of the carry it starts from, through
    # the hidden states, the final carry and the values, resets included; also
    # for cores whose initial carry is not zeros and depends on their
    # parameters (the resets read it, and its gradient flows back).
    network, observations, episode_start, start_carry = asymmetric_sequence(
        network_type
    )
    if initial_carry == "from_parameters":

        def from_parameters(core):
            start = jnp.tanh(core.cell.bias[: core.cell.hidden_size]) + 0.3
            if isinstance(core.cell, eqx.nn.LSTMCell):
                return eqxrl.nn.LSTMCarry(hidden=start, cell=-start)
            return eqxrl.nn.GRUCarry(hidden=start)

        monkeypatch.setattr(type(network.actor_core), "initial_carry", from_parameters)
        assert not jnp.allclose(network.initial_carry().actor.hidden, 0.0)

    def unrolled(network, start_carry):
        with eqxrl.algorithms.cpu_speed_tricks(speed_tricks):
            final, distributions, values = network.unroll(
                start_carry, observations, episode_start
            )
        log_probs = jax.vmap(lambda d: d.log_prob(jnp.int32(0)))(distributions)
        return final, log_probs, values

    def stepped(network, start_carry):
        carry, log_probs, values = start_carry, [], []
        for t in range(7):
            if episode_start[t]:
                carry = network.initial_carry()
            observation = jax.tree.map(lambda x: x[t], observations)
            carry = eqxrl.nn.ActorCriticCarry(
                actor=equinox_step(network.actor_core, carry.actor, observation),
                critic=equinox_step(network.critic_core, carry.critic, observation),
            )
            distribution, value = network._heads(
                carry.actor.hidden, carry.critic.hidden, None
            )
            log_probs.append(distribution.log_prob(jnp.int32(0)))
            values.append(value)
        return carry, jnp.stack(log_probs), jnp.stack(values)

    def loss(run, network, start_carry):
        final, log_probs, values = run(network, start_carry)
        squares = sum(jnp.sum(leaf**2) for leaf in jax.tree.leaves(final))
        return jnp.sum(values**2) + jnp.sum(log_probs * jnp.arange(7.0)) + squares

    ours = jax.grad(lambda n, c: loss(unrolled, n, c), argnums=(0, 1))(
        network, start_carry
    )
    reference = jax.grad(lambda n, c: loss(stepped, n, c), argnums=(0, 1))(
        network, start_carry
    )
    leaves, reference_leaves = jax.tree.leaves(ours), jax.tree.leaves(reference)
    assert len(leaves) == len(reference_leaves) > 10
    for leaf, expected in zip(leaves, reference_leaves):
        assert jnp.allclose(leaf, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("speed_tricks", [None, False])
def test_the_backward_loop_carries_no_weight_gradients(speed_tricks):
    # Backpropagation through the sequence loop carries only the carries'
    # cotangents; the recurrent weights' gradient is one product after the loop
    # (XLA's transpose of a scan would add one outer product per step into a
    # weight-shaped loop carry).
    network, observations, episode_start, start_carry = asymmetric_sequence("gru")

    def loss(network):
        _, _, values = network.unroll(start_carry, observations, episode_start)
        return jnp.sum(values**2)

    with eqxrl.algorithms.cpu_speed_tricks(speed_tricks):
        jaxpr = jax.make_jaxpr(eqx.filter_grad(loss))(network)
    scans = [e for e in equations(jaxpr) if e.primitive.name == "scan"]
    backward = [e for e in scans if e.params["reverse"]]
    assert len(backward) == 1
    (scan,) = backward
    num_consts, num_carry = scan.params["num_consts"], scan.params["num_carry"]
    carried = [v.aval.shape for v in scan.invars[num_consts : num_consts + num_carry]]
    weight_shapes = {network.actor_core.cell.weight_hh.shape, (8, 8)}
    assert carried and not weight_shapes & set(carried), carried
