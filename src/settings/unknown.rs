//! `SQS_CLAIM_*` variables nobody reads: a misspelled setting (`SQS_CLAIM_TTL_SEC`) would
//! otherwise be ignored without a word, and the consumer run with the default. At start-up
//! [`Settings::from_env`](super::Settings::from_env) warns of each, with the nearest known
//! name; [`unknown_variables`] finds them for an app that reports them its own way.
//!
//! Known are the library's [`VARIABLES`], `READ_ELSEWHERE` (the names the repository's
//! scripts, example app and tests read) and the names an app passes as its own
//! ([`Settings::from_env_beside`](super::Settings::from_env_beside)).

use std::fmt;

use super::VARIABLES;

/// The prefix of the variables checked.
const PREFIX: &str = "SQS_CLAIM_";

/// `SQS_CLAIM_*` names read outside the library, so a process environment that holds them
/// (a shell that sourced the stand-ins' `.standins/env`, the example app's template) is not
/// warned of: the example app's own settings, the scripts' (`scripts/`, `Makefile`), the
/// tests' and benchmarks'.
pub(crate) const READ_ELSEWHERE: &[&str] = &[
    // The example app (examples/payments): its own settings.
    "SQS_CLAIM_ACCOUNTS_TABLE",
    "SQS_CLAIM_OUTPUT_QUEUE_URL",
    // The stand-ins and the local deployment (scripts/standins.sh, services.sh, deploy-local.sh,
    // pytool.sh, sam.sh, check-sam-build.sh, public-items.py, powertools/venv.sh; .standins/env).
    "SQS_CLAIM_API_BASE",
    "SQS_CLAIM_CACHE",
    "SQS_CLAIM_DDB_JAVA_OPTS",
    "SQS_CLAIM_DDB_NPM_VERSION",
    "SQS_CLAIM_DDB_PORT",
    "SQS_CLAIM_DEPLOY_BINARY",
    "SQS_CLAIM_DEPLOY_ENDPOINT",
    "SQS_CLAIM_DEPLOY_PARAMS",
    "SQS_CLAIM_DEPLOY_STACK",
    "SQS_CLAIM_DEPLOY_STREAM_BINARY",
    "SQS_CLAIM_DEPLOY_STREAMS",
    "SQS_CLAIM_DEPLOY_WAIT",
    "SQS_CLAIM_DYNAMODB_ENDPOINT",
    "SQS_CLAIM_MINISTACK_SERVICES",
    "SQS_CLAIM_MINISTACK_VERSION",
    "SQS_CLAIM_POSTGRES_URL",
    "SQS_CLAIM_POWERTOOLS_VENV",
    "SQS_CLAIM_PYTHON",
    "SQS_CLAIM_REDIS_URL",
    "SQS_CLAIM_RUN",
    "SQS_CLAIM_SAM_TARGET_DIR",
    "SQS_CLAIM_SAM_TRANSLATOR_VERSION",
    "SQS_CLAIM_SERVICES_TIMEOUT",
    "SQS_CLAIM_SQS_ENDPOINT",
    "SQS_CLAIM_SQS_PORT",
    "SQS_CLAIM_STANDINS_TIMEOUT",
    // Tests and benchmarks (tests/, examples/payments/tests/, benches/).
    "SQS_CLAIM_BENCH_CLIENT_CPU_US",
    "SQS_CLAIM_BENCH_RTT_MS",
    "SQS_CLAIM_CHAOS",
    "SQS_CLAIM_CONFLICT_HOLD_MS",
    "SQS_CLAIM_E2E_ENDPOINT",
    "SQS_CLAIM_MINISTACK",
    "SQS_CLAIM_TEST_RACE_DB",
    "SQS_CLAIM_TEST_RACE_PREFIX",
    "SQS_CLAIM_TEST_RACE_START_MS",
];

/// An `SQS_CLAIM_*` variable that is set but that nothing reads.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnknownVariable {
    /// Its name.
    pub name: String,
    /// The known name nearest to it (by edit distance: at most 3 edits, or a name cut short
    /// or run on), the one probably meant: `SQS_CLAIM_TTL_SECS` for `SQS_CLAIM_TTL_SEC`.
    pub nearest: Option<String>,
}

impl fmt::Display for UnknownVariable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is set, but sqs-claim reads no such variable",
            self.name
        )?;
        match &self.nearest {
            Some(nearest) => write!(f, ": did you mean {nearest}?"),
            None => f.write_str(" (docs/configuration.md lists them)"),
        }
    }
}

/// The `SQS_CLAIM_*` names among `names` (a process environment's: `std::env::vars()`'s
/// names) that are neither the library's ([`VARIABLES`]), nor `READ_ELSEWHERE` (the names the
/// repository's own scripts and example app read), nor in
/// `beside` (an app's own), each with the nearest known name; in the order given.
///
/// ```
/// use sqs_claim::settings::unknown_variables;
///
/// let unknown = unknown_variables(["SQS_CLAIM_TTL_SEC", "SQS_CLAIM_ORDERS_TABLE", "HOME"], &["SQS_CLAIM_ORDERS_TABLE"]);
/// assert_eq!(unknown.len(), 1);
/// assert_eq!(unknown[0].name, "SQS_CLAIM_TTL_SEC");
/// assert_eq!(unknown[0].nearest.as_deref(), Some("SQS_CLAIM_TTL_SECS"));
/// ```
pub fn unknown_variables<I>(names: I, beside: &[&str]) -> Vec<UnknownVariable>
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    let known = || {
        VARIABLES
            .iter()
            .map(|v| v.name)
            .chain(READ_ELSEWHERE.iter().copied())
            .chain(beside.iter().copied())
    };
    names
        .into_iter()
        .filter_map(|name| {
            let name = name.as_ref();
            if !name.starts_with(PREFIX) || known().any(|k| k == name) {
                return None;
            }
            let typed = &name[PREFIX.len()..];
            let nearest = known()
                .filter(|k| k.starts_with(PREFIX))
                .map(|k| (distance(typed, &k[PREFIX.len()..]), k))
                // A few edits, or a name cut short or run on (`FIFO` for `FIFO_MODE`).
                .filter(|(d, k)| *d <= 3 || near_prefix(typed, &k[PREFIX.len()..]))
                .min_by_key(|(d, _)| *d)
                .map(|(_, k)| k.to_owned());
            Some(UnknownVariable {
                name: name.to_owned(),
                nearest,
            })
        })
        .collect()
}

/// Logs a warning for each unknown `SQS_CLAIM_*` variable of the process environment
/// ([`unknown_variables`]).
pub(crate) fn warn_unknown(beside: &[&str]) {
    let names = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
    for unknown in unknown_variables(names, beside) {
        tracing::warn!(
            variable = %unknown.name,
            nearest = unknown.nearest.as_deref().unwrap_or(""),
            "{unknown}"
        );
    }
}

/// Whether one of `a` and `b` begins the other, the shorter at least 4 characters long.
fn near_prefix(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    short.len() >= 4 && long.starts_with(short)
}

/// The Levenshtein distance of `a` and `b`, in characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelled_setting_is_named_with_the_nearest_one() {
        for (typo, meant) in [
            ("SQS_CLAIM_TTL_SEC", "SQS_CLAIM_TTL_SECS"),
            ("SQS_CLAIM_LEASE_SEC", "SQS_CLAIM_LEASE_SECS"),
            ("SQS_CLAIM_FIFO", "SQS_CLAIM_FIFO_MODE"),
            ("SQS_CLAIM_STOR", "SQS_CLAIM_STORE"),
            ("SQS_CLAIM_BACKOF", "SQS_CLAIM_BACKOFF"),
            ("SQS_CLAIM_ACOUNTS_TABLE", "SQS_CLAIM_ACCOUNTS_TABLE"),
        ] {
            let unknown = unknown_variables([typo], &[]);
            assert_eq!(unknown.len(), 1, "{typo}");
            assert_eq!(unknown[0].nearest.as_deref(), Some(meant), "{typo}");
            assert_eq!(
                unknown[0].to_string(),
                format!(
                    "{typo} is set, but sqs-claim reads no such variable: did you mean {meant}?"
                )
            );
        }
        let far = unknown_variables(["SQS_CLAIM_SOMETHING_ELSE_ENTIRELY"], &[]);
        assert_eq!(far[0].nearest, None, "nothing near: no guess");
    }

    #[test]
    fn known_names_and_other_prefixes_are_not_warned_of() {
        let names = VARIABLES
            .iter()
            .map(|v| v.name)
            .chain(READ_ELSEWHERE.iter().copied())
            .chain(["HOME", "AWS_REGION", "SQS_CLAIMS_X", "MY_SQS_CLAIM_TTL"]);
        assert_eq!(unknown_variables(names, &[]), []);
        // An app's own names, given beside the library's.
        assert_eq!(
            unknown_variables(["SQS_CLAIM_ORDERS_TABLE"], &["SQS_CLAIM_ORDERS_TABLE"]),
            []
        );
        let unknown = unknown_variables(["SQS_CLAIM_ORDER_TABLE"], &["SQS_CLAIM_ORDERS_TABLE"]);
        assert_eq!(
            unknown[0].nearest.as_deref(),
            Some("SQS_CLAIM_ORDERS_TABLE")
        );
    }

    #[test]
    fn read_elsewhere_holds_no_library_variable() {
        for name in READ_ELSEWHERE {
            assert!(name.starts_with(PREFIX), "{name}");
            assert!(
                VARIABLES.iter().all(|v| v.name != *name),
                "{name} is the library's"
            );
        }
    }

    #[test]
    fn edit_distance() {
        assert_eq!(distance("", ""), 0);
        assert_eq!(distance("TTL_SEC", "TTL_SECS"), 1);
        assert_eq!(distance("STORE", "STOER"), 2);
        assert_eq!(distance("abc", ""), 3);
    }
}
