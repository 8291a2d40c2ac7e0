"""Per-partition state: the snapshot codec and the object-store backend."""
