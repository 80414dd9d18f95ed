//! The Redis script's cases, worked out by the core: `tests/vectors/settle.json`.
//!
//! `settle.lua` is the core's settlement on a clock of whole microseconds. Each case in the file
//! is a key's configuration, its hash before the call (or none: a new key), one call (op, n,
//! now, initial tokens, least TTL, extra), and what the script must answer: its reply, the hash
//! after the call, and the TTL the call sets. `test_settle_vectors.py` runs every case through
//! the script on a real redis-server; this test works every case out again through the core
//! ([`Balances`]), so the file is right by construction, and a change to either side that the
//! other does not share fails one of the two tests.
//!
//! To add a case, add its name, bands, `before` and `request` to the file, and run
//! `QOS_WRITE_SETTLE_VECTORS=1 cargo test --test settle_vectors`: the core fills in (or
//! rewrites) every case's `reply`, `after` and `ttl_ms`. Read the diff before committing it.
//!
//! # The core on the script's clock
//!
//! A core band of rate `r` tokens per second counts `1 / (denominator(r) * 10^9)` token a unit
//! and settles in nanoseconds. Handed the script's times in microseconds as if they were
//! nanoseconds, a band of `p/q` tokens per second is the core's band of `1000 p / q` tokens per
//! (core) second: the same tokens per tick. A core unit is then a script unit divided by
//! `k = 1000 / gcd(1000, q)`, so balances and rates are the script's times `k`, and every
//! quotient the two take (waits, times to full, a give-back's steps back) is the same. So the core, fed the script's
//! numbers scaled by `k`, answers exactly what the script must.
//!
//! Where the script's hash holds less than the core's state, the case is read as the script
//! reads it:
//!
//! * **One settlement point per key.** After a give-back the core's bands may stand at
//!   different points; the script keeps the latest, settles the others forward to it, and
//!   empties the bands already there when the points differed (they keep no part of a
//!   microsecond's accrual, so nothing is taken before it). [`Key::one_point`] does the same.
//! * **The limiter's clock.** The core forfeits a refund while a band is settled beyond the
//!   latest time any call used. The script keeps no clock: field `w` marks a settlement point a
//!   reservation or a give-back left, and a refund is forfeited while the key is settled ahead
//!   of now at exactly that point. [`clock_for_refund`] gives the core the clock that means.
//! * **The latest moment.** A reservation is refused (TOO LATE) beyond `2^52` microseconds,
//!   the script's exactness bound ([`LAST_US`]); the core's own range is wider.
//! * **Expiry.** A key is kept until every band is full again (the core's
//!   [`Balances::fresh_from`]), at least the call's least TTL, in whole milliseconds, rounded
//!   up; a key kept for 0 ms is deleted.

use std::fmt::Write as _;
use std::path::PathBuf;

use protocol_in_code_qos::core::exact::limiter::{Balances, Decision, Reservation};
use protocol_in_code_qos::core::exact::rate::{BandSpec, Rate};
use protocol_in_code_qos::core::exact::settle::{settle, Balance};

/// The latest settlement point a reservation may book, in microseconds: the script's `LAST`.
const LAST_US: i64 = 1 << 52;
/// Microseconds in a millisecond, the grain of a key's expiry.
const MICROS_PER_MS: i64 = 1_000;
/// The script's ops (settle.lua, ARGV[1]).
const TAKE: i64 = 0;
const MANY: i64 = 1;
const PEEK: i64 = 2;
const REFUND: i64 = 3;
const AVAILABLE: i64 = 4;
const RESERVE: i64 = 5;
const GIVE_BACK: i64 = 6;
const TAKE_WITH_LEVELS: i64 = 9;
const SETTLE: i64 = 10;
/// The outcomes, as the script numbers them.
const ALLOWED: i128 = 0;
const DENIED: i128 = 1;
const NEVER: i128 = 2;

fn vectors_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/settle.json")
}

#[test]
fn the_core_settles_every_case_as_the_vectors_say() {
    let text = std::fs::read_to_string(vectors_path()).expect("tests/vectors/settle.json");
    let mut file = Json::parse(&text);
    let mut wrong = Vec::new();
    for case in file.field_mut("vectors").items_mut() {
        let worked = work_out(case);
        for (name, value) in worked {
            if case.get(name) != Some(&value) {
                wrong.push(format!(
                    "{}: {name} is {:?} in the file, {value:?} by the core",
                    case.field("name").text(),
                    case.get(name)
                ));
                case.set(name, value);
            }
        }
    }
    if std::env::var_os("QOS_WRITE_SETTLE_VECTORS").is_some() {
        // Written whole, then moved into place: the other test reads the file meanwhile.
        let written = vectors_path().with_extension("json.new");
        std::fs::write(&written, file.pretty()).expect("write the vectors");
        std::fs::rename(written, vectors_path()).expect("replace the vectors");
        return;
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_vectors_cover_every_op_and_several_bands() {
    let file = Json::parse(&std::fs::read_to_string(vectors_path()).expect("vectors"));
    let cases = file.field("vectors").items();
    for op in [
        TAKE,
        MANY,
        PEEK,
        REFUND,
        AVAILABLE,
        RESERVE,
        GIVE_BACK,
        TAKE_WITH_LEVELS,
        SETTLE,
    ] {
        let of_op = |case: &&Json| case.field("request").field("op").int() == i128::from(op);
        assert!(cases.iter().any(|case| of_op(&case)), "op {op}");
        let several = |case: &&Json| of_op(case) && case.field("bands").items().len() > 1;
        assert!(
            cases.iter().any(|case| several(&case)),
            "op {op} on several bands"
        );
    }
}

/// One key's bands, in the core's units on the script's clock, and the scale between them.
struct Key {
    specs: Vec<BandSpec>,
    /// Core units per script unit, per band.
    scale: Vec<u128>,
}

impl Key {
    fn new(bands: &[Json]) -> Self {
        let mut key = Self {
            specs: Vec::new(),
            scale: Vec::new(),
        };
        for band in bands {
            let [p, q, burst] = [0, 1, 2].map(|i| u64::try_from(band.items()[i].int()).unwrap());
            let rate = Rate::new(p * 1_000, q).expect("a positive rate");
            key.specs
                .push(BandSpec::new(rate, burst).expect("a band the core holds"));
            // The script's unit is 1 / (q * 10^6) token.
            key.scale
                .push(rate.units_per_token() / (u128::from(q) * 1_000_000));
        }
        key
    }

    /// The key's balances as the script reads its hash: field `i` (1-based) in script units,
    /// capped at the burst, a band missing read as full; a new key's `initial` tokens (-1: full),
    /// not anchored yet.
    fn read(&self, before: &Json, initial: i128) -> Balances {
        if before == &Json::Null {
            return Balances::new(&self.specs, u64::try_from(initial).ok(), None);
        }
        let settled = int(before.field("t"));
        let balances: Vec<Balance> = (0..self.specs.len())
            .map(|i| {
                let capacity = self.specs[i].capacity_units();
                let stored = before.get(&(i + 1).to_string()).map(int::<u128>);
                Balance {
                    units: stored.map_or(capacity, |units| (units * self.scale[i]).min(capacity)),
                    settled_at: Some(settled),
                }
            })
            .collect();
        balances.into()
    }

    /// The bands brought to one settlement point, the latest of theirs: the others settled
    /// forward to it; if they stood at different points, the bands already there emptied (see
    /// the module's docs). Returns that point.
    fn one_point(&self, balances: &mut Balances) -> i64 {
        let points = || balances.iter().filter_map(|balance| balance.settled_at);
        let latest = points().max().expect("settled by the call");
        let spread = points().any(|point| point != latest);
        for (spec, balance) in self.specs.iter().zip(balances.iter_mut()) {
            if spread && balance.settled_at == Some(latest) {
                balance.units = 0;
            }
            let (per_tick, capacity) = (spec.rate.units_per_ns(), spec.capacity_units());
            *balance = settle(*balance, per_tick, capacity, latest);
        }
        latest
    }
}

/// A number of the file, as the integer type it stands for.
fn int<T: TryFrom<i128>>(value: &Json) -> T {
    T::try_from(value.int()).unwrap_or_else(|_| panic!("{value:?} is out of range"))
}

/// The clock the core's refund is decided with: `now`, when the key is settled ahead of it at
/// the point a reservation or a give-back left (field `w`), so that the refund is forfeited;
/// else the key's settlement point or `now`, whichever is later, so that it is not.
fn clock_for_refund(before: &Json, now: i64) -> i64 {
    let field = |name: &str| before.get(name).map(int::<i64>);
    match (field("t"), field("w")) {
        (Some(settled), Some(booked)) if booked == settled && settled > now => now,
        (Some(settled), _) => settled.max(now),
        _ => now,
    }
}

/// One call, as the script receives it.
struct Call {
    op: i64,
    /// Tokens; for a settlement, the actual cost less the reserved one, which may be negative.
    n: i128,
    now: i64,
    least_ms: i128,
    extra: i128,
}

/// What the core decided: the outcome, the wait as the script counts it (from the key's
/// settlement point; the core counts from now), a reservation's moment, and whether the call
/// leaves field `w`.
#[derive(Default)]
struct Decided {
    outcome: i128,
    wait: i128,
    moment: Option<i128>,
    booked: bool,
}

/// Make the call on `balances`, through the core.
fn decide(key: &Key, balances: &mut Balances, call: &Call, before: &Json) -> Decided {
    let (specs, now) = (&key.specs[..], call.now);
    let n = u64::try_from(call.n.unsigned_abs()).expect("a count of tokens");
    let behind = i128::from(
        balances
            .first()
            .and_then(|b| b.settled_at)
            .map_or(0, |at| (at - now).max(0)),
    );
    let denied = |after: u128| Decided {
        outcome: DENIED,
        wait: i128::try_from(after).unwrap() - behind,
        ..Decided::default()
    };
    let decision = |decision: Decision| match decision {
        Decision::Allowed => Decided::default(),
        Decision::Wait(after) => denied(after),
        Decision::Never => Decided {
            outcome: NEVER,
            ..Decided::default()
        },
    };
    match call.op {
        TAKE | MANY | TAKE_WITH_LEVELS => decision(balances.acquire(specs, n, now)),
        PEEK => decision(balances.peek(specs, n, now)),
        AVAILABLE => {
            balances.available_at(specs, now);
            Decided::default()
        }
        REFUND => {
            balances.refund(specs, n, now, clock_for_refund(before, now));
            Decided::default()
        }
        RESERVE => {
            let longest = u128::try_from(call.extra).unwrap_or(u128::MAX);
            let mut tried = balances.clone();
            let reservation = tried.reserve(specs, n, now, longest);
            if let Reservation::Taken { after_ns } = reservation {
                if i128::from(now) + i128::try_from(after_ns).unwrap() > i128::from(LAST_US) {
                    // Beyond the script's bound: TOO LATE, nothing taken, the key settled.
                    balances.reserve(specs, n, now, 0);
                    return denied(after_ns);
                }
            }
            *balances = tried;
            match reservation {
                Reservation::Never => decision(Decision::Never),
                Reservation::TooLate(after_ns) => denied(after_ns),
                Reservation::Taken { after_ns } => {
                    let wait = i128::try_from(after_ns).unwrap();
                    Decided {
                        wait,
                        moment: (wait > 0).then(|| i128::from(now) + wait),
                        booked: true,
                        ..Decided::default()
                    }
                }
            }
        }
        SETTLE if call.n < 0 => {
            // Less than reserved: a refund of the difference, under the refund's clock.
            balances.settle_cost(specs, n, 0, now, clock_for_refund(before, now));
            Decided::default()
        }
        SETTLE => {
            // More: the difference owed; the clock does not matter to an overage.
            balances.settle_cost(specs, 0, n, now, now);
            Decided {
                booked: n > 0,
                ..Decided::default()
            }
        }
        GIVE_BACK => {
            balances.give_back(specs, n, now, i64::try_from(call.extra).unwrap());
            Decided {
                booked: true,
                ..Decided::default()
            }
        }
        op => panic!("op {op} is not a one-key op"),
    }
}

/// What the script must answer to `case`, worked out by the core: its reply, the hash after
/// the call, and the TTL the call sets (`null`: none set, the key left as it was, or absent).
fn work_out(case: &Json) -> Vec<(&'static str, Json)> {
    let key = Key::new(case.field("bands").items());
    let request = case.field("request");
    let call = Call {
        op: int(request.field("op")),
        n: request.field("n").int(),
        now: int(request.field("now")),
        least_ms: request.field("least_ms").int(),
        extra: request.field("extra").int(),
    };
    let before = case.field("before");
    let mut balances = key.read(before, request.field("initial").int());
    let decided = decide(&key, &mut balances, &call, before);
    let settled = key.one_point(&mut balances);
    let (specs, now) = (&key.specs[..], call.now);
    let behind = i128::from((settled - now).max(0));
    let remaining = i128::try_from(balances.available_at(specs, now)).unwrap();

    let mut reply = match (decided.outcome, decided.moment) {
        (DENIED, _) => Json::ints(&[DENIED, remaining, behind, decided.wait]),
        (_, Some(at)) => Json::ints(&[ALLOWED, remaining, decided.wait, at]),
        (outcome, None) => Json::Int(4 * remaining + outcome),
    };
    if call.op == MANY {
        reply = Json::Str(decided.outcome.to_string());
    } else if call.op == TAKE_WITH_LEVELS {
        let mut leveled = vec![reply, Json::Int(behind)];
        for level in balances.levels_at(specs, now) {
            leveled.push(Json::Int(i128::try_from(level.tokens).unwrap()));
            leveled.push(Json::Int(i128::try_from(level.next_ns).unwrap() - behind));
        }
        reply = Json::Arr(leveled);
    }
    let (after, ttl_ms) = stored(&key, &balances, &call, before, settled, decided.booked);
    vec![("reply", reply), ("after", after), ("ttl_ms", ttl_ms)]
}

/// The hash after the call, and the TTL the call set: written by every call that changes a
/// balance, and by a read of a new key (its anchor), unless the key is to be kept for 0 ms.
fn stored(
    key: &Key,
    balances: &Balances,
    call: &Call,
    before: &Json,
    settled: i64,
    booked: bool,
) -> (Json, Json) {
    let writes = !matches!(call.op, PEEK | AVAILABLE);
    if !writes && *before != Json::Null {
        return (before.clone(), Json::Null);
    }
    let full_in = i128::from(balances.fresh_from(&key.specs)) - i128::from(call.now);
    let per_ms = i128::from(MICROS_PER_MS);
    let ttl_ms = ((full_in + per_ms - 1).div_euclid(per_ms)).max(call.least_ms);
    if ttl_ms <= 0 {
        return (Json::Null, Json::Null);
    }
    let mut after = match before {
        Json::Null => Json::Obj(Vec::new()),
        before => before.clone(),
    };
    after.set("t", Json::Int(i128::from(settled)));
    for (i, balance) in balances.iter().enumerate() {
        assert_eq!(balance.units % key.scale[i], 0, "whole script units");
        let units = i128::try_from(balance.units / key.scale[i]).unwrap();
        after.set(&(i + 1).to_string(), Json::Int(units));
    }
    if booked {
        after.set("w", Json::Int(i128::from(settled)));
    }
    (after, Json::Int(ttl_ms))
}

// -- JSON, as much as the vectors use: null, integers, strings without escapes, arrays, objects.

#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Int(i128),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn parse(text: &str) -> Self {
        let mut rest = text.trim_start();
        let value = Self::value(&mut rest);
        assert!(rest.trim().is_empty(), "text after the JSON value");
        value
    }

    fn value(rest: &mut &str) -> Self {
        let skip = |rest: &mut &str, n: usize| *rest = rest[n..].trim_start();
        let value = match rest.as_bytes()[0] {
            b'n' => {
                skip(rest, "null".len());
                return Self::Null;
            }
            b'"' => {
                let end = rest[1..].find('"').expect("a closing quote") + 1;
                let text = rest[1..end].to_owned();
                assert!(!text.contains('\\'), "no escapes in the vectors");
                skip(rest, end + 1);
                return Self::Str(text);
            }
            b'[' => {
                skip(rest, 1);
                let mut items = Vec::new();
                while !rest.starts_with(']') {
                    items.push(Self::value(rest));
                    if rest.starts_with(',') {
                        skip(rest, 1);
                    }
                }
                Self::Arr(items)
            }
            b'{' => {
                skip(rest, 1);
                let mut fields = Vec::new();
                while !rest.starts_with('}') {
                    let Self::Str(name) = Self::value(rest) else {
                        panic!("an object's field is named by a string")
                    };
                    assert!(rest.starts_with(':'), "a colon after {name}");
                    skip(rest, 1);
                    fields.push((name, Self::value(rest)));
                    if rest.starts_with(',') {
                        skip(rest, 1);
                    }
                }
                Self::Obj(fields)
            }
            _ => {
                let end = rest
                    .find(|c: char| !(c == '-' || c.is_ascii_digit()))
                    .unwrap_or(rest.len());
                let number = rest[..end].parse().expect("an integer");
                skip(rest, end);
                return Self::Int(number);
            }
        };
        skip(rest, 1); // the closing bracket or brace
        value
    }

    fn ints(values: &[i128]) -> Self {
        Self::Arr(values.iter().copied().map(Self::Int).collect())
    }

    fn get(&self, name: &str) -> Option<&Self> {
        let Self::Obj(fields) = self else { return None };
        fields
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value)
    }

    fn field(&self, name: &str) -> &Self {
        self.get(name).unwrap_or_else(|| panic!("no field {name}"))
    }

    fn field_mut(&mut self, name: &str) -> &mut Self {
        let Self::Obj(fields) = self else {
            panic!("not an object")
        };
        let found = fields.iter_mut().find(|(field, _)| field == name);
        &mut found.unwrap_or_else(|| panic!("no field {name}")).1
    }

    fn set(&mut self, name: &str, value: Self) {
        let Self::Obj(fields) = self else {
            panic!("not an object")
        };
        match fields.iter_mut().find(|(field, _)| field == name) {
            Some(field) => field.1 = value,
            None => fields.push((name.to_owned(), value)),
        }
    }

    fn items(&self) -> &[Self] {
        let Self::Arr(items) = self else {
            panic!("not an array")
        };
        items
    }

    fn items_mut(&mut self) -> &mut [Self] {
        let Self::Arr(items) = self else {
            panic!("not an array")
        };
        items
    }

    fn int(&self) -> i128 {
        let Self::Int(value) = self else {
            panic!("not an integer: {self:?}")
        };
        *value
    }

    fn text(&self) -> &str {
        let Self::Str(text) = self else {
            panic!("not a string")
        };
        text
    }

    /// The file's layout: the top object and each case one field a line, anything inside a
    /// case's field on that line.
    fn pretty(&self) -> String {
        let mut out = String::from("{\n");
        let Self::Obj(fields) = self else {
            panic!("not an object")
        };
        for (i, (name, value)) in fields.iter().enumerate() {
            let comma = if i + 1 < fields.len() { "," } else { "" };
            if let Self::Arr(cases) = value {
                let _ = writeln!(out, "  \"{name}\": [");
                for (j, case) in cases.iter().enumerate() {
                    let Self::Obj(case_fields) = case else {
                        panic!("a case is an object")
                    };
                    out.push_str("    {\n");
                    for (k, (field, value)) in case_fields.iter().enumerate() {
                        let comma = if k + 1 < case_fields.len() { "," } else { "" };
                        let _ = writeln!(out, "      \"{field}\": {}{comma}", value.compact());
                    }
                    let comma = if j + 1 < cases.len() { "," } else { "" };
                    let _ = writeln!(out, "    }}{comma}");
                }
                let _ = writeln!(out, "  ]{comma}");
            } else {
                let _ = writeln!(out, "  \"{name}\": {}{comma}", value.compact());
            }
        }
        out.push_str("}\n");
        out
    }

    fn compact(&self) -> String {
        match self {
            Self::Null => "null".to_owned(),
            Self::Int(value) => value.to_string(),
            Self::Str(text) => format!("\"{text}\""),
            Self::Arr(items) => {
                let items: Vec<String> = items.iter().map(Self::compact).collect();
                format!("[{}]", items.join(", "))
            }
            Self::Obj(fields) => {
                let fields: Vec<String> = fields
                    .iter()
                    .map(|(name, value)| format!("\"{name}\": {}", value.compact()))
                    .collect();
                format!("{{{}}}", fields.join(", "))
            }
        }
    }
}
