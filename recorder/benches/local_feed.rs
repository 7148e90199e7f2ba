//! What `replay --local`'s journal side costs per record beside reading the journal bare: `LocalFeed::feed` into a
//! sink that only counts, against a loop over `HistoryReader::next` that only counts; beside them, the same loop
//! through `ReplayInput::next_input` (the socket replay's input) and with a header decode per record (what keeping
//! each publisher's position record by record would cost: the feed looks back at damage instead). Alternating,
//! ROUNDS rounds over the same journal.
//! Run: `cargo bench -p tickbox-recorder --bench local_feed`.

use std::time::{Duration, Instant};

use tickbox_journal::{Writer, WriterOptions};
use tickbox_recorder::{HistoryReader, LocalFeed};
use tickbox_wire::{encode_to_vec, Header, Kind, Quote};

const N: u64 = 2_000_000;
const ROUNDS: usize = 7;

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("day");
    let mut w = Writer::open(&path, &WriterOptions::archive(256 << 20)).unwrap();
    for i in 1..=N {
        let publisher = (i % 8) as u32 + 1;
        let f = encode_to_vec(
            &format!("Q.XNAS.S{:03}", i % 500),
            &Header::live(Kind::Quote, publisher, i / 8 + 1, i),
            &Quote::default().into(),
        )
        .unwrap();
        w.append(i, &f).unwrap();
    }
    w.close().unwrap();
    let (mut bare, mut feed, mut decoded, mut input) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let mut r = HistoryReader::open(&path).unwrap();
        let mut n = 0u64;
        while let tickbox_recorder::Input::Record(rec) =
            tickbox_recorder::ReplayInput::next_input(&mut r).unwrap()
        {
            n += rec.payload.len() as u64 & 1;
        }
        input.push(t.elapsed());
        std::hint::black_box(n);
        let t = Instant::now();
        let mut r = HistoryReader::open(&path).unwrap();
        let mut n = 0u64;
        while let Some(rec) = r.next().unwrap() {
            n += tickbox_wire::MessageRef::decode(rec.payload)
                .map_or(0, |m| m.header().sequence & 1);
        }
        decoded.push(t.elapsed());
        std::hint::black_box(n);
        let t = Instant::now();
        let mut r = HistoryReader::open(&path).unwrap();
        let mut n = 0u64;
        while let Some(rec) = r.next().unwrap() {
            n += rec.payload.len() as u64 & 1;
        }
        bare.push(t.elapsed());
        std::hint::black_box(n);
        let t = Instant::now();
        let mut n = 0u64;
        let report = LocalFeed::open(&path).unwrap().feed(|frame, _| {
            n += frame.len() as u64 & 1;
            true
        });
        feed.push(t.elapsed());
        assert_eq!(report.records, N);
        std::hint::black_box(n);
    }
    let per = |v: &mut Vec<Duration>| {
        v.sort();
        let ns = |d: Duration| d.as_nanos() as f64 / N as f64;
        (ns(v[v.len() / 2]), ns(v[0]), ns(v[v.len() - 1]))
    };
    let (b, b_lo, b_hi) = per(&mut bare);
    let (f, f_lo, f_hi) = per(&mut feed);
    let (d, d_lo, d_hi) = per(&mut decoded);
    let (i, i_lo, i_hi) = per(&mut input);
    println!("read via ReplayInput          {i:6.1} ns/record  ({i_lo:.1} .. {i_hi:.1})");
    println!("read + MessageRef::decode     {d:6.1} ns/record  ({d_lo:.1} .. {d_hi:.1})");
    println!("read the journal bare         {b:6.1} ns/record  ({b_lo:.1} .. {b_hi:.1})");
    println!("LocalFeed::feed               {f:6.1} ns/record  ({f_lo:.1} .. {f_hi:.1})");
    println!("feed - bare = {:.1} ns/record", f - b);
}
