//! A quicker door for calls into the hottest functions and methods.
//!
//! PyO3's own entry point counts the thread as attached, catches panics, and binds keyword
//! arguments by comparing their UTF-8 text with every parameter name: for
//! `compute_refill(tokens=..., capacity=..., ...)` that costs more than the refill arithmetic
//! itself, and for `limiter.try_acquire()` about as much as the decision. Keyword names in a
//! call are nearly always interned strings (Python interns the identifiers in compiled code), so
//! comparing their addresses with interned parameter names finds each at once; comparing text
//! remains the fallback for names built at run time.
//!
//! Only a few calls use it: `compute_refill` (its callers, the course among them, pass five
//! keywords), the course's bucket operations (`try_consume`, `offer`, `leak`), the shaper's
//! `enqueue`, and the limiters' `try_acquire` (the call a rate-limited program makes most). A
//! function exported this way is a plain CPython `METH_FASTCALL | METH_KEYWORDS` function:
//! [`Parameters::bind`] maps its arguments to the parameters, [`run`] turns the Rust result (or
//! a panic) into what CPython expects, and [`MethodDef`] describes it to Python, with a text
//! signature so that `inspect.signature` and `help()` see the parameter names.

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::panic::PanicException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::type_object::PyTypeCheck;
use pyo3::types::{PyCFunction, PyString, PyTuple, PyType};

/// The parameters of a function, each of which may be passed by position or by keyword: the
/// first `required` must be given, the rest may be left out.
pub struct Parameters<const N: usize> {
    function: &'static str,
    names: [&'static str; N],
    required: usize,
    interned: PyOnceLock<[Py<PyString>; N]>,
}

/// A vectorcall's arguments, as CPython passes them.
pub struct VectorcallArgs {
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
}

impl<const N: usize> Parameters<N> {
    /// Every parameter required.
    pub const fn new(function: &'static str, names: [&'static str; N]) -> Self {
        Self::with_optional(function, names, N)
    }

    /// The first `required` parameters required, the others optional.
    pub const fn with_optional(
        function: &'static str,
        names: [&'static str; N],
        required: usize,
    ) -> Self {
        Self {
            function,
            names,
            required,
            interned: PyOnceLock::new(),
        }
    }

    /// The arguments of one call, in parameter order, when every parameter is required.
    ///
    /// # Safety
    ///
    /// As for [`Parameters::bind_optional`].
    // Inlined into each door for the same reason as `bind_optional`; with two doors of three
    // parameters (`try_consume`, `offer`) the compiler stopped doing it by itself.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub unsafe fn bind<'a, 'py>(
        &self,
        py: Python<'py>,
        call: &VectorcallArgs,
    ) -> PyResult<[Borrowed<'a, 'py, PyAny>; N]> {
        // SAFETY: as the caller promised.
        let bound = unsafe { self.bind_optional(py, call) }?;
        Ok(bound.map(|argument| argument.expect("every parameter is required and was checked")))
    }

    /// The arguments of one call, in parameter order (`None` for an optional one left out).
    ///
    /// # Safety
    ///
    /// `call` holds the arguments CPython passed to a `METH_FASTCALL | METH_KEYWORDS` function,
    /// and the returned references are used only during that call.
    // Inlined into each door, the bound arguments stay in registers; returned through memory,
    // they were stored as words and reloaded as pairs, which stalls store-to-load forwarding
    // (perf showed it as the costliest instruction of a keyed `try_acquire`).
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub unsafe fn bind_optional<'a, 'py>(
        &self,
        py: Python<'py>,
        call: &VectorcallArgs,
    ) -> PyResult<[Option<Borrowed<'a, 'py, PyAny>>; N]> {
        #[allow(clippy::cast_sign_loss)] // CPython passes a non-negative count with a flag bit
        let nargs = (call.nargsf as usize) & !ffi::PY_VECTORCALL_ARGUMENTS_OFFSET;
        if nargs > N {
            return Err(self.too_many(nargs));
        }
        // SAFETY (all dereferences below): CPython passes `nargs` positional arguments followed
        // by one value per name in `kwnames`, all valid for the duration of the call.
        let argument = |i: usize| unsafe { Borrowed::from_ptr(py, *call.args.add(i)) };
        let mut bound: [Option<Borrowed<'a, 'py, PyAny>>; N] = [None; N];
        for (i, slot) in bound.iter_mut().enumerate().take(nargs) {
            *slot = Some(argument(i));
        }
        if !call.kwnames.is_null() {
            // SAFETY: `kwnames` is a tuple of str when it is not NULL.
            let kwnames =
                unsafe { Borrowed::from_ptr(py, call.kwnames).cast_unchecked::<PyTuple>() };
            for (k, name) in kwnames.iter_borrowed().enumerate() {
                let i = self.position(py, &name)?;
                if bound[i].replace(argument(nargs + k)).is_some() {
                    return Err(self.twice(i));
                }
            }
        }
        if bound[..self.required].iter().any(Option::is_none) {
            let missing: Vec<_> = (0..self.required).filter(|&i| bound[i].is_none()).collect();
            return Err(self.missing(&missing));
        }
        Ok(bound)
    }

    #[cold]
    fn too_many(&self, nargs: usize) -> PyErr {
        let takes = if self.required == N {
            format!("{N}")
        } else {
            format!("from {} to {N}", self.required)
        };
        PyTypeError::new_err(format!(
            "{}() takes {takes} positional arguments but {nargs} were given",
            self.function
        ))
    }

    #[cold]
    fn twice(&self, i: usize) -> PyErr {
        PyTypeError::new_err(format!(
            "{}() got multiple values for argument '{}'",
            self.function, self.names[i]
        ))
    }

    fn position(&self, py: Python<'_>, name: &Borrowed<'_, '_, PyAny>) -> PyResult<usize> {
        let interned = self.interned.get_or_init(py, || {
            self.names.map(|name| PyString::intern(py, name).unbind())
        });
        if let Some(i) = interned
            .iter()
            .position(|known| known.as_ptr() == name.as_ptr())
        {
            return Ok(i);
        }
        let name = name.cast::<PyString>()?;
        // A name that is not valid UTF-8 (a lone surrogate) is no parameter's name either.
        let text = name.to_string_lossy();
        self.names
            .iter()
            .position(|known| *known == text)
            .ok_or_else(|| {
                PyTypeError::new_err(format!(
                    "{}() got an unexpected keyword argument '{text}'",
                    self.function
                ))
            })
    }

    #[cold]
    fn missing(&self, missing: &[usize]) -> PyErr {
        let quoted: Vec<String> = missing
            .iter()
            .map(|&i| format!("'{}'", self.names[i]))
            .collect();
        // As CPython words it: 'a', 'a' and 'b', 'a', 'b', and 'c'.
        let list = match quoted.as_slice() {
            [one] => one.clone(),
            [first, last] => format!("{first} and {last}"),
            [init @ .., last] => format!("{}, and {last}", init.join(", ")),
            [] => String::new(),
        };
        let plural = if missing.len() == 1 { "" } else { "s" };
        PyTypeError::new_err(format!(
            "{}() missing {} required positional argument{plural}: {list}",
            self.function,
            missing.len()
        ))
    }
}

/// An optional argument, `None` counting as not given (as PyO3 reads `Option` parameters).
pub fn given<'a, 'py>(
    argument: Option<Borrowed<'a, 'py, PyAny>>,
) -> Option<Borrowed<'a, 'py, PyAny>> {
    argument.filter(|value| !value.is_none())
}

/// Run the body of a function called by CPython with these vectorcall arguments (which it
/// binds with [`Parameters`]): its result as a new reference, or NULL with the Python exception
/// set (a Rust panic becomes a `PanicException`).
///
/// PyO3 does not count this thread as attached inside `body` (counting it is what makes PyO3's
/// own entry points cost more than this door), so a `Py` handle (or a `PyErr`) dropped in `body`
/// waits in PyO3's pool of deferred releases until PyO3's next entry point: safe, but a cost,
/// and a door called in a loop may not reach such an entry point for a long time. Bodies work
/// with `Bound` references, which are released at once, move any `Py` they make into the
/// result, release displaced objects with `Py::drop_ref`, and do not discard `PyErr`s on
/// their usual paths. An error is raised from inside PyO3's own attachment, so that what PyO3
/// drops while setting it is released at once.
///
/// # Safety
///
/// Call only from a function that CPython invoked, on the calling thread.
pub unsafe fn run(
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
    body: impl for<'py> FnOnce(Python<'py>, &VectorcallArgs) -> PyResult<Bound<'py, PyAny>>,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls extension functions from an attached thread.
    let py = unsafe { Python::assume_attached() };
    let call = VectorcallArgs {
        args,
        nargsf,
        kwnames,
    };
    let result = catch_unwind(AssertUnwindSafe(|| body(py, &call))).unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(ToString::to_string)
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "Rust panic".to_owned());
        Err(PanicException::new_err(message))
    });
    match result {
        Ok(object) => object.into_ptr(),
        Err(err) => {
            Python::attach(|py| err.restore(py));
            ptr::null_mut()
        }
    }
}

/// Defines `$door`, the C function behind a [`MethodDef`]: CPython calls it with the module or
/// the instance (bound to the pattern `$receiver`) and the call's arguments, and `$body` runs
/// through [`run`] with the interpreter token `$py` and the arguments `$call`.
///
/// `$body` runs inside an `unsafe` block, for [`Parameters::bind`] and for reading the receiver,
/// and keeps [`run`]'s rule: it drops no `Py` handle.
macro_rules! door {
    ($door:ident($receiver:pat) |$py:ident, $call:ident| $body:block) => {
        unsafe extern "C" fn $door(
            $receiver: *mut ::pyo3::ffi::PyObject,
            args: *const *mut ::pyo3::ffi::PyObject,
            nargsf: ::pyo3::ffi::Py_ssize_t,
            kwnames: *mut ::pyo3::ffi::PyObject,
        ) -> *mut ::pyo3::ffi::PyObject {
            // SAFETY: CPython calls a `METH_FASTCALL | METH_KEYWORDS` function on an attached
            // thread, with its module or instance and these arguments, which the body uses
            // only during the call; the body keeps `run`'s rule.
            unsafe { $crate::python::fastcall::run(args, nargsf, kwnames, |$py, $call| $body) }
        }
    };
}

pub(crate) use door;

/// The arguments of a course function `operation(bucket, n, now)` (`try_consume`, `offer`),
/// bound by `parameters`, with a `bucket` of another class than `B` refused.
///
/// # Safety
///
/// As for [`Parameters::bind`].
pub unsafe fn bucket_call<'a, 'py, B: PyTypeCheck>(
    py: Python<'py>,
    call: &VectorcallArgs,
    parameters: &Parameters<3>,
) -> PyResult<(
    Borrowed<'a, 'py, B>,
    Borrowed<'a, 'py, PyAny>,
    Borrowed<'a, 'py, PyAny>,
)> {
    // SAFETY: as the caller promised.
    let [bucket, n, now] = unsafe { parameters.bind(py, call) }?;
    Ok((bucket_argument::<B>(bucket)?, n, now))
}

/// The `bucket` argument of a course function, if it is a `B`.
pub fn bucket_argument<'a, 'py, B: PyTypeCheck>(
    bucket: Borrowed<'a, 'py, PyAny>,
) -> PyResult<Borrowed<'a, 'py, B>> {
    bucket
        .cast::<B>()
        .map_err(|err| PyTypeError::new_err(format!("argument 'bucket': {err}")))
}

/// A `METH_FASTCALL | METH_KEYWORDS` function's description for CPython.
pub struct MethodDef(ffi::PyMethodDef);

// SAFETY: the definition is immutable and its pointers are to 'static data.
unsafe impl Sync for MethodDef {}

impl MethodDef {
    /// `doc` starts with the text signature line, `name(params)\n--\n\n`, as CPython expects.
    pub const fn new(
        name: &'static CStr,
        doc: &'static CStr,
        function: ffi::PyCFunctionFastWithKeywords,
    ) -> Self {
        Self(ffi::PyMethodDef {
            ml_name: name.as_ptr(),
            ml_meth: ffi::PyMethodDefPointer {
                PyCFunctionFastWithKeywords: function,
            },
            ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
            ml_doc: doc.as_ptr(),
        })
    }

    /// Make this a method of `class` (whose instances the function then receives as its first
    /// argument): what `#[pymethods]` would do, through this door.
    pub fn install(&'static self, class: &Bound<'_, PyType>) -> PyResult<()> {
        let py = class.py();
        // SAFETY: the definition lives forever and CPython only reads it; the result is a new
        // reference or NULL with an exception set.
        let descriptor = unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                ffi::PyDescr_NewMethod(class.as_type_ptr(), ptr::from_ref(&self.0).cast_mut()),
            )
        }?;
        // SAFETY: `ml_name` is a valid C string, from a `&'static CStr`.
        let name = unsafe { CStr::from_ptr(self.0.ml_name) }.to_string_lossy();
        class.setattr(name.as_ref(), descriptor)
    }

    /// The function object, reporting `module` as its `__module__`.
    pub fn function<'py>(
        &'static self,
        py: Python<'py>,
        module: &str,
    ) -> PyResult<Bound<'py, PyCFunction>> {
        let module = PyString::new(py, module);
        // SAFETY: the definition lives forever and CPython only reads it; the result is a new
        // reference or NULL with an exception set.
        unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                ffi::PyCMethod_New(
                    ptr::from_ref(&self.0).cast_mut(),
                    ptr::null_mut(),
                    module.as_ptr(),
                    ptr::null_mut(),
                ),
            )
            .map(|function| function.cast_into_unchecked())
        }
    }
}
