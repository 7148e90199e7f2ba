//! Import rate beside the `dbn` crate reading the same file alone. Ignored by default (it writes ~400 MB); run
//! with `cargo test --release -p tickbox-dbn --test dbn import_rate:: -- --ignored --nocapture`. `TICKBOX_RATE_RECORDS`
//! sets the record count (default 2 000 000 MBO records).

use std::time::Instant;

use tickbox_dbn::dbn::decode::{DecodeRecordRef, DynDecoder};
use tickbox_dbn::dbn::encode::dbn::Encoder;
use tickbox_dbn::dbn::encode::EncodeRecord;
use tickbox_dbn::dbn::{
    rtype, MboMsg, Metadata, Record, RecordHeader, SType, Schema, VersionUpgradePolicy,
};
use tickbox_dbn::{import_files, ImportOptions};

fn median_spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

#[test]
#[ignore = "measurement: writes a large file; run explicitly in release"]
fn import_rate_beside_dbn_alone() {
    let n: u64 = std::env::var("TICKBOX_RATE_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mbo.dbn");
    let t0 = 1_700_000_000_000_000_000u64;
    let m = Metadata::builder()
        .dataset("GLBX.MDP3".to_owned())
        .schema(Some(Schema::Mbo))
        .start(t0)
        .stype_in(Some(SType::InstrumentId))
        .stype_out(SType::InstrumentId)
        .build();
    {
        let f = std::io::BufWriter::new(std::fs::File::create(&file).unwrap());
        let mut enc = Encoder::new(f, &m).unwrap();
        for i in 0..n {
            enc.encode_record(&MboMsg {
                hd: RecordHeader::new::<MboMsg>(rtype::MBO, 1, (i % 50) as u32, t0 + i * 100),
                order_id: i,
                price: 4_500_000_000_000 + (i as i64 % 100) * 250_000_000,
                size: 1 + (i % 10) as u32,
                flags: Default::default(),
                channel_id: 0,
                action: b'A' as _,
                side: b'B' as _,
                ts_recv: t0 + i * 100 + 50,
                ts_in_delta: 0,
                sequence: i as u32,
            })
            .unwrap();
        }
    }
    let size = std::fs::metadata(&file).unwrap().len();
    println!("file: {n} MBO records, {size} bytes (plain DBN v3)");
    let (mut alone, mut import) = (Vec::new(), Vec::new());
    for rep in 0..3 {
        let start = Instant::now();
        let mut d = DynDecoder::from_file(&file, VersionUpgradePolicy::AsIs).unwrap();
        let (mut count, mut sum) = (0u64, 0u64);
        while let Some(r) = d.decode_record_ref().unwrap() {
            count += 1;
            sum = sum.wrapping_add(r.raw_index_ts());
        }
        let secs = start.elapsed().as_secs_f64();
        assert_eq!(count, n);
        std::hint::black_box(sum);
        alone.push(n as f64 / secs);

        let journal = dir.path().join(format!("j{rep}"));
        let start = Instant::now();
        let rep_ = import_files(
            &journal,
            std::slice::from_ref(&file),
            &ImportOptions::default(),
        )
        .unwrap();
        let secs = start.elapsed().as_secs_f64();
        assert_eq!(rep_.records, n);
        import.push(n as f64 / secs);
        std::fs::remove_dir_all(&journal).unwrap();
        println!(
            "run {rep}: dbn crate alone {:.0} records/s, import {:.0} records/s",
            alone[rep], import[rep]
        );
    }
    let (am, alo, ahi) = median_spread(alone);
    let (im, ilo, ihi) = median_spread(import);
    println!("dbn crate alone: median {am:.0} records/s (min {alo:.0}, max {ahi:.0})");
    println!("tickbox import:  median {im:.0} records/s (min {ilo:.0}, max {ihi:.0}); {:.1}x the read alone", am / im);
}
