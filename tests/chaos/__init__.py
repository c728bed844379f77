"""Chaos testing: fault injection, a recorded history of every run, and a checker of it.

faults.py    S3 faults (a botocore hook) and the same faults at the `Storage` level
process.py   crashes at chosen S3 calls, freezes, skewed clocks
history.py   the record of a run: queue events, handler calls, faults, the final state
checker.py   the guarantees, checked against a history
workload.py  the message mix (ok, flaky, poison, slow, malformed) and its handler
actors.py    coordinator and worker processes, as a runner runs them
sim.py       a deterministic runner: one actor at a time, simulated time, seeded
cluster.py   a real runner: threads, the wall clock, any storage (SeaweedFS)
soak.py      ``make chaos``: a long run with random seeds and a results table
"""
