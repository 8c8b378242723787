"""Whether two requests are about the same work: the measure a lesson's contexts are compared by.

A lesson keeps the requests it was learnt on, as unit vectors of the packaged sentence model. Requests of one
piece of work (one system's records, one project's files) are close in meaning even when they name no file or
company; requests of different work share only the shape of a request ("what is the total …"). Learning uses the
measure to decide whether a new lesson is taught again on the same work (a merge), retrieval to decide whether a
lesson is about the work a request asks for. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np

#: Two requests at least this close (cosine of unit vectors) are about the same work. Measured on the lesson
#: corpus's dev families with the packaged model: requests of one family 0.49 at the 10th percentile, requests of
#: different families 0.50 at the 95th.
SAME_WORK_SIMILARITY: Final = 0.6


def closeness(vector: Any, contexts: Sequence[Any]) -> float | None:
    """The closest cosine between a unit vector and a lesson's context vectors; None when either is missing."""
    if vector is None or not contexts:
        return None
    return max(float(np.dot(vector, context)) for context in contexts)
