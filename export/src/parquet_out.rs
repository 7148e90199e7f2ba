//! Parquet: one dataset partitioned by date and kind (`date=2026-01-02/kind=quote/part-<first journal seq>.parquet`,
//! hive style), one file per partition and size bound, typed columns ([`crate::vocab`]), zstd, row groups bounded
//! in rows and bytes, page statistics on every column and a bloom filter on the symbol.
//!
//! Memory is bounded whatever the journal's size: each open partition holds one Arrow batch being built
//! ([`BATCH_ROWS`] rows) and the encoded pages of one row group (at most [`ROW_GROUP_BYTES`]); a partition is
//! closed when its file reaches the size bound, and every partition of a day is closed when a later day starts.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, Float64Builder, Int64Builder, StringBuilder, TimestampNanosecondBuilder,
    UInt16Builder, UInt32Builder, UInt64Builder, UInt8Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use tickbox_wire::PRICE_SCALE;

use crate::days::Days;
use crate::dest::Output;
use crate::error::ExportError;
use crate::vocab::{
    column_name, columns_of, price_f64, FieldType, PriceType, RecordKind, Row, Value,
};

/// Rows built in Arrow before they are handed to the Parquet writer.
pub const BATCH_ROWS: usize = 64 * 1024;
/// A row group ends at this many rows…
pub const ROW_GROUP_ROWS: usize = 1024 * 1024;
/// …or when its encoded pages reach this size, whichever comes first.
pub const ROW_GROUP_BYTES: usize = 64 << 20;

/// Options of a Parquet export.
#[derive(Debug, Clone)]
pub struct ParquetOptions {
    /// Exact or float prices.
    pub price: PriceType,
    /// A partition's file is closed and a new one begun once it reaches this size.
    pub max_file_bytes: u64,
    /// zstd level.
    pub zstd_level: i32,
}

impl Default for ParquetOptions {
    fn default() -> Self {
        ParquetOptions {
            price: PriceType::Fixed,
            max_file_bytes: 512 << 20,
            zstd_level: 3,
        }
    }
}

/// The Arrow schema of `kind`'s files: every column of the vocabulary (the partition values `date` and `kind`
/// are in the path, not the file), with the price type and scale in the schema's metadata and each price
/// column's.
pub fn schema_of(kind: RecordKind, price: PriceType) -> SchemaRef {
    let ts = DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()));
    let fields: Vec<Field> = columns_of(kind)
        .map(|def| {
            let (ty, nullable) = match def.ty {
                FieldType::Time => (ts.clone(), false),
                FieldType::OptTime => (ts.clone(), true),
                FieldType::U8 => (DataType::UInt8, false),
                FieldType::U16 => (DataType::UInt16, false),
                FieldType::U32 => (DataType::UInt32, false),
                FieldType::U64 => (DataType::UInt64, false),
                FieldType::Price => match price {
                    PriceType::Fixed => (DataType::Int64, false),
                    PriceType::Float => (DataType::Float64, false),
                },
                FieldType::Str => (DataType::Utf8, false),
                FieldType::Bytes => (DataType::Binary, false),
            };
            let field = Field::new(column_name(def, price), ty, nullable);
            if def.ty == FieldType::Price {
                field.with_metadata(price_metadata(price).into_iter().collect())
            } else {
                field
            }
        })
        .collect();
    let mut meta: HashMap<String, String> = price_metadata(price).into_iter().collect();
    meta.insert("tickbox.kind".into(), kind.name().into());
    Arc::new(Schema::new_with_metadata(fields, meta))
}

fn price_metadata(price: PriceType) -> Vec<(String, String)> {
    let mut v = vec![("tickbox.price_type".to_owned(), price.name().to_owned())];
    if price == PriceType::Fixed {
        v.push(("tickbox.price_scale".to_owned(), PRICE_SCALE.to_string()));
    }
    v
}

fn writer_properties(
    kind: RecordKind,
    opts: &ParquetOptions,
) -> Result<WriterProperties, ExportError> {
    let mut kv: Vec<KeyValue> = price_metadata(opts.price)
        .into_iter()
        .map(|(k, v)| KeyValue::new(k, v))
        .collect();
    kv.push(KeyValue::new(
        "tickbox.kind".to_owned(),
        kind.name().to_owned(),
    ));
    let mut props = WriterProperties::builder()
        // Dictionaries only for the text columns (topic, symbol, side, …: few distinct values, long repeats):
        // on times, sequences and prices nearly every value is new, and interning them cost a sixth of the
        // export's CPU for no smaller file (zstd and the plain encoding do as well).
        .set_dictionary_enabled(false);
    for def in columns_of(kind) {
        if def.ty == FieldType::Str {
            props = props.set_column_dictionary_enabled(ColumnPath::from(def.name), true);
        }
    }
    Ok(props
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(opts.zstd_level)?))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_max_row_group_bytes(Some(ROW_GROUP_BYTES))
        // Min/max per page and per row group on every column: capture_time for time ranges, symbol and topic
        // for their ranges; a bloom filter on symbol answers `symbol = 'AAPL'` where ranges cannot (a day's
        // row groups each hold every symbol).
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_column_bloom_filter_enabled(ColumnPath::from("symbol"), true)
        .set_column_bloom_filter_max_ndv(ColumnPath::from("symbol"), 100_000)
        .set_created_by(format!("tickbox {}", env!("CARGO_PKG_VERSION")))
        .set_key_value_metadata(Some(kv))
        .build())
}

enum Col {
    Ts(TimestampNanosecondBuilder),
    U8(UInt8Builder),
    U16(UInt16Builder),
    U32(UInt32Builder),
    U64(UInt64Builder),
    I64(Int64Builder),
    F64(Float64Builder),
    Str(StringBuilder),
    Bin(BinaryBuilder),
}

impl Col {
    fn new(ty: FieldType, price: PriceType) -> Col {
        let n = BATCH_ROWS;
        match ty {
            FieldType::Time | FieldType::OptTime => {
                Col::Ts(TimestampNanosecondBuilder::with_capacity(n).with_timezone("UTC"))
            }
            FieldType::U8 => Col::U8(UInt8Builder::with_capacity(n)),
            FieldType::U16 => Col::U16(UInt16Builder::with_capacity(n)),
            FieldType::U32 => Col::U32(UInt32Builder::with_capacity(n)),
            FieldType::U64 => Col::U64(UInt64Builder::with_capacity(n)),
            FieldType::Price => match price {
                PriceType::Fixed => Col::I64(Int64Builder::with_capacity(n)),
                PriceType::Float => Col::F64(Float64Builder::with_capacity(n)),
            },
            FieldType::Str => Col::Str(StringBuilder::with_capacity(n, n * 16)),
            FieldType::Bytes => Col::Bin(BinaryBuilder::with_capacity(n, n * 64)),
        }
    }

    #[inline]
    fn push(&mut self, v: Value<'_>, nullable: bool) {
        match (self, v) {
            (Col::Ts(b), Value::Time(0)) if nullable => b.append_null(),
            (Col::Ts(b), Value::Time(t)) => b.append_value(t as i64),
            (Col::U8(b), Value::U(x)) => b.append_value(x as u8),
            (Col::U16(b), Value::U(x)) => b.append_value(x as u16),
            (Col::U32(b), Value::U(x)) => b.append_value(x as u32),
            (Col::U64(b), Value::U(x)) => b.append_value(x),
            (Col::I64(b), Value::Price(p)) => b.append_value(p),
            (Col::F64(b), Value::Price(p)) => b.append_value(price_f64(p)),
            (Col::Str(b), Value::Str(s)) => b.append_value(s),
            (Col::Bin(b), Value::Bytes(x)) => b.append_value(x),
            // The vocabulary gives each column one value type (a unit test checks every kind); anything else
            // is a bug, shown in tests and never a panic on data.
            (_, v) => debug_assert!(false, "value {v:?} does not fit its column"),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Col::Ts(b) => Arc::new(b.finish()),
            Col::U8(b) => Arc::new(b.finish()),
            Col::U16(b) => Arc::new(b.finish()),
            Col::U32(b) => Arc::new(b.finish()),
            Col::U64(b) => Arc::new(b.finish()),
            Col::I64(b) => Arc::new(b.finish()),
            Col::F64(b) => Arc::new(b.finish()),
            Col::Str(b) => Arc::new(b.finish()),
            Col::Bin(b) => Arc::new(b.finish()),
        }
    }
}

/// Rows of one kind being built into an Arrow batch.
struct KindBatch {
    schema: SchemaRef,
    cols: Vec<Col>,
    nullable: Vec<bool>,
    rows: usize,
}

impl KindBatch {
    fn new(kind: RecordKind, price: PriceType) -> KindBatch {
        KindBatch {
            schema: schema_of(kind, price),
            cols: columns_of(kind).map(|d| Col::new(d.ty, price)).collect(),
            nullable: columns_of(kind)
                .map(|d| d.ty == FieldType::OptTime)
                .collect(),
            rows: 0,
        }
    }

    #[inline]
    fn push(&mut self, row: &Row<'_>) {
        let mut i = 0;
        let (cols, nullable) = (&mut self.cols, &self.nullable);
        row.values(|v| {
            if let (Some(c), Some(&n)) = (cols.get_mut(i), nullable.get(i)) {
                c.push(v, n);
            }
            i += 1;
        });
        self.rows += 1;
    }

    fn finish(&mut self) -> Result<RecordBatch, ExportError> {
        let arrays = self.cols.iter_mut().map(Col::finish).collect();
        self.rows = 0;
        Ok(RecordBatch::try_new(self.schema.clone(), arrays)?)
    }
}

/// One partition (a day and a kind): its batch, and its file being written.
struct Partition {
    day: String,
    kind: RecordKind,
    batch: KindBatch,
    file: Option<OpenFile>,
}

struct OpenFile {
    rel: String,
    writer: ArrowWriter<BufWriter<File>>,
    rows: u64,
}

/// A partitioned Parquet dataset being written into an [`Output`].
pub struct ParquetSink {
    opts: ParquetOptions,
    days: Days,
    /// Open partitions by (day start, kind).
    parts: HashMap<(u64, RecordKind), Partition>,
    /// Start of the latest day seen: partitions of earlier days are closed when a later one starts.
    latest_day: u64,
}

impl std::fmt::Debug for ParquetSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParquetSink")
            .field("open_partitions", &self.parts.len())
            .finish()
    }
}

impl ParquetSink {
    /// A sink partitioning by day in `days`' zone.
    pub fn new(opts: ParquetOptions, days: Days) -> ParquetSink {
        ParquetSink {
            opts,
            days,
            parts: HashMap::new(),
            latest_day: 0,
        }
    }

    /// Adds one row.
    pub fn push(&mut self, row: &Row<'_>, out: &mut Output) -> Result<(), ExportError> {
        let (day_start, _) = self.days.day_of(row.capture_ns);
        if day_start > self.latest_day {
            if self.latest_day != 0 {
                self.close_days_before(day_start, out)?;
            }
            self.latest_day = day_start;
        }
        // One lookup per row; the partition is made on its day and kind's first row.
        let (days, price) = (&mut self.days, self.opts.price);
        let part = self
            .parts
            .entry((day_start, row.kind))
            .or_insert_with(|| Partition {
                day: days.label(row.capture_ns),
                kind: row.kind,
                batch: KindBatch::new(row.kind, price),
                file: None,
            });
        if part.file.is_none() {
            let rel = format!(
                "date={}/kind={}/part-{:012}.parquet",
                part.day,
                part.kind.name(),
                row.journal_seq
            );
            let path = out.stage(&rel)?;
            let file = File::create(&path).map_err(|e| ExportError::io(path.display(), e))?;
            let writer = ArrowWriter::try_new(
                BufWriter::with_capacity(1 << 20, file),
                part.batch.schema.clone(),
                Some(writer_properties(part.kind, &self.opts)?),
            )?;
            part.file = Some(OpenFile {
                rel,
                writer,
                rows: 0,
            });
        }
        part.batch.push(row);
        if part.batch.rows >= BATCH_ROWS {
            Self::flush_batch(part, &self.opts, out)?;
        }
        Ok(())
    }

    fn flush_batch(
        part: &mut Partition,
        opts: &ParquetOptions,
        out: &mut Output,
    ) -> Result<(), ExportError> {
        if part.batch.rows == 0 {
            return Ok(());
        }
        let rows = part.batch.rows as u64;
        let batch = part.batch.finish()?;
        let Some(f) = part.file.as_mut() else {
            return Ok(());
        };
        f.writer.write(&batch)?;
        f.rows += rows;
        if (f.writer.bytes_written() + f.writer.in_progress_size()) as u64 >= opts.max_file_bytes {
            Self::close_file(part, out)?;
        }
        Ok(())
    }

    fn close_file(part: &mut Partition, out: &mut Output) -> Result<(), ExportError> {
        if let Some(f) = part.file.take() {
            f.writer.close()?;
            out.closed(&f.rel, f.rows)?;
        }
        Ok(())
    }

    fn close_part(
        mut part: Partition,
        opts: &ParquetOptions,
        out: &mut Output,
    ) -> Result<(), ExportError> {
        Self::flush_batch(&mut part, opts, out)?;
        Self::close_file(&mut part, out)
    }

    fn close_days_before(&mut self, day_start: u64, out: &mut Output) -> Result<(), ExportError> {
        let old: Vec<_> = self
            .parts
            .keys()
            .filter(|(d, _)| *d < day_start)
            .copied()
            .collect();
        for key in old {
            if let Some(part) = self.parts.remove(&key) {
                Self::close_part(part, &self.opts, out)?;
            }
        }
        Ok(())
    }

    /// Writes what is buffered and closes every file.
    pub fn finish(mut self, out: &mut Output) -> Result<(), ExportError> {
        let mut keys: Vec<_> = self.parts.keys().copied().collect();
        keys.sort();
        for key in keys {
            if let Some(part) = self.parts.remove(&key) {
                Self::close_part(part, &self.opts, out)?;
            }
        }
        Ok(())
    }
}
