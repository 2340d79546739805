// Kafka's own key partitioning, as the Java producer applies it, for the tests (tests/helpers.py
// kafka_partitions): reads hex-encoded serialized keys, one per line, from stdin and prints, per
// key, "<Utils.murmur2(key)> <BuiltInPartitioner.partitionForKey(key, N)>" for N = args[0].
// Run: java -cp "$KAFKA_LIBS/*" tests/java/KafkaPartitions.java N < keys.hex
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;

import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.utils.Utils;

public class KafkaPartitions {
    public static void main(String[] args) throws Exception {
        int partitions = Integer.parseInt(args[0]);
        HexFormat hex = HexFormat.of();
        StringBuilder out = new StringBuilder();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        for (String line; (line = in.readLine()) != null; ) {
            byte[] key = hex.parseHex(line.strip());
            out.append(Utils.murmur2(key)).append(' ')
               .append(BuiltInPartitioner.partitionForKey(key, partitions)).append('\n');
        }
        System.out.print(out);
    }
}
