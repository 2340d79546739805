//! pgshovel2_native.Producer: librdkafka's producer (the rdkafka crate) behind the calls
//! pgshovel2.sinks.kafka.KafkaSink makes of confluent_kafka.Producer, so a message is enqueued
//! from native code without Python building or parsing it per call. Errors are raised as
//! confluent_kafka's (KafkaException of a KafkaError with librdkafka's code, fatal, retriable and
//! txn_requires_abort flags; BufferError for a full queue), so the sink maps both producers'
//! errors in one place (kafka_reports). librdkafka's error events and failed deliveries are
//! gathered while it works (the GIL released) and handed to the Python callbacks when the call
//! returns. Messages are sent through per-topic handles (Topic), so librdkafka does not look a
//! topic up by name per message.

use std::ffi::{c_void, CString};
use std::ptr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, Producer as _};
use rdkafka::bindings::{
    rd_kafka_flush, rd_kafka_header_add, rd_kafka_headers_destroy, rd_kafka_headers_new,
    rd_kafka_headers_t, rd_kafka_last_error, rd_kafka_producev, rd_kafka_queue_destroy, rd_kafka_queue_get_main,
    rd_kafka_queue_length, rd_kafka_resp_err_t, rd_kafka_topic_destroy, rd_kafka_topic_new, rd_kafka_topic_t,
    rd_kafka_vtype_t, RD_KAFKA_MSG_F_COPY, RD_KAFKA_MSG_F_FREE,
};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;

use crate::kafka_reports::{kafka_error, kafka_exception, raise, text_of, Reports};

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

/// Adds item, a (name: str, value) tuple, to headers.
fn add_header(headers: &mut Headers, item: &Bound<'_, PyAny>) -> PyResult<()> {
    let pair = item.downcast::<PyTuple>()?;
    let (name, value) = (pair.get_item(0)?, pair.get_item(1)?);
    headers.add(name.downcast::<PyString>()?.to_str()?, header_value(&value)?);
    Ok(())
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
    /// the topic handles made so far, by name; destroyed before inner (Drop)
    topics: Mutex<Vec<(String, Topic)>>,
}

/// A topic's librdkafka handle (rd_kafka_topic_t), valid while the producer that made it lives.
/// A message sent through it skips librdkafka's lookup of the topic by name.
#[derive(Clone, Copy)]
pub(crate) struct Topic(*mut rd_kafka_topic_t);

// SAFETY: librdkafka's topic handles are thread-safe (refcounted, locked inside librdkafka).
unsafe impl Send for Topic {}
unsafe impl Sync for Topic {}

/// One message's headers, built in librdkafka's own list; destroyed unless a send takes them.
pub(crate) struct Headers(*mut rd_kafka_headers_t);

impl Headers {
    pub(crate) fn with_capacity(n: usize) -> Self {
        // SAFETY: rd_kafka_headers_new allocates (it aborts rather than return NULL).
        Headers(unsafe { rd_kafka_headers_new(n) })
    }

    /// Adds a header: name, and value (None: null).
    pub(crate) fn add(&mut self, name: &str, value: Option<&[u8]>) {
        let (v, len) = value.map_or((ptr::null(), 0), |v| (v.as_ptr() as *const c_void, v.len() as isize));
        // SAFETY: librdkafka copies name and value; it fails only on read-only headers, never these.
        unsafe { rd_kafka_header_add(self.0, name.as_ptr() as *const _, name.len() as isize, v, len) };
    }
}

impl Drop for Headers {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: not handed to librdkafka (a send that takes them sets the pointer to NULL).
            unsafe { rd_kafka_headers_destroy(self.0) };
        }
    }
}

impl Drop for Producer {
    /// The topic handles go before librdkafka's client (inner, dropped after this).
    fn drop(&mut self) {
        for (_, topic) in self.topics.get_mut().map(std::mem::take).unwrap_or_default() {
            // SAFETY: made by rd_kafka_topic_new on this client, released once.
            unsafe { rd_kafka_topic_destroy(topic.0) };
        }
    }
}

impl Producer {
    /// The handle of the topic named name, made on its first use and kept until the producer is
    /// dropped. Err: librdkafka refused the name (InvalidArg for one with a NUL).
    pub(crate) fn topic(&self, name: &str) -> Result<Topic, RDKafkaErrorCode> {
        let mut topics = self.topics.lock().unwrap();
        if let Some((_, topic)) = topics.iter().find(|(n, _)| n == name) {
            return Ok(*topic);
        }
        let cname = CString::new(name).map_err(|_| RDKafkaErrorCode::InvalidArgument)?;
        // SAFETY: the client pointer is valid while inner lives; NULL conf: the default topic conf.
        let handle = unsafe { rd_kafka_topic_new(self.inner.client().native_ptr(), cname.as_ptr(), ptr::null_mut()) };
        if handle.is_null() {
            // SAFETY: reads this thread's last librdkafka error.
            return Err(RDKafkaErrorCode::from(unsafe { rd_kafka_last_error() }));
        }
        topics.push((name.to_string(), Topic(handle)));
        Ok(Topic(handle))
    }

    /// Enqueues one message (librdkafka copies key and value and takes the headers); Err(code)
    /// when it refuses (QueueFull: full).
    pub(crate) fn send(&self, topic: Topic, key: Option<&[u8]>, value: Option<&[u8]>, mut headers: Headers)
                       -> Result<(), RDKafkaErrorCode> {
        let bytes = |b: Option<&[u8]>| b.map_or((ptr::null_mut(), 0), |b| (b.as_ptr() as *mut c_void, b.len()));
        let ((key_ptr, key_len), (value_ptr, value_len)) = (bytes(key), bytes(value));
        // SAFETY: topic was made on this client and lives as long as it; librdkafka copies key and
        // value (F_COPY) before it returns and owns the headers when it accepts the message.
        let err = unsafe {
            rd_kafka_producev(
                self.inner.client().native_ptr(),
                rd_kafka_vtype_t::RD_KAFKA_VTYPE_RKT, topic.0,
                rd_kafka_vtype_t::RD_KAFKA_VTYPE_PARTITION, -1i32,
                rd_kafka_vtype_t::RD_KAFKA_VTYPE_MSGFLAGS, RD_KAFKA_MSG_F_COPY,
                rd_kafka_vtype_t::RD_KAFKA_VTYPE_VALUE, value_ptr, value_len,
                rd_kafka_vtype_t::RD_KAFKA_VTYPE_KEY, key_ptr, key_len,
                rd_kafka_vtype_t::RD_KAFKA_VTYPE_OPAQUE, ptr::null_mut::<c_void>(),
                rd_kafka_vtype_t::RD_KAFKA_VTYPE_HEADERS, headers.0,
                rd_kafka_vtype_t::RD_KAFKA_VTYPE_END,
            )
        };
        if err != rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(RDKafkaErrorCode::from(err));
        }
        headers.0 = ptr::null_mut();
        Ok(())
    }

    /// send, for a value the caller gives away: librdkafka takes the buffer itself (F_FREE: it
    /// frees it with free() once delivered or failed) instead of copying it, one copy of a large
    /// value fewer in the relay's memory. Rust's global allocator here is the system's (malloc,
    /// also when jemalloc is preloaded: both then are jemalloc's), so free() is the buffer's
    /// deallocator. Err: (code, the value back) when librdkafka refuses it (QueueFull: full).
    pub(crate) fn send_owned(&self, topic: Topic, key: Option<&[u8]>, value: Vec<u8>, mut headers: Headers)
                             -> Result<(), (RDKafkaErrorCode, Vec<u8>)> {
        let (key_ptr, key_len) = key.map_or((ptr::null_mut(), 0), |b| (b.as_ptr() as *mut c_void, b.len()));
        let mut value = std::mem::ManuallyDrop::new(value);
        let (value_ptr, value_len, value_cap) = (value.as_mut_ptr(), value.len(), value.capacity());
        // SAFETY: as send's; the value's buffer is malloc'd (the system allocator) and is
        // librdkafka's once it accepts the message (F_FREE), still ours when it refuses it. The key
        // is copied (F_COPY applies to it: librdkafka copies a key whatever the flags).
        let err = unsafe {
            rd_kafka_producev(
                self.inner.client().native_ptr(),
                rd_kafka_vtype_t::RD_KAFKA_VTYPE_RKT, topic.0,
                rd_kafka_vtype_t::RD_KAFKA_VTYPE_PARTITION, -1i32,
                rd_kafka_vtype_t::RD_KAFKA_VTYPE_MSGFLAGS, RD_KAFKA_MSG_F_FREE,
                rd_kafka_vtype_t::RD_KAFKA_VTYPE_VALUE, value_ptr as *mut c_void, value_len,
                rd_kafka_vtype_t::RD_KAFKA_VTYPE_KEY, key_ptr, key_len,
                rd_kafka_vtype_t::RD_KAFKA_VTYPE_OPAQUE, ptr::null_mut::<c_void>(),
                rd_kafka_vtype_t::RD_KAFKA_VTYPE_HEADERS, headers.0,
                rd_kafka_vtype_t::RD_KAFKA_VTYPE_END,
            )
        };
        if err != rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            // SAFETY: refused, so the buffer is still ours, as it was made.
            let back = unsafe { Vec::from_raw_parts(value_ptr, value_len, value_cap) };
            return Err((RDKafkaErrorCode::from(err), back));
        }
        headers.0 = ptr::null_mut();
        Ok(())
    }

    fn send_py(&self, py: Python<'_>, topic: &Bound<'_, PyAny>, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>,
               headers: &Bound<'_, PyAny>) -> PyResult<Result<(), RDKafkaErrorCode>> {
        let mut owned = Headers::with_capacity(headers.len().unwrap_or(6));
        if let Ok(list) = headers.downcast::<PyList>() {
            for item in list.iter() {
                add_header(&mut owned, &item)?;
            }
        } else {
            for item in headers.try_iter()? {
                add_header(&mut owned, &item?)?;
            }
        }
        let topic = self.topic(topic.downcast::<PyString>()?.to_str()?).map_err(|code| self.refused(py, code))?;
        let sent = self.send(topic, opt_bytes(key)?, opt_bytes(value)?, owned);
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
        Ok(Producer { inner, on_error, on_delivery, topics: Mutex::new(Vec::new()) })
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
