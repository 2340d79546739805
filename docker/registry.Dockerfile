# Apicurio Registry 2.6 (Confluent-compatible API at /apis/ccompat/v7) from Maven Central on Debian's
# Java 17, in-memory storage, BACKWARD compatibility enforced globally -- as scripts/registry/ runs it.
FROM debian:bookworm AS app
RUN apt-get update && apt-get install -y --no-install-recommends maven openjdk-17-jdk-headless \
    && rm -rf /var/lib/apt/lists/*
COPY scripts/registry/install.sh /src/install.sh
RUN /src/install.sh /opt/registry

FROM debian:bookworm
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* && useradd --system registry
COPY --from=app /opt/registry/app /opt/registry/app
USER registry
EXPOSE 8080
ENTRYPOINT ["java", "-Xmx384m", "-Dquarkus.http.host=0.0.0.0", "-Dquarkus.http.port=8080", \
  "-Dquarkus.management.enabled=false", "-Dquarkus.datasource.jdbc.url=jdbc:h2:mem:registry_db", \
  "-Dregistry.rules.global.compatibility=BACKWARD", "-jar", "/opt/registry/app/registry-runner.jar"]
