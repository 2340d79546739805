# pgshovel2 CLI and relay (`pgshovel`, `pgshovel-kafka-relay`), with the native row codec and Kafka
# producer (native/), on Debian bookworm only: Debian's Python 3.11 and Debian's Rust (rustc-web).

# The native module (Rust + PyO3, an abi3 wheel for CPython >= 3.11), built as scripts/install.sh builds
# it; without it the relay runs the pure-Python codec, several times slower (it logs which it runs).
FROM debian:bookworm AS native
RUN apt-get update && apt-get install -y --no-install-recommends \
      rustc-web cargo-web python3 python3-venv python3-dev build-essential pkg-config libssl-dev cmake \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /maturin && /maturin/bin/pip install --no-cache-dir "maturin>=1.5,<2"
COPY native /src/native
RUN /maturin/bin/maturin build -q --release --auditwheel skip -m /src/native/Cargo.toml -i python3 -o /wheels

FROM debian:bookworm
# jemalloc: the relay's allocator when installed (docs/operations.rst, "Memory allocator");
# postgresql-client: psql for the operator's own checks inside the container.
RUN apt-get update && apt-get install -y --no-install-recommends \
      python3 python3-venv libjemalloc2 libssl3 postgresql-client \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --home-dir /home/pgshovel pgshovel
COPY setup.py requirements.txt README.rst /src/
COPY pgshovel2 /src/pgshovel2
COPY --from=native /wheels /wheels
# Only the runtime dependencies (setup.py install_requires), pinned by requirements.txt.
RUN python3 -m venv /opt/pgshovel2 \
    && /opt/pgshovel2/bin/pip install --no-cache-dir --use-pep517 -c /src/requirements.txt /src /wheels/pgshovel2_native-*.whl \
    && rm -rf /src /wheels
ENV PATH=/opt/pgshovel2/bin:$PATH PYTHONUNBUFFERED=1
USER pgshovel
ENTRYPOINT ["pgshovel-kafka-relay"]
