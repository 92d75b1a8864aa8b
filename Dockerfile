# One image for the web server, the Celery worker and beat (docker-compose.yml picks the command).
FROM node:20-bookworm-slim AS static
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    UV_PROJECT_ENVIRONMENT=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    DJANGO_SETTINGS_MODULE=computeshare.settings.production
RUN apt-get update \
    && apt-get install -y --no-install-recommends openssh-client \
    && rm -rf /var/lib/apt/lists/* \
    && pip install --no-cache-dir uv==0.13.9 \
    && useradd --create-home --uid 1000 computeshare
WORKDIR /app
COPY pyproject.toml uv.lock ./
RUN uv sync --frozen --no-dev --no-install-project
COPY --from=static /app/node_modules ./node_modules
COPY . .
# collectstatic needs production settings to import, not real secrets: throwaway random ones,
# made for this step alone (production refuses the demo's and the tests' known keys).
RUN SECRET_KEY="$(python -c 'import secrets; print(secrets.token_urlsafe(50))')" \
    FIELD_ENCRYPTION_KEY="$(python -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())')" \
    ALLOWED_HOSTS=localhost DATABASE_URL=sqlite:////tmp/build.sqlite3 REDIS_URL=redis://localhost:6379/0 \
    python manage.py collectstatic --no-input \
    && rm -f /tmp/build.sqlite3 \
    && install -d -o computeshare -g computeshare /var/lib/celerybeat
USER computeshare
EXPOSE 8000
# Keep-alive above a proxy's idle time, as in docker-compose.yml.
CMD ["gunicorn", "computeshare.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", "--threads", "4", "--keep-alive", "75", "--access-logfile", "-"]
