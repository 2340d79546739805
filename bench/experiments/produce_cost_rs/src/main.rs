//! CPU µs per message of librdkafka's produce called from Rust (the rdkafka crate), with the relay's
//! six data-message headers built per message and without headers, enqueue only: the broker,
//! 127.0.0.1:1, never answers, so nothing is sent. Producer settings as the relay's
//! (pgshovel2.sinks.kafka.PRODUCER_DEFAULTS, but transactions). Prints one JSON object:
//! {"native_headers_us": [per round], "native_no_headers_us": [per round]}.
//!
//!     cargo run --release -- [messages] [rounds]

use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, PurgeConfig};
use std::time::Duration;

/// utime + stime of this process (all threads), in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn producer() -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", "127.0.0.1:1")
        .set("partitioner", "murmur2_random")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("compression.type", "lz4")
        .set("queue.buffering.max.messages", "2000000")
        .set("queue.buffering.max.kbytes", "4000000")
        .set("log_level", "0")
        .create()
        .expect("a producer")
}

/// CPU µs per message of messages produces, with the six headers or none.
fn round(p: &BaseProducer, messages: usize, headers: bool) -> f64 {
    let value = vec![b'x'; 300];
    let key = b"{\"id\": 12345}".to_vec();
    let started = cpu_seconds();
    for i in 0..messages {
        let position = format!("0000000001/0000000001/{i:010}");
        let record = BaseRecord::to("topic.t").key(&key).payload(&value);
        let record = if headers {
            record.headers(OwnedHeaders::new_with_capacity(6)
                .insert(Header { key: "pgshovel.op", value: Some("c") })
                .insert(Header { key: "pgshovel.txid", value: Some("123456") })
                .insert(Header { key: "pgshovel.position", value: Some(position.as_str()) })
                .insert(Header { key: "pgshovel.ts_ms", value: Some("1700000000000") })
                .insert(Header { key: "pgshovel.set", value: Some("myset") })
                .insert(Header { key: "pgshovel.version", value: Some("3") }))
        } else {
            record
        };
        p.send(record).map_err(|(e, _)| e).expect("the queue takes it");
    }
    let used = cpu_seconds() - started;
    p.purge(PurgeConfig::default().queue());
    p.poll(Duration::from_millis(0));
    used * 1e6 / messages as f64
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (messages, rounds) = (args.first().copied().unwrap_or(400_000), args.get(1).copied().unwrap_or(3));
    let p = producer();
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        with.push(round(&p, messages, true));
        without.push(round(&p, messages, false));
    }
    let list = |v: &[f64]| v.iter().map(|x| format!("{x:.3}")).collect::<Vec<_>>().join(", ");
    println!("{{\"native_headers_us\": [{}], \"native_no_headers_us\": [{}]}}", list(&with), list(&without));
}
