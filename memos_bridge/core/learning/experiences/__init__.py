"""The typed-experience stage: feedback → lessons in the feedback's own words, one per convention.

`stage` is the step in the learning chain, `store` its SQL, `rules` its pure logic (assessment, drafts, merge
arithmetic, domain tags) and `verifier` the parser of verifier payloads. The sentence classifier, the instance
filter and the subject terms it builds on are leaf rules (`memos_bridge.rules`) the other stages share.
"""

from memos_bridge.core.learning.experiences.stage import ExperienceReport, experience_stage
from memos_bridge.core.learning.experiences.store import get_policy, list_policies

__all__ = ["ExperienceReport", "experience_stage", "get_policy", "list_policies"]
