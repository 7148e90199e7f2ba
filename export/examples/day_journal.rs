//! Writes a day-sized synthetic recording for the export benchmark: `day_journal PATH RECORDS [GAP_NS]` makes an
//! archive journal of quotes (3 in 4) and trades over 1,000 symbols, captured GAP_NS apart (10 µs unless given;
//! 2,340,000 spreads 10 M records over a 6.5-hour session), as a recorder would have stored them (wire frames
//! with publisher, session and sequence).

use tickbox_journal::{Writer, WriterOptions};
use tickbox_wire::{encode_to_vec, Header, Kind, Payload, Quote, Side, Trade};

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(n)) = (args.next(), args.next().and_then(|n| n.parse::<u64>().ok()))
    else {
        eprintln!("usage: day_journal PATH RECORDS [GAP_NS]");
        std::process::exit(2);
    };
    let gap: u64 = args.next().and_then(|g| g.parse().ok()).unwrap_or(10_000);
    let topics: Vec<(String, String)> = (0..1_000)
        .map(|i| (format!("Q.XNAS.S{i:04}"), format!("T.XNAS.S{i:04}")))
        .collect();
    let t0: u64 = 1_767_364_200_000_000_000; // 2026-01-02T14:30:00Z
    let mut w = Writer::open(&path, &WriterOptions::archive(1 << 30)).expect("open the journal");
    let mut seq = 0u64;
    for i in 0..n {
        let t = t0 + i * gap;
        let s = (i.wrapping_mul(2_654_435_761) % 1_000) as usize;
        seq += 1;
        let frame = if i % 4 == 3 {
            encode_to_vec(
                &topics[s].1,
                &Header::live(Kind::Trade, 7, seq, t - 2_000).with_session(1),
                &Payload::Trade(Trade {
                    instrument_id: s as u32,
                    price: 100_000_000_000 + (i % 5_000) as i64 * 10_000_000,
                    size: 1 + (i % 300) as u32,
                    aggressor: if i % 2 == 0 { Side::Buy } else { Side::Sell },
                    trade_id: i,
                    venue_time_ns: t - 5_000,
                }),
            )
        } else {
            encode_to_vec(
                &topics[s].0,
                &Header::live(Kind::Quote, 7, seq, t - 2_000).with_session(1),
                &Payload::Quote(Quote {
                    instrument_id: s as u32,
                    bid_px: 99_990_000_000 + (i % 5_000) as i64 * 10_000_000,
                    ask_px: 100_010_000_000 + (i % 5_000) as i64 * 10_000_000,
                    bid_size: 100 + (i % 900) as u32,
                    ask_size: 100 + (i % 700) as u32,
                    bid_orders: 1 + (i % 9) as u32,
                    ask_orders: 1 + (i % 7) as u32,
                    venue_time_ns: t - 5_000,
                }),
            )
        }
        .expect("encode");
        w.append(t, &frame).expect("append");
    }
    w.close().expect("close");
}
