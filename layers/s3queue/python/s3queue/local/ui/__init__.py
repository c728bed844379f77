"""``s3queue ui``: a local web dashboard of a bucket's queues (Flask, served by waitress).

Imported only by the ``ui`` command and ``dev --ui``: ``import s3queue.local`` never loads the
web stack, and none of it ships in the Lambda layer. Parts: `board` (what the pages show, from
the operator's calls), `trend` (the backlog's rate), `guard` (Host, Origin and CSRF checks),
`views` (pages), `actions` (every POST), `app` (the Flask app), `serve` (the command).
"""
