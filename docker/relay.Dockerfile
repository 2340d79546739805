# pgshovel2 CLI and relay, with the native row codec and Kafka producer (native/).

# The native module (Rust + PyO3, an abi3 wheel for CPython >= 3.11), as scripts/install.sh builds it;
# without it the relay runs the pure-Python codec, several times slower (it logs which it runs).
FROM rust:1.85-slim-bookworm AS native
RUN apt-get update && apt-get install -y --no-install-recommends \
      python3 python3-venv build-essential pkg-config libssl-dev \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /maturin && /maturin/bin/pip install --no-cache-dir "maturin>=1.5,<2"
COPY native /src/native
RUN /maturin/bin/maturin build -q --release --auditwheel skip -m /src/native/Cargo.toml -i python3 -o /wheels

FROM python:3.11-slim-bookworm
# jemalloc: the relay's allocator when installed (docs/operations.rst, "Memory allocator")
RUN apt-get update && apt-get install -y --no-install-recommends libjemalloc2 && rm -rf /var/lib/apt/lists/*
COPY . /src
COPY --from=native /wheels /wheels
RUN pip install --no-cache-dir -r /src/requirements.txt \
    && pip install --no-cache-dir --no-deps /src /wheels/pgshovel2_native-*.whl
ENTRYPOINT ["pgshovel-kafka-relay"]
