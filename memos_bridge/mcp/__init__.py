"""The MCP face: an MCP server, Claude Code hook commands, and installers for MCP hosts."""
