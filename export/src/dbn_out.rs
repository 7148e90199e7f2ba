//! DBN out. A journal written by `tickbox import` gives back its imported file (metadata, then the selected
//! records exactly as imported). A recording gives DBN records of the schema matching the kind asked for:
//! trades → `trades` (`TradeMsg`), quotes → `mbp-1` (`Mbp1Msg`, the top of book as its one level), with a symbol
//! map from each topic's symbol to the instrument id its records carry; other kinds have no DBN schema here and
//! are refused before anything is written.

use std::collections::BTreeMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::num::NonZeroU64;
use std::path::Path;
use std::time::Instant;

use tickbox_dbn::dbn::{
    self, BidAskPair, FlagSet, MappingInterval, Mbp1Msg, Metadata, RecordHeader, SType, Schema,
    SymbolMapping, TradeMsg,
};
use tickbox_dbn::{pick_source, Manifest, VendorFrame};
use tickbox_journal::JournalError;
use tickbox_recorder::HistoryReader;
use tickbox_wire::{Payload, Side};

use crate::dest::{Output, Shape};
use crate::error::ExportError;
use crate::options::{Dest, ExportOptions};
use crate::read_window::read_window;
use crate::summary::{finish_summary, ExportSummary, Progress};
use crate::vocab::{symbol_of, RecordKind, Row};

fn dbn_err(e: impl std::fmt::Display) -> ExportError {
    ExportError::Dbn(e.to_string())
}

fn aggressor(s: Side) -> std::ffi::c_char {
    (match s {
        Side::Buy => b'B',
        Side::Sell => b'A',
        Side::None => b'N',
    }) as std::ffi::c_char
}

/// `(first ns, last ns)` of the records a symbol's instrument id was seen in.
type Seen = BTreeMap<(String, u32), (u64, u64)>;

fn date_of(ns: u64) -> Result<time::Date, ExportError> {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns))
        .map(|t| t.date())
        .map_err(dbn_err)
}

fn writer_for(
    dest: &Dest,
    out: Option<&Output>,
    zstd: bool,
) -> Result<dbn::encode::DynWriter<'static, Box<dyn Write>>, ExportError> {
    let sink: Box<dyn Write> = match (dest, out) {
        (Dest::Stdout, _) => Box::new(BufWriter::with_capacity(1 << 20, std::io::stdout().lock())),
        (_, Some(out)) => {
            let path = out.stage("")?;
            Box::new(BufWriter::with_capacity(
                1 << 20,
                std::fs::File::create(&path).map_err(|e| ExportError::io(path.display(), e))?,
            ))
        }
        (_, None) => return Err(ExportError::Refused("no output".into())),
    };
    let compression = if zstd {
        dbn::Compression::Zstd
    } else {
        dbn::Compression::None
    };
    dbn::encode::DynWriter::new(sink, compression).map_err(dbn_err)
}

/// `journal export --format dbn`.
pub(crate) fn export_dbn(
    input: &Path,
    dest: &Dest,
    opts: &ExportOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<ExportSummary, ExportError> {
    let started = Instant::now();
    let journal_err = |e: JournalError| ExportError::Journal {
        path: input.display().to_string(),
        source: e,
    };
    let manifest = Manifest::read(input).map_err(dbn_err)?;
    let filter = &opts.filter;
    let schema = match &manifest {
        Some(_) => {
            if !filter.kinds.is_empty() && !filter.kinds.contains(&RecordKind::Vendor) {
                return Err(ExportError::Refused(
                    "an imported journal's DBN export gives its records as imported (kind vendor); --kind picks \
                     nothing else there"
                        .into(),
                ));
            }
            None
        }
        None => match filter.kinds[..] {
            [RecordKind::Trade] => Some(Schema::Trades),
            [RecordKind::Quote] => Some(Schema::Mbp1),
            _ => {
                return Err(ExportError::Refused(
                    "a recording exports to DBN one schema at a time: --kind trade (trades) or --kind quote \
                     (mbp-1, top of book); other kinds have no DBN schema here"
                        .into(),
                ))
            }
        },
    };
    let mut reader = HistoryReader::open(input).map_err(journal_err)?;
    let mut output = match dest {
        Dest::Stdout => None,
        Dest::At(loc) => Some(Output::open(loc, Shape::File)?),
    };
    let mut s = ExportSummary {
        format: "dbn",
        ..ExportSummary::default()
    };
    // A recording's records go to a spool first: the metadata, written before them, holds the symbol map, known
    // only once every record is read.
    let spool_dir = tempfile_dir()?;
    let spool_path = spool_dir.join("records");
    let mut spool = BufWriter::with_capacity(
        1 << 20,
        std::fs::File::create(&spool_path).map_err(|e| ExportError::io(spool_path.display(), e))?,
    );
    let mut w = match (&manifest, schema) {
        (Some(m), _) => {
            let (_, src) = pick_source(m, opts.dbn_source).map_err(dbn_err)?;
            let meta = src.metadata_bytes().map_err(dbn_err)?;
            let mut w = writer_for(dest, output.as_ref(), opts.dbn_zstd)?;
            if let Some(m) = &meta {
                w.write_all(m)
                    .map_err(|e| ExportError::io("the DBN output", e))?;
            }
            Some(w)
        }
        _ => None,
    };
    let source = match &manifest {
        Some(m) => Some(pick_source(m, opts.dbn_source).map_err(dbn_err)?.0),
        None => None,
    };
    let mut seen: Seen = BTreeMap::new();
    let mut venue: Option<String> = None;
    let (mut first_ns, mut last_ns) = (u64::MAX, 0u64);
    read_window(input, &mut reader, filter, &mut s, progress, |rec, s| {
        let t = rec.capture_time_ns;
        if let (Some(w), Some(index)) = (w.as_mut(), source) {
            match VendorFrame::decode(rec.payload) {
                Ok(f)
                    if f.source == index
                        && (filter.topics.is_empty()
                            || filter
                                .topics
                                .iter()
                                .any(|p| f.topic.starts_with(p.as_str()))) =>
                {
                    w.write_all(f.record)
                        .map_err(|e| ExportError::io("the DBN output", e))?;
                    s.rows += 1;
                    s.bytes_selected += rec.payload.len() as u64;
                }
                _ => s.filtered_out += 1,
            }
            return Ok(());
        }
        let Some(row) = Row::decode(rec) else {
            s.undecodable += 1;
            return Ok(());
        };
        if !filter.selects(&row) {
            s.filtered_out += 1;
            return Ok(());
        }
        let publisher = u16::try_from(row.publisher_id).unwrap_or(u16::MAX);
        let seq = row.sequence as u32;
        let flags = FlagSet::new(dbn::flags::LAST);
        let bytes: Vec<u8> = match row.payload() {
            Some(Payload::Trade(tr)) => {
                let ts_event = if tr.venue_time_ns != 0 {
                    tr.venue_time_ns
                } else {
                    row.origin_ns
                };
                let msg = TradeMsg {
                    hd: RecordHeader::new::<TradeMsg>(
                        dbn::rtype::MBP_0,
                        publisher,
                        tr.instrument_id,
                        ts_event,
                    ),
                    price: tr.price,
                    size: tr.size,
                    action: b'T' as std::ffi::c_char,
                    side: aggressor(tr.aggressor),
                    flags,
                    depth: 0,
                    ts_recv: t,
                    ts_in_delta: i32::try_from(t.saturating_sub(row.send_ns)).unwrap_or(i32::MAX),
                    sequence: seq,
                };
                note(&mut seen, row.topic, tr.instrument_id, t);
                msg.as_ref().to_vec()
            }
            Some(Payload::Quote(q)) => {
                let ts_event = if q.venue_time_ns != 0 {
                    q.venue_time_ns
                } else {
                    row.origin_ns
                };
                let msg = Mbp1Msg {
                    hd: RecordHeader::new::<Mbp1Msg>(
                        dbn::rtype::MBP_1,
                        publisher,
                        q.instrument_id,
                        ts_event,
                    ),
                    price: dbn::UNDEF_PRICE,
                    size: 0,
                    action: b'M' as std::ffi::c_char,
                    side: b'N' as std::ffi::c_char,
                    flags,
                    depth: 0,
                    ts_recv: t,
                    ts_in_delta: i32::try_from(t.saturating_sub(row.send_ns)).unwrap_or(i32::MAX),
                    sequence: seq,
                    levels: [BidAskPair {
                        bid_px: q.bid_px,
                        ask_px: q.ask_px,
                        bid_sz: q.bid_size,
                        ask_sz: q.ask_size,
                        bid_ct: q.bid_orders,
                        ask_ct: q.ask_orders,
                    }],
                };
                note(&mut seen, row.topic, q.instrument_id, t);
                msg.as_ref().to_vec()
            }
            _ => {
                s.filtered_out += 1;
                return Ok(());
            }
        };
        if venue.is_none() {
            venue = row.topic.split('.').nth(1).map(str::to_owned);
        }
        first_ns = first_ns.min(t);
        last_ns = last_ns.max(t);
        spool
            .write_all(&bytes)
            .map_err(|e| ExportError::io(spool_path.display(), e))?;
        s.rows += 1;
        s.bytes_selected += rec.payload.len() as u64;
        *s.rows_by_kind.entry(row.kind.name()).or_default() += 1;
        Ok(())
    })?;
    spool
        .flush()
        .map_err(|e| ExportError::io(spool_path.display(), e))?;
    drop(spool);
    if let (None, Some(schema)) = (&w, schema) {
        let metadata = recording_metadata(schema, venue.as_deref(), first_ns, last_ns, &seen)?;
        let mut writer = writer_for(dest, output.as_ref(), opts.dbn_zstd)?;
        dbn::encode::dbn::MetadataEncoder::new(&mut writer)
            .encode(&metadata)
            .map_err(dbn_err)?;
        let mut records = BufReader::new(
            std::fs::File::open(&spool_path)
                .map_err(|e| ExportError::io(spool_path.display(), e))?,
        );
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = records
                .read(&mut buf)
                .map_err(|e| ExportError::io(spool_path.display(), e))?;
            if n == 0 {
                break;
            }
            writer
                .write_all(&buf[..n])
                .map_err(|e| ExportError::io("the DBN output", e))?;
        }
        w = Some(writer);
    }
    let _ = std::fs::remove_dir_all(&spool_dir);
    if let Some(mut w) = w {
        w.flush()
            .map_err(|e| ExportError::io("the DBN output", e))?;
        w.finish().map_err(dbn_err)?;
    }
    if let Some(out) = output.as_mut() {
        out.closed("", s.rows)?;
    }
    if let Some(out) = output {
        s.files = out.commit()?;
    }
    if manifest.is_some() {
        s.rows_by_kind.insert("vendor", s.rows);
    }
    finish_summary(&mut s, started.elapsed());
    Ok(s)
}

fn note(seen: &mut Seen, topic: &str, iid: u32, t: u64) {
    let e = seen
        .entry((symbol_of(topic).to_owned(), iid))
        .or_insert((t, t));
    e.0 = e.0.min(t);
    e.1 = e.1.max(t);
}

fn tempfile_dir() -> Result<std::path::PathBuf, ExportError> {
    let d = std::env::temp_dir().join(format!(
        "tickbox-dbn-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    ));
    std::fs::create_dir_all(&d).map_err(|e| ExportError::io(d.display(), e))?;
    Ok(d)
}

/// The metadata of a recording's DBN export: the schema, the time range, raw symbols mapped to instrument ids
/// for the UTC dates each was seen on.
fn recording_metadata(
    schema: Schema,
    venue: Option<&str>,
    first_ns: u64,
    last_ns: u64,
    seen: &Seen,
) -> Result<Metadata, ExportError> {
    let start = if first_ns == u64::MAX { 0 } else { first_ns };
    let mut mappings: BTreeMap<String, Vec<MappingInterval>> = BTreeMap::new();
    for ((symbol, iid), (a, b)) in seen {
        let end = date_of(*b)?
            .next_day()
            .ok_or_else(|| dbn_err("date out of range"))?;
        mappings
            .entry(symbol.clone())
            .or_default()
            .push(MappingInterval {
                start_date: date_of(*a)?,
                end_date: end,
                symbol: iid.to_string(),
            });
    }
    // DBN's dataset field holds at most 16 bytes.
    let dataset: String = format!("TICKBOX.{}", venue.unwrap_or("MIXED"))
        .chars()
        .take(16)
        .collect();
    Ok(Metadata::builder()
        .dataset(dataset)
        .schema(Some(schema))
        .start(start)
        .end(NonZeroU64::new(last_ns.saturating_add(1)))
        .stype_in(Some(SType::RawSymbol))
        .stype_out(SType::InstrumentId)
        .symbols(mappings.keys().cloned().collect())
        .mappings(
            mappings
                .into_iter()
                .map(|(raw_symbol, intervals)| SymbolMapping {
                    raw_symbol,
                    intervals,
                })
                .collect(),
        )
        .build())
}
