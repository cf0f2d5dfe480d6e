"""Training: `train()` and its settings, counting (shards -> counts), the plan of a multilingual
run, small corpora, superwords, extending a tokenizer, and the kernel groups a run compiles first."""
