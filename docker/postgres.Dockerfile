# PostgreSQL 15 with PgQ, pgqd and the pgshovel2 capture extension.
FROM postgres:15-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends \
      postgresql-15-pgq3 pgqd postgresql-server-dev-15 build-essential \
    && rm -rf /var/lib/apt/lists/*
COPY sql/capture /src/capture
RUN make -C /src/capture with_llvm=no && make -C /src/capture with_llvm=no install
