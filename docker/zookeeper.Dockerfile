# ZooKeeper 3.8 from Debian's package, one node, for the set configs and relay election.
FROM debian:bookworm
RUN apt-get update && apt-get install -y --no-install-recommends zookeeper openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o zookeeper -g zookeeper /var/lib/zookeeper/data
# Not Debian's /etc/zookeeper/conf: its dataDir holds a myid placeholder that makes a standalone
# server fail on "serverid ... is not a number".
COPY docker/zoo.cfg /etc/pgshovel2/zoo.cfg
USER zookeeper
VOLUME /var/lib/zookeeper/data
EXPOSE 2181
ENTRYPOINT ["java", "-Xmx256m", "-Dzookeeper.jmx.log4j.disable=true", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", \
  "-cp", "/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/netty.jar:/usr/share/java/metrics-core.jar", \
  "org.apache.zookeeper.server.ZooKeeperServerMain", "/etc/pgshovel2/zoo.cfg"]
