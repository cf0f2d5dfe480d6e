"""Evaluation: tokenizers measured language by language on a parallel dev set, and the report."""
