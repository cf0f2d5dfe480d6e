# bpe-trainer:latest, the one image of every Python service of docker-compose.yml (Prefect server
# and worker, Dask scheduler and workers): Dask needs the same package versions in client,
# scheduler and workers.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    BPE_KERNEL_CACHE=/opt/bpe/kernels \
    PREFECT_UI_STATIC_DIRECTORY=/opt/bpe/prefect-ui

WORKDIR /app

# Third-party packages at the versions pinned in docker/constraints.txt (regenerate it with
# `sh docker/constraints.sh` after changing dependencies): this layer is rebuilt only when the pins
# change, not when the code does.
COPY docker/constraints.txt docker/constraints.txt
RUN pip install -r docker/constraints.txt

COPY pyproject.toml README.md ./
COPY bpe bpe
COPY flows flows
COPY tasks tasks
COPY conf conf

# Editable, so that deployments find their source in /app. The demo corpus and the compiled
# kernels of both engines are built in (installing compiles nothing; `bpe warm` compiles every
# kernel group into BPE_KERNEL_CACHE, a group per core at once, and writes the package's bytecode,
# which PYTHONDONTWRITEBYTECODE keeps Python from writing as the services run), so that a fresh
# `docker compose up` trains at once.
RUN pip install -c docker/constraints.txt -e '.[pipeline,s3]' \
    && python -c "from bpe.pipeline.demo import write_demo_corpus; write_demo_corpus('demo-data')" \
    && bpe warm \
    && useradd --create-home --uid 1000 bpe \
    && mkdir -p /data /artifacts /opt/bpe/kernels \
    && chown -R bpe /app /data /artifacts /opt/bpe

USER bpe
