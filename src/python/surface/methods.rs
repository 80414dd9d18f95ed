//! The `#[pymethods]` every limiter class shares, written once, in one macro.
//!
//! PyO3 makes a class's methods from one `#[pymethods]` block, and a generic block cannot be
//! one, so [`limiter_methods!`] writes each class's block: every shared method, each a single
//! call of its body in [`super`], then the class's own methods, as given. A method's doc comment
//! is its Python docstring, and its `text_signature` what `inspect.signature` and the stubs
//! see. Two forms:
//!
//! * `limiter_methods! { one key: RateLimiter { ... } }`: a limiter of one key, whose calls take
//!   `n` first (`try_acquire(n=1, now_ns=None)`), which is also a decorator and a context
//!   manager;
//! * `limiter_methods! { keyed: KeyedRateLimiter { ... } }`: a keyed limiter, whose calls take
//!   the key first and `plan=` last, with its table's keys, counts, plans and traces.
//!
//! Each shared method is written once, in the macro's inner `@shared` form. The two forms only
//! fill it in: the `key` and `plan` parameters (present for a keyed limiter, absent for one of
//! one key, where the bodies pass `()` and `None` for them), what `_reserve` answers, and each
//! method's docstring and `text_signature`, which say what the calls take and so differ
//! between the forms.
//!
//! The expansion names PyO3's prelude items (`Python`, `Bound`, `PyAny`, `PyResult`) as the
//! class's file imports them.

/// Write a limiter class's `#[pymethods]`: the shared methods, then `own` (see the module).
macro_rules! limiter_methods {
    (one key: $class:ty { $($own:tt)* }) => {
        $crate::python::surface::methods::limiter_methods! { @shared $class {
            key: [],
            plan: [],
            passed: ((), None, None),
            reserved: Option<i64> = $crate::core::exact::waiting::Reserved::at,
            try_acquire: {
                /// Take `n` tokens if every band holds them; True if taken, False if not (nothing
                /// taken). Raises ValueError if `n` exceeds a band's burst, since no wait would
                /// ever be enough.
            } "($self, n=1, now_ns=None)",
            check: {
                /// Take `n` tokens if every band holds them, and say exactly what happened: a
                /// Decision that is ALLOWED (taken), DENIED with the exact wait_ns until the same
                /// request would pass (nothing taken), or NEVER (n exceeds a band's burst).
            } "($self, n=1, now_ns=None)",
            peek: {
                /// What check(n) would answer now, taking nothing.
            } "($self, n=1, now_ns=None)",
            refund: {
                /// Give `n` tokens back to every band (each capped at its burst).
            } "($self, n=1, now_ns=None)",
            available: {
                /// Whole tokens every band holds now: how many 1-token requests would pass at
                /// once.
            },
            band_levels: {
                /// Each band's whole tokens now, and the nanoseconds until it can give one more
                /// (for a full band, once it is spent from): `[(tokens, next_ns), ...]` in the
                /// order of `bands`. Until `next_ns` has passed, no band can give more than its
                /// `tokens`. Takes nothing.
            },
            acquire: {
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
            } "($self, n=1, timeout=None)",
            _reserve: {
                /// Reserve `n` tokens as `acquire` does, without sleeping: the time, on the
                /// limiter's clock, from which they are the caller's, or None, taking nothing, if
                /// that is more than `timeout` seconds away. Raises ValueError if `n` exceeds a
                /// band's burst. For `acquire_async`, which awaits that time (see `_until`) and
                /// gives the tokens back (`_give_back`) if it is cancelled.
            },
            _give_back: {
                /// Give back `n` tokens that `_reserve` booked for `at_ns` and that were not used
                /// (a cancelled waiter): undone if no waiter queued behind them, else forfeited,
                /// so nobody is ever let in before a turn already promised.
            },
            acquire_async: {
                /// Take `n` tokens, awaiting (asyncio) until every band holds them. True once
                /// taken, False at once if they would only be there after `timeout` seconds;
                /// ValueError if `n` exceeds a band's burst. Served in order of arrival, as
                /// `acquire`; a cancelled waiter gives its tokens back.
            } "($self, n=1, timeout=None)",
            bands: {
                /// The bands, each a `Band` as it was written.
            },
        } {
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
        } }
    };

    (keyed: $class:ty { $($own:tt)* }) => {
        $crate::python::surface::methods::limiter_methods! { @shared $class {
            key: [key],
            plan: [plan],
            passed: (key, plan, Some(key)),
            reserved: Option<(bool, i128)> = $crate::python::waiting::for_python,
            try_acquire: {
                /// Take `n` tokens for `key` if its every band holds them; True if taken, False if
                /// not (denied, or refused because the table is full). Raises ValueError if `n`
                /// exceeds a band's burst, since no wait would ever be enough.
            } "($self, key, n=1, now_ns=None, *, plan=None)",
            check: {
                /// Take `n` tokens for `key` if allowed, and say exactly what happened: a Decision
                /// that is ALLOWED, DENIED (with the exact wait_ns), NEVER (n exceeds a burst) or
                /// REFUSED (a new key and a full table; wait_ns says when room may appear).
            } "($self, key, n=1, now_ns=None, *, plan=None)",
            peek: {
                /// What check(key, n) would answer now, taking nothing.
            } "($self, key, n=1, now_ns=None, *, plan=None)",
            refund: {
                /// Give `n` tokens back to `key` (each band capped at its burst; a key not
                /// remembered is already full).
            } "($self, key, n=1, now_ns=None, *, plan=None)",
            available: {
                /// Whole tokens `key` holds now (every band's least).
            },
            band_levels: {
                /// Each band's whole tokens for `key` now, and the nanoseconds until it can give
                /// one more (for a full band, once it is spent from): `[(tokens, next_ns), ...]` in
                /// the order of `bands` (of `plan`'s, with plans). A key not remembered is full.
                /// Takes and stores nothing.
            },
            acquire: {
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
            } "($self, key, n=1, timeout=None, *, plan=None)",
            _reserve: {
                /// Reserve `n` tokens for `key` as `acquire` does, without sleeping, for
                /// `acquire_async`: `(True, at_ns)` once reserved (the time, on the limiter's
                /// clock, from which they are the caller's), `(False, retry_ns)` if refused (a new
                /// key and a full table: try again after that long), or None, taking nothing, if
                /// they would only be there after `timeout` seconds. Raises ValueError if `n`
                /// exceeds a burst.
            },
            _give_back: {
                /// Give back `n` tokens that `_reserve` booked for `key` at `at_ns` and that were
                /// not used (a cancelled waiter): undone if no waiter on the key queued behind
                /// them, else forfeited, so nobody is ever let in before a turn already promised.
            },
            acquire_async: {
                /// Take `n` tokens for `key`, awaiting (asyncio) until allowed. True once taken,
                /// False at once if they would only be there after `timeout` seconds; ValueError if
                /// `n` exceeds a burst. Served in order of arrival, as `acquire`; a cancelled
                /// waiter gives its tokens back. A refusal (full table) awaits until room may
                /// appear, then tries again.
            } "($self, key, n=1, timeout=None, *, plan=None)",
            bands: {
                /// The bands every key is limited by, each a `Band` as it was written. A limiter
                /// with plans has no bands of its own: it raises AttributeError, pointing to
                /// `plans`.
            },
        } {
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
        } }
    };

    // Every shared method, written once. The two forms above differ only in what they hand
    // in: whether the calls take a `key` first and a `plan=` last (`key` and `plan` name those
    // parameters, or are empty), what the bodies pass for them (`passed`: key and plan for the
    // synchronous calls, then the key for `acquire_async`), what `_reserve` answers
    // (`reserved`, and the function that makes it from a `Reserved`), and each method's
    // docstring and `text_signature`.
    (@shared $class:ty {
        key: [$($key:ident)?],
        plan: [$($plan:ident)?],
        passed: ($key_arg:expr, $plan_arg:expr, $async_key:expr),
        reserved: $reserved:ty = $for_python:expr,
        try_acquire: { $(#[$try_acquire:meta])* } $try_acquire_text:literal,
        check: { $(#[$check:meta])* } $check_text:literal,
        peek: { $(#[$peek:meta])* } $peek_text:literal,
        refund: { $(#[$refund:meta])* } $refund_text:literal,
        available: { $(#[$available:meta])* },
        band_levels: { $(#[$band_levels:meta])* },
        acquire: { $(#[$acquire:meta])* } $acquire_text:literal,
        _reserve: { $(#[$reserve:meta])* },
        _give_back: { $(#[$give_back:meta])* },
        acquire_async: { $(#[$acquire_async:meta])* } $acquire_async_text:literal,
        bands: { $(#[$bands:meta])* },
    } { $($own:tt)* }) => {
        #[pymethods]
        impl $class {
            $(#[$try_acquire])*
            #[pyo3(
                signature = ($($key,)? n = None, now_ns = None $(, *, $plan = None)?),
                text_signature = $try_acquire_text
            )]
            fn try_acquire(
                &self,
                py: Python<'_>,
                $($key: &Bound<'_, PyAny>,)?
                n: Option<$crate::python::args::N>,
                now_ns: Option<$crate::python::args::NowNs>,
                $($plan: Option<&Bound<'_, PyAny>>,)?
            ) -> PyResult<bool> {
                $crate::python::surface::try_acquire(self, py, $key_arg, $plan_arg, n, now_ns)
            }

            $(#[$check])*
            #[pyo3(
                signature = ($($key,)? n = None, now_ns = None $(, *, $plan = None)?),
                text_signature = $check_text
            )]
            fn check<'py>(
                &self,
                py: Python<'py>,
                $($key: &Bound<'_, PyAny>,)?
                n: Option<$crate::python::args::N>,
                now_ns: Option<$crate::python::args::NowNs>,
                $($plan: Option<&Bound<'_, PyAny>>,)?
            ) -> PyResult<Bound<'py, $crate::python::decision::Decision>> {
                $crate::python::surface::check(self, py, $key_arg, $plan_arg, n, now_ns)
            }

            $(#[$peek])*
            #[pyo3(
                signature = ($($key,)? n = None, now_ns = None $(, *, $plan = None)?),
                text_signature = $peek_text
            )]
            fn peek<'py>(
                &self,
                py: Python<'py>,
                $($key: &Bound<'_, PyAny>,)?
                n: Option<$crate::python::args::N>,
                now_ns: Option<$crate::python::args::NowNs>,
                $($plan: Option<&Bound<'_, PyAny>>,)?
            ) -> PyResult<Bound<'py, $crate::python::decision::Decision>> {
                $crate::python::surface::peek(self, py, $key_arg, $plan_arg, n, now_ns)
            }

            $(#[$refund])*
            #[pyo3(
                signature = ($($key,)? n = None, now_ns = None $(, *, $plan = None)?),
                text_signature = $refund_text
            )]
            fn refund(
                &self,
                py: Python<'_>,
                $($key: &Bound<'_, PyAny>,)?
                n: Option<$crate::python::args::N>,
                now_ns: Option<$crate::python::args::NowNs>,
                $($plan: Option<&Bound<'_, PyAny>>,)?
            ) -> PyResult<()> {
                $crate::python::surface::refund(self, py, $key_arg, $plan_arg, n, now_ns)
            }

            /// Settle a cost taken as `reserved` tokens (by `check`, `try_acquire` or `acquire`)
            /// now that it is known to be `actual`. Less: the difference is given back, as
            /// `refund` gives it. More: the difference is taken from every band even beyond
            /// what it holds; the debt is kept as time, and later calls wait until it is
            /// repaid, exactly. The same: nothing changes.
            #[pyo3(signature = ($($key,)? reserved, actual, now_ns = None $(, *, $plan = None)?))]
            fn settle(
                &self,
                py: Python<'_>,
                $($key: &Bound<'_, PyAny>,)?
                reserved: $crate::python::args::ReservedCost,
                actual: $crate::python::args::ActualCost,
                now_ns: Option<$crate::python::args::NowNs>,
                $($plan: Option<&Bound<'_, PyAny>>,)?
            ) -> PyResult<()> {
                $crate::python::surface::settle(
                    self, py, $key_arg, $plan_arg, reserved, actual, now_ns,
                )
            }

            $(#[$available])*
            #[pyo3(signature = ($($key,)? now_ns = None $(, *, $plan = None)?))]
            fn available(
                &self,
                py: Python<'_>,
                $($key: &Bound<'_, PyAny>,)?
                now_ns: Option<$crate::python::args::NowNs>,
                $($plan: Option<&Bound<'_, PyAny>>,)?
            ) -> PyResult<u128> {
                $crate::python::surface::available(self, py, $key_arg, $plan_arg, now_ns)
            }

            $(#[$band_levels])*
            #[pyo3(signature = ($($key,)? now_ns = None $(, *, $plan = None)?))]
            fn band_levels(
                &self,
                py: Python<'_>,
                $($key: &Bound<'_, PyAny>,)?
                now_ns: Option<$crate::python::args::NowNs>,
                $($plan: Option<&Bound<'_, PyAny>>,)?
            ) -> PyResult<Vec<(u128, u128)>> {
                $crate::python::surface::band_levels(self, py, $key_arg, $plan_arg, now_ns)
            }

            $(#[$acquire])*
            #[pyo3(
                signature = ($($key,)? n = None, timeout = None $(, *, $plan = None)?),
                text_signature = $acquire_text
            )]
            fn acquire(
                &self,
                py: Python<'_>,
                $($key: &Bound<'_, PyAny>,)?
                n: Option<$crate::python::args::N>,
                timeout: Option<$crate::python::args::Timeout>,
                $($plan: Option<&Bound<'_, PyAny>>,)?
            ) -> PyResult<bool> {
                $crate::python::surface::acquire(self, py, $key_arg, $plan_arg, n, timeout)
            }

            $(#[$reserve])*
            #[pyo3(signature = ($($key,)? n = None, timeout = None $(, *, $plan = None)?))]
            fn _reserve(
                &self,
                py: Python<'_>,
                $($key: &Bound<'_, PyAny>,)?
                n: Option<$crate::python::args::N>,
                timeout: Option<$crate::python::args::Timeout>,
                $($plan: Option<&Bound<'_, PyAny>>,)?
            ) -> PyResult<$reserved> {
                $crate::python::surface::reserve(self, py, $key_arg, $plan_arg, n, timeout)
                    .map($for_python)
            }

            $(#[$give_back])*
            #[pyo3(signature = ($($key,)? n, at_ns $(, *, $plan = None)?))]
            fn _give_back(
                &self,
                py: Python<'_>,
                $($key: &Bound<'_, PyAny>,)?
                n: $crate::python::args::N,
                at_ns: i64,
                $($plan: Option<&Bound<'_, PyAny>>,)?
            ) -> PyResult<()> {
                $crate::python::surface::give_back(self, py, $key_arg, $plan_arg, n, at_ns)
            }

            /// Nanoseconds from the limiter's clock until `at_ns` (0 once it is there).
            fn _until(&self, py: Python<'_>, at_ns: i64) -> PyResult<u128> {
                $crate::python::surface::PyLimit::clock(self).until(py, at_ns)
            }

            $(#[$acquire_async])*
            #[pyo3(
                signature = ($($key,)? n = None, timeout = None $(, *, $plan = None)?),
                text_signature = $acquire_async_text
            )]
            fn acquire_async<'py>(
                slf: &Bound<'py, Self>,
                $($key: &Bound<'py, PyAny>,)?
                n: Option<Bound<'py, PyAny>>,
                timeout: Option<Bound<'py, PyAny>>,
                $($plan: Option<&Bound<'py, PyAny>>,)?
            ) -> PyResult<Bound<'py, PyAny>> {
                $crate::python::surface::acquire_async(
                    slf.get(),
                    slf.as_any(),
                    $async_key,
                    $plan_arg,
                    n,
                    timeout,
                )
            }

            $(#[$bands])*
            #[getter]
            fn bands<'py>(
                &self,
                py: Python<'py>,
            ) -> PyResult<Bound<'py, pyo3::types::PyTuple>> {
                $crate::python::surface::bands(self, py)
            }

            $($own)*
        }
    };
}

pub(crate) use limiter_methods;
