"""memos-bridge: a local-first, self-evolving memory service for LLM agents.

The service speaks JSON-RPC 2.0 (newline-delimited JSON) over stdio or TCP; see README.md.
"""

__version__ = "0.1.0"
