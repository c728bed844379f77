"""The local tools: the ``s3queue`` command, `run_local`, the embedded S3 server, the demo.

None of this ships in the Lambda layer (`s3queue.contract.packaging.LAYER_EXCLUDES`
leaves ``local/`` out): a function never imports it, and its import time is not cold-start time.
"""

from s3queue.local.runtime import RunSummary, run_local

__all__ = ["RunSummary", "run_local"]
