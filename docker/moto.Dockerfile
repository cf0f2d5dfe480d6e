# bpe-moto:latest: moto's S3 server, a stand-in for MinIO in tests (docker-compose.moto.yml).
FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PYTHONUNBUFFERED=1
RUN pip install 'moto[server]==5.2.5'
USER nobody
EXPOSE 9000
CMD ["python", "-m", "moto.server", "-H", "0.0.0.0", "-p", "9000"]
