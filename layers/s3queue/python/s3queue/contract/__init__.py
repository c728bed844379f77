"""What the stack, the functions and the core agree on: names, settings, the environment,
handler discovery.

The CDK app imports only this folder (and `s3queue.errors`): nothing here touches storage.
"""
