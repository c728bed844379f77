"""The producer: `Queue.enqueue`, `enqueue_many` and group commit."""
