//! `RowCodec`: a table's row encoder (pgshovel2.codec.rows.RowEncoder in native code).
//!
//! A `RowCodec` is built from a table's per-column plans (pgshovel2.codec.native_plan) and
//! encodes captured rows -- the capture's JSON text (PgQ ev_data, our plugin's row) or a list
//! of trigger-form values -- into the key and value bytes the Python codec writes for them,
//! byte for byte (Avro with the registry's 5-byte prefix, or JSON). A row it cannot encode
//! exactly as Python would gives None: the caller encodes that row in Python. The debezium
//! envelope and the lane encode their rows through it (`encode_row`).

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::json::{self, Value};
use crate::kinds::{self, Kind};

/// The key and value of one row (None where absent); None: left to the Python codec.
type Encoded = Option<(Option<Vec<u8>>, Option<Vec<u8>>)>;

/// How a field's value is written in Avro: the branch index of null in its union (-1: the field
/// takes no null) and that of a non-null plain value (-1: the field is no union).
type Union = (i64, i64);

#[pyclass(frozen)]
pub struct RowCodec {
    kinds: Vec<Kind>,
    /// Per column: the element kind of a one-dimensional array column (plan ``array:<kind>``).
    elems: Vec<Option<Kind>>,
    nullable: Vec<Union>,
    key_idx: Vec<usize>,
    key_nullable: Vec<Union>,
    json_names: Vec<Vec<u8>>,
    avro: bool,
    key_header: Vec<u8>,
    value_header: Vec<u8>,
    /// Bytes of the JSON field names: with a row text's length, the size a value is allocated at.
    names_len: usize,
}

/// A row to encode: the capture's JSON text, or its values (trigger-form values from Python, or
/// the capture values of a pgoutput change) with the bytes a value is allocated at.
pub(crate) enum Row<'a> {
    Text(&'a [u8]),
    Values(&'a [Value<'a>], usize),
}

#[pymethods]
impl RowCodec {
    /// plans: (plan name, decimal scale) per column (``array:<plan>``: an array of that element);
    /// nullable: per value field (Avro), the branch of null in its union (-1: none) and that of a
    /// plain value (-1: no union); key_idx: key columns' positions in key order; key_nullable:
    /// the same per key field; names: the JSON field names (column names); avro: Avro (else JSON);
    /// key_header/value_header: the registry prefixes (Avro).
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (plans, nullable, key_idx, key_nullable, names, avro, key_header, value_header))]
    fn new(plans: Vec<(String, u32)>, nullable: Vec<Union>, key_idx: Vec<usize>, key_nullable: Vec<Union>,
           names: Vec<String>, avro: bool, key_header: Vec<u8>, value_header: Vec<u8>) -> PyResult<Self> {
        let n = plans.len();
        if nullable.len() != n || names.len() != n || key_idx.iter().any(|&i| i >= n)
            || key_nullable.len() != key_idx.len()
        {
            return Err(pyo3::exceptions::PyValueError::new_err("RowCodec: inconsistent column plans"));
        }
        let json_names: Vec<Vec<u8>> = names
            .iter()
            .map(|name| {
                let mut out = Vec::new();
                json::write_str(name, &mut out);
                out.push(b':');
                out
            })
            .collect();
        Ok(RowCodec {
            kinds: plans.iter().map(|(name, scale)| Kind::parse(name, *scale)).collect(),
            elems: plans
                .iter()
                .map(|(name, scale)| name.strip_prefix("array:").map(|elem| Kind::parse(elem, *scale)))
                .collect(),
            names_len: json_names.iter().map(Vec::len).sum(),
            nullable, key_idx, key_nullable, json_names, avro, key_header, value_header,
        })
    }

    /// (key bytes or None, value bytes or None when not with_value) of one row -- str or bytes
    /// (the capture's JSON text) or a list of trigger-form values -- or None when the Python
    /// codec must encode it.
    fn encode<'py>(&self, py: Python<'py>, row: &Bound<'py, PyAny>, with_value: bool) -> PyResult<PyObject> {
        let got = if let Ok(s) = row.downcast::<PyString>() {
            self.encode_row(Row::Text(s.to_str()?.as_bytes()), with_value)
        } else if let Ok(b) = row.downcast::<PyBytes>() {
            self.encode_row(Row::Text(b.as_bytes()), with_value)
        } else if let Ok(list) = row.downcast::<PyList>() {
            match list.iter().map(|v| from_py(&v)).collect::<Option<Vec<_>>>() {
                Some(values) => self.encode_row(Row::Values(&values, 256), with_value),
                None => None,
            }
        } else {
            None
        };
        to_py(py, got)
    }

    /// encode() of many rows given as their JSON text (str or bytes), in one call that releases
    /// the GIL while it parses and encodes: a list of what encode() returns for each.
    fn encode_many<'py>(&self, py: Python<'py>, rows: Vec<Bound<'py, PyAny>>, with_value: bool)
                        -> PyResult<Vec<PyObject>> {
        let rows: Vec<Vec<u8>> = rows.iter().map(text_of).collect();
        let got: Vec<Encoded> = py.allow_threads(|| {
            rows.iter().map(|text| self.encode_row(Row::Text(text), with_value)).collect()
        });
        got.into_iter().map(|g| to_py(py, g)).collect()
    }
}

impl RowCodec {
    pub(crate) fn encode_row(&self, row: Row, with_value: bool) -> Encoded {
        let parsed;
        let (values, size) = match row {
            Row::Text(text) => match json::parse(std::str::from_utf8(text).ok()?, true)? {
                Value::Arr(values) => {
                    parsed = values;
                    (parsed.as_slice(), text.len())
                }
                _ => return None,
            },
            Row::Values(values, size) => (values, size),
        };
        if values.len() != self.kinds.len() {
            return None;
        }
        let key = if self.key_idx.is_empty() { None } else { Some(self.key(values)?) };
        let value = if with_value { Some(self.value(values, size + self.names_len + 16)?) } else { None };
        Some((key, value))
    }

    fn key(&self, values: &[Value]) -> Option<Vec<u8>> {
        let fields = self.key_idx.iter().zip(&self.key_nullable).map(|(&i, &nullable)| (i, nullable));
        self.record(values, fields, &self.key_header, 64)
    }

    /// size: the bytes to allocate (the value is seldom longer: no reallocation while writing it).
    fn value(&self, values: &[Value], size: usize) -> Option<Vec<u8>> {
        self.record(values, self.nullable.iter().copied().enumerate(), &self.value_header, size)
    }

    fn record(&self, values: &[Value], fields: impl Iterator<Item = (usize, Union)>, header: &[u8], size: usize)
              -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(size);
        if self.avro {
            out.extend_from_slice(header);
            for (i, (null_branch, branch)) in fields {
                match &values[i] {
                    Value::Null if null_branch >= 0 => kinds::write_long(null_branch, &mut out),
                    Value::Null => return None,
                    v => {
                        if branch >= 0 {
                            kinds::write_long(branch, &mut out);
                        }
                        match self.elems[i] {
                            Some(elem) => kinds::avro_array(elem, v, &mut out)?,
                            None => kinds::avro(self.kinds[i], v, &mut out)?,
                        }
                    }
                }
            }
        } else {
            out.push(b'{');
            for (n, (i, _)) in fields.enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(&self.json_names[i]);
                match (&values[i], self.elems[i]) {
                    (Value::Null, _) => out.extend_from_slice(b"null"),
                    (v, Some(elem)) => kinds::json_array(elem, v, &mut out)?,
                    (v, None) => kinds::json_value(self.kinds[i], v, &mut out)?,
                }
            }
            out.push(b'}');
        }
        Some(out)
    }
}

/// The bytes of a str or bytes row text (empty, which no row parses from, for anything else).
fn text_of(row: &Bound<'_, PyAny>) -> Vec<u8> {
    if let Ok(s) = row.downcast::<PyString>() {
        return s.to_str().map(|t| t.as_bytes().to_vec()).unwrap_or_default();
    }
    row.downcast::<PyBytes>().map(|b| b.as_bytes().to_vec()).unwrap_or_default()
}

/// A trigger-form Python value as a Value (None for a type the capture forms do not use here).
pub(crate) fn from_py(v: &Bound<'_, PyAny>) -> Option<Value<'static>> {
    if v.is_none() {
        Some(Value::Null)
    } else if let Ok(b) = v.downcast::<PyBool>() {
        Some(Value::Bool(b.is_true()))
    } else if v.downcast::<PyInt>().is_ok() {
        match v.extract::<i64>() {
            Ok(i) => Some(Value::Int(i)),
            Err(_) => Some(Value::BigInt(v.str().ok()?.to_str().ok()?.to_string())),
        }
    } else if let Ok(f) = v.downcast::<PyFloat>() {
        Some(Value::Float(f.value()))
    } else if let Ok(s) = v.downcast::<PyString>() {
        Some(Value::Str(s.to_str().ok()?.to_string().into()))
    } else if let Ok(list) = v.downcast::<PyList>() {
        list.iter().map(|x| from_py(&x)).collect::<Option<Vec<_>>>().map(Value::Arr)
    } else {
        None
    }
}

fn to_py(py: Python<'_>, got: Encoded) -> PyResult<PyObject> {
    let bytes = |b: Option<Vec<u8>>| -> PyObject {
        match b {
            Some(b) => PyBytes::new(py, &b).into_any().unbind(),
            None => py.None(),
        }
    };
    Ok(match got {
        Some((key, value)) => PyTuple::new(py, [bytes(key), bytes(value)])?.into_any().unbind(),
        None => py.None(),
    })
}

