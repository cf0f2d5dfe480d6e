"""The Dask engine (the `[dask]` extra): partitioned counting, word buckets held on the workers,
and the diff-based merge loop driven from the client.

`client` connects to (or starts) a cluster, `count_tasks` counts partitions on the workers,
`bucket_holder` holds one bucket of the words on a worker, `channel` is the socket the loop runs
over, and `driver` runs the loop. Nothing here imports Prefect.
"""
