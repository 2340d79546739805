//! pgoutput's Insert/Update/Delete messages -> the set's rows as capture JSON text.
//!
//! A `PgoutputRows` is built per relation from the set's columns: where each is in the
//! relation's TupleData and its text form (pgshovel2.codec.textforms.native_form). `change`
//! reads one message's TupleData ('n', 'u', 't' columns) and writes each row as the JSON
//! array the capture code would have written: `json.loads` of it gives exactly the list the
//! Python converters (textforms.converter) give, with pgshovel2.relay.pgoutput_decoder's
//! rules for unchanged TOAST values. Anything it does not take exactly (a text outside the
//! pinned output forms, binary columns, an array of several dimensions or with bounds, a
//! malformed message) gives None: the Python decoder then decodes that change, and names the
//! error of a bad one. The text forms are in `forms`.

mod forms;

use forms::{array_value, value, Form};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

/// One column of a TupleData.
#[derive(Clone, Copy, PartialEq)]
enum Col<'a> {
    Null,
    Unchanged,
    Text(&'a str),
}

/// (row JSON or None, before JSON or None, unchanged positions) of a change.
pub(crate) type Decoded = (Option<Vec<u8>>, Option<Vec<u8>>, Vec<usize>);

#[pyclass(frozen)]
pub struct PgoutputRows {
    picks: Vec<usize>,
    /// Per set column: its form, and whether it is a one-dimensional array of that form.
    forms: Vec<(Form, bool)>,
}

#[pymethods]
impl PgoutputRows {
    /// picks: per set column, its index in the relation's columns; forms: per set column, its
    /// text form name (textforms.native_form: ``array:<form>`` for an array of that element
    /// form; another name: left to Python).
    #[new]
    fn new(picks: Vec<usize>, forms: Vec<String>) -> PyResult<Self> {
        if picks.len() != forms.len() {
            return Err(pyo3::exceptions::PyValueError::new_err("PgoutputRows: picks and forms differ in length"));
        }
        let forms = forms
            .iter()
            .map(|f| match f.strip_prefix("array:") {
                Some(elem) => (Form::parse(elem), true),
                None => (Form::parse(f), false),
            })
            .collect();
        Ok(PgoutputRows { picks, forms })
    }

    /// An Insert ('I'), Update ('U') or Delete ('D') message (the whole message) ->
    /// (row, before, unchanged): row and before as capture JSON text (bytes) or None, as
    /// PgoutputDecoder._change gives them (a Delete's old row is its row); unchanged: a tuple of
    /// the set-column positions whose unchanged TOASTed value is not known. None: decode it in Python.
    fn change<'py>(&self, py: Python<'py>, data: &[u8]) -> PyResult<PyObject> {
        let Some((row, before, unchanged)) = self.decode(data) else {
            return Ok(py.None());
        };
        let bytes = |b: Option<Vec<u8>>| -> PyObject {
            match b {
                Some(b) => PyBytes::new(py, &b).into_any().unbind(),
                None => py.None(),
            }
        };
        let unchanged = PyTuple::new(py, unchanged)?.into_any().unbind();
        Ok(PyTuple::new(py, [bytes(row), bytes(before), unchanged])?.into_any().unbind())
    }
}

impl PgoutputRows {
    /// What `change` gives, without Python objects (the lane reads it); None: Python's.
    pub(crate) fn decode(&self, data: &[u8]) -> Option<Decoded> {
        let kind = *data.first()?;
        if !matches!(kind, b'I' | b'U' | b'D') {
            return None;
        }
        let mut pos = 5;
        let full = data.get(pos) == Some(&b'O');
        let mut old = None;
        if matches!(data.get(pos), Some(b'K' | b'O')) {
            let (cols, next) = tuple(data, pos + 1)?;
            old = Some(cols);
            pos = next;
        }
        let mut new = None;
        if kind != b'D' {
            if data.get(pos) != Some(&b'N') {
                return None;
            }
            let (cols, next) = tuple(data, pos + 1)?;
            new = Some(cols);
            pos = next;
        }
        if pos != data.len() {
            return None;
        }
        let (mut row, mut unchanged) = match &new {
            Some(cols) => {
                let (row, unchanged) = self.row(cols, old.as_deref(), full)?;
                (Some(row), unchanged)
            }
            None => (None, Vec::new()),
        };
        let mut before = match &old {
            Some(cols) => {
                let (row, missing) = self.row(cols, None, false)?;
                if !missing.is_empty() {
                    return None; // an old row without a value: Python names the error
                }
                Some(row)
            }
            None => None,
        };
        if kind == b'D' {
            row = before.take();
            unchanged.clear();
        }
        Some((row, before, unchanged))
    }

    /// PgoutputDecoder._row: the set's row of a TupleData as JSON, and its unchanged positions.
    fn row(&self, values: &[Col], old: Option<&[Col]>, full: bool) -> Option<(Vec<u8>, Vec<usize>)> {
        let mut out = Vec::with_capacity(256);
        let mut unchanged = Vec::new();
        out.push(b'[');
        for (i, (&pick, &(form, array))) in self.picks.iter().zip(&self.forms).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let mut col = *values.get(pick)?;
            if col == Col::Unchanged {
                let known = match old {
                    Some(cols) => *cols.get(pick)?,
                    None => Col::Null,
                };
                if known == Col::Unchanged || (known == Col::Null && !full) {
                    unchanged.push(i);
                    out.extend_from_slice(b"null");
                    continue;
                }
                col = known;
            }
            match col {
                Col::Text(text) if array => array_value(form, text, &mut out)?,
                Col::Text(text) => value(form, text, &mut out)?,
                _ => out.extend_from_slice(b"null"),
            }
        }
        out.push(b']');
        Some((out, unchanged))
    }
}

/// TupleData at pos -> (its columns, the position after it); None for a binary column or a
/// malformed one (pgoutput_decoder._tuple raises there). Every text must be UTF-8, as
/// _tuple decodes them all.
fn tuple(data: &[u8], mut pos: usize) -> Option<(Vec<Col<'_>>, usize)> {
    let n = u16::from_be_bytes(data.get(pos..pos + 2)?.try_into().ok()?) as usize;
    pos += 2;
    let mut cols = Vec::with_capacity(n);
    for _ in 0..n {
        let kind = *data.get(pos)?;
        pos += 1;
        match kind {
            b't' => {
                let size = u32::from_be_bytes(data.get(pos..pos + 4)?.try_into().ok()?) as usize;
                let bytes = data.get(pos + 4..pos + 4 + size)?;
                cols.push(Col::Text(std::str::from_utf8(bytes).ok()?));
                pos += 4 + size;
            }
            b'n' => cols.push(Col::Null),
            b'u' => cols.push(Col::Unchanged),
            _ => return None,
        }
    }
    Some((cols, pos))
}
