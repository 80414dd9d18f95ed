//! A limit's configuration for Python: `Band`, and the `rate`/`burst`/`per`/`bands` arguments
//! every limiter takes, read into the core's [`Config`] in one place.
//!
//! Python hands over numbers of any kind (ints, `Fraction`s, `Decimal`s, floats, numeric
//! strings, quota strings such as `"100/minute"`); this module reads each exactly and lets
//! `core::exact::config` decide everything else: the default burst, the rate per second, the
//! bounds. A `Band` is a view of the core's band: it holds it, shows it and pickles it, from one
//! list of fields. Its `From<ConfigError> for PyErr` is where every configuration error becomes a
//! Python one.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};
use pyo3::IntoPyObjectExt;

use crate::core::exact::config::{BandConfig, Config, ConfigError, Param, Ratio};
use crate::core::exact::plans::{PlanError, Plans};
use crate::core::exact::quota;
use crate::python::args::{count, exact_fraction, fraction_parts, is_iterable, rational_object};
use crate::python::errors::{shown, text_of};
use crate::python::record::repr;

/// One limit: `rate` tokens per `per` seconds, holding at most `burst` tokens.
///
/// Band(rate, burst=None, per=None). `per` defaults to one second, or to the period the rate
/// says (`Band("100/minute")` is `Band(100, per=60)`). `burst` defaults to the rate rounded up:
/// the tokens one period brings, all of which may be spent at once. The band is checked when it
/// is made, exactly as a limiter checks it: a bad value raises here, naming the parameter.
/// Immutable, hashable and picklable; two bands are equal when they are the same limit written
/// the same way.
#[pyclass(
    frozen,
    eq,
    hash,
    name = "Band",
    module = "protocol_in_code.qos.limiter"
)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Band {
    pub config: BandConfig,
}

impl Band {
    /// The band's fields as a constructor takes them, in order: what its repr shows and its
    /// pickle rebuilds it from. `per` is left out of the repr at its default, one second.
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<[(&'static str, Bound<'py, PyAny>); 3]> {
        Ok([
            ("rate", ratio_object(py, self.config.rate())?),
            ("burst", self.config.burst().into_bound_py_any(py)?),
            ("per", ratio_object(py, self.config.per())?),
        ])
    }

    fn per_is_default(&self) -> bool {
        self.config.per() == Ratio::whole(1).expect("one is positive")
    }
}

#[pymethods]
impl Band {
    #[new]
    #[pyo3(signature = (rate, burst = None, per = None))]
    fn __new__(
        py: Python<'_>,
        rate: &Bound<'_, PyAny>,
        burst: Option<&Bound<'_, PyAny>>,
        per: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        Ok(Self {
            config: band_config(py, rate, burst, per)?,
        })
    }

    /// Tokens per period, as written: an int, or a Fraction.
    #[getter]
    fn rate<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        ratio_object(py, self.config.rate())
    }

    /// The most tokens the band holds.
    #[getter]
    fn burst(&self) -> u64 {
        self.config.burst()
    }

    /// The period, in seconds, the rate is counted over: an int, or a Fraction.
    #[getter]
    fn per<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        ratio_object(py, self.config.per())
    }

    /// Tokens per second (`rate / per`), exactly: an int, or a Fraction.
    #[getter]
    fn per_second<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        ratio_object(py, self.config.per_second())
    }

    #[classattr]
    fn __match_args__() -> (&'static str, &'static str, &'static str) {
        ("rate", "burst", "per")
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let this = slf.get();
        let fields = this.fields(slf.py())?;
        let shown = if this.per_is_default() {
            &fields[..2]
        } else {
            &fields[..]
        };
        repr(slf.as_any(), shown)
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, pyo3::types::PyType>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let values = slf.get().fields(py)?.map(|(_, value)| value);
        Ok((slf.get_type(), PyTuple::new(py, values)?))
    }
}

/// `ratio` as Python shows an exact number: an int when whole, else a Fraction.
fn ratio_object(py: Python<'_>, ratio: Ratio) -> PyResult<Bound<'_, PyAny>> {
    rational_object(py, ratio.numerator(), ratio.denominator())
}

/// The configuration a constructor describes: one band from `rate`, `burst` and `per`, or a
/// list of `bands`.
pub fn read_config(
    py: Python<'_>,
    rate: Option<&Bound<'_, PyAny>>,
    burst: Option<&Bound<'_, PyAny>>,
    per: Option<&Bound<'_, PyAny>>,
    bands: Option<&Bound<'_, PyAny>>,
) -> PyResult<Config> {
    let bands = match (rate, bands) {
        (Some(rate), None) => vec![band_config(py, rate, burst, per)?],
        (None, Some(_)) if burst.is_some() || per.is_some() => {
            return Err(ConfigError::BandOptionsBesideBands.into())
        }
        (None, Some(bands)) => bands_from(py, bands)?,
        (None, None) => return Err(ConfigError::NoLimit.into()),
        (Some(_), Some(_)) => return Err(ConfigError::RateAndBands.into()),
    };
    Ok(Config::new(bands)?)
}

/// One band from a rate (tokens per `per` seconds, or a quota string) and a burst.
fn band_config(
    py: Python<'_>,
    rate: &Bound<'_, PyAny>,
    burst: Option<&Bound<'_, PyAny>>,
    per: Option<&Bound<'_, PyAny>>,
) -> PyResult<BandConfig> {
    let (rate, per) = read_quota(py, rate, per)?;
    let rate = exact_ratio(py, &rate, Param::Rate)?;
    let per = per
        .map(|per| exact_ratio(py, &per, Param::Per))
        .transpose()?;
    let burst = burst.map(burst_count).transpose()?;
    Ok(BandConfig::new(rate, burst, per)?)
}

/// A positive number read exactly (see `exact_fraction`), within 64 bits above and below the
/// line.
fn exact_ratio(py: Python<'_>, value: &Bound<'_, PyAny>, param: Param) -> PyResult<Ratio> {
    let name = param.to_string();
    let fraction = exact_fraction(py, value, &name)?;
    let shown = || text_of(&fraction);
    if !fraction.gt(0)? {
        return Err(ConfigError::NotPositive {
            param,
            shown: shown(),
        }
        .into());
    }
    let (numerator, denominator) =
        fraction_parts(&fraction).ok_or_else(|| ConfigError::Beyond64Bits {
            param,
            shown: shown(),
        })?;
    Ok(Ratio::new(numerator, denominator).expect("a positive fraction"))
}

/// A rate given as text may say its period (`"100/minute"`, see `core::exact::quota`): then it
/// is read as its count, with the period as `per`. Other rates pass through unchanged.
fn read_quota<'py>(
    py: Python<'py>,
    rate: &Bound<'py, PyAny>,
    per: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyAny>, Option<Bound<'py, PyAny>>)> {
    let unchanged = || Ok((rate.clone(), per.cloned()));
    let Ok(text) = rate.cast::<PyString>() else {
        return unchanged();
    };
    // A str that is not valid UTF-8 (a lone surrogate) is no quota: the number check says why.
    let Ok(text) = text.to_cow() else {
        return unchanged();
    };
    let shown = || rate.repr().map(|shown| shown.to_string());
    match quota::parse(&text) {
        Ok(None) => unchanged(),
        Ok(Some(quota)) if per.is_none() => Ok((
            PyString::new(py, quota.count).into_any(),
            Some(quota.per_seconds.into_bound_py_any(py)?),
        )),
        Ok(Some(quota)) => Err(PyErr::from(ConfigError::PeriodTwice {
            shown: shown()?,
            count: quota.count.to_owned(),
        })),
        Err(error) => Err(PyErr::from(ConfigError::Quota {
            error,
            shown: shown()?,
        })),
    }
}

/// A band's burst: a whole number of tokens (0 is the core's to refuse).
fn burst_count(burst: &Bound<'_, PyAny>) -> PyResult<u64> {
    count(burst, "burst").map_err(|err| {
        if err.is_instance_of::<PyValueError>(burst.py()) {
            ConfigError::BurstRange {
                shown: shown(burst),
            }
            .into()
        } else {
            err
        }
    })
}

/// Bands from `Band` objects (or any object with `rate`, `burst` and `per` attributes) or from
/// `(rate, burst)` / `(rate, burst, per)` tuples.
fn bands_from(py: Python<'_>, bands: &Bound<'_, PyAny>) -> PyResult<Vec<BandConfig>> {
    if bands.is_instance_of::<PyString>() {
        let shown = bands.repr()?.to_string();
        return Err(ConfigError::BandsNotAList { shown }.into());
    }
    let mut configs = Vec::new();
    for band in bands.try_iter()? {
        let band = band?;
        let config = if let Ok(band) = band.cast::<Band>() {
            band.get().config
        } else if let Ok(tuple) = band.cast::<PyTuple>() {
            let item = |i| tuple.get_item(i).ok().filter(|value| !value.is_none());
            match tuple.len() {
                2 | 3 => band_config(py, &tuple.get_item(0)?, item(1).as_ref(), item(2).as_ref())?,
                _ => {
                    let shown = tuple.repr()?.to_string();
                    return Err(ConfigError::BandTuple { shown }.into());
                }
            }
        } else {
            let attribute = |name| band.getattr(name).ok().filter(|value| !value.is_none());
            let Ok(rate) = band.getattr("rate") else {
                let shown = band.repr()?.to_string();
                return Err(ConfigError::NotABand { shown }.into());
            };
            band_config(
                py,
                &rate,
                attribute("burst").as_ref(),
                attribute("per").as_ref(),
            )?
        };
        configs.push(config);
    }
    Ok(configs)
}

/// The bands of `config` as a tuple of `Band`: what a limiter's `bands` answers.
pub fn bands_tuple<'py>(py: Python<'py>, config: &Config) -> PyResult<Bound<'py, PyTuple>> {
    let bands = config
        .bands()
        .iter()
        .map(|&config| Bound::new(py, Band { config }))
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, bands)
}

/// The canonical encoding of the configuration `bands` describe (see `Config::encode`), and its
/// fingerprint: what a store that keeps a limit's state outside this process records with it.
#[pyfunction]
#[pyo3(name = "_canonical")]
pub fn canonical<'py>(
    py: Python<'py>,
    bands: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyBytes>, u64)> {
    let config = read_config(py, None, None, None, Some(bands))?;
    Ok((PyBytes::new(py, &config.encode()), config.fingerprint()))
}

/// The configurations of a limiter given `plans` (a dict of plan name to what `rate=` or
/// `bands=` takes). Each plan's value is read by [`read_config`] (a `Band`, or any non-str
/// iterable, as `bands`; anything else as `rate`), so its errors are those of `rate=` and
/// `bands=`, said of the plan.
fn read_plans(py: Python<'_>, plans: &Bound<'_, PyAny>) -> PyResult<Plans> {
    let Ok(dict) = plans.cast::<pyo3::types::PyDict>() else {
        return Err(PyTypeError::new_err(format!(
            "plans must be a dict of plan name to its rate or bands, not {}",
            plans.get_type().name()?
        )));
    };
    if dict.is_empty() {
        return Err(PlanError::Empty.into());
    }
    let mut named: Vec<(String, Config)> = Vec::with_capacity(dict.len());
    for (name, value) in dict.iter() {
        let text = match name.cast::<PyString>() {
            Ok(text) => text.to_str().map(str::to_owned).ok(),
            Err(_) => None,
        };
        let Some(text) = text.filter(|text| !text.is_empty()) else {
            let (shown, kind) = (
                name.repr()?.to_string(),
                name.get_type().name()?.to_string(),
            );
            return Err(PlanError::BadName { shown, kind }.into());
        };
        let config = plan_config(py, &value).map_err(|error| {
            // The same error as rate= or bands= gives, said of the plan.
            let message = error.value(py).to_string();
            let said = format!("plans['{text}']: {message}");
            if error.is_instance_of::<PyTypeError>(py) {
                PyTypeError::new_err(said)
            } else {
                PyValueError::new_err(said)
            }
        })?;
        named.push((text, config));
    }
    Ok(Plans::new(named))
}

/// The configurations of a keyed limiter: with `plans`, each plan's, and the plans' names with
/// the index of their configuration (see [`read_plans`]), refusing `plans` beside any of
/// `rate`, `burst`, `per` and `bands`; without, the one configuration those describe (see
/// [`read_config`]).
#[allow(clippy::type_complexity)] // the names with their indices, and the configurations
pub fn read_limits(
    py: Python<'_>,
    rate: Option<&Bound<'_, PyAny>>,
    burst: Option<&Bound<'_, PyAny>>,
    per: Option<&Bound<'_, PyAny>>,
    bands: Option<&Bound<'_, PyAny>>,
    plans: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Option<Box<[(String, usize)]>>, Vec<Config>)> {
    let Some(plans) = plans else {
        return Ok((None, vec![read_config(py, rate, burst, per, bands)?]));
    };
    let given: Vec<&'static str> = [
        ("rate", rate),
        ("burst", burst),
        ("per", per),
        ("bands", bands),
    ]
    .into_iter()
    .filter_map(|(name, value)| value.map(|_| name))
    .collect();
    if !given.is_empty() {
        return Err(PlanError::Both { given }.into());
    }
    let Plans { names, configs } = read_plans(py, plans)?;
    Ok((Some(names.into_boxed_slice()), configs))
}

/// One plan's configuration: a `Band`, or a non-str iterable of bands, as `bands`; anything else
/// (a quota string, a number) as `rate`.
fn plan_config(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Config> {
    if value.cast::<Band>().is_ok() {
        let bands = PyTuple::new(py, [value])?;
        return read_config(py, None, None, None, Some(bands.as_any()));
    }
    let iterable = !value.is_instance_of::<PyString>()
        && !value.is_instance_of::<PyBytes>()
        && is_iterable(value)?;
    if iterable {
        read_config(py, None, None, None, Some(value))
    } else {
        read_config(py, Some(value), None, None, None)
    }
}

/// The plans as a dict of name to a tuple of `Band`: what a limiter's `plans` answers, and what
/// its pickle rebuilds it from.
pub fn plans_dict<'py>(
    py: Python<'py>,
    names: &[(String, usize)],
    configs: &[&Config],
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let dict = pyo3::types::PyDict::new(py);
    for (name, index) in names {
        dict.set_item(name, bands_tuple(py, configs[*index])?)?;
    }
    Ok(dict)
}

/// The plans a limiter written in Python (the Redis ones) was given, read as the native ones
/// read them (see [`read_limits`]): each plan's name with the index of its bands, and each
/// distinct configuration's bands, a tuple of `Band`.
#[pyfunction]
#[allow(clippy::type_complexity)] // the names with their indices, and the bands
#[pyo3(name = "_read_plans", signature = (plans, rate = None, burst = None, per = None, bands = None))]
pub fn read_plans_py<'py>(
    py: Python<'py>,
    plans: &Bound<'py, PyAny>,
    rate: Option<&Bound<'py, PyAny>>,
    burst: Option<&Bound<'py, PyAny>>,
    per: Option<&Bound<'py, PyAny>>,
    bands: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Vec<(String, usize)>, Vec<Bound<'py, PyTuple>>)> {
    let (names, configs) = read_limits(py, rate, burst, per, bands, Some(plans))?;
    let names = names.map(Vec::from).unwrap_or_default();
    let bands = configs
        .iter()
        .map(|config| bands_tuple(py, config))
        .collect::<PyResult<Vec<_>>>()?;
    Ok((names, bands))
}
