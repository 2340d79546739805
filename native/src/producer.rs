//! pgshovel2_native.Producer: librdkafka's producer (the rdkafka crate) behind the calls
//! pgshovel2.sinks.kafka.KafkaSink makes of confluent_kafka.Producer, so a message is enqueued
//! from native code without Python building or parsing it per call. Errors are raised as
//! confluent_kafka's (KafkaException of a KafkaError with librdkafka's code, fatal, retriable and
//! txn_requires_abort flags; BufferError for a full queue), so the sink maps both producers'
//! errors in one place. librdkafka's error events and failed deliveries are gathered while it
//! works (the GIL released) and handed to the Python callbacks when the call returns.

use std::ffi::CStr;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaError};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer as _, ProducerContext};
use rdkafka::bindings::{
    rd_kafka_err2str, rd_kafka_flush, rd_kafka_queue_destroy, rd_kafka_queue_get_main, rd_kafka_queue_length,
    rd_kafka_resp_err_t,
};
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use rdkafka::util::Timeout;
use rdkafka::{ClientContext, Message};

/// A failed delivery: (librdkafka's error, topic, key).
type Failure = (RDKafkaErrorCode, String, Option<Vec<u8>>);

/// What librdkafka reported while the producer worked, for the Python callbacks.
#[derive(Default)]
struct Reports {
    errors: Mutex<Vec<(RDKafkaErrorCode, String)>>,
    failures: Mutex<Vec<Failure>>,
}

fn code_of(error: &KafkaError) -> RDKafkaErrorCode {
    error.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail)
}

/// librdkafka's text of an error code (rd_kafka_err2str), as confluent_kafka's KafkaError.str().
fn text_of(code: RDKafkaErrorCode) -> String {
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
fn kafka_exception(py: Python<'_>, code: RDKafkaErrorCode, reason: &str, flags: (bool, bool, bool)) -> PyErr {
    match kafka_error(py, code, reason, flags).and_then(|e| {
        py.import("confluent_kafka")?.getattr("KafkaException")?.call1((e,))
    }) {
        Ok(exc) => PyErr::from_value(exc),
        Err(err) => err,
    }
}

fn kafka_error<'py>(py: Python<'py>, code: RDKafkaErrorCode, reason: &str,
                    (fatal, retriable, abort): (bool, bool, bool)) -> PyResult<Bound<'py, PyAny>> {
    py.import("confluent_kafka")?.getattr("KafkaError")?.call1((code as i32, reason, fatal, retriable, abort))
}

/// The Python exception of an error of the rdkafka crate.
fn raise(py: Python<'_>, error: KafkaError) -> PyErr {
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

/// The instant seconds from now (negative: a year, for ever).
fn deadline(seconds: f64) -> Instant {
    Instant::now() + if seconds < 0.0 { Duration::from_secs(365 * 86_400) } else { Duration::from_secs_f64(seconds) }
}

/// Serves the events waiting on the producer's main queue (error events, failed deliveries and
/// librdkafka's log lines, which the rdkafka crate routes there): a poll serves one at most.
fn serve(inner: &BaseProducer<Reports>) {
    // SAFETY: the client pointer is valid while inner lives; the queue reference is released.
    let waiting = unsafe {
        let queue = rd_kafka_queue_get_main(inner.client().native_ptr());
        let n = rd_kafka_queue_length(queue);
        rd_kafka_queue_destroy(queue);
        n
    };
    for _ in 0..waiting {
        inner.poll(Duration::ZERO);
    }
}

/// Waits until every message is acknowledged or failed, up to deadline: true when none is left.
/// librdkafka's flush waits on its message count without polling (delivery reports are events
/// here, and with delivery.report.only.error only a failure makes one), so it returns as soon as
/// the last message is acknowledged; the waiting events are served between steps of at most
/// 100 ms so a failure's report does not hold it up. Not the rdkafka crate's flush: it polls in
/// steps of 100 ms that always last their full length, so every Kafka commit took 100 ms more.
fn drain(inner: &BaseProducer<Reports>, deadline: Instant) -> bool {
    loop {
        serve(inner);
        let step = deadline.saturating_duration_since(Instant::now()).min(Duration::from_millis(100));
        // SAFETY: the client pointer is valid while inner lives.
        let left = unsafe { rd_kafka_flush(inner.client().native_ptr(), step.as_millis() as i32) };
        if left == rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            serve(inner);
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
    }
}

fn timeout(seconds: f64) -> Timeout {
    if seconds < 0.0 { Timeout::Never } else { Timeout::After(Duration::from_secs_f64(seconds)) }
}

/// A header's value: str (UTF-8) or bytes; None for null.
fn header_value<'a>(value: &'a Bound<'_, PyAny>) -> PyResult<Option<&'a [u8]>> {
    if let Ok(s) = value.downcast::<PyString>() {
        return Ok(Some(s.to_str()?.as_bytes()));
    }
    if let Ok(b) = value.downcast::<PyBytes>() {
        return Ok(Some(b.as_bytes()));
    }
    if value.is_none() {
        return Ok(None);
    }
    Err(PyValueError::new_err("a header value must be str, bytes or None"))
}

/// headers with one more: item, a (name: str, value) tuple.
fn add_header(headers: OwnedHeaders, item: &Bound<'_, PyAny>) -> PyResult<OwnedHeaders> {
    let pair = item.downcast::<PyTuple>()?;
    let (name, value) = (pair.get_item(0)?, pair.get_item(1)?);
    Ok(headers.insert(Header { key: name.downcast::<PyString>()?.to_str()?, value: header_value(&value)? }))
}

/// Optional bytes (a key or value): None or bytes.
fn opt_bytes<'a>(value: &'a Bound<'_, PyAny>) -> PyResult<Option<&'a [u8]>> {
    if value.is_none() { Ok(None) } else { Ok(Some(value.downcast::<PyBytes>()?.as_bytes())) }
}

/// librdkafka's producer, as KafkaSink drives it (the module docstring).
#[pyclass(frozen, module = "pgshovel2_native")]
pub struct Producer {
    inner: BaseProducer<Reports>,
    on_error: PyObject,
    on_delivery: PyObject,
}

impl Producer {
    /// Enqueues one message (librdkafka copies it); Err(code) when it refuses (QueueFull: full).
    pub(crate) fn send(&self, topic: &str, key: Option<&[u8]>, value: Option<&[u8]>, headers: OwnedHeaders)
                       -> Result<(), RDKafkaErrorCode> {
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic).headers(headers);
        record.key = key;
        record.payload = value;
        self.inner.send(record).map_err(|(e, _)| e.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail))
    }

    fn send_py(&self, py: Python<'_>, topic: &Bound<'_, PyAny>, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>,
               headers: &Bound<'_, PyAny>) -> PyResult<Result<(), RDKafkaErrorCode>> {
        let mut owned = OwnedHeaders::new_with_capacity(headers.len().unwrap_or(6));
        if let Ok(list) = headers.downcast::<PyList>() {
            for item in list.iter() {
                owned = add_header(owned, &item)?;
            }
        } else {
            for item in headers.try_iter()? {
                owned = add_header(owned, &item?)?;
            }
        }
        let sent = self.send(topic.downcast::<PyString>()?.to_str()?, opt_bytes(key)?, opt_bytes(value)?, owned);
        match sent {
            Err(code) if code != RDKafkaErrorCode::QueueFull => {
                Err(self.refused(py, code))
            }
            other => Ok(other),
        }
    }

    /// The exception of a message librdkafka refused with code: for a generic fatal error, the
    /// fatal error itself (its code and text, flagged fatal), so the sink can tell fenced from
    /// other fatal errors without a report of it.
    pub(crate) fn refused(&self, py: Python<'_>, code: RDKafkaErrorCode) -> PyErr {
        match (code == RDKafkaErrorCode::Fatal).then(|| self.inner.client().fatal_error()).flatten() {
            Some((cause, text)) => kafka_exception(py, cause, &text, (true, false, false)),
            None => kafka_exception(py, code, &text_of(code), (code == RDKafkaErrorCode::Fatal, false, false)),
        }
    }

    /// The Python exception of an error of a producer call (a generic fatal error as refused's).
    fn raise(&self, py: Python<'_>, error: KafkaError) -> PyErr {
        match error {
            KafkaError::Transaction(e) if e.code() == RDKafkaErrorCode::Fatal => self.refused(py, e.code()),
            KafkaError::MessageProduction(code) | KafkaError::Global(code) if code == RDKafkaErrorCode::Fatal => {
                self.refused(py, code)
            }
            other => raise(py, other),
        }
    }

    /// Hands what librdkafka reported meanwhile to the callbacks: on_error(KafkaError) per error
    /// event (a generic fatal error as its cause, flagged fatal), on_delivery(KafkaError, topic,
    /// key) per failed delivery.
    fn report(&self, py: Python<'_>) -> PyResult<()> {
        serve(&self.inner);
        let context = self.inner.context();
        let errors = std::mem::take(&mut *context.errors.lock().unwrap());
        for (code, reason) in errors {
            // A fatal error's event carries either the generic code or the error's own (the
            // rdkafka crate drops librdkafka's is-fatal flag): fatal when the client's fatal
            // error is this one.
            let (code, reason, fatal) = match self.inner.client().fatal_error() {
                Some((cause, text)) if code == RDKafkaErrorCode::Fatal => (cause, text, true),
                Some((cause, _)) if cause == code => (code, reason, true),
                _ => (code, reason, code == RDKafkaErrorCode::Fatal),
            };
            self.on_error.call1(py, (kafka_error(py, code, &reason, (fatal, false, false))?,))?;
        }
        let failures = std::mem::take(&mut *context.failures.lock().unwrap());
        for (code, topic, key) in failures {
            let key = key.map(|k| PyBytes::new(py, &k).into_any().unbind());
            self.on_delivery.call1(py, (kafka_error(py, code, &text_of(code), (false, false, false))?, topic, key))?;
        }
        Ok(())
    }
}

#[pymethods]
impl Producer {
    /// settings: librdkafka properties (name -> text); on_error(KafkaError): an error event;
    /// on_delivery(KafkaError, topic, key): a message that failed (set delivery.report.only.error
    /// for failures only). Raises ValueError naming a setting librdkafka (as built here) refuses.
    #[new]
    fn new(settings: Vec<(String, String)>, on_error: PyObject, on_delivery: PyObject) -> PyResult<Self> {
        let mut config = ClientConfig::new();
        config.set_log_level(RDKafkaLogLevel::Info); // librdkafka's own default, as confluent_kafka's
        for (name, value) in settings {
            config.set(name, value);
        }
        let inner = config.create_with_context(Reports::default())
            .map_err(|e| PyValueError::new_err(format!("Kafka producer settings: {e}")))?;
        Ok(Producer { inner, on_error, on_delivery })
    }

    /// Enqueue one message; BufferError when the queue is full, KafkaException otherwise.
    #[pyo3(signature = (topic, value, key, headers))]
    fn produce(&self, py: Python<'_>, topic: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>, key: &Bound<'_, PyAny>,
               headers: &Bound<'_, PyAny>) -> PyResult<()> {
        match self.send_py(py, topic, key, value, headers)? {
            Ok(()) => Ok(()),
            Err(_) => Err(PyBufferError::new_err("Local: Queue full")),
        }
    }

    /// Enqueue messages[start:], each a (topic, key, value, headers) tuple, in order, until the
    /// queue is full: the index of the first message not enqueued (len(messages): all were).
    fn produce_many(&self, py: Python<'_>, messages: &Bound<'_, PyList>, start: usize) -> PyResult<usize> {
        for i in start..messages.len() {
            let item = messages.get_item(i)?;
            let m = item.downcast::<PyTuple>()?;
            if self.send_py(py, &m.get_item(0)?, &m.get_item(1)?, &m.get_item(2)?, &m.get_item(3)?)?.is_err() {
                return Ok(i);
            }
        }
        Ok(messages.len())
    }

    /// Serve librdkafka's events for timeout seconds (0: what is ready), then the callbacks.
    fn poll(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let inner = &self.inner;
        py.allow_threads(|| inner.poll(self::timeout(timeout)));
        self.report(py)
    }

    /// Wait up to timeout seconds for every message to be acknowledged (or failed); the number
    /// still in flight.
    fn flush(&self, py: Python<'_>, timeout: f64) -> PyResult<i32> {
        let inner = &self.inner;
        py.allow_threads(|| drain(inner, deadline(timeout)));
        self.report(py)?;
        Ok(inner.in_flight_count())
    }

    fn __len__(&self) -> usize {
        self.inner.in_flight_count().max(0) as usize
    }

    fn init_transactions(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let inner = &self.inner;
        let done = py.allow_threads(|| inner.init_transactions(self::timeout(timeout)));
        self.report(py)?;
        done.map_err(|e| self.raise(py, e))
    }

    fn begin_transaction(&self, py: Python<'_>) -> PyResult<()> {
        self.inner.begin_transaction().map_err(|e| self.raise(py, e))
    }

    /// Flush, then commit the open transaction (librdkafka's commit_transaction).
    fn commit_transaction(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let inner = &self.inner;
        let done = py.allow_threads(|| {
            let deadline = deadline(timeout);
            if !drain(inner, deadline) {
                return Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut));
            }
            inner.commit_transaction(Timeout::After(deadline.saturating_duration_since(Instant::now())))
        });
        self.report(py)?;
        done.map_err(|e| self.raise(py, e))
    }

    /// librdkafka's abort, in steps of 100 ms with the reports served between them: the abort
    /// waits for the reports of the messages it purges, and this producer's reports are events
    /// it must poll (a timed-out abort is resumed by calling it again).
    fn abort_transaction(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let inner = &self.inner;
        let done = py.allow_threads(|| {
            let deadline = deadline(timeout);
            loop {
                let step = deadline.saturating_duration_since(Instant::now()).min(Duration::from_millis(100));
                match inner.abort_transaction(Timeout::After(step)) {
                    Err(KafkaError::Transaction(e)) if e.is_retriable() && Instant::now() < deadline => {
                        inner.poll(Duration::ZERO);
                    }
                    other => return other,
                }
            }
        });
        self.report(py)?;
        done.map_err(|e| self.raise(py, e))
    }
}
