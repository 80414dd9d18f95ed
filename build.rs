//! The PyO3 glue learns, as PyO3's own crates do, which interpreter it is built for: a
//! free-threaded build (`Py_GIL_DISABLED`) must not rely on the interpreter's lock.
fn main() {
    #[cfg(feature = "python")]
    pyo3_build_config::use_pyo3_cfgs();
}
