"""The training loop's parts, each with one job; `skillopt_ray.engine.trainer.Trainer` orchestrates them.

schedule    splits, batch order, the episode plan (what the run will play)
evaluation  scoring a skill on a split with the score cache; gate comparisons; early stop
recorder    stage records, skill versions, step records, the state commit, tracker calls
step        one training step: rollout, reflect, aggregate, select, update, gate, commit
boundary    the epoch boundary: comparison pairs, slow update, meta skill
final       the final evaluation and the run's summary
"""
