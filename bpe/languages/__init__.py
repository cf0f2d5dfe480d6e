"""Languages: their codes and inputs given by language, the mixture that weighs their counts, and
the parity ratios. The rules a setting's value must follow, below the schema that checks them; the
plan of a multilingual run is training's (`bpe.training.plan`)."""
