"""Learning from outcomes: reward and back-propagation, L2 policies, decision repair, and the background
queue that runs them in order after an episode ends (or at once on explicit feedback)."""
