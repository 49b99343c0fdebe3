"""The six stages of a SkillOpt step, in order: rollout, reflect, aggregate, select, update, gate; and the
skill-aware appendix call a step makes after its gate."""
