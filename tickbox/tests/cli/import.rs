//! `tickbox import` and `tickbox journal export --format dbn` through the real binary: DBN files written here
//! with the `dbn` crate are imported, counted by `journal info`, verified, and exported back byte for byte;
//! unreadable files are refused with an error naming them.

use crate::common;
use crate::dbn_fixtures;

use std::path::Path;
use std::process::{Command, Output};

use common::{TempDir, TICKBOX};
use dbn_fixtures::{mbo, meta, T0};
use tickbox_dbn::dbn::decode::{DbnMetadata, DecodeRecord, DynDecoder};
use tickbox_dbn::dbn::encode::dbn::Encoder;
use tickbox_dbn::dbn::encode::EncodeRecord;
use tickbox_dbn::dbn::{
    rtype, MboMsg, Metadata, RecordHeader, Schema, TradeMsg, VersionUpgradePolicy,
};

fn trade(i: u64) -> TradeMsg {
    TradeMsg {
        hd: RecordHeader::new::<TradeMsg>(rtype::MBP_0, 2, 7, T0 + i * 2_000),
        price: 189_260_000_000,
        size: 5,
        action: b'T' as _,
        side: b'N' as _,
        flags: Default::default(),
        depth: 0,
        ts_recv: T0 + i * 2_000 + 300,
        ts_in_delta: 0,
        sequence: i as u32,
    }
}

/// The plain DBN encoding of `records` under `m`; written zstd-compressed to `path` when `zstd`.
fn write<R: tickbox_dbn::dbn::encode::DbnEncodable>(
    path: &Path,
    m: &Metadata,
    records: &[R],
    zstd: bool,
) -> Vec<u8> {
    let mut plain = Vec::new();
    let mut enc = Encoder::new(&mut plain, m).unwrap();
    for r in records {
        enc.encode_record(r).unwrap();
    }
    if zstd {
        let mut z = Encoder::with_zstd(std::fs::File::create(path).unwrap(), m).unwrap();
        for r in records {
            z.encode_record(r).unwrap();
        }
    } else {
        std::fs::write(path, &plain).unwrap();
    }
    plain
}

fn run(args: &[&str]) -> Output {
    Command::new(TICKBOX).args(args).output().unwrap()
}

fn json_of(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn import_counts_every_record_and_exports_each_file_back_byte_for_byte() {
    let dir = TempDir::new("import");
    let a = dir.path().join("mbo.dbn.zst");
    let b = dir.path().join("trades.dbn");
    let mbos: Vec<MboMsg> = (0..300).map(mbo).collect();
    let trades: Vec<TradeMsg> = (0..120).map(trade).collect();
    let plain_a = write(&a, &meta(Schema::Mbo), &mbos, true);
    let plain_b = write(&b, &meta(Schema::Trades), &trades, false);
    let j = dir.path().join("j");
    let js = |p: &Path| p.to_str().unwrap().to_owned();
    let imported = json_of(&run(&[
        "import",
        &js(&a),
        &js(&b),
        "--journal",
        &js(&j),
        "--json",
    ]));
    assert_eq!(imported["records"], 420);
    assert_eq!(imported["manifest"]["sources"][0]["records"], 300);
    assert_eq!(imported["manifest"]["sources"][0]["compressed"], true);
    assert_eq!(imported["manifest"]["sources"][1]["schema"], "trades");

    let info = json_of(&run(&["journal", "info", "--journal", &js(&j), "--json"]));
    assert_eq!(
        info["records"], 420,
        "journal info counts one record per DBN record"
    );
    assert_eq!(info["first_time_ns"], T0 + 400, "capture time is ts_recv");
    assert_eq!(
        info["vendor_records"], 420,
        "imported records are counted as vendor data"
    );
    assert_eq!(info["data_records"], 420);
    assert_eq!(
        info["foreign_records"], 0,
        "imported records are not foreign"
    );
    let verify = run(&["journal", "verify", "--journal", &js(&j)]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );

    // Each file back: plain is byte-identical to what the dbn crate wrote; .zst decodes to the same records.
    let out_a = dir.path().join("a.dbn");
    let o = run(&[
        "journal",
        "export",
        "--journal",
        &js(&j),
        "--format",
        "dbn",
        "--source",
        "0",
        "--out",
        &js(&out_a),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(&out_a).unwrap() == plain_a, "mbo round trip");
    let out_b = dir.path().join("b.dbn.zst");
    let o = run(&[
        "journal",
        "export",
        "--journal",
        &js(&j),
        "--format",
        "dbn",
        "--source",
        "1",
        "--out",
        &js(&out_b),
    ]);
    assert!(o.status.success());
    let mut d = DynDecoder::from_file(&out_b, VersionUpgradePolicy::AsIs).unwrap();
    assert_eq!(d.metadata(), &meta(Schema::Trades));
    let mut back = Vec::new();
    while let Some(t) = d.decode_record::<TradeMsg>().unwrap() {
        back.push(t.clone());
    }
    assert_eq!(back, trades);
    // To stdout as well, byte for byte.
    let o = run(&[
        "journal",
        "export",
        "--journal",
        &js(&j),
        "--format",
        "dbn",
        "--source",
        "1",
    ]);
    assert!(o.status.success() && o.stdout == plain_b);
    // Two sources and no --source: refused, naming the choice.
    let o = run(&["journal", "export", "--journal", &js(&j), "--format", "dbn"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--source"));
}

#[test]
fn unreadable_files_are_refused_by_name_and_no_journal_is_made() {
    let dir = TempDir::new("import-refuse");
    let good = dir.path().join("good.dbn");
    write(&good, &meta(Schema::Mbo), &[mbo(1)], false);
    let bad = dir.path().join("notes.dbn");
    std::fs::write(&bad, "these are not market data\n").unwrap();
    let j = dir.path().join("j");
    let o = run(&[
        "import",
        good.to_str().unwrap(),
        bad.to_str().unwrap(),
        "--journal",
        j.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("notes.dbn") && err.contains("not DBN"),
        "{err}"
    );
    assert!(!j.exists(), "a refused import creates no journal");
    // An existing journal is never overwritten.
    std::fs::create_dir(&j).unwrap();
    let o = run(&[
        "import",
        good.to_str().unwrap(),
        "--journal",
        j.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("already exists"));
}
