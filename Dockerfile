# Colony's image: the worker (`python worker.py`), the watcher (`python watcher.py`), the HTTP API
# (`python -m api`), colonyctl, and the SIMULATOR (`python -m sim`, for trying Colony out) are one
# image, the same code `make run` runs. docker-compose.yml builds it once for all of them.
FROM python:3.11-slim
WORKDIR /app
# Everything but what .dockerignore leaves out (local state, virtualenvs, caches).
COPY . .
RUN pip install --no-cache-dir .
ENV PYTHONUNBUFFERED=1
# Nobody: the processes need no privilege (the sim writes its state under /colony, a volume).
USER 65534:65534
CMD ["python", "worker.py"]
