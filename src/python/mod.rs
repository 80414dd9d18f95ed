//! The PyO3 glue: the `protocol_in_code._native` extension module.
//!
//! Each file adapts one core module to Python and nothing more; the Python package in
//! `python/protocol_in_code/qos/` re-exports these objects under the course's module names.
//!
//! * [`number`]: Python numbers as a core `Quantity`, with Python's arithmetic.
//! * [`record`]: dataclass behaviour (repr, ==, hash, frozenness, pickle) for native classes.
//! * [`enums`]: the course's `(str, Enum)` outcome classes.
//! * [`fastcall`]: keyword arguments bound by identity, for the calls where that matters.
//! * [`refill`], [`token_bucket`]: the lesson's two modules.

mod enums;
mod fastcall;
mod number;
mod record;
mod refill;
mod token_bucket;

use pyo3::prelude::*;

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    module.add_class::<refill::RefillResult>()?;
    module.add_function(refill::COMPUTE_REFILL.function(py, "protocol_in_code.qos.refill")?)?;
    module.add(
        "ConsumeOutcome",
        token_bucket::consume_outcome(py)?.class(py),
    )?;
    module.add_class::<token_bucket::ConsumeResult>()?;
    module.add_class::<token_bucket::TokenBucket>()?;
    module.add_function(wrap_pyfunction!(token_bucket::try_consume, module)?)?;
    Ok(())
}
