//! What librdkafka reports to the native producer (error events and failed deliveries, gathered
//! while it works without the GIL) and the confluent_kafka exceptions its errors become.

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;
use rdkafka::bindings::rd_kafka_err2str;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaError};
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use rdkafka::{ClientContext, Message};

/// A failed delivery: (librdkafka's error, topic, key).
type Failure = (RDKafkaErrorCode, String, Option<Vec<u8>>);

/// What librdkafka reported while the producer worked, for the Python callbacks, and the log
/// lines already printed (folded as pgshovel2.kafkalog folds confluent_kafka's).
#[derive(Default)]
pub(crate) struct Reports {
    pub errors: Mutex<Vec<(RDKafkaErrorCode, String)>>,
    pub failures: Mutex<Vec<Failure>>,
    logged: Mutex<HashMap<String, (Instant, u64)>>,
}

/// Seconds a repeated log line stays folded (pgshovel2.kafkalog.WINDOW).
const FOLD_WINDOW: Duration = Duration::from_secs(60);

/// The text librdkafka repeats, without what changes between repeats (pgshovel2.kafkalog.fold_key):
/// digit runs become "N" and the " (after N ms in state X...)" tail goes.
pub(crate) fn fold_key(message: &str) -> String {
    let text = match message.find(" (after ") {
        Some(at) if message[at..].contains("ms in state ") => &message[..at],
        _ => message,
    };
    let mut key = String::with_capacity(text.len());
    let mut in_number = false;
    for c in text.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                key.push('N');
            }
            in_number = true;
        } else {
            key.push(c);
            in_number = false;
        }
    }
    key
}

impl Reports {
    /// The line to print for message, or None: a repeat of the last minute (its count goes on
    /// the next line of its kind).
    fn admit(&self, message: &str) -> Option<String> {
        let (key, now) = (fold_key(message), Instant::now());
        let mut logged = self.logged.lock().unwrap();
        match logged.get_mut(&key) {
            Some((since, left_out)) if now.duration_since(*since) < FOLD_WINDOW => {
                *left_out += 1;
                None
            }
            Some((since, left_out)) => {
                let line = if *left_out > 0 {
                    format!("{message} (and {left_out} like it in the last {}s)", now.duration_since(*since).as_secs())
                } else {
                    message.to_string()
                };
                *since = now;
                *left_out = 0;
                Some(line)
            }
            None => {
                logged.insert(key, (now, 0));
                Some(message.to_string())
            }
        }
    }
}

fn code_of(error: &KafkaError) -> RDKafkaErrorCode {
    error.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail)
}

/// librdkafka's text of an error code (rd_kafka_err2str), as confluent_kafka's KafkaError.str().
pub(crate) fn text_of(code: RDKafkaErrorCode) -> String {
    match RDKafkaRespErr::try_from(code as i32) {
        // SAFETY: rd_kafka_err2str returns a static NUL-terminated string for every code.
        Ok(resp) => unsafe { CStr::from_ptr(rd_kafka_err2str(resp)) }.to_string_lossy().into_owned(),
        Err(_) => format!("{code:?}"),
    }
}

impl ClientContext for Reports {
    /// Each error event comes here twice in a row (the rdkafka crate's Client::poll_event and
    /// BaseProducer::poll both hand it over): the repeat is dropped.
    fn error(&self, error: KafkaError, reason: &str) {
        let report = (code_of(&error), reason.to_string());
        let mut errors = self.errors.lock().unwrap();
        if errors.last() != Some(&report) {
            errors.push(report);
        }
    }

    /// librdkafka's log lines to stderr in its own default form (what confluent_kafka's producer
    /// prints: a broker that refuses connections shows there at once), folded (Reports::admit). Written from librdkafka's
    /// threads, which must not wait for the GIL: a Python thread holding it may be waiting on them.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        let Some(line) = self.admit(message) else { return };
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        eprintln!("%{}|{}.{:03}|{}|pgshovel2-native#producer| {}", level as i32, now.as_secs(),
                  now.subsec_millis(), fac, line);
    }
}

impl ProducerContext for Reports {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((error, message)) = result {
            self.failures.lock().unwrap().push((code_of(error), message.topic().to_string(),
                                                message.key().map(<[u8]>::to_vec)));
        }
    }
}

/// confluent_kafka.KafkaException(KafkaError(code, reason, fatal, retriable, txn_requires_abort)).
pub(crate) fn kafka_exception(py: Python<'_>, code: RDKafkaErrorCode, reason: &str, flags: (bool, bool, bool)) -> PyErr {
    match kafka_error(py, code, reason, flags).and_then(|e| {
        py.import("confluent_kafka")?.getattr("KafkaException")?.call1((e,))
    }) {
        Ok(exc) => PyErr::from_value(exc),
        Err(err) => err,
    }
}

pub(crate) fn kafka_error<'py>(py: Python<'py>, code: RDKafkaErrorCode, reason: &str,
                    (fatal, retriable, abort): (bool, bool, bool)) -> PyResult<Bound<'py, PyAny>> {
    py.import("confluent_kafka")?.getattr("KafkaError")?.call1((code as i32, reason, fatal, retriable, abort))
}

/// The Python exception of an error of the rdkafka crate.
pub(crate) fn raise(py: Python<'_>, error: KafkaError) -> PyErr {
    match error {
        KafkaError::Transaction(e) => transaction_exception(py, &e),
        KafkaError::Flush(code) if code == RDKafkaErrorCode::OperationTimedOut => {
            kafka_exception(py, code, "Local: Timed out flushing the messages", (false, true, false))
        }
        other => {
            let code = code_of(&other);
            kafka_exception(py, code, &text_of(code), (false, false, false))
        }
    }
}

fn transaction_exception(py: Python<'_>, e: &RDKafkaError) -> PyErr {
    kafka_exception(py, e.code(), &e.string(), (e.is_fatal(), e.is_retriable(), e.txn_requires_abort()))
}
