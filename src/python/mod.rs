//! The PyO3 glue: the `protocol_in_code._native` extension module.
//!
//! Each file adapts one core module to Python; every decision is the core's, and no file here
//! holds limiting arithmetic of its own. The Python package in `python/protocol_in_code/qos/`
//! re-exports these objects under the course's module names.
//!
//! * [`number`]: Python numbers as a core `Quantity`, with Python's arithmetic.
//! * [`record`]: dataclass behaviour (repr, ==, hash, frozenness, pickle) for native classes, and
//!   the thread-safe fields of the mutable ones.
//! * [`enums`]: the course's `(str, Enum)` outcome classes.
//! * [`args`], [`clock`]: arguments and times checked at the door of the exact modules;
//!   [`buffers`]: whole traces of integers in, codes out.
//! * [`refill`], [`token_bucket`], [`leaky_bucket`], [`classes`], [`shaper_loop`]: the course's
//!   modules.
//! * [`config`]: `Band`, and a limit's configuration read into `core::exact::config`, with
//!   the one mapping of its errors to Python's.
//! * [`surface`]: the methods every limiter class shares (`try_acquire`, `check`, `acquire`...),
//!   written once over the core's `Limit`; [`decision`]: their answer, `Decision`.
//! * [`limiter`]: the exact real-clock limiter built on `core::exact`.
//! * [`keyed`]: one limiter per key, in bounded memory; [`keys`]: Python objects as its keys.
//! * [`meter`]: the three-colour meters of `core::meter`, per packet and per trace.
//! * [`shared`]: the limiters whose table the processes of one host share, on
//!   `core::exact::shared` and the mapped file of `shared_memory`.
//! * [`seats`]: in-flight limits, `core::seats` under a lock, with their waiting threads and
//!   tasks, and the leases of their holders.
//! * [`stack`]: one request under several in-process limiters, taken from all or none.
//! * [`waiting`]: the core's deadline loop of every blocking `acquire`, sleeping with the
//!   interpreter released and answering signals.
//! * [`errors`]: the one place the core's errors become Python exceptions.
//! * [`fork`]: what `os.fork()` does to limiters, and the hooks that keep a child working.

// The glue has no `unsafe` of its own: every entry point, conversion and clock read goes through
// PyO3 or a safe crate. (What PyO3's macros expand to is PyO3's to answer for.)
#![deny(unsafe_code)]

mod args;
mod buffers;
mod classes;
mod clock;
mod config;
mod decision;
mod enums;
mod errors;
mod fork;
mod keyed;
mod keys;
mod leaky_bucket;
mod limiter;
mod meter;
mod number;
mod record;
mod refill;
mod seats;
mod shaper_loop;
mod shared;
mod stack;
mod surface;
mod token_bucket;
mod waiting;

use pyo3::prelude::*;

// The module needs the interpreter's lock: the fork hooks (`fork`) count on a thread that holds
// it not being interrupted between two Rust statements, which only a build with that lock
// promises. Nothing here has been made or tested for a free-threaded build.
#[pymodule(gil_used = true)]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    fork::register(module, &[seats::forget_owners_in_child])?;
    // refill
    module.add_class::<refill::RefillResult>()?;
    add_function(
        module,
        wrap_pyfunction!(refill::compute_refill, module)?,
        "refill",
    )?;
    // token_bucket
    module.add("ConsumeOutcome", token_bucket::CONSUME_OUTCOME.class(py)?)?;
    module.add_class::<token_bucket::ConsumeResult>()?;
    module.add_class::<token_bucket::TokenBucket>()?;
    add_function(
        module,
        wrap_pyfunction!(token_bucket::try_consume, module)?,
        "token_bucket",
    )?;
    // leaky_bucket
    module.add("OfferOutcome", leaky_bucket::OFFER_OUTCOME.class(py)?)?;
    module.add_class::<leaky_bucket::LeakyBucket>()?;
    module.add_class::<leaky_bucket::OfferResult>()?;
    add_function(
        module,
        wrap_pyfunction!(leaky_bucket::leak, module)?,
        "leaky_bucket",
    )?;
    add_function(
        module,
        wrap_pyfunction!(leaky_bucket::offer, module)?,
        "leaky_bucket",
    )?;
    // classes
    module.add("ValidationOutcome", classes::VALIDATION_OUTCOME.class(py)?)?;
    module.add_class::<classes::TrafficClass>()?;
    module.add_class::<classes::ClassTree>()?;
    module.add_class::<classes::ValidationResult>()?;
    add_function(
        module,
        wrap_pyfunction!(classes::validate_tree, module)?,
        "classes",
    )?;
    add_function(
        module,
        wrap_pyfunction!(classes::borrowable, module)?,
        "classes",
    )?;
    // shaper_loop
    module.add_class::<shaper_loop::EnqueueResult>()?;
    module.add_class::<shaper_loop::ToyShaper>()?;
    add_function(
        module,
        wrap_pyfunction!(shaper_loop::run_contention, module)?,
        "shaper_loop",
    )?;
    // limiter: past the toy
    module.add("LimitOutcome", decision::LIMIT_OUTCOME.class(py)?)?;
    module.add_class::<decision::Decision>()?;
    module.add_class::<stack::Stacked>()?;
    module.add_class::<config::Band>()?;
    module.add_function(wrap_pyfunction!(config::canonical, module)?)?;
    module.add_function(wrap_pyfunction!(config::read_plans_py, module)?)?;
    module.add_class::<limiter::RateLimiter>()?;
    module.add_function(wrap_pyfunction!(args::timeout_seconds, module)?)?;
    module.add_function(wrap_pyfunction!(stack::check_together, module)?)?;
    module.add_function(wrap_pyfunction!(stack::combined_py, module)?)?;
    module.add_function(wrap_pyfunction!(stack::of_this_host_py, module)?)?;
    module.add_function(wrap_pyfunction!(waiting::wait_for_turn_py, module)?)?;
    module.add_function(wrap_pyfunction!(
        limiter::only_the_rate_by_position_py,
        module
    )?)?;
    // keyed: one limiter per client
    module.add_class::<surface::tables::KeyedStats>()?;
    module.add_class::<keyed::KeyedRateLimiter>()?;
    module.add_class::<keys::KeyDigest>()?;
    // shared: one limit for the processes of one host
    module.add_class::<shared::SharedRateLimiter>()?;
    module.add_class::<shared::SharedKeyedRateLimiter>()?;
    module.add_function(wrap_pyfunction!(shared::host_secret_py, module)?)?;
    module.add_function(wrap_pyfunction!(shared::host_folder_py, module)?)?;
    // seats: how many at once
    module.add_class::<seats::ConcurrencyLimiter>()?;
    module.add_class::<seats::KeyedConcurrencyLimiter>()?;
    module.add_class::<seats::Lease>()?;
    module.add_class::<seats::Waiter>()?;
    module.add_class::<seats::SharedConcurrencyLimiter>()?;
    module.add_class::<seats::SharedKeyedConcurrencyLimiter>()?;
    module.add_class::<seats::SharedLease>()?;
    module.add_class::<seats::SharedWaiter>()?;
    // meter: the RFC three-colour markers
    module.add("Color", meter::COLOR.class(py)?)?;
    module.add_class::<meter::SingleRateMeter>()?;
    module.add_class::<meter::TwoRateMeter>()?;
    module.add_class::<meter::ExcessRateMeter>()?;
    Ok(())
}

/// Export `function` from the extension, reporting the course module `qos.<course_module>` as
/// its `__module__`, as the course's own function would.
fn add_function(
    module: &Bound<'_, PyModule>,
    function: Bound<'_, pyo3::types::PyCFunction>,
    course_module: &str,
) -> PyResult<()> {
    function.setattr(
        "__module__",
        format!("protocol_in_code.qos.{course_module}"),
    )?;
    module.add_function(function)
}
