"""The worker: claim a ticket, run the handler on each message, commit, apply."""
