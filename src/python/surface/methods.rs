//! The `#[pymethods]` every limiter class shares, written once, in one macro.
//!
//! PyO3 makes a class's methods from one `#[pymethods]` block, and a generic block cannot be
//! one, so [`limiter_methods!`] writes each class's block: every shared method, each a single
//! call of its body in [`super`], then the class's own methods, as given. A method's doc comment
//! here is its Python docstring, and its `text_signature` what `inspect.signature` and the stubs
//! see. Two forms:
//!
//! * `limiter_methods! { one key: RateLimiter { ... } }`: a limiter of one key, whose calls take
//!   `n` first (`try_acquire(n=1, now_ns=None)`), which is also a decorator and a context
//!   manager;
//! * `limiter_methods! { keyed: KeyedRateLimiter { ... } }`: a keyed limiter, whose calls take
//!   the key first and `plan=` last, with its table's keys, counts, plans and traces.
//!
//! The expansion names PyO3's prelude items (`Python`, `Bound`, `PyAny`, `PyResult`) as the
//! class's file imports them.

/// Write a limiter class's `#[pymethods]`: the shared methods, then `own` (see the module).
macro_rules! limiter_methods {
    (one key: $class:ty { $($own:tt)* }) => {
        #[pymethods]
        impl $class {
            /// Take `n` tokens if every band holds them; True if taken, False if not (nothing
            /// taken). Raises ValueError if `n` exceeds a band's burst, since no wait would
            /// ever be enough.
            #[pyo3(
                signature = (n = None, now_ns = None),
                text_signature = "($self, n=1, now_ns=None)"
            )]
            fn try_acquire(
                &self,
                py: Python<'_>,
                n: Option<$crate::python::args::N>,
                now_ns: Option<$crate::python::args::NowNs>,
            ) -> PyResult<bool> {
                $crate::python::surface::try_acquire(self, py, (), None, n, now_ns)
            }

            /// Take `n` tokens if every band holds them, and say exactly what happened: a
            /// Decision that is ALLOWED (taken), DENIED with the exact wait_ns until the same
            /// request would pass (nothing taken), or NEVER (n exceeds a band's burst).
            #[pyo3(
                signature = (n = None, now_ns = None),
                text_signature = "($self, n=1, now_ns=None)"
            )]
            fn check<'py>(
                &self,
                py: Python<'py>,
                n: Option<$crate::python::args::N>,
                now_ns: Option<$crate::python::args::NowNs>,
            ) -> PyResult<Bound<'py, $crate::python::decision::Decision>> {
                $crate::python::surface::check(self, py, (), None, n, now_ns)
            }

            /// What check(n) would answer now, taking nothing.
            #[pyo3(
                signature = (n = None, now_ns = None),
                text_signature = "($self, n=1, now_ns=None)"
            )]
            fn peek<'py>(
                &self,
                py: Python<'py>,
                n: Option<$crate::python::args::N>,
                now_ns: Option<$crate::python::args::NowNs>,
            ) -> PyResult<Bound<'py, $crate::python::decision::Decision>> {
                $crate::python::surface::peek(self, py, (), None, n, now_ns)
            }

            /// Give `n` tokens back to every band (each capped at its burst).
            #[pyo3(
                signature = (n = None, now_ns = None),
                text_signature = "($self, n=1, now_ns=None)"
            )]
            fn refund(
                &self,
                py: Python<'_>,
                n: Option<$crate::python::args::N>,
                now_ns: Option<$crate::python::args::NowNs>,
            ) -> PyResult<()> {
                $crate::python::surface::refund(self, py, (), None, n, now_ns)
            }

            /// Whole tokens every band holds now: how many 1-token requests would pass at
            /// once.
            #[pyo3(signature = (now_ns = None))]
            fn available(
                &self,
                py: Python<'_>,
                now_ns: Option<$crate::python::args::NowNs>,
            ) -> PyResult<u128> {
                $crate::python::surface::available(self, py, (), None, now_ns)
            }

            /// Each band's whole tokens now, and the nanoseconds until it can give one more
            /// (for a full band, once it is spent from): `[(tokens, next_ns), ...]` in the
            /// order of `bands`. Until `next_ns` has passed, no band can give more than its
            /// `tokens`. Takes nothing.
            #[pyo3(signature = (now_ns = None))]
            fn band_levels(
                &self,
                py: Python<'_>,
                now_ns: Option<$crate::python::args::NowNs>,
            ) -> PyResult<Vec<(u128, u128)>> {
                $crate::python::surface::band_levels(self, py, (), None, now_ns)
            }

            /// Take `n` tokens, sleeping (without holding the interpreter) until every band
            /// holds them. Returns True once taken, or False at once if they would only be
            /// there after `timeout` seconds. Raises ValueError if `n` exceeds a band's burst,
            /// since no wait would ever be enough.
            ///
            /// Waiters are served in the order they arrive (in every process, for a shared
            /// limiter): each reserves its tokens at the moment they will be there, and
            /// whoever comes later queues behind it, so a large request is never starved by
            /// small ones. Ctrl-C ends the wait with KeyboardInterrupt (signals are looked at
            /// every 50 ms), and the waiter gives its tokens back. The sleep assumes the
            /// limiter's clock keeps pace with real time, as a monotonic clock does.
            #[pyo3(
                signature = (n = None, timeout = None),
                text_signature = "($self, n=1, timeout=None)"
            )]
            fn acquire(
                &self,
                py: Python<'_>,
                n: Option<$crate::python::args::N>,
                timeout: Option<$crate::python::args::Timeout>,
            ) -> PyResult<bool> {
                $crate::python::surface::acquire(self, py, (), None, n, timeout)
            }

            /// Reserve `n` tokens as `acquire` does, without sleeping: the time, on the
            /// limiter's clock, from which they are the caller's, or None, taking nothing, if
            /// that is more than `timeout` seconds away. Raises ValueError if `n` exceeds a
            /// band's burst. For `acquire_async`, which awaits that time (see `_until`) and
            /// gives the tokens back (`_give_back`) if it is cancelled.
            #[pyo3(signature = (n = None, timeout = None))]
            fn _reserve(
                &self,
                py: Python<'_>,
                n: Option<$crate::python::args::N>,
                timeout: Option<$crate::python::args::Timeout>,
            ) -> PyResult<Option<i64>> {
                $crate::python::surface::reserve(self, py, (), None, n, timeout)
                    .map(|reserved| reserved.at())
            }

            /// Give back `n` tokens that `_reserve` booked for `at_ns` and that were not used
            /// (a cancelled waiter): undone if no waiter queued behind them, else forfeited,
            /// so nobody is ever let in before a turn already promised.
            fn _give_back(
                &self,
                py: Python<'_>,
                n: $crate::python::args::N,
                at_ns: i64,
            ) -> PyResult<()> {
                $crate::python::surface::give_back(self, py, (), None, n, at_ns)
            }

            /// Nanoseconds from the limiter's clock until `at_ns` (0 once it is there).
            fn _until(&self, py: Python<'_>, at_ns: i64) -> PyResult<u128> {
                $crate::python::surface::PyLimit::clock(self).until(py, at_ns)
            }

            /// Take `n` tokens, awaiting (asyncio) until every band holds them. True once
            /// taken, False at once if they would only be there after `timeout` seconds;
            /// ValueError if `n` exceeds a band's burst. Served in order of arrival, as
            /// `acquire`; a cancelled waiter gives its tokens back.
            #[pyo3(
                signature = (n = None, timeout = None),
                text_signature = "($self, n=1, timeout=None)"
            )]
            fn acquire_async<'py>(
                slf: &Bound<'py, Self>,
                n: Option<Bound<'py, PyAny>>,
                timeout: Option<Bound<'py, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $crate::python::surface::acquire_async(
                    slf.get(),
                    slf.as_any(),
                    None,
                    None,
                    n,
                    timeout,
                )
            }

            /// The bands, each a `Band` as it was written.
            #[getter]
            fn bands<'py>(
                &self,
                py: Python<'py>,
            ) -> PyResult<Bound<'py, pyo3::types::PyTuple>> {
                $crate::python::surface::bands(self, py)
            }

            /// Use as a decorator: `function` takes one token each time its body starts,
            /// waiting as acquire() does for a def or a generator, as acquire_async() does for
            /// an async def or an async generator. A generator's token is taken at its first
            /// iteration, a coroutine's when it is first awaited.
            fn __call__<'py>(
                slf: &Bound<'py, Self>,
                function: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $crate::python::surface::conveniences(slf.py())?
                    .call_method1("decorate", (slf, function))
            }

            /// `with limiter:` takes one token, waiting as acquire() does.
            fn __enter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
                slf.call_method0("acquire")?;
                Ok(slf.clone())
            }

            /// Leaving the block gives nothing back: the token was spent.
            #[pyo3(signature = (*_exc_info))]
            fn __exit__(_slf: &Bound<'_, Self>, _exc_info: &Bound<'_, pyo3::types::PyTuple>) {}

            /// `async with limiter:` takes one token, awaiting as acquire_async() does.
            fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
                $crate::python::surface::conveniences(slf.py())?
                    .call_method1("enter_async", (slf,))
            }

            #[pyo3(signature = (*_exc_info))]
            fn __aexit__<'py>(
                slf: &Bound<'py, Self>,
                _exc_info: &Bound<'py, pyo3::types::PyTuple>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $crate::python::surface::conveniences(slf.py())?.call_method0("exit_async")
            }

            $($own)*
        }
    };

    (keyed: $class:ty { $($own:tt)* }) => {
        #[pymethods]
        impl $class {
            /// Take `n` tokens for `key` if its every band holds them; True if taken, False if
            /// not (denied, or refused because the table is full). Raises ValueError if `n`
            /// exceeds a band's burst, since no wait would ever be enough.
            #[pyo3(
                signature = (key, n = None, now_ns = None, *, plan = None),
                text_signature = "($self, key, n=1, now_ns=None, *, plan=None)"
            )]
            fn try_acquire(
                &self,
                py: Python<'_>,
                key: &Bound<'_, PyAny>,
                n: Option<$crate::python::args::N>,
                now_ns: Option<$crate::python::args::NowNs>,
                plan: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<bool> {
                $crate::python::surface::try_acquire(self, py, key, plan, n, now_ns)
            }

            /// Take `n` tokens for `key` if allowed, and say exactly what happened: a Decision
            /// that is ALLOWED, DENIED (with the exact wait_ns), NEVER (n exceeds a burst) or
            /// REFUSED (a new key and a full table; wait_ns says when room may appear).
            #[pyo3(
                signature = (key, n = None, now_ns = None, *, plan = None),
                text_signature = "($self, key, n=1, now_ns=None, *, plan=None)"
            )]
            fn check<'py>(
                &self,
                py: Python<'py>,
                key: &Bound<'_, PyAny>,
                n: Option<$crate::python::args::N>,
                now_ns: Option<$crate::python::args::NowNs>,
                plan: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Bound<'py, $crate::python::decision::Decision>> {
                $crate::python::surface::check(self, py, key, plan, n, now_ns)
            }

            /// What check(key, n) would answer now, taking nothing.
            #[pyo3(
                signature = (key, n = None, now_ns = None, *, plan = None),
                text_signature = "($self, key, n=1, now_ns=None, *, plan=None)"
            )]
            fn peek<'py>(
                &self,
                py: Python<'py>,
                key: &Bound<'_, PyAny>,
                n: Option<$crate::python::args::N>,
                now_ns: Option<$crate::python::args::NowNs>,
                plan: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Bound<'py, $crate::python::decision::Decision>> {
                $crate::python::surface::peek(self, py, key, plan, n, now_ns)
            }

            /// Give `n` tokens back to `key` (each band capped at its burst; a key not
            /// remembered is already full).
            #[pyo3(
                signature = (key, n = None, now_ns = None, *, plan = None),
                text_signature = "($self, key, n=1, now_ns=None, *, plan=None)"
            )]
            fn refund(
                &self,
                py: Python<'_>,
                key: &Bound<'_, PyAny>,
                n: Option<$crate::python::args::N>,
                now_ns: Option<$crate::python::args::NowNs>,
                plan: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<()> {
                $crate::python::surface::refund(self, py, key, plan, n, now_ns)
            }

            /// Whole tokens `key` holds now (every band's least).
            #[pyo3(signature = (key, now_ns = None, *, plan = None))]
            fn available(
                &self,
                py: Python<'_>,
                key: &Bound<'_, PyAny>,
                now_ns: Option<$crate::python::args::NowNs>,
                plan: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<u128> {
                $crate::python::surface::available(self, py, key, plan, now_ns)
            }

            /// Each band's whole tokens for `key` now, and the nanoseconds until it can give
            /// one more (for a full band, once it is spent from): `[(tokens, next_ns), ...]` in
            /// the order of `bands` (of `plan`'s, with plans). A key not remembered is full.
            /// Takes and stores nothing.
            #[pyo3(signature = (key, now_ns = None, *, plan = None))]
            fn band_levels(
                &self,
                py: Python<'_>,
                key: &Bound<'_, PyAny>,
                now_ns: Option<$crate::python::args::NowNs>,
                plan: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Vec<(u128, u128)>> {
                $crate::python::surface::band_levels(self, py, key, plan, now_ns)
            }

            /// Take `n` tokens for `key`, sleeping (without holding the interpreter) until
            /// allowed. True once taken, or False at once if they would only be there after
            /// `timeout` seconds; ValueError if `n` exceeds a burst.
            ///
            /// Waiters on one key are served in the order they arrive (in every process, for a
            /// shared limiter): each reserves its tokens at the moment they will be there, and
            /// whoever comes later queues behind it, so a large request is never starved by
            /// small ones. A refusal (a new key and a full table) sleeps until room may appear
            /// and tries again, within `timeout`. Ctrl-C ends the wait with KeyboardInterrupt
            /// (signals are looked at every 50 ms), and the waiter gives its tokens back. The
            /// sleep assumes the limiter's clock keeps pace with real time, as a monotonic
            /// clock does.
            #[pyo3(
                signature = (key, n = None, timeout = None, *, plan = None),
                text_signature = "($self, key, n=1, timeout=None, *, plan=None)"
            )]
            fn acquire(
                &self,
                py: Python<'_>,
                key: &Bound<'_, PyAny>,
                n: Option<$crate::python::args::N>,
                timeout: Option<$crate::python::args::Timeout>,
                plan: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<bool> {
                $crate::python::surface::acquire(self, py, key, plan, n, timeout)
            }

            /// Reserve `n` tokens for `key` as `acquire` does, without sleeping, for
            /// `acquire_async`: `(True, at_ns)` once reserved (the time, on the limiter's
            /// clock, from which they are the caller's), `(False, retry_ns)` if refused (a new
            /// key and a full table: try again after that long), or None, taking nothing, if
            /// they would only be there after `timeout` seconds. Raises ValueError if `n`
            /// exceeds a burst.
            #[pyo3(signature = (key, n = None, timeout = None, *, plan = None))]
            fn _reserve(
                &self,
                py: Python<'_>,
                key: &Bound<'_, PyAny>,
                n: Option<$crate::python::args::N>,
                timeout: Option<$crate::python::args::Timeout>,
                plan: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Option<(bool, i128)>> {
                $crate::python::surface::reserve(self, py, key, plan, n, timeout)
                    .map($crate::python::waiting::for_python)
            }

            /// Give back `n` tokens that `_reserve` booked for `key` at `at_ns` and that were
            /// not used (a cancelled waiter): undone if no waiter on the key queued behind
            /// them, else forfeited, so nobody is ever let in before a turn already promised.
            #[pyo3(signature = (key, n, at_ns, *, plan = None))]
            fn _give_back(
                &self,
                py: Python<'_>,
                key: &Bound<'_, PyAny>,
                n: $crate::python::args::N,
                at_ns: i64,
                plan: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<()> {
                $crate::python::surface::give_back(self, py, key, plan, n, at_ns)
            }

            /// Nanoseconds from the limiter's clock until `at_ns` (0 once it is there).
            fn _until(&self, py: Python<'_>, at_ns: i64) -> PyResult<u128> {
                $crate::python::surface::PyLimit::clock(self).until(py, at_ns)
            }

            /// Take `n` tokens for `key`, awaiting (asyncio) until allowed. True once taken,
            /// False at once if they would only be there after `timeout` seconds; ValueError if
            /// `n` exceeds a burst. Served in order of arrival, as `acquire`; a cancelled
            /// waiter gives its tokens back. A refusal (full table) awaits until room may
            /// appear, then tries again.
            #[pyo3(
                signature = (key, n = None, timeout = None, *, plan = None),
                text_signature = "($self, key, n=1, timeout=None, *, plan=None)"
            )]
            fn acquire_async<'py>(
                slf: &Bound<'py, Self>,
                key: Bound<'py, PyAny>,
                n: Option<Bound<'py, PyAny>>,
                timeout: Option<Bound<'py, PyAny>>,
                plan: Option<Bound<'py, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $crate::python::surface::acquire_async(
                    slf.get(),
                    slf.as_any(),
                    Some(key),
                    plan,
                    n,
                    timeout,
                )
            }

            /// Decide a whole trace of integer keys: request `i` is `n[i]` tokens (or `n` for
            /// each, 1 by default) for `keys[i]` at `now_ns[i]`. Returns an `array('B')` of
            /// outcome codes (0 allowed, 1 denied, 2 never, 3 refused), exactly what `check`
            /// would have said one call at a time, with the same effect. Any buffer of integers
            /// works (numpy, array.array, memoryview), or a list. A bad trace raises, naming
            /// the index, and changes nothing.
            #[pyo3(signature = (keys, now_ns, n = None, *, plan = None))]
            fn try_acquire_many<'py>(
                &self,
                py: Python<'py>,
                keys: &Bound<'py, PyAny>,
                now_ns: &Bound<'py, PyAny>,
                n: Option<&Bound<'py, PyAny>>,
                plan: Option<&Bound<'py, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $crate::python::surface::tables::try_acquire_many(self, py, keys, now_ns, n, plan)
            }

            /// What the table has done: a KeyedStats(allowed, denied, refused, forgotten); with
            /// plans, the sums over every plan's table.
            #[getter]
            fn stats(
                &self,
                py: Python<'_>,
            ) -> PyResult<$crate::python::surface::tables::KeyedStats> {
                $crate::python::surface::tables::stats(self, py)
            }

            /// The most keys the table holds at once (with plans, each plan's table; a shared
            /// table's max_keys rounded up to whole buckets).
            #[getter]
            fn max_keys(&self) -> usize {
                $crate::python::surface::tables::max_keys(self)
            }

            /// The bands every key is limited by, each a `Band` as it was written. A limiter
            /// with plans has no bands of its own: it raises AttributeError, pointing to
            /// `plans`.
            #[getter]
            fn bands<'py>(
                &self,
                py: Python<'py>,
            ) -> PyResult<Bound<'py, pyo3::types::PyTuple>> {
                $crate::python::surface::bands(self, py)
            }

            /// Each plan's bands, a dict of plan name to a tuple of `Band`; None without plans.
            #[getter]
            fn plans<'py>(
                &self,
                py: Python<'py>,
            ) -> PyResult<Option<Bound<'py, pyo3::types::PyDict>>> {
                $crate::python::surface::tables::plans(self, py)
            }

            /// How many keys are remembered now (with plans, in every plan's table: a key
            /// remembered under two plans counts twice).
            fn __len__(&self) -> PyResult<usize> {
                $crate::python::surface::tables::len(self)
            }

            /// Always True, however many keys are remembered. Without it an empty table would
            /// be false through `__len__`, and `limiter or KeyedRateLimiter(...)` would quietly
            /// put a new table in place of one that simply has no throttled client at the
            /// moment.
            fn __bool__(_slf: &Bound<'_, Self>) -> bool {
                true
            }

            /// Whether `key` is remembered now (a key not remembered is full); with plans,
            /// under any plan.
            fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
                $crate::python::surface::tables::contains(self, key)
            }

            $($own)*
        }
    };
}

pub(crate) use limiter_methods;
