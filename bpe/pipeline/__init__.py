"""What the Prefect pipeline needs (the `[pipeline]` extra): tokenizer configurations, the
versioned artifact store, held-out evaluation, the published reports, and starting the services.

The flows and tasks that use it live in `flows/` and `tasks/` at the top of the source tree
(installed as `bpe.flows` and `bpe.tasks`).
"""
