"""Tokenizer files, one module per format, each with one reader and one writer:

- `gpt2`: `vocab.json` + `merges.txt`; `write`, `read` -> `TokenizerRecord`
- `hf_json`: Hugging Face's `tokenizer.json`; `write`, `read` -> `TokenizerRecord`
- `transformers_config`: `tokenizer_config.json` and `special_tokens_map.json`; `write`,
  `read_roles`, `read_max_length`
- `tiktoken_ranks`: `tokenizer.tiktoken` (`base64(token) rank` lines); `write`, `read`
- `manifest_json`: our `manifest.json` (a `bpe.manifest.Manifest`: how it was trained, each file's
  SHA-256); `write`, `read`, `read_tokenizer_section`
- `saved`: the whole directory `Tokenizer.save` writes; `write`, `read` (each file checked
  against the others)

`load.read(path)` tells which format a path holds and reads it. A reader takes any tool's file of
its format (ids as that file gives them); `spelling` is GPT-2's byte alphabet the first two share,
`files` the checked reading (regular files of bounded size, lines as they come), one-line errors
and id limits every reader applies, `record` what they all return.
"""
