//! pgshovel2_native: the native hot path of pgshovel2's relay (the Python module
//! `pgshovel2_native`, built with maturin by scripts/install.sh). This file is the crate root
//! only: the modules, and the registration of what Python sees.
//!
//! The modules, each using only those listed before it:
//! - `digits`: integers as text (decimal, positions, LSN prefixes)
//! - `pyfloat`: Python's repr of a float
//! - `json`: JSON read and written as Python's `json` does
//! - `canon`: json/jsonb column texts canonicalised (jsonvalue.embed)
//! - `kinds`: one column value -> its Avro body or JSON value
//! - `row_codec`: `RowCodec`, a table's rows -> key and value bytes
//! - `debezium`: `DebeziumEvents`, the debezium envelope's events
//! - `pgoutput`: `PgoutputRows`, pgoutput's I/U/D messages -> rows
//! - `kafka_reports`, `producer`: `Producer`, the native Kafka producer (librdkafka)
//! - `lane`: `Lane`, a run of changes -> Kafka messages in one call
//! - `stream`: the readers of a replication stream (`CopyReader`, `PackReader`, `Unpacked`,
//!   `pgoutput_scan`)

mod canon;
mod debezium;
mod digits;
mod json;
mod kafka_reports;
mod kinds;
mod lane;
mod pgoutput;
mod producer;
mod pyfloat;
mod row_codec;
mod stream;

use pyo3::prelude::*;

#[pymodule]
fn pgshovel2_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<row_codec::RowCodec>()?;
    m.add_class::<debezium::DebeziumEvents>()?;
    m.add_class::<pgoutput::PgoutputRows>()?;
    m.add_class::<lane::Lane>()?;
    m.add_class::<producer::Producer>()?;
    m.add_class::<stream::packs::PackReader>()?;
    m.add_class::<stream::message::Unpacked>()?;
    m.add_class::<stream::copy::CopyReader>()?;
    m.add_function(wrap_pyfunction!(stream::pgoutput_scan::pgoutput_scan, m)?)?;
    m.add("ABI", 1)?;
    Ok(())
}
