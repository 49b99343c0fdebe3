"""The six stages of a SkillOpt step, in order: rollout, reflect, aggregate, select, update, gate."""
