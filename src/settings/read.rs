//! The one way a setting is read: a variable through the lookup function, parsed with
//! [`FromStr`], and on failure one [`ErrorKind::Config`] error naming the variable. The value
//! types here are the settings' own forms that no library type has (a whole number of a unit
//! with a floor, `on`/`off`, a queue URL, per-kind delays).

use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;
use std::time::Duration;

use crate::metrics::Emf;
use crate::{Backoff, Error, ErrorKind, FailureKind};

/// The error of a variable whose value is not accepted: `environment variable VAR is invalid:
/// WHY`, where `WHY` (the parser's words) shows the value unless it can be secret, and the
/// accepted forms.
pub(crate) fn invalid(var: &str, why: impl fmt::Display) -> Error {
    Error::new(
        ErrorKind::Config,
        format!("environment variable {var} is invalid: {why}"),
    )
}

/// Reads the variable `var` through `lookup` and parses it as a `T`: `None` when it is unset
/// or blank (an empty value counts as unset, as a template that blanks a variable means it),
/// else the value, trimmed, parsed with [`FromStr`]; a value `T` refuses is one
/// [`ErrorKind::Config`] error naming the variable, with the parser's words after it (the
/// value, unless it can carry a secret, and the accepted forms).
///
/// The settings reader ([`Settings::from_lookup`](super::Settings::from_lookup)) reads every
/// variable with it; an app reads its own variables the same way.
///
/// ```
/// use sqs_claim::FifoMode;
/// use sqs_claim::settings::read;
///
/// let env = |name: &str| (name == "SQS_CLAIM_FIFO_MODE").then(|| "strict".to_owned());
/// let err = read::<FifoMode>(&env, "SQS_CLAIM_FIFO_MODE").unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "environment variable SQS_CLAIM_FIFO_MODE is invalid: \"strict\": expected per-group or whole-batch"
/// );
/// assert_eq!(read::<FifoMode>(&env, "SQS_CLAIM_UNSET").unwrap(), None);
///
/// // A team's own variable of a standard type: the value and the accepted forms too.
/// let env = |name: &str| (name == "ORDERS_BATCH").then(|| "ten".to_owned());
/// let err = read::<u32>(&env, "ORDERS_BATCH").unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "environment variable ORDERS_BATCH is invalid: \"ten\" is not a whole number from 0 to \
///      4294967295 (u32) (invalid digit found in string)"
/// );
/// ```
///
/// The value and the forms: the standard library's types (whole numbers, `NonZero*`,
/// floats, `bool`, `char`, IP and socket addresses) have them added to their parser's words;
/// a type of your own says them in its `FromStr` error, as the library's do (and leaves out a
/// value that can carry a secret).
pub fn read<T>(lookup: &dyn Fn(&str) -> Option<String>, var: &str) -> Result<Option<T>, Error>
where
    T: FromStr + 'static,
    T::Err: fmt::Display,
{
    match lookup(var) {
        Some(value) if !value.trim().is_empty() => {
            let value = value.trim();
            value.parse().map(Some).map_err(|e| match std_forms::<T>() {
                // std's words ("invalid digit found in string") name neither the value nor
                // what would do: say both.
                Some(forms) => invalid(var, format!("{value:?} is not {forms} ({e})")),
                None => invalid(var, e),
            })
        }
        _ => Ok(None),
    }
}

/// The accepted forms of a standard library type whose `FromStr` error says neither the value
/// nor the forms (`u32`: "invalid digit found in string"), as `read`'s error names them; `None`
/// for other types, whose parser speaks for itself (the library's own types name the value,
/// unless it can carry a secret, and the forms).
fn std_forms<T: 'static>() -> Option<String> {
    use std::any::TypeId;
    use std::num::{NonZeroU8, NonZeroU16, NonZeroU32, NonZeroU64, NonZeroUsize};
    let id = TypeId::of::<T>();
    macro_rules! whole {
        ($($t:ty),*) => {$(
            if id == TypeId::of::<$t>() {
                return Some(format!(
                    "a whole number from {} to {} ({})",
                    <$t>::MIN,
                    <$t>::MAX,
                    stringify!($t)
                ));
            }
        )*};
    }
    whole!(
        u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize
    );
    macro_rules! nonzero {
        ($($t:ty => $inner:ty),*) => {$(
            if id == TypeId::of::<$t>() {
                return Some(format!(
                    "a whole number from 1 to {} ({})",
                    <$inner>::MAX,
                    stringify!($t)
                ));
            }
        )*};
    }
    nonzero!(NonZeroU8 => u8, NonZeroU16 => u16, NonZeroU32 => u32, NonZeroU64 => u64, NonZeroUsize => usize);
    let forms = if id == TypeId::of::<f32>() || id == TypeId::of::<f64>() {
        "a number (`1.5`, `-2`, `1e3`)"
    } else if id == TypeId::of::<bool>() {
        "`true` or `false`"
    } else if id == TypeId::of::<char>() {
        "one character"
    } else if id == TypeId::of::<std::net::IpAddr>() {
        "an IP address (`10.0.0.1`, `::1`)"
    } else if id == TypeId::of::<std::net::Ipv4Addr>() {
        "an IPv4 address (`10.0.0.1`)"
    } else if id == TypeId::of::<std::net::Ipv6Addr>() {
        "an IPv6 address (`::1`)"
    } else if id == TypeId::of::<std::net::SocketAddr>() {
        "an address and port (`10.0.0.1:8080`, `[::1]:8080`)"
    } else {
        return None;
    };
    Some(forms.to_owned())
}

/// The unit a [`Whole`] number counts, as its error names it.
pub(crate) trait Unit {
    /// `seconds`, `milliseconds`, ...
    const NAME: &'static str;
}

macro_rules! units {
    ($($unit:ident = $name:literal),* $(,)?) => {$(
        #[derive(Debug)]
        pub(crate) enum $unit {}
        impl Unit for $unit {
            const NAME: &'static str = $name;
        }
    )*};
}

units! {
    Seconds = "seconds",
    Millis = "milliseconds",
    Messages = "messages",
    Entries = "entries",
    Receives = "receives",
}

#[cfg(feature = "s3")]
units! {
    Bytes = "bytes",
}

/// A whole number of `U` of at least `MIN`: `"1h"`, `"-1"` or a number below the floor is
/// refused with `"1h" is not a whole number of seconds of at least 1`.
#[derive(Debug)]
pub(crate) struct Whole<U, const MIN: u64>(u64, PhantomData<U>);

impl<U, const MIN: u64> Whole<U, MIN> {
    /// The number.
    pub(crate) fn get(&self) -> u64 {
        self.0
    }
}

impl<const MIN: u64> Whole<Seconds, MIN> {
    /// The number as a duration.
    pub(crate) fn duration(&self) -> Duration {
        Duration::from_secs(self.0)
    }
}

impl<const MIN: u64> Whole<Millis, MIN> {
    /// The number as a duration.
    pub(crate) fn duration(&self) -> Duration {
        Duration::from_millis(self.0)
    }
}

impl<U: Unit, const MIN: u64> Whole<U, MIN> {
    /// The number as a `usize` (a count of things held in memory).
    pub(crate) fn usize(&self) -> Result<usize, String> {
        usize::try_from(self.0).map_err(|_| format!("\"{}\" is too large", self.0))
    }
}

impl<U: Unit, const MIN: u64> FromStr for Whole<U, MIN> {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().parse::<u64>() {
            Ok(n) if n >= MIN => Ok(Whole(n, PhantomData)),
            _ => Err(format!(
                "{s:?} is not a whole number of {} of at least {MIN}",
                U::NAME
            )),
        }
    }
}

/// `on` or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OnOff(pub(crate) bool);

impl FromStr for OnOff {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "on" => Ok(OnOff(true)),
            "off" => Ok(OnOff(false)),
            other => Err(format!("{other:?} is not `on` or `off`")),
        }
    }
}

/// An SQS queue URL (`https://sqs.REGION.amazonaws.com/ACCOUNT/NAME`, or `http://` for a local
/// endpoint). Only the scheme is checked: a name where a URL belongs is the usual mistake.
#[derive(Debug)]
pub(crate) struct QueueUrl(pub(crate) String);

impl FromStr for QueueUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.starts_with("https://") || s.starts_with("http://") {
            Ok(QueueUrl(s.to_owned()))
        } else {
            Err(format!(
                "{s:?}: expected a queue URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)"
            ))
        }
    }
}

/// A CloudWatch namespace for the EMF metrics line, checked as [`Emf::new`] checks it (so a
/// namespace CloudWatch would refuse stops the start), or `off` (any case) for none.
#[derive(Debug)]
pub(crate) struct MetricsNamespace(pub(crate) Option<String>);

impl FromStr for MetricsNamespace {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("off") {
            return Ok(MetricsNamespace(None));
        }
        Emf::new(s)?;
        Ok(MetricsNamespace(Some(s.to_owned())))
    }
}

/// A text value, trimmed (a table name, a namespace): any non-blank value is accepted.
#[derive(Debug)]
pub(crate) struct Text(pub(crate) String);

impl FromStr for Text {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Text(s.trim().to_owned()))
    }
}

/// Fixed delays per failure kind, `KIND=SECS,...` (`store_unavailable=10,contention=5`): a
/// kind given twice keeps its last delay, each at most `Backoff::MAX`.
#[derive(Debug, Default)]
pub(crate) struct BackoffFor(pub(crate) Vec<(FailureKind, Backoff)>);

impl FromStr for BackoffFor {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut out: Vec<(FailureKind, Backoff)> = Vec::new();
        for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((kind, secs)) = pair.split_once('=') else {
                return Err(format!("{pair:?} is not KIND=SECS"));
            };
            let kind: FailureKind = kind.trim().parse().map_err(|e: Error| e.to_string())?;
            let secs = secs.parse::<Whole<Seconds, 0>>()?.get();
            if secs > Backoff::MAX.as_secs() {
                return Err(format!("{pair:?}: above SQS's limit of 43200 s (12 h)"));
            }
            out.retain(|(k, _)| *k != kind);
            out.push((kind, Backoff::fixed(Duration::from_secs(secs))));
        }
        Ok(BackoffFor(out))
    }
}

/// `SQS_CLAIM_BACKOFF` and its two durations, checked together: `None` for `off` (the
/// queue's visibility timeout), else the exponential backoff, its cap at most SQS's 12 h and
/// its first delay at most the cap.
pub(crate) fn backoff(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Option<Backoff>, Error> {
    const FIRST: &str = "SQS_CLAIM_BACKOFF_FIRST_SECS";
    const CAP: &str = "SQS_CLAIM_BACKOFF_CAP_SECS";
    let on = read::<OnOff>(lookup, "SQS_CLAIM_BACKOFF")?.is_some_and(|s| s.0);
    let default = Backoff::default();
    let secs = |var: &str, default: Duration| -> Result<Duration, Error> {
        Ok(read::<Whole<Seconds, 1>>(lookup, var)?.map_or(default, |s| s.duration()))
    };
    let first = secs(FIRST, default.first())?;
    let cap = secs(CAP, default.cap())?;
    if cap > Backoff::MAX {
        return Err(invalid(
            CAP,
            format!("{} s is above SQS's limit of 43200 s (12 h)", cap.as_secs()),
        ));
    }
    if first > cap {
        return Err(invalid(
            FIRST,
            format!("{} s is above {CAP} ({} s)", first.as_secs(), cap.as_secs()),
        ));
    }
    Ok(on.then(|| Backoff::exponential(first, cap)))
}
