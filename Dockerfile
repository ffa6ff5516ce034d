# One image for the API, the workers and the migration step (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    GRADACC_HOME=/data \
    GRADACC_REQUIRE_AUTH=true

WORKDIR /app
# Dependencies first, so that a code change does not reinstall torch.
COPY pyproject.toml README.md ./
RUN mkdir -p trainer_core api worker gradacc commands \
    && touch trainer_core/__init__.py api/__init__.py worker/__init__.py gradacc/__init__.py \
       commands/__init__.py \
    && pip install . \
    && pip uninstall -y gradacc
COPY alembic.ini ./
COPY migrations migrations
COPY trainer_core trainer_core
COPY gradacc gradacc
COPY api api
COPY worker worker
COPY commands commands
# Editable, so `gradacc migrate` finds alembic.ini and migrations/ beside the code.
RUN pip install --no-deps -e . \
    && useradd --create-home --uid 1000 gradacc \
    && mkdir -p /data && chown gradacc /data
USER gradacc
VOLUME ["/data"]
EXPOSE 8000
CMD ["gradacc", "serve", "--host", "0.0.0.0", "--port", "8000"]
