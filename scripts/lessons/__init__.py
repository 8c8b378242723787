"""The lesson-generalization corpus and its evaluation: do lessons taught by feedback come back, faithfully,
for task families the service was never tuned on?

Modules: `corpus` (families as data: conventions, tasks with checkable answers, feedback in six styles;
loading and validation), `evaluate` (every family through the real JSON-RPC service with scripted naive
answers; recall, leaks, invented lines, unrelated injections), `agent_eval` (a real local model as the agent,
four memory arms). The CLIs are `scripts/eval_lessons.py` and `scripts/eval_lessons_agent.py`.
"""
