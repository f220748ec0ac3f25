# trainguard responder image. Build: docker build -t trainguard .
# Run:   docker run -p 9480:9480 -v trainguard-data:/data -e TRAINGUARD_WEBHOOK_TOKEN=... trainguard
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY trainguard ./trainguard
COPY responder ./responder
COPY exporters ./exporters
RUN python -m venv /opt/trainguard \
 && /opt/trainguard/bin/pip install --no-cache-dir -c constraints.txt '.[k8s,nvml]'

FROM python:3.11-slim-bookworm
RUN useradd --system --uid 10001 --home-dir /data --create-home trainguard
COPY --from=build /opt/trainguard /opt/trainguard
ENV PATH=/opt/trainguard/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PROMETHEUS_DISABLE_CREATED_SERIES=True \
    TRAINGUARD_HOST=0.0.0.0 \
    TRAINGUARD_DB_PATH=/data/trainguard.db
USER trainguard
WORKDIR /data
VOLUME ["/data"]
EXPOSE 9480
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:9480/healthz', timeout=2).status == 200 else 1)"]
ENTRYPOINT ["trainguard"]
CMD ["serve"]
