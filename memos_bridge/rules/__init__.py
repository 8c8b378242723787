"""Pure, deterministic text rules any layer may import: text clipping, content tokens, lesson sentences,
instance content and subject terms. Nothing here does I/O or imports another part of memos_bridge."""
