# The hitlflow image: the same code runs as a worker (`hitlflow worker`) or as the
# HTTP API (`hitlflow api`), configured by HITLFLOW_* environment variables only.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY workflows workflows
COPY activities activities
COPY observation observation
COPY api api
RUN pip install --no-cache-dir .
ENV HITLFLOW_DATA_DIR=/data
VOLUME ["/data"]
ENTRYPOINT ["hitlflow"]
CMD ["worker"]
