"""The web viewer: see what the agent learnt, live, and correct it — served by the data home's owner."""
