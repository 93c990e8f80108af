//! The operator's commands for one key: `sqs-claim inspect`, `release` and `forget` (and
//! `inspect --event FILE` for every record of a captured batch: `batch.rs`).
//!
//! They work on every store through its administration ([`StoreAdmin::inspect`],
//! [`StoreAdmin::force_release`], [`StoreAdmin::forget`]), whose
//! deletes are conditional on the record's status in the same request: `release` never deletes
//! a completed record and `forget` never an in-progress one, even if the record changes between
//! the operator's read and the delete.
//!
//! A key is the full key as the store holds it, `namespace#key` (as `invoke --report json`
//! prints it), or the raw key with `--namespace NS`. Without `--namespace`, a key that has no
//! `#` is refused with a hint: the raw key alone is ambiguous, and a raw key may itself contain
//! a `#`, so the CLI never guesses the namespace.
//!
//! With the Powertools interop on (`SQS_CLAIM_POWERTOOLS_HANDLER`, [`sqs_claim::settings::powertools`])
//! keys have no namespace: a KEY that starts with the configured prefix and `#`
//! (`orders-fn.app.record_handler#3e8f…`, as `invoke --report json`, the consumer's logs and the
//! table's `id` show it) is the stored key as is; any other KEY is the raw key, a string (the
//! order id `ord-1001`, a message id), hashed as Powertools hashes it. `--namespace` is refused,
//! and so is a KEY that is another prefix's Powertools key (the settings name another function).

use std::io::{BufRead, IsTerminal, Write};
use std::time::{Duration, SystemTime};

use clap::{Args, Subcommand, ValueEnum};
use sqs_claim::powertools::{HashFunction, PowertoolsFormat};
use sqs_claim::store::{BoxStore, Inspected, Status, StoreAdmin};

use crate::Settings;

/// `inspect`, `release` and `forget`: flattened into the CLI's commands.
// The fields' doc comments would be clap's help text; the variants' say what each field is.
#[allow(missing_docs)]
#[derive(Debug, Subcommand)]
pub enum OperatorCommand {
    /// Shows one key's claim record: status, lease, expiry, token, fingerprint
    ///
    /// In plain words on stdout, or with --report json as one JSON object. Exit 1 if the key
    /// has no record.
    ///
    /// With --event FILE instead of KEY: every record of a captured batch (SQS, Kinesis or
    /// DynamoDB Streams), its key derived as the consumer derives it (SQS_CLAIM_KEY,
    /// SQS_CLAIM_ENVELOPE, SQS_CLAIM_NAMESPACE or --namespace, SQS_CLAIM_POWERTOOLS_*) and
    /// its claim's state, and for each shard the first record not completed. Exit 0 once the
    /// batch is read, whatever the states.
    Inspect {
        /// The full key, namespace#key (as `invoke --report json` shows it); with --namespace,
        /// the raw key. With SQS_CLAIM_POWERTOOLS_HANDLER: the stored key (PREFIX#HASH), or
        /// the raw key string, hashed as Powertools does
        #[arg(
            value_name = "KEY",
            required_unless_present = "event",
            conflicts_with = "event"
        )]
        key: Option<String>,

        /// The key's namespace (the consumer's SQS_CLAIM_NAMESPACE): KEY is then the raw key;
        /// with --event, the namespace of the batch's keys
        #[arg(long, value_name = "NS")]
        namespace: Option<String>,

        /// A captured batch (the event JSON the function received): inspect each record's
        /// claim
        #[arg(long, value_name = "FILE")]
        event: Option<std::path::PathBuf>,

        /// Print the record as one JSON object (with --event, one JSON array)
        #[arg(long, value_name = "FORMAT")]
        report: Option<InspectReport>,
    },

    /// Frees a stuck in-progress claim, so the next delivery runs the handler at once
    ///
    /// Deletes the record only if it is in progress (never a completed one). Asks y/N on a
    /// terminal; elsewhere pass --yes. A worker still running the handler then fails to
    /// complete (fencing), and its message is retried.
    Release {
        #[command(flatten)]
        key: KeyArgs,

        /// Do not ask
        #[arg(long, short = 'y')]
        yes: bool,
    },

    /// Deletes a completed record, so its message runs again if delivered again
    ///
    /// Deletes the record only if it is completed (never an in-progress one). For payments
    /// this means the credit may be applied again. Asks y/N on a terminal; elsewhere pass
    /// --yes.
    Forget {
        #[command(flatten)]
        key: KeyArgs,

        /// Do not ask
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

/// The key of `inspect`, `release`, `forget`.
#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The full key, namespace#key (as `invoke --report json` shows it); with --namespace, the
    /// raw key. With SQS_CLAIM_POWERTOOLS_HANDLER: the stored key (PREFIX#HASH), or the raw key
    /// string, hashed as Powertools does
    #[arg(value_name = "KEY")]
    key: String,

    /// The key's namespace (the consumer's SQS_CLAIM_NAMESPACE): KEY is then the raw key
    #[arg(long, value_name = "NS")]
    namespace: Option<String>,
}

impl KeyArgs {
    /// The key as the store holds it, under `settings`' key scheme: [`KeyArgs::full_key`], or
    /// with the Powertools interop on [`KeyArgs::powertools_key`].
    fn stored_key(&self, settings: &Settings) -> Result<String, Failure> {
        match &settings.powertools {
            Some(format) => self.powertools_key(format),
            None => self.full_key(settings.namespace.as_deref()),
        }
    }

    /// The Powertools key KEY names: itself when it is `{prefix}#...` under `format`'s
    /// prefix, else the Powertools key of KEY as a string datum (printed on stderr, so the
    /// operator sees what was looked up).
    fn powertools_key(&self, format: &PowertoolsFormat) -> Result<String, Failure> {
        if self.key.is_empty() {
            return Err(Failure::usage("KEY is empty"));
        }
        let prefix = format.prefix();
        if self.namespace.is_some() {
            return Err(Failure::usage(format!(
                "--namespace does not apply with SQS_CLAIM_POWERTOOLS_HANDLER: Powertools keys \
                 have no namespace; pass the stored key ({prefix}#...) or the raw key alone"
            )));
        }
        if self
            .key
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('#'))
        {
            return Ok(self.key.clone());
        }
        // `{other prefix}#{digest}`: another function's key, not a raw key to hash again.
        let digest_len = match format.hash_function() {
            HashFunction::Md5 => 32,
            _ => 64,
        };
        if let Some((other, digest)) = self.key.rsplit_once('#')
            && digest.len() == digest_len
            && digest
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(Failure::usage(format!(
                "KEY {:?} is a Powertools key of prefix {other:?}, and this consumer's prefix is \
                 {prefix:?}: set SQS_CLAIM_POWERTOOLS_FUNCTION / _HANDLER / _KEY_PREFIX to that \
                 function's, or pass the raw key",
                self.key
            )));
        }
        let key = format.key(&serde_json::Value::String(self.key.clone()));
        eprintln!("{:?} is the raw key; its Powertools key is {key}", self.key);
        Ok(key)
    }

    /// The full key, or why the arguments do not make one.
    fn full_key(&self, settings_namespace: Option<&str>) -> Result<String, Failure> {
        if self.key.is_empty() {
            return Err(Failure::usage("KEY is empty"));
        }
        match &self.namespace {
            Some(ns) if ns.is_empty() => Err(Failure::usage("--namespace is empty")),
            Some(ns) => Ok(format!("{ns}#{}", self.key)),
            None if self.key.contains('#') => Ok(self.key.clone()),
            None => {
                // The consumer's namespace when the environment says it (SQS_CLAIM_NAMESPACE),
                // else a placeholder: the CLI never guesses it.
                let ns = settings_namespace.unwrap_or("NAMESPACE");
                Err(Failure::usage(format!(
                    "KEY must be the full key, namespace#key: {:?} has no namespace; pass \
                     {ns}#{} or --namespace {ns} {}",
                    self.key, self.key, self.key
                )))
            }
        }
    }
}

/// `inspect --report`: the one report format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InspectReport {
    /// The record as one JSON object
    Json,
}

/// Why an operator's command failed: one line for the user, and whether it was a usage
/// mistake (exit 2) or bad input, a missing record or a store error (exit 1).
#[derive(Debug)]
pub struct Failure {
    /// The line to print after `error: `.
    pub message: String,
    /// A usage mistake (exit 2).
    pub usage: bool,
}

impl Failure {
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            usage: true,
        }
    }

    pub(crate) fn failed(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            usage: false,
        }
    }
}

/// Runs `command` on `store`. `settings` say how a KEY names a record (its
/// namespace, for the hint when a key lacks one, or the Powertools interop); `store` names the
/// store in messages.
pub async fn run(
    command: OperatorCommand,
    claims: &BoxStore,
    settings: &Settings,
    store: &str,
) -> Result<(), Failure> {
    match command {
        OperatorCommand::Inspect {
            key,
            namespace,
            event,
            report,
        } => {
            let key = match (event, key) {
                (Some(path), _) => {
                    return crate::batch::inspect(
                        &path,
                        namespace.as_deref(),
                        claims,
                        settings,
                        store,
                        report,
                    )
                    .await;
                }
                (None, Some(key)) => KeyArgs { key, namespace }.stored_key(settings)?,
                (None, None) => return Err(Failure::usage("inspect needs KEY or --event FILE")),
            };
            let found = inspect_on(claims, &key, store).await?;
            let now = SystemTime::now();
            match report {
                Some(InspectReport::Json) => {
                    let text = serde_json::to_string_pretty(&to_json(&key, &found, now))
                        .map_err(|e| Failure::failed(e.to_string()))?;
                    println!("{text}");
                }
                None => print!("{}", describe(&key, &found, now)),
            }
            Ok(())
        }
        OperatorCommand::Release { key, yes } => {
            let key = key.stored_key(settings)?;
            release_on(claims, &key, store, yes).await
        }
        OperatorCommand::Forget { key, yes } => {
            let key = key.stored_key(settings)?;
            forget_on(claims, &key, store, yes).await
        }
    }
}

async fn inspect_on(claims: &BoxStore, key: &str, store: &str) -> Result<Inspected, Failure> {
    match claims.inspect(key).await {
        Ok(Some(found)) => Ok(found),
        Ok(None) => Err(Failure::failed(format!(
            "no claim record for key {key:?} in {store} (never claimed, released, forgotten, \
             or deleted by its TTL)"
        ))),
        Err(e) => Err(Failure::failed(format!("store {store}: {e:#}"))),
    }
}

async fn release_on(claims: &BoxStore, key: &str, store: &str, yes: bool) -> Result<(), Failure> {
    let found = inspect_on(claims, key, store).await?;
    let now = SystemTime::now();
    if found.record.status == Status::Completed {
        return Err(Failure::failed(format!(
            "key {key:?} is completed, not in progress: release frees only stuck claims, and a \
             completed record is what keeps its message from running twice; to have the message \
             run again, use `sqs-claim forget`"
        )));
    }
    eprintln!("{key}: {}", state_line(&found, now));
    if let Some(lease) = found.record.lease_until.filter(|l| *l > now) {
        eprintln!(
            "warning: the lease is live until {} ({}): a worker may still be running the \
             handler; releasing lets a redelivery run it alongside, and that worker's \
             completion will then fail (fenced) and its message be retried",
            timestamp(lease),
            relative(lease, now)
        );
    }
    confirm(&format!("Release {key}?"), yes)?;
    match claims.force_release(key).await {
        Ok(true) => {
            println!("released {key}");
            eprintln!("the next delivery of its message claims the key again and runs the handler");
            Ok(())
        }
        Ok(false) => Err(changed(key)),
        Err(e) => Err(Failure::failed(format!("store {store}: {e:#}"))),
    }
}

async fn forget_on(claims: &BoxStore, key: &str, store: &str, yes: bool) -> Result<(), Failure> {
    let found = inspect_on(claims, key, store).await?;
    let now = SystemTime::now();
    if found.record.status == Status::InProgress {
        return Err(Failure::failed(format!(
            "key {key:?} is in progress, not completed: forget deletes only completed records; \
             to free a stuck claim, use `sqs-claim release`"
        )));
    }
    eprintln!("{key}: {}", state_line(&found, now));
    eprintln!(
        "warning: forgetting {key} lets its message run again: a redelivered or resent copy \
         applies its effects a second time (for payments, it credits the account a second \
         time; what was already applied stays). Forget only a message whose effect was lost or \
         reverted."
    );
    confirm(&format!("Forget {key}?"), yes)?;
    match claims.forget(key).await {
        Ok(true) => {
            println!("forgotten {key}");
            Ok(())
        }
        Ok(false) => Err(changed(key)),
        Err(e) => Err(Failure::failed(format!("store {store}: {e:#}"))),
    }
}

/// The conditional delete found another status (or no record) than the read before it.
fn changed(key: &str) -> Failure {
    Failure::failed(format!(
        "the record of key {key:?} changed since it was read (completed, taken over or \
         deleted meanwhile); nothing was deleted: run `sqs-claim inspect` again"
    ))
}

/// `--yes`, or a `y` typed on a terminal. Elsewhere (a script, a pipe) the command refuses
/// rather than reading an answer nobody typed.
fn confirm(question: &str, yes: bool) -> Result<(), Failure> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(Failure::usage(
            "not a terminal, so nobody can confirm: pass --yes",
        ));
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::failed(format!("cannot read the answer: {e}")))?;
    if matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
        Ok(())
    } else {
        Err(Failure::failed("not confirmed; nothing was changed"))
    }
}

/// What the record means now, in one line.
pub(crate) fn state_line(found: &Inspected, now: SystemTime) -> String {
    let r = &found.record;
    if r.expires_at <= now {
        return format!(
            "{}, expired at {} ({}): counts as absent, the next delivery runs the handler",
            status_words(r.status),
            timestamp(r.expires_at),
            relative(r.expires_at, now)
        );
    }
    match (r.status, r.lease_until) {
        (Status::Completed, _) => format!(
            "completed, remembered until {} ({}): copies until then are skipped as duplicates",
            timestamp(r.expires_at),
            relative(r.expires_at, now)
        ),
        (Status::InProgress, Some(lease)) if lease > now => format!(
            "in progress, lease lapses at {} ({}): a worker holds it until then (a live \
             worker extends it while its handler runs)",
            timestamp(lease),
            relative(lease, now)
        ),
        (Status::InProgress, Some(lease)) => format!(
            "in progress, lease lapsed at {} ({}): the worker died or overran; the next \
             delivery takes it over",
            timestamp(lease),
            relative(lease, now)
        ),
        (Status::InProgress, None) => {
            "in progress, no lease recorded: held until the record expires".to_owned()
        }
    }
}

fn status_words(status: Status) -> &'static str {
    match status {
        Status::InProgress => "in progress",
        Status::Completed => "completed",
    }
}

/// `inspect`'s plain-words output.
fn describe(key: &str, found: &Inspected, now: SystemTime) -> String {
    let r = &found.record;
    let mut s = format!("key          {key}\n");
    s.push_str(&format!("state        {}\n", state_line(found, now)));
    s.push_str(&format!("status       {}\n", r.status.as_str()));
    match r.lease_until {
        Some(l) => s.push_str(&format!(
            "lease until  {} ({})\n",
            timestamp(l),
            relative(l, now)
        )),
        None => s.push_str("lease until  -\n"),
    }
    s.push_str(&format!(
        "expires at   {} ({})\n",
        timestamp(r.expires_at),
        relative(r.expires_at, now)
    ));
    s.push_str(&format!(
        "token        {}\n",
        found.token.as_ref().map_or("-", |t| t.as_str())
    ));
    s.push_str(&format!(
        "fingerprint  {}\n",
        r.fingerprint.as_deref().unwrap_or("-")
    ));
    s
}

/// A record's state in one word at `now`: `held`, `lapsed`, `completed` or `expired` (the
/// `state` of `inspect --report json`, for one key or a batch).
pub(crate) fn state_word(found: &Inspected, now: SystemTime) -> &'static str {
    let r = &found.record;
    if r.expires_at <= now {
        return "expired";
    }
    match (r.status, r.lease_until) {
        (Status::Completed, _) => "completed",
        (Status::InProgress, Some(l)) if l <= now => "lapsed",
        (Status::InProgress, _) => "held",
    }
}

/// `inspect --report json`: times as RFC 3339 (UTC) and epoch milliseconds, and the state in
/// one word (`held`, `lapsed`, `completed`, `expired`).
pub(crate) fn to_json(key: &str, found: &Inspected, now: SystemTime) -> serde_json::Value {
    let r = &found.record;
    let state = state_word(found, now);
    serde_json::json!({
        "key": key,
        "status": match r.status {
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
        },
        "state": state,
        "lease_until": r.lease_until.map(timestamp),
        "lease_until_ms": r.lease_until.map(epoch_millis),
        "expires_at": timestamp(r.expires_at),
        "expires_at_ms": epoch_millis(r.expires_at),
        "token": found.token.as_ref().map(|t| t.as_str()),
        "fingerprint": r.fingerprint,
    })
}

/// Milliseconds since the Unix epoch (0 before it), as the stores keep leases.
fn epoch_millis(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// `2025-01-31T12:00:00.250Z`: RFC 3339 in UTC, to the millisecond.
pub(crate) fn timestamp(t: SystemTime) -> String {
    let ms = epoch_millis(t);
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (year, month, day) = civil_from_days(days);
    let secs = rem / 1000;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        rem % 1000
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `in 42 s`, `3 min ago`, `in 2 h 5 min`: how far `t` is from `now`.
fn relative(t: SystemTime, now: SystemTime) -> String {
    match t.duration_since(now) {
        Ok(ahead) => format!("in {}", span(ahead)),
        Err(e) => format!("{} ago", span(e.duration())),
    }
}

fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..86_400 => format!("{} h {} min", s / 3600, s / 60 % 60),
        _ => format!("{} d {} h", s / 86_400, s / 3600 % 24),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqs_claim::store::{ClaimRecord, ClaimToken};

    fn from_epoch_millis(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(timestamp(from_epoch_millis(0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            timestamp(from_epoch_millis(951_782_400_250)),
            "2000-02-29T00:00:00.250Z"
        );
        assert_eq!(
            timestamp(from_epoch_millis(1_767_225_599_999)),
            "2025-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn spans_read_in_plain_words() {
        let now = from_epoch_millis(1_000_000_000);
        assert_eq!(relative(now + Duration::from_secs(42), now), "in 42 s");
        assert_eq!(
            relative(now - Duration::from_secs(180), now),
            "3 min 0 s ago"
        );
        assert_eq!(
            relative(now + Duration::from_secs(2 * 3600 + 300), now),
            "in 2 h 5 min"
        );
        assert_eq!(
            relative(now + Duration::from_secs(86_400), now),
            "in 1 d 0 h"
        );
    }

    fn key_args(key: &str, namespace: Option<&str>) -> KeyArgs {
        KeyArgs {
            key: key.into(),
            namespace: namespace.map(str::to_owned),
        }
    }

    #[test]
    fn a_key_is_full_or_given_with_its_namespace() {
        assert_eq!(
            key_args("payments#o-1", None)
                .full_key(Some("payments"))
                .unwrap(),
            "payments#o-1"
        );
        assert_eq!(
            key_args("o#1", Some("ns"))
                .full_key(Some("payments"))
                .unwrap(),
            "ns#o#1"
        );
        let e = key_args("o-1", None)
            .full_key(Some("payments"))
            .unwrap_err();
        assert!(e.usage, "{}", e.message);
        assert!(e.message.contains("payments#o-1"), "{}", e.message);
        assert!(key_args("", None).full_key(Some("p")).unwrap_err().usage);
        // No namespace configured: a placeholder, never a guess.
        let e = key_args("o-1", None).full_key(None).unwrap_err();
        assert!(e.message.contains("NAMESPACE#o-1"), "{}", e.message);
    }

    #[test]
    fn a_powertools_key_is_stored_or_the_raw_key_hashed() {
        let format = PowertoolsFormat::new("orders-fn", "app.record_handler");
        let hashed = format.key(&serde_json::json!("ord-1001"));
        assert_eq!(
            key_args("ord-1001", None).powertools_key(&format).unwrap(),
            hashed
        );
        assert_eq!(
            key_args(&hashed, None).powertools_key(&format).unwrap(),
            hashed,
            "the stored key as is"
        );
        // A raw key with a `#` that is not a Powertools key is hashed too.
        assert_eq!(
            key_args("o#1", None).powertools_key(&format).unwrap(),
            format.key(&serde_json::json!("o#1"))
        );
        let other = PowertoolsFormat::new("other-fn", "app.record_handler")
            .key(&serde_json::json!("ord-1001"));
        let e = key_args(&other, None).powertools_key(&format).unwrap_err();
        assert!(e.usage && e.message.contains("other-fn"), "{}", e.message);
        let e = key_args("ord-1001", Some("payments"))
            .powertools_key(&format)
            .unwrap_err();
        assert!(
            e.usage && e.message.contains("--namespace"),
            "{}",
            e.message
        );
        assert!(
            key_args("", None)
                .powertools_key(&format)
                .unwrap_err()
                .usage
        );
    }

    #[test]
    fn states_in_plain_words() {
        let now = from_epoch_millis(1_700_000_000_000);
        let held = Inspected::new(
            ClaimRecord {
                status: Status::InProgress,
                expires_at: now + Duration::from_secs(3600),
                lease_until: Some(now + Duration::from_secs(42)),
                fingerprint: None,
                response: None,
            },
            Some(ClaimToken::from_string("t".into())),
        );
        let line = state_line(&held, now);
        assert!(
            line.starts_with("in progress, lease lapses at 2023-11-14T22:14:02.000Z (in 42 s)"),
            "{line}"
        );
        assert_eq!(to_json("k", &held, now)["state"], "held");
        let done = Inspected::new(
            ClaimRecord {
                status: Status::Completed,
                expires_at: now + Duration::from_secs(86_400),
                lease_until: None,
                fingerprint: Some("fp".into()),
                response: None,
            },
            None,
        );
        assert!(state_line(&done, now).starts_with("completed, remembered until "));
        assert_eq!(to_json("k", &done, now)["state"], "completed");
        assert_eq!(to_json("k", &done, now)["token"], serde_json::Value::Null);
        let later = now + Duration::from_secs(2 * 86_400);
        assert!(state_line(&done, later).starts_with("completed, expired at "));
        assert_eq!(to_json("k", &done, later)["state"], "expired");
        assert_eq!(
            to_json("k", &held, now + Duration::from_secs(60))["state"],
            "lapsed"
        );
    }
}
