"""Models: a torso (mlp, nature_cnn, or a user's nn.Module by dotted path) under the head an algorithm
trains. Imported by policy and trainer handlers only (never by actors that do not run inference).

Heads (the algorithm's spec names one):
  actor_critic  forward(obs) -> (the policy's distribution parameters (B, width), state values (B,)): logits,
                masked where a Dict observation has an `action_mask`, or a Gaussian's means and log-stds
                (srl_hpc/models/distributions.py; `model.action_dist` turns them into the distribution)
  central_critic  forward(obs, state=None) -> as actor_critic, the value over every agent's observation (MAPPO)
  q             forward(obs) -> action values (B, A); dueling: value + centred advantages
With model.rnn, the actor-critic and q heads sit on a recurrent core (RecurrentActorCritic, RecurrentQ):
forward(obs, state) also takes and returns the recurrent state, and forward(obs, state, resets) unrolls
whole segments.
Observations come as they travel (srl_hpc/streams/contract.py): a Dict observation as packed bytes, which
ObsDecoder turns back into one tensor per key; DictTorso encodes each key (NatureCNN for images, an MLP
otherwise) and concatenates. With algorithm.normalize_observations the MLPs normalise their input by
running statistics the trainer keeps (srl_hpc/models/normalization.py).
A user's model is `package.module:Class`, built as Class(obs_space, action_space, **model.kwargs); it must
return what its algorithm's head returns (ObsDecoder(obs_space) reads a Dict observation).
The package: torsos.py, heads.py, building.py (build_model), devices.py (which GPU), weights.py (arrays and
checksums), beside distributions.py and normalization.py.
"""
