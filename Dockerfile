# One image for every Python service of the local cluster (Prefect server and worker, Dask
# scheduler and workers): the same package versions everywhere, as Dask requires across client,
# scheduler and workers.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    BPE_KERNEL_CACHE=/opt/bpe/kernels \
    PREFECT_UI_STATIC_DIRECTORY=/opt/bpe/prefect-ui

WORKDIR /app
COPY pyproject.toml README.md ./
COPY bpe bpe
COPY flows flows
COPY tasks tasks
COPY conf conf

# Editable, so that deployments find their source in /app. The demo corpus and the compiled
# kernels are built into the image, so that a fresh `docker compose up` can train at once.
RUN pip install --upgrade pip \
    && pip install -e '.[pipeline]' \
    && python -c "from bpe.pipeline.demo import write_demo_corpus; write_demo_corpus('demo-data')" \
    && bpe train demo-data --vocab-size 300 --out /tmp/warm --quiet \
    && rm -rf /tmp/warm \
    && useradd --create-home --uid 1000 bpe \
    && mkdir -p /data /artifacts /opt/bpe/kernels \
    && chown -R bpe /app /data /artifacts /opt/bpe

USER bpe
