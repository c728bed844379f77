"""Small primitives every part uses: the injected clock, backoff, concurrency, events."""
