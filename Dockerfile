# Iris in a container. Build: docker build -t iris .   Run: see compose.yaml.
# The vault (and config.toml, .env) live in /data, a volume; the HTTP server listens on 8787
# for /healthz and webhooks. Secrets come from the environment (compose's env_file), never
# from the image.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY channels ./channels
COPY proactive ./proactive
COPY vault ./vault
# EXTRAS="[postgres]" adds the PostgreSQL driver (compose.replicas.yaml builds it so).
ARG EXTRAS=""
RUN pip install ".${EXTRAS}" && rm -rf /src

RUN useradd --create-home --uid 10001 iris && mkdir /data && chown iris:iris /data
USER iris
WORKDIR /data
VOLUME ["/data"]

# Inside the container the server must listen beyond loopback for the port mapping; publish
# it on the host's 127.0.0.1 only (compose.yaml does) unless a reverse proxy needs otherwise.
ENV IRIS_VAULT__PATH=/data/iris.db \
    IRIS_HTTP__ENABLED=true \
    IRIS_HTTP__HOST=0.0.0.0 \
    IRIS_HTTP__PORT=8787
EXPOSE 8787

# 200 when every enabled channel is connected; 503 (unhealthy) while one is not.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8787/healthz', timeout=4)"]

# SIGTERM starts the graceful stop: intake stops, turns in flight drain ([router]
# drain_timeout_s, 10 s by default), then the vault closes. Give it that long (compose's
# stop_grace_period).
STOPSIGNAL SIGTERM
CMD ["iris", "run"]
