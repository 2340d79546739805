//! What librdkafka reports to the native producer (error events and failed deliveries, gathered
//! while it works without the GIL) and the confluent_kafka exceptions its errors become.

use std::ffi::CStr;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;
use rdkafka::bindings::rd_kafka_err2str;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaError};
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use rdkafka::{ClientContext, Message};

/// A failed delivery: (librdkafka's error, topic, key).
type Failure = (RDKafkaErrorCode, String, Option<Vec<u8>>);

/// What librdkafka reported while the producer worked, for the Python callbacks.
#[derive(Default)]
pub(crate) struct Reports {
    pub errors: Mutex<Vec<(RDKafkaErrorCode, String)>>,
    pub failures: Mutex<Vec<Failure>>,
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
    /// prints: a broker that refuses connections shows there at once). Written from librdkafka's
    /// threads, which must not wait for the GIL: a Python thread holding it may be waiting on them.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        eprintln!("%{}|{}.{:03}|{}|pgshovel2-native#producer| {}", level as i32, now.as_secs(),
                  now.subsec_millis(), fac, message);
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
