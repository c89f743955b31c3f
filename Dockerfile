# One image for the API, the worker and beat (the command differs).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
# Dependencies first, from the lock file (exact versions, hashes checked), in a layer of their
# own that a code change does not rebuild; then the project itself without dependencies.
COPY requirements.lock ./
RUN pip install --require-hashes -r requirements.lock
COPY pyproject.toml README.md alembic.ini ./
COPY backend backend
COPY workers workers
COPY migrations migrations
COPY frontend frontend
RUN pip install --no-deps .
RUN useradd --system --uid 10001 headroom
USER headroom
EXPOSE 8000
CMD ["headroom", "serve", "--host", "0.0.0.0"]
