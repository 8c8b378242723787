"""SkillFlow: drive families of verifiable tasks through memos-bridge and measure whether memory helps.

One trial per task, never re-run to success: the agent attempts the task once, a verifier scores the output,
the verdict goes back to the service as structured feedback bound to the task's episode, and the next task of
the family shows whether the lesson came back (seed 000 "SkillFlow 集成要求"). The same family is also run
without any memory, so the report can put the two success rates side by side.

Modules: `family` (task families as data), `verify` (the verifier result and the shared comparison and
diagnosis helpers), `lessons` (how the simulated agent recognises a lesson in recalled text), `agents` (the
simulated agent and the external-command agent), `protocol` (the per-family loop, with and without the
service), `report` (JSON report, table, plot). The runner CLI is `scripts/skillflow_runner.py`.
"""
