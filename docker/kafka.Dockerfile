# Apache Kafka (KRaft, one node as broker and controller) from Maven Central's jars on Debian's Java 17;
# the same jars and settings scripts/stack.sh runs for the tests.
FROM debian:bookworm AS jars
RUN apt-get update && apt-get install -y --no-install-recommends maven openjdk-17-jdk-headless \
    && rm -rf /var/lib/apt/lists/*
COPY scripts/kafka/pom.xml /src/pom.xml
RUN mvn -q -B -f /src/pom.xml dependency:copy-dependencies -DoutputDirectory=/opt/kafka/libs

FROM debian:bookworm
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --home-dir /var/lib/kafka kafka
COPY --from=jars /opt/kafka/libs /opt/kafka/libs
COPY scripts/kafka/single-node.properties /opt/kafka/single-node.properties
COPY docker/kafka-entrypoint.sh /usr/local/bin/kafka-entrypoint
USER kafka
VOLUME /var/lib/kafka
EXPOSE 9092
ENTRYPOINT ["kafka-entrypoint"]
