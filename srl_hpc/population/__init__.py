"""Populations and self-play: population-based training's choice of who copies whom (pbt.py), the opponents
a learner meets in a game of several seats (opponents.py), and the Elo ratings of its versions (ratings.py).
The handlers that run them (srl_hpc/handlers/population.py, rating.py) call these; the turn-taking games
themselves are envs (srl_hpc/envs/turns.py, connect_four.py, fixed_players.py)."""
