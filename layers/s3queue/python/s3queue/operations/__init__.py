"""The operator's calls on a whole queue: stats, dead letters, redrive, purge, orphans."""
