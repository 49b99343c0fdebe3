"""The LLM layer: the gateway actor, its clients for each API, the response cache, the ledger, the embedded model
server, and the agent API the agent CLIs call. The messages and requests it carries are the benchmarks' contract's
(skillopt_envs.chat)."""
