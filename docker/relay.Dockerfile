# pgshovel2 CLI and relay.
FROM python:3.11-slim-bookworm
COPY . /src
RUN pip install --no-cache-dir -r /src/requirements.txt && pip install --no-cache-dir --no-deps /src
ENTRYPOINT ["pgshovel-kafka-relay"]
