"""Training text, from where it lies to the documents that are counted:

    files, directories, globs, URLs, stdin
      -> discover.py    the inputs as shards, each once (and what walks and globs skipped)
      -> shard.py       one file: its kind, compression, fingerprint and reading options
      -> read.py        its documents in batches, as they are trained on: readers.py reads
                        each kind, selection.py applies --sample and --limit
      -> bpe.engine.count, which counts their words

In-memory documents (`train(texts)`) come through documents.py, selected by the same rules.
Import each name from the module that defines it.
"""
