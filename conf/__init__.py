"""Tokenizer configurations (one YAML file each); shipped as package data for `bpe demo`."""
