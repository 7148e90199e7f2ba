//! Realism properties of the synthetic market.

use std::collections::{HashMap, HashSet};

use tickbox_feed::{
    generated_ticker, FeedConfig, GeneratorParams, MarketGenerator, PublisherShardConfig, Universe,
};
use tickbox_wire::{shard_for, shard_key_of_topic, Kind, Payload, Quote, Side};

fn config(symbols: usize, shards: usize) -> FeedConfig {
    FeedConfig {
        symbols,
        shards: vec![PublisherShardConfig::default(); shards],
        ..FeedConfig::default()
    }
}

fn whole_market(config: &FeedConfig, seed: u64) -> (Universe, MarketGenerator) {
    let universe = Universe::from_config(config);
    let all: Vec<usize> = (0..universe.symbols().len()).collect();
    let generator = MarketGenerator::new(&universe, &all, GeneratorParams::from(config), seed);
    (universe, generator)
}

#[test]
fn prices_stay_positive_on_tick_and_uncrossed() {
    let config = config(500, 1);
    let (universe, mut generator) = whole_market(&config, 1);
    let ticks: Vec<i64> = universe.symbols().iter().map(|s| s.tick).collect();
    assert!(
        ticks.iter().any(|&t| t != ticks[0]),
        "tick sizes should vary per symbol"
    );
    let mut last_quote: HashMap<u32, Quote> = HashMap::new();
    let mut last_trade_id: HashMap<u32, u64> = HashMap::new();
    let mut checked_touch = 0;
    for i in 0..300_000u64 {
        let generated = generator.next(i).unwrap();
        match generated.payload {
            Payload::Quote(q) => {
                let tick = ticks[q.instrument_id as usize - 1];
                assert!(q.bid_px > 0, "{q:?}");
                assert!(q.bid_px < q.ask_px, "{q:?}");
                assert_eq!(q.bid_px % tick, 0, "{q:?}");
                assert_eq!(q.ask_px % tick, 0, "{q:?}");
                assert!(q.bid_size > 0 && q.ask_size > 0, "{q:?}");
                assert!(q.bid_orders > 0 && q.ask_orders > 0, "{q:?}");
                assert_eq!(q.venue_time_ns, i);
                last_quote.insert(q.instrument_id, q);
            }
            Payload::Trade(t) => {
                let tick = ticks[t.instrument_id as usize - 1];
                assert!(t.price > 0 && t.price % tick == 0, "{t:?}");
                assert!(t.size > 0, "{t:?}");
                assert_ne!(t.aggressor, Side::None);
                let prev = last_trade_id
                    .insert(t.instrument_id, t.trade_id)
                    .unwrap_or(0);
                assert_eq!(t.trade_id, prev + 1, "trade ids count up per symbol");
                // When the previous event of this symbol was a quote, the book is exactly that quote: a buy
                // prints at or above the ask, a sell at or below the bid.
                if let Some(q) = last_quote.remove(&t.instrument_id) {
                    match t.aggressor {
                        Side::Buy => assert!(t.price >= q.ask_px, "{t:?} vs {q:?}"),
                        Side::Sell => assert!(t.price <= q.bid_px, "{t:?} vs {q:?}"),
                        Side::None => unreachable!(),
                    }
                    checked_touch += 1;
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(checked_touch > 1_000, "{checked_touch}");
}

#[test]
fn quote_trade_mix_follows_the_config() {
    for quotes_per_trade in [10.0, 3.0] {
        let config = FeedConfig {
            quotes_per_trade,
            ..config(200, 1)
        };
        let (_, mut generator) = whole_market(&config, 2);
        let n = 200_000;
        let trades = (0..n)
            .filter(|&i| generator.next(i).unwrap().payload.kind() == Kind::Trade)
            .count();
        let expected = n as f64 / (1.0 + quotes_per_trade);
        let ratio = trades as f64 / expected;
        assert!(
            (0.95..1.05).contains(&ratio),
            "{quotes_per_trade}: {trades} vs {expected}"
        );
    }
}

#[test]
fn activity_is_skewed_towards_a_few_names() {
    let top10_share = |zipf_exponent: f64| {
        let config = FeedConfig {
            zipf_exponent,
            ..config(1_000, 1)
        };
        let (_, mut generator) = whole_market(&config, 3);
        let mut per_symbol = vec![0u64; 1_000];
        for i in 0..200_000 {
            per_symbol[generator.next(i).unwrap().symbol] += 1;
        }
        per_symbol.sort_unstable_by(|a, b| b.cmp(a));
        per_symbol[..10].iter().sum::<u64>() as f64 / 200_000.0
    };
    // Zipf(1) over 1,000 names puts ~39 % of the flow on the top 10; uniform puts 1 %.
    let skewed = top10_share(1.0);
    assert!((0.33..0.45).contains(&skewed), "{skewed}");
    let flat = top10_share(0.0);
    assert!(flat < 0.02, "{flat}");
}

#[test]
fn every_symbol_always_routes_to_the_same_shard() {
    let config = config(1_000, 4);
    let universe = Universe::from_config(&config);
    let mut seen = HashSet::new();
    for shard in 0..4 {
        let mine = universe.shard_symbols(shard);
        assert!(!mine.is_empty());
        for &i in &mine {
            assert!(seen.insert(i), "symbol {i} in two shards");
        }
        let mut generator = MarketGenerator::new(
            &universe,
            &mine,
            GeneratorParams::from(&config),
            shard as u64,
        );
        for t in 0..20_000 {
            let generated = generator.next(t).unwrap();
            let topic = generator.topic(generated.symbol, generated.payload.kind());
            assert_eq!(
                shard_for(shard_key_of_topic(topic.as_bytes()), 4),
                shard,
                "{topic}"
            );
        }
    }
    assert_eq!(seen.len(), 1_000, "every symbol has a shard");
    // The universe (names, ticks, prices) does not depend on the shard count, only the routing does.
    let other = Universe::from_config(&self::config(1_000, 7));
    assert_eq!(universe.symbols(), other.symbols());
}

#[test]
fn topics_are_kind_venue_symbol() {
    let config = FeedConfig {
        symbol_names: vec!["AAPL".into(), "BRK.B".into()],
        venue: "XNYS".into(),
        ..FeedConfig::default()
    };
    let (_, generator) = whole_market(&config, 4);
    assert_eq!(generator.topic(0, Kind::Quote), "Q.XNYS.AAPL");
    assert_eq!(generator.topic(1, Kind::Trade), "T.XNYS.BRK.B");
}

#[test]
fn same_seed_same_stream() {
    let config = config(100, 1);
    let (_, mut a) = whole_market(&config, 9);
    let (_, mut b) = whole_market(&config, 9);
    let (_, mut c) = whole_market(&config, 10);
    let xs: Vec<_> = (0..1_000).map(|i| a.next(i).unwrap()).collect();
    let ys: Vec<_> = (0..1_000).map(|i| b.next(i).unwrap()).collect();
    let zs: Vec<_> = (0..1_000).map(|i| c.next(i).unwrap()).collect();
    assert_eq!(xs, ys);
    assert_ne!(xs, zs);
}

#[test]
fn generated_tickers_are_distinct_letters() {
    let mut seen = HashSet::new();
    for i in 0..100_000 {
        let t = generated_ticker(i);
        assert_eq!(t.len(), 4);
        assert!(t.bytes().all(|b| b.is_ascii_uppercase()), "{t}");
        assert!(seen.insert(t), "duplicate at {i}");
    }
}
