# pgshovel2 CLI and relay.
FROM python:3.11-slim-bookworm
# jemalloc: the relay's allocator when installed (docs/operations.rst, "Memory allocator")
RUN apt-get update && apt-get install -y --no-install-recommends libjemalloc2 && rm -rf /var/lib/apt/lists/*
COPY . /src
RUN pip install --no-cache-dir -r /src/requirements.txt && pip install --no-cache-dir --no-deps /src
ENTRYPOINT ["pgshovel-kafka-relay"]
