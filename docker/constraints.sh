#!/bin/sh
# Regenerates docker/constraints.txt, the exact versions the image installs: a `pip freeze` of
# '.[pipeline,s3]' on python:3.11-slim, without this project itself.
# Run from the repository root after changing dependencies in pyproject.toml, then rebuild:
#   sh docker/constraints.sh && docker compose build
set -eu
out=docker/constraints.txt
docker run --rm -e PIP_ROOT_USER_ACTION=ignore -v "$PWD:/src:ro" python:3.11-slim sh -ec '
  mkdir /tmp/src && cd /src && cp -r pyproject.toml README.md bpe flows tasks conf /tmp/src/
  pip install -q --no-cache-dir --disable-pip-version-check "/tmp/src[pipeline,s3]" >&2
  pip freeze --exclude bpe-trainer' > "$out.new"
{
  echo "# Pinned versions for the image (Dockerfile: pip install -c docker/constraints.txt)."
  echo "# Python 3.11, linux. Regenerate with: sh docker/constraints.sh (from the repository root)."
  cat "$out.new"
} > "$out"
rm "$out.new"
echo "wrote $out ($(grep -vc '^#' "$out") packages)"
