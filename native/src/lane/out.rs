//! Where the lane's messages go: a list of (topic, key, value, headers) tuples for
//! KafkaSink.produce_many, or, given the native producer (pgshovel2_native.Producer), straight
//! into it with the same headers, so no Python object is made per message.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use rdkafka::types::RDKafkaErrorCode;

use crate::producer::{Headers, Producer, Topic};

/// bytes: a value at least this large is given to librdkafka (Producer::send_owned), not copied
const GIVE_AWAY: usize = 1 << 20;

/// A message the lane made: topic (a table index; None: the transactions topic), key, value,
/// and a data message's op (b'c', b'u', b'd') and pgshovel.position (None: a BEGIN or END record).
pub(crate) struct Msg {
    pub topic: Option<usize>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub data: Option<(u8, String)>,
}

/// The headers of one transaction's messages as (name, value) header tuples: the op headers (c,
/// u, d), txid, ts_ms, set and version; and the position header's name.
pub(crate) struct Heads<'py> {
    pub ops: [Bound<'py, PyAny>; 3],
    pub position: Bound<'py, PyString>,
    pub txid: Bound<'py, PyAny>,
    pub ts_ms: Bound<'py, PyAny>,
    pub set: Bound<'py, PyAny>,
    pub version: Bound<'py, PyAny>,
}

/// A header tuple's (name, value) strings.
fn pair<'py>(header: &Bound<'py, PyAny>) -> PyResult<[Bound<'py, PyString>; 2]> {
    let t = header.downcast::<PyTuple>()?;
    Ok([t.get_item(0)?.downcast_into()?, t.get_item(1)?.downcast_into()?])
}

/// The texts of a pair.
fn texts<'a>(pair: &'a [Bound<'_, PyString>; 2]) -> PyResult<(&'a str, &'a str)> {
    Ok((pair[0].to_str()?, pair[1].to_str()?))
}

/// The native producer a lane call produces into, and how it waits when the queue is full.
pub(crate) struct Direct<'a, 'py> {
    pub producer: &'a Producer,
    /// called (no arguments) when the producer's queue is full: serves its reports a while, or
    /// raises (a stop request); KafkaSink._wait_for_room
    pub wait: Bound<'py, PyAny>,
    /// per table index, its topic's name
    pub topics: &'a [String],
    pub txn_topic: Option<String>,
    /// per table index, then the transactions topic (one more than topics): its handle once a
    /// message went to it
    pub handles: Vec<Option<Topic>>,
    pub sent: usize,
}

/// Where a lane call's messages go.
pub(crate) enum Target<'a, 'py> {
    List(Bound<'py, PyList>),
    Direct(Direct<'a, 'py>),
}

impl<'py> Target<'_, 'py> {
    /// Hands msgs over in order: as tuples appended to the list (topics: per table index its
    /// topic object; txn_topic: the transactions topic's), or produced.
    pub(crate) fn put(&mut self, py: Python<'py>, msgs: Vec<Msg>, heads: &Heads<'py>, topics: &[PyObject],
                      txn_topic: Option<&PyObject>) -> PyResult<()> {
        match self {
            Target::List(list) => {
                for m in msgs {
                    let topic = match m.topic {
                        Some(t) => topics[t].clone_ref(py),
                        None => txn_topic.map(|t| t.clone_ref(py)).unwrap_or_else(|| py.None()),
                    };
                    list.append(tuple(py, topic, m.key, m.value, headers_list(py, heads, m.data)?)?)?;
                }
                Ok(())
            }
            Target::Direct(direct) => direct.produce(py, msgs, heads),
        }
    }

    /// What a lane call returns for its messages: the list, or the number produced.
    pub(crate) fn result(self, py: Python<'py>) -> PyResult<PyObject> {
        Ok(match self {
            Target::List(list) => list.into_any().unbind(),
            Target::Direct(direct) => direct.sent.into_pyobject(py)?.into_any().unbind(),
        })
    }
}

fn tuple<'py>(py: Python<'py>, topic: PyObject, key: Option<Vec<u8>>, value: Option<Vec<u8>>,
              headers: Bound<'py, PyList>) -> PyResult<Bound<'py, PyTuple>> {
    let bytes = |b: Option<Vec<u8>>| -> PyObject { b.map_or_else(|| py.None(), |b| PyBytes::new(py, &b).into_any().unbind()) };
    PyTuple::new(py, [topic, bytes(key), bytes(value), headers.into_any().unbind()])
}

/// A message's header list: [op, txid, position, ts_ms, set, version] for a data message,
/// [set, version] for a transaction record.
fn headers_list<'py>(py: Python<'py>, heads: &Heads<'py>, data: Option<(u8, String)>) -> PyResult<Bound<'py, PyList>> {
    let Some((op, position)) = data else { return PyList::new(py, [&heads.set, &heads.version]) };
    let position = PyTuple::new(py, [heads.position.clone().into_any(), PyString::new(py, &position).into_any()])?;
    PyList::new(py, [&heads.ops[op_index(op)], &heads.txid, position.as_any(), &heads.ts_ms, &heads.set, &heads.version])
}

fn op_index(op: u8) -> usize {
    match op { b'c' => 0, b'u' => 1, _ => 2 }
}

impl<'py> Direct<'_, 'py> {
    fn produce(&mut self, py: Python<'py>, msgs: Vec<Msg>, heads: &Heads<'py>) -> PyResult<()> {
        let held = [pair(&heads.ops[0])?, pair(&heads.ops[1])?, pair(&heads.ops[2])?, pair(&heads.txid)?,
                    pair(&heads.ts_ms)?, pair(&heads.set)?, pair(&heads.version)?];
        let [c, u, d, txid, ts_ms, set, version] = [texts(&held[0])?, texts(&held[1])?, texts(&held[2])?,
                                                    texts(&held[3])?, texts(&held[4])?, texts(&held[5])?,
                                                    texts(&held[6])?];
        let ops = [c, u, d];
        let position = heads.position.to_str()?;
        for mut m in msgs {
            let topic = self.handle(py, m.topic)?;
            loop {
                let list: &[(&str, &str)] = match &m.data {
                    Some((op, pos)) => &[ops[op_index(*op)], txid, (position, pos.as_str()), ts_ms, set, version],
                    None => &[set, version],
                };
                let mut headers = Headers::with_capacity(list.len());
                for (name, value) in list {
                    headers.add(name, Some(value.as_bytes()));
                }
                let sent = match m.value.take() {
                    Some(value) if value.len() >= GIVE_AWAY => {
                        self.producer.send_owned(topic, m.key.as_deref(), value, headers).map_err(|(code, back)| {
                            m.value = Some(back);
                            code
                        })
                    }
                    value => {
                        m.value = value;
                        self.producer.send(topic, m.key.as_deref(), m.value.as_deref(), headers)
                    }
                };
                match sent {
                    Ok(()) => break,
                    Err(RDKafkaErrorCode::QueueFull) => {
                        self.wait.call0()?;
                    }
                    Err(code) => return Err(self.producer.refused(py, code)),
                }
            }
            self.sent += 1;
        }
        Ok(())
    }

    /// The handle of a message's topic (a table index; None: the transactions topic).
    fn handle(&mut self, py: Python<'py>, topic: Option<usize>) -> PyResult<Topic> {
        let slot = topic.unwrap_or(self.topics.len());
        if let Some(handle) = self.handles[slot] {
            return Ok(handle);
        }
        let name = match topic {
            Some(t) => self.topics[t].as_str(),
            None => self.txn_topic.as_deref().unwrap_or_default(),
        };
        let handle = self.producer.topic(name).map_err(|code| self.producer.refused(py, code))?;
        self.handles[slot] = Some(handle);
        Ok(handle)
    }
}
