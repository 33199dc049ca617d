# Colony's worker, HTTP API, CLI and simulator in one image (the same code `make run` uses).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY models models
COPY workflows workflows
COPY activities activities
COPY starter starter
COPY api api
COPY sim sim
COPY catalog catalog
COPY worker.py ./
RUN pip install --no-cache-dir .
ENV PYTHONUNBUFFERED=1
CMD ["python", "worker.py"]
