"""Benchmarks of S3Queue: throughput, latency, cost, idle, scale and cold start (`make bench`)."""
