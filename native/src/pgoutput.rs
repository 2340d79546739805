//! pgoutput's Insert/Update/Delete messages -> the set's rows as capture JSON text (for the
//! Python decoder) or as the capture values that text parses to (for the native lane).
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

use std::borrow::Cow;

use forms::{array_of, array_value, value, value_of, Form};

use crate::json::Value;
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

/// The tuples of an Insert/Update/Delete message: its kind, its old tuple ('K' or 'O') and
/// whether that is the whole old row ('O'), its new tuple ('N').
struct Tuples<'a> {
    kind: u8,
    old: Option<Vec<Col<'a>>>,
    full: bool,
    new: Option<Vec<Col<'a>>>,
}

/// One change's rows in the set's columns: per set column its text, or None (NULL, or an
/// unchanged value not known, whose position is in unchanged).
struct Picked<'a> {
    kind: u8,
    row: Option<Vec<Option<&'a str>>>,
    before: Option<Vec<Option<&'a str>>>,
    unchanged: Vec<usize>,
}

/// (kind, row, before, unchanged) of a change with its rows as capture values (decode's).
pub(crate) type Values<'a> = (u8, Option<Vec<Value<'a>>>, Option<Vec<Value<'a>>>, Vec<usize>);

impl PgoutputRows {
    /// What `change` gives, without Python objects; None: Python's.
    pub(crate) fn decode(&self, data: &[u8]) -> Option<Decoded> {
        let picked = self.pick(data)?;
        let json = |cols: Option<Vec<Option<&str>>>| match cols {
            Some(cols) => self.row_json(&cols).map(Some),
            None => Some(None),
        };
        Some((json(picked.row)?, json(picked.before)?, picked.unchanged))
    }

    /// The change of a message with its rows as the capture values `json::parse` reads from
    /// decode's JSON (the lane encodes them without that text); None: Python's.
    pub(crate) fn values<'a>(&self, data: &'a [u8]) -> Option<Values<'a>> {
        let picked = self.pick(data)?;
        let values = |cols: Option<Vec<Option<&'a str>>>| match cols {
            Some(cols) => self.row_values(&cols).map(Some),
            None => Some(None),
        };
        Some((picked.kind, values(picked.row)?, values(picked.before)?, picked.unchanged))
    }

    /// PgoutputDecoder._change's rows of a message in the set's columns (a Delete's old row is
    /// its row); None: Python's.
    fn pick<'a>(&self, data: &'a [u8]) -> Option<Picked<'a>> {
        let t = tuples(data)?;
        let (mut row, mut unchanged) = match &t.new {
            Some(cols) => {
                let (row, unchanged) = self.row(cols, t.old.as_deref(), t.full)?;
                (Some(row), unchanged)
            }
            None => (None, Vec::new()),
        };
        let mut before = match &t.old {
            Some(cols) => {
                let (row, missing) = self.row(cols, None, false)?;
                if !missing.is_empty() {
                    return None; // an old row without a value: Python names the error
                }
                Some(row)
            }
            None => None,
        };
        if t.kind == b'D' {
            row = before.take();
            unchanged.clear();
        }
        Some(Picked { kind: t.kind, row, before, unchanged })
    }

    /// PgoutputDecoder._row: per set column its text of a TupleData (None: NULL or not known),
    /// and the positions of unchanged values not known.
    fn row<'a>(&self, values: &[Col<'a>], old: Option<&[Col<'a>]>, full: bool) -> Option<(Vec<Option<&'a str>>, Vec<usize>)> {
        let mut out = Vec::with_capacity(self.picks.len());
        let mut unchanged = Vec::new();
        for (i, &pick) in self.picks.iter().enumerate() {
            let mut col = *values.get(pick)?;
            if col == Col::Unchanged {
                let known = match old {
                    Some(cols) => *cols.get(pick)?,
                    None => Col::Null,
                };
                if known == Col::Unchanged || (known == Col::Null && !full) {
                    unchanged.push(i);
                }
                col = known;
            }
            out.push(match col {
                Col::Text(text) => Some(text),
                _ => None,
            });
        }
        Some((out, unchanged))
    }

    /// A row's texts as capture JSON.
    fn row_json(&self, cols: &[Option<&str>]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(256);
        out.push(b'[');
        for (i, (col, &(form, array))) in cols.iter().zip(&self.forms).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            match col {
                Some(text) if array => array_value(form, text, &mut out)?,
                Some(text) => value(form, text, &mut out)?,
                None => out.extend_from_slice(b"null"),
            }
        }
        out.push(b']');
        Some(out)
    }

    /// A row's texts as capture values.
    fn row_values<'a>(&self, cols: &[Option<&'a str>]) -> Option<Vec<Value<'a>>> {
        let mut out = Vec::with_capacity(cols.len()); // collect() of Options grows it twice a row
        for (col, &(form, array)) in cols.iter().zip(&self.forms) {
            out.push(match col {
                Some(text) if array => array_of(form, text)?,
                Some(text) => value_of(form, Cow::Borrowed(text))?,
                None => Value::Null,
            });
        }
        Some(out)
    }
}

/// The tuples of an I/U/D message; None: another message, or one Python names the error of.
fn tuples(data: &[u8]) -> Option<Tuples<'_>> {
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
    (pos == data.len()).then_some(Tuples { kind, old, full, new })
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

#[cfg(test)]
mod tests;
