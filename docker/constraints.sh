#!/bin/sh
# Regenerates the two lists of exact versions, each a `pip freeze` on python:3.11-slim without this
# project itself:
#   constraints.txt         what the README's two commands and CI install: pip (the first command
#                           upgrades the venv's own to it), then '.[pipeline,test]'
#   docker/constraints.txt  what the image installs: '.[pipeline,s3]', at the same versions
# Run from the repository root after changing dependencies in pyproject.toml, then rebuild:
#   sh docker/constraints.sh && docker compose build
set -eu
docker run --rm -e PIP_ROOT_USER_ACTION=ignore -v "$PWD:/src:ro" python:3.11-slim sh -ec '
  mkdir /tmp/src && cd /src && cp -r pyproject.toml README.md bpe flows tasks conf /tmp/src/
  export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
  python -m venv /tmp/dev && /tmp/dev/bin/pip install -q -U pip >&2 && /tmp/dev/bin/pip install -q "/tmp/src[pipeline,test]" >&2
  /tmp/dev/bin/pip freeze --all --exclude bpe-trainer --exclude setuptools --exclude wheel > /tmp/dev.txt
  python -m venv /tmp/image && /tmp/image/bin/pip install -q -c /tmp/dev.txt "/tmp/src[pipeline,s3]" >&2
  /tmp/image/bin/pip freeze --exclude bpe-trainer > /tmp/image.txt
  cat /tmp/dev.txt; echo "--- image"; cat /tmp/image.txt' > constraints.new
{
  echo "# The exact versions the README's first command and CI install: pip itself, then '.[pipeline,test]' (with [s3]) on"
  echo "# Python 3.11, Linux, x86-64. docker/constraints.txt (the image's) pins the same versions of what it shares."
  echo "# Regenerate both with: sh docker/constraints.sh (from the repository root), after changing dependencies."
  echo
  sed '/^--- image$/,$d' constraints.new
} > constraints.txt
{
  echo "# Pinned versions for the image (Dockerfile: pip install -c docker/constraints.txt)."
  echo "# Python 3.11, linux. Regenerate with: sh docker/constraints.sh (from the repository root)."
  sed '1,/^--- image$/d' constraints.new
} > docker/constraints.txt
rm constraints.new
echo "wrote constraints.txt ($(grep -vc '^#' constraints.txt) lines) and docker/constraints.txt ($(grep -vc '^#' docker/constraints.txt) packages)"
