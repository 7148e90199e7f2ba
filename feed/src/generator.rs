//! The synthetic market: a universe of symbols and a generator of quotes and trades that look like a real
//! equity feed (random-walk mids on each symbol's tick grid, sizes in lots, ~10 quotes per trade, a few hot
//! names carrying most of the activity, trades at or through the touch with an aggressor side).

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, WeightedAliasIndex};
use tickbox_wire::{make_topic, shard_for, Kind, Payload, Quote, Side, Trade, PRICE_SCALE};

use crate::config::{FeedConfig, MAX_GENERATED_SYMBOLS};

/// A cent, in wire price units.
const CENT: i64 = PRICE_SCALE / 100;

/// One instrument of the universe, fixed at start-up.
#[derive(Debug, Clone, PartialEq)]
pub struct SymbolSpec {
    /// Ticker as it appears in topics (`Q.<venue>.<name>`).
    pub name: String,
    /// 1-based position in the universe; the `instrument_id` of every payload for this symbol.
    pub instrument_id: u32,
    /// Minimum price increment in wire units (1e-9): every price of this symbol is a multiple of it.
    pub tick: i64,
    /// Opening best bid, in ticks.
    pub initial_bid_ticks: i64,
    /// Typical spread, in ticks.
    pub typical_spread_ticks: i64,
    /// Relative activity (Zipf by rank); the generator picks symbols in proportion to it.
    pub weight: f64,
}

/// The symbols of a feed and which shard owns each. Built deterministically from the config, so every shard,
/// test or subscriber that builds it from the same config sees the same universe.
#[derive(Debug, Clone)]
pub struct Universe {
    venue: String,
    shards: usize,
    symbols: Vec<SymbolSpec>,
}

impl Universe {
    /// Builds the universe of a (validated) config.
    pub fn from_config(config: &FeedConfig) -> Universe {
        let names: Vec<String> = if config.symbol_names.is_empty() {
            (0..config.symbols.min(MAX_GENERATED_SYMBOLS))
                .map(generated_ticker)
                .collect()
        } else {
            config.symbol_names.clone()
        };
        let n = names.len();
        let mut rng = SmallRng::seed_from_u64(config.seed ^ 0x5EED_0F00_117E_4500);
        // Hot names are spread over the universe (and so over the shards), not clustered at the start.
        let mut ranks: Vec<usize> = (0..n).collect();
        ranks.shuffle(&mut rng);
        let symbols = names
            .into_iter()
            .enumerate()
            .map(|(i, name)| {
                let rank = ranks[i];
                let (price, tick) = if rng.gen_bool(0.03) {
                    // Sub-dollar names trade in hundredths of a cent.
                    (rng.gen_range(0.10..1.0), CENT / 100)
                } else {
                    let price = (rng.gen_range(2f64.ln()..800f64.ln())).exp();
                    let tick = if rng.gen_bool(0.05) { 5 * CENT } else { CENT };
                    (price, tick)
                };
                let initial_bid_ticks = ((price * PRICE_SCALE as f64) / tick as f64)
                    .round()
                    .max(1.0) as i64;
                // Hot names trade at the minimum spread; colder names a little wider.
                let coldness = rank as f64 / n.max(1) as f64;
                let typical_spread_ticks = 1 + (coldness * rng.gen_range(0.0..4.0)) as i64;
                SymbolSpec {
                    name,
                    instrument_id: (i + 1) as u32,
                    tick,
                    initial_bid_ticks,
                    typical_spread_ticks,
                    weight: 1.0 / ((rank + 1) as f64).powf(config.zipf_exponent),
                }
            })
            .collect();
        Universe {
            venue: config.venue.clone(),
            shards: config.shards.len().max(1),
            symbols,
        }
    }

    /// Venue code of every topic.
    pub fn venue(&self) -> &str {
        &self.venue
    }

    /// Every symbol, in `instrument_id` order (index `i` has id `i + 1`).
    pub fn symbols(&self) -> &[SymbolSpec] {
        &self.symbols
    }

    /// Number of publisher shards the symbols are spread over (at least 1).
    pub fn shard_count(&self) -> usize {
        self.shards
    }

    /// The shard that owns a symbol: `shard_for("VENUE.SYMBOL")`, the same key subscribers derive from the
    /// topic with `shard_key_of_topic`.
    pub fn shard_of(&self, symbol: &SymbolSpec) -> usize {
        shard_of_symbol(&self.venue, &symbol.name, self.shards)
    }

    /// Indices (into `symbols()`) of the symbols shard `shard` publishes.
    pub fn shard_symbols(&self, shard: usize) -> Vec<usize> {
        (0..self.symbols.len())
            .filter(|&i| self.shard_of(&self.symbols[i]) == shard)
            .collect()
    }

    /// The fraction of total activity that shard `shard` carries.
    pub fn shard_share(&self, shard: usize) -> f64 {
        let total: f64 = self.symbols.iter().map(|s| s.weight).sum();
        let mine: f64 = self
            .symbols
            .iter()
            .filter(|s| self.shard_of(s) == shard)
            .map(|s| s.weight)
            .sum();
        if total > 0.0 {
            mine / total
        } else {
            0.0
        }
    }
}

/// The shard owning `symbol` on `venue` among `shards` shards.
pub fn shard_of_symbol(venue: &str, symbol: &str, shards: usize) -> usize {
    let mut key = Vec::with_capacity(venue.len() + 1 + symbol.len());
    key.extend_from_slice(venue.as_bytes());
    key.push(b'.');
    key.extend_from_slice(symbol.as_bytes());
    shard_for(&key, shards)
}

/// Ticker number `i` (`i < MAX_GENERATED_SYMBOLS`): four letters, distinct for distinct `i`, scattered over the
/// alphabet so a small universe does not all start with `A`.
pub fn generated_ticker(i: usize) -> String {
    // 7919 is coprime to 26^4 (= 2^4 * 13^4), so this is a bijection on 0..26^4.
    let mut v = (i as u64 * 7_919 + 104_729) % MAX_GENERATED_SYMBOLS as u64;
    let mut letters = [b'A'; 4];
    for slot in letters.iter_mut().rev() {
        *slot = b'A' + (v % 26) as u8;
        v /= 26;
    }
    String::from_utf8(letters.to_vec()).expect("ASCII letters")
}

/// Knobs of the generator, taken from [`FeedConfig`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GeneratorParams {
    /// Mean quotes between two trades (see [`FeedConfig::quotes_per_trade`]).
    pub quotes_per_trade: f64,
    /// Probability, 0..=1, that a trade prints through the touch (see
    /// [`FeedConfig::trade_through_probability`]).
    pub trade_through_probability: f64,
}

impl From<&FeedConfig> for GeneratorParams {
    fn from(config: &FeedConfig) -> Self {
        GeneratorParams {
            quotes_per_trade: config.quotes_per_trade,
            trade_through_probability: config.trade_through_probability,
        }
    }
}

/// One generated message: which of the generator's symbols, and its payload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Generated {
    /// Index into the generator's own symbols (see [`MarketGenerator::topic`]).
    pub symbol: usize,
    /// The quote or trade, ready to encode.
    pub payload: Payload,
}

#[derive(Debug, Clone)]
struct SymbolState {
    quote_topic: String,
    trade_topic: String,
    instrument_id: u32,
    tick: i64,
    typical_spread: i64,
    bid_ticks: i64,
    spread_ticks: i64,
    bid_size: u32,
    ask_size: u32,
    bid_orders: u32,
    ask_orders: u32,
    next_trade_id: u64,
}

/// Generates the market for a subset of the universe (one shard's symbols). All state is allocated at
/// construction; `next` never allocates.
#[derive(Debug, Clone)]
pub struct MarketGenerator {
    symbols: Vec<SymbolState>,
    pick: Option<WeightedAliasIndex<f64>>,
    trade_probability: f64,
    through_probability: f64,
    rng: SmallRng,
}

impl MarketGenerator {
    /// A generator for `universe.symbols()[i]` for each `i` in `indices`, seeded with `seed`.
    pub fn new(universe: &Universe, indices: &[usize], params: GeneratorParams, seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let symbols: Vec<SymbolState> = indices
            .iter()
            .map(|&i| {
                let spec = &universe.symbols()[i];
                let bid_size = lot_size(&mut rng);
                let ask_size = lot_size(&mut rng);
                SymbolState {
                    quote_topic: make_topic(Kind::Quote, universe.venue(), &spec.name),
                    trade_topic: make_topic(Kind::Trade, universe.venue(), &spec.name),
                    instrument_id: spec.instrument_id,
                    tick: spec.tick,
                    typical_spread: spec.typical_spread_ticks,
                    bid_ticks: spec.initial_bid_ticks,
                    spread_ticks: spec.typical_spread_ticks,
                    bid_size,
                    ask_size,
                    bid_orders: orders_for(bid_size, &mut rng),
                    ask_orders: orders_for(ask_size, &mut rng),
                    next_trade_id: 1,
                }
            })
            .collect();
        let weights: Vec<f64> = indices
            .iter()
            .map(|&i| universe.symbols()[i].weight)
            .collect();
        // All-zero weights cannot happen from the config (weights are 1/rank^s > 0); fall back to uniform anyway.
        let pick = WeightedAliasIndex::new(weights)
            .or_else(|_| WeightedAliasIndex::new(vec![1.0; indices.len()]))
            .ok();
        MarketGenerator {
            symbols,
            pick,
            trade_probability: 1.0 / (1.0 + params.quotes_per_trade.max(0.0)),
            through_probability: params.trade_through_probability.clamp(0.0, 1.0),
            rng,
        }
    }

    /// Number of symbols this generator covers.
    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    /// Whether this generator covers no symbol (its shard owns none); it then generates nothing.
    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    /// The precomputed topic of `symbol` for `kind` (`Q.` or `T.`; other kinds get the quote topic).
    #[inline]
    pub fn topic(&self, symbol: usize, kind: Kind) -> &str {
        let s = &self.symbols[symbol];
        match kind {
            Kind::Trade => &s.trade_topic,
            _ => &s.quote_topic,
        }
    }

    /// The next message of the market: a symbol picked by activity, then a quote update or a trade.
    /// Returns `None` only for a generator with no symbols.
    #[inline]
    pub fn next(&mut self, venue_time_ns: u64) -> Option<Generated> {
        let symbol = self.pick.as_ref()?.sample(&mut self.rng);
        let kind = if self.rng.gen_bool(self.trade_probability) {
            Kind::Trade
        } else {
            Kind::Quote
        };
        Some(self.next_for(symbol, kind, venue_time_ns))
    }

    /// A message of `kind` (quote or trade) for `symbol`, moving its book as a real one would.
    pub fn next_for(&mut self, symbol: usize, kind: Kind, venue_time_ns: u64) -> Generated {
        let payload = if kind == Kind::Trade {
            Payload::Trade(self.trade(symbol, venue_time_ns))
        } else {
            Payload::Quote(self.quote(symbol, venue_time_ns))
        };
        Generated { symbol, payload }
    }

    fn quote(&mut self, symbol: usize, venue_time_ns: u64) -> Quote {
        let rng = &mut self.rng;
        let s = &mut self.symbols[symbol];
        let r: f64 = rng.gen();
        if r < 0.35 {
            // The mid walks one tick; the book never crosses zero.
            let step = if rng.gen_bool(0.5) { 1 } else { -1 };
            s.bid_ticks = (s.bid_ticks + step).max(1);
        } else if r < 0.50 {
            // Spreads wander but are pulled back to the symbol's typical width.
            let target = s.typical_spread;
            let step = if s.spread_ticks > target && rng.gen_bool(0.7) {
                -1
            } else if rng.gen_bool(0.5) {
                1
            } else {
                -1
            };
            s.spread_ticks = (s.spread_ticks + step).clamp(1, target * 4 + 4);
        } else if rng.gen_bool(0.5) {
            s.bid_size = lot_size(rng);
            s.bid_orders = orders_for(s.bid_size, rng);
        } else {
            s.ask_size = lot_size(rng);
            s.ask_orders = orders_for(s.ask_size, rng);
        }
        s.to_quote(venue_time_ns)
    }

    fn trade(&mut self, symbol: usize, venue_time_ns: u64) -> Trade {
        let through = self.rng.gen_bool(self.through_probability);
        let rng = &mut self.rng;
        let s = &mut self.symbols[symbol];
        let buy = rng.gen_bool(0.5);
        let bid_ticks = s.bid_ticks;
        let ask_ticks = bid_ticks + s.spread_ticks;
        let (price_ticks, size) = if through {
            // A sweep takes the whole touch and prints one or two ticks beyond it; the book re-forms there.
            let levels = rng.gen_range(1..=2);
            if buy {
                let price = ask_ticks + levels;
                let size = s.ask_size + rng.gen_range(1..=500);
                s.bid_ticks = price;
                s.spread_ticks = 1;
                (price, size)
            } else if s.bid_ticks - levels >= 1 {
                let price = s.bid_ticks - levels;
                let size = s.bid_size + rng.gen_range(1..=500);
                s.bid_ticks = price - 1;
                s.spread_ticks = 1;
                if s.bid_ticks < 1 {
                    s.bid_ticks = 1;
                }
                (price, size)
            } else {
                // No room below the bid: print at the touch instead.
                (s.bid_ticks, s.bid_size.max(1))
            }
        } else if buy {
            let size = rng.gen_range(1..=s.ask_size.max(1));
            s.ask_size -= size.min(s.ask_size);
            if s.ask_size == 0 {
                // The level is gone: the ask backs off a tick with fresh size behind it.
                s.spread_ticks += 1;
                s.ask_size = lot_size(rng);
                s.ask_orders = orders_for(s.ask_size, rng);
            }
            (ask_ticks, size)
        } else {
            let size = rng.gen_range(1..=s.bid_size.max(1));
            s.bid_size -= size.min(s.bid_size);
            if s.bid_size == 0 {
                if s.bid_ticks > 1 {
                    s.bid_ticks -= 1;
                    s.spread_ticks += 1;
                }
                s.bid_size = lot_size(rng);
                s.bid_orders = orders_for(s.bid_size, rng);
            }
            (bid_ticks, size)
        };
        if s.bid_size == 0 {
            s.bid_size = lot_size(rng);
        }
        if s.ask_size == 0 {
            s.ask_size = lot_size(rng);
        }
        let trade_id = s.next_trade_id;
        s.next_trade_id += 1;
        Trade {
            instrument_id: s.instrument_id,
            price: price_ticks * s.tick,
            size,
            aggressor: if buy { Side::Buy } else { Side::Sell },
            trade_id,
            venue_time_ns,
        }
    }
}

impl SymbolState {
    #[inline]
    fn to_quote(&self, venue_time_ns: u64) -> Quote {
        Quote {
            instrument_id: self.instrument_id,
            bid_px: self.bid_ticks * self.tick,
            ask_px: (self.bid_ticks + self.spread_ticks) * self.tick,
            bid_size: self.bid_size,
            ask_size: self.ask_size,
            bid_orders: self.bid_orders,
            ask_orders: self.ask_orders,
            venue_time_ns,
        }
    }
}

/// Displayed size in round lots of 100, mostly small, occasionally large.
fn lot_size(rng: &mut SmallRng) -> u32 {
    let lots = if rng.gen_bool(0.9) {
        rng.gen_range(1..=10)
    } else {
        rng.gen_range(10..=100)
    };
    lots * 100
}

fn orders_for(size: u32, rng: &mut SmallRng) -> u32 {
    let lots = (size / 100).max(1);
    rng.gen_range(1..=lots.min(20))
}
