//! The readers of a started replication stream, each the native twin of a Python reader of the
//! relay's logical source. In the order they use one another:
//! - `message`: what they share (a message read, the `Reads` trait, `Unpacked`, field reads)
//! - `copy`: `CopyReader`, the COPY stream read with psycopg2's own libpq
//! - `scan`: the scan of whole small transactions over a reader and a stream's form
//! - `packs`: `PackReader`, our plugin's packs opened into records, and its scan (`txn_scan`)
//! - `pgoutput_scan`: pgoutput's scan (`pgoutput_scan`), over a cursor or a `CopyReader`

pub(crate) mod copy;
pub(crate) mod message;
pub(crate) mod packs;
pub(crate) mod pgoutput_scan;
pub(crate) mod scan;
