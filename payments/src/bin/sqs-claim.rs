//! `sqs-claim`: run the reference consumer locally, over an SQS event file, exactly as Lambda
//! would, against an embedded SQLite file (the default), memory, or DynamoDB.
//!
//! ```text
//! sqs-claim invoke EVENT.json [--store URL] [--accounts-table NAME] [--report json]
//! sqs-claim balances [--store URL] [--accounts-table NAME]
//! sqs-claim init [--store URL] [--accounts-table NAME]
//! ```
//!
//! Bad input (a missing file, not JSON, not an SQS event, an unknown store URL, a store that
//! does not answer) is one `error: ...` line on stderr and a non-zero exit. A batch that ran
//! exits 0 even if messages failed: the batch response says which.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;

use lambda_runtime::{Context, LambdaEvent};
use payments::{Ledger, LedgerTask, Settings, StoreUrl};
use sqs_claim::events::SqsEvent;
use sqs_claim::{BatchReport, Outcome};

const USAGE: &str = "\
sqs-claim: run the sqs-claim reference consumer (a payments example) locally.

Usage:
  sqs-claim invoke EVENT.json [--store URL] [--report json]
      Runs the consumer over an SQS event file as Lambda would. Prints the batch response
      (or, with --report json, every message's outcome) on stdout, a summary on stderr.
  sqs-claim balances [--store URL]
      Prints each account and its balance in cents, tab-separated.
  sqs-claim init [--store URL]
      Creates the store's tables (idempotent). DynamoDB tables are never created otherwise.
  sqs-claim prune [--store URL] [--limit N]
      Deletes at most N (default 10000) expired claim records (SQLite, PostgreSQL; the tiered
      store's durable tier) and prints how many. DynamoDB and Redis expire records by TTL:
      nothing to do there. Expired records already count as absent: pruning only reclaims
      space, so schedule it as often as the table's growth needs.

Options:
  --store URL             sqlite:PATH | memory: | dynamodb:TABLE
                          | redis://HOST[:PORT][/DB][?prefix=P] | rediss://... (TLS)
                          | postgres://USER@HOST[:PORT]/DB | tiered:REDIS_URL|DURABLE_URL
                          (default: $SQS_CLAIM_STORE, else sqlite:.sqs-claim/claims.db)
  --accounts-table NAME   DynamoDB accounts table (default: $SQS_CLAIM_ACCOUNTS_TABLE,
                          else TABLE-accounts)
  --report json           invoke: print {\"response\", \"outcomes\", \"counts\"} instead
  --limit N               prune: at most N records per run (default 10000)
  -h, --help              this text

DynamoDB endpoint, region and credentials come from the standard AWS environment
(AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 for DynamoDB Local). Opening the store and
checking its tables may take SQS_CLAIM_STARTUP_TIMEOUT_MS (default 5000). The consumer's other
settings (SQS_CLAIM_KEY, SQS_CLAIM_NAMESPACE, ...) are read from the environment as the
Lambda reads them. RUST_LOG=info shows the processor's logs on stderr.
";

/// The default store: a file in the current directory, so a second run of the same event
/// finds every message already done.
const DEFAULT_DIR: &str = ".sqs-claim";
const DEFAULT_DB: &str = "claims.db";

/// An error for the user: printed as one `error: ...` line.
struct CliError {
    message: String,
    /// 2 for a usage mistake, 1 for anything else.
    code: u8,
}

impl CliError {
    fn usage(message: impl Into<String>) -> Self {
        CliError {
            message: format!("{} (see sqs-claim --help)", message.into()),
            code: 2,
        }
    }

    fn failed(message: impl fmt::Display) -> Self {
        CliError {
            message: message.to_string(),
            code: 1,
        }
    }
}

#[derive(Debug)]
enum Command {
    Invoke { event: PathBuf, json_report: bool },
    Balances,
    Init,
    Prune { limit: u32 },
    Help,
}

#[derive(Debug)]
struct Args {
    command: Command,
    store: Option<String>,
    accounts_table: Option<String>,
}

fn parse_args(raw: Vec<OsString>) -> Result<Args, CliError> {
    let mut words = Vec::with_capacity(raw.len());
    for a in raw {
        match a.into_string() {
            Ok(s) => words.push(s),
            Err(bad) => {
                return Err(CliError::usage(format!(
                    "argument {} is not valid UTF-8",
                    bad.to_string_lossy()
                )));
            }
        }
    }
    let mut positional = Vec::new();
    let (mut store, mut accounts_table, mut report, mut limit) = (None, None, None, None);
    let mut it = words.into_iter();
    while let Some(word) = it.next() {
        let (name, inline) = match word.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_owned(), Some(v.to_owned())),
            _ => (word.clone(), None),
        };
        let mut value = |slot: &mut Option<String>| -> Result<(), CliError> {
            let v = match inline.clone() {
                Some(v) => v,
                None => it
                    .next()
                    .ok_or_else(|| CliError::usage(format!("{name} needs a value")))?,
            };
            if slot.replace(v).is_some() {
                return Err(CliError::usage(format!("{name} given twice")));
            }
            Ok(())
        };
        match name.as_str() {
            "-h" | "--help" | "help" => {
                return Ok(Args {
                    command: Command::Help,
                    store: None,
                    accounts_table: None,
                });
            }
            "--store" => value(&mut store)?,
            "--accounts-table" => value(&mut accounts_table)?,
            "--report" => value(&mut report)?,
            "--limit" => value(&mut limit)?,
            flag if flag.starts_with('-') && flag != "-" => {
                return Err(CliError::usage(format!("unknown option {flag}")));
            }
            _ => positional.push(word),
        }
    }
    let json_report = match report.as_deref() {
        None => false,
        Some("json") => true,
        Some(other) => {
            return Err(CliError::usage(format!(
                "--report {other:?} is not supported: the only report format is json"
            )));
        }
    };
    let mut positional = positional.into_iter();
    let command = match positional.next().as_deref() {
        None => {
            return Err(CliError::usage(
                "missing command: invoke, balances, init or prune",
            ));
        }
        Some("invoke") => {
            let event = positional.next().ok_or_else(|| {
                CliError::usage("invoke needs an event file: sqs-claim invoke EVENT.json")
            })?;
            Command::Invoke {
                event: PathBuf::from(event),
                json_report,
            }
        }
        Some("balances") => Command::Balances,
        Some("init") => Command::Init,
        Some("prune") => Command::Prune {
            limit: match limit.as_deref() {
                None => DEFAULT_PRUNE_LIMIT,
                Some(v) => v.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    CliError::usage(format!("--limit {v:?} is not a positive whole number"))
                })?,
            },
        },
        Some(other) => {
            return Err(CliError::usage(format!(
                "unknown command {other:?}: expected invoke, balances, init or prune"
            )));
        }
    };
    if limit.is_some() && !matches!(command, Command::Prune { .. }) {
        return Err(CliError::usage("--limit applies to prune only"));
    }
    if let Some(extra) = positional.next() {
        return Err(CliError::usage(format!("unexpected argument {extra:?}")));
    }
    if json_report && !matches!(command, Command::Invoke { .. }) {
        return Err(CliError::usage("--report applies to invoke only"));
    }
    Ok(Args {
        command,
        store: store.filter(|s| !s.is_empty()),
        accounts_table: accounts_table.filter(|s| !s.is_empty()),
    })
}

/// `--store`, else `SQS_CLAIM_STORE`, else the SQLite file in `.sqs-claim/`.
fn store_url(args: &Args, settings: &Settings) -> Result<StoreUrl, CliError> {
    let url = match (&args.store, &settings.store) {
        (Some(s), _) => {
            StoreUrl::parse(s).map_err(|e| CliError::failed(format!("--store: {e:#}")))?
        }
        (None, Some(url)) => url.clone(),
        // Created on demand by StoreUrl::open.
        (None, None) => StoreUrl::Sqlite(PathBuf::from(DEFAULT_DIR).join(DEFAULT_DB)),
    };
    let accounts = args
        .accounts_table
        .clone()
        .or_else(|| settings.accounts_table.clone());
    Ok(url.with_accounts_table(accounts))
}

/// Reads and checks an SQS event file. Every failure names the file and what is wrong.
fn read_event(path: &PathBuf) -> Result<SqsEvent, CliError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::failed(format!("cannot read event file {shown}: {e}")))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| CliError::failed(format!("event file {shown} is not JSON: {e}")))?;
    let not_sqs = |why: String| CliError::failed(format!("{shown} is not an SQS event: {why}"));
    let Some(records) = value.get("Records").and_then(|r| r.as_array()) else {
        return Err(not_sqs("it has no \"Records\" array".into()));
    };
    for (i, record) in records.iter().enumerate() {
        let Some(record) = record.as_object() else {
            return Err(not_sqs(format!("record #{i} is not an object")));
        };
        // Other event sources (S3, SNS, DynamoDB streams) also have "Records"; say so plainly
        // rather than failing each record for a missing messageId.
        let source = record
            .get("eventSource")
            .or_else(|| record.get("EventSource"))
            .and_then(|s| s.as_str());
        if let Some(source) = source.filter(|s| *s != "aws:sqs") {
            return Err(not_sqs(format!(
                "record #{i} comes from {source:?}, not \"aws:sqs\""
            )));
        }
        // The processor refuses such a batch too; checking here keeps a broken file from
        // creating the default store.
        if record
            .get("messageId")
            .is_none_or(|id| id.as_str().is_some_and(str::is_empty) || id.is_null())
        {
            return Err(CliError::failed(format!(
                "{shown}: record #{i} has no messageId, so Lambda could not report it as a \
                 failure and would fail the whole batch"
            )));
        }
    }
    serde_json::from_value(value).map_err(|e| not_sqs(e.to_string()))
}

struct Invoke {
    event: SqsEvent,
    json_report: bool,
    settings: Settings,
    store: String,
}

impl LedgerTask for Invoke {
    type Output = Result<(), CliError>;

    /// Runs once the ledger is open and ready (`StoreUrl::open_prepared` checked it).
    async fn run<L: Ledger + Clone>(self, ledger: L) -> Self::Output {
        let store = &self.store;
        let processor = payments::build(ledger, &self.settings)
            .await
            .map_err(CliError::failed)?;
        // A default context: no deadline (0), as outside Lambda; leases use SQS_CLAIM_LEASE_SECS.
        let event = LambdaEvent::new(self.event, Context::default());
        let report = processor
            .process(event)
            .await
            .map_err(|e| CliError::failed(format!("the batch was refused: {e:#}")))?;
        let out = if self.json_report {
            report.to_json()
        } else {
            serde_json::to_value(report.response()).map_err(CliError::failed)?
        };
        let text = serde_json::to_string_pretty(&out).map_err(CliError::failed)?;
        println!("{text}");
        eprint!("{}", summary(&report, store));
        Ok(())
    }
}

fn summary(report: &BatchReport, store: &str) -> String {
    let c = report.counts();
    let n = report.items().len();
    let mut s = format!(
        "{n} message{}: {} processed, {} duplicate, {} held elsewhere, {} failed, {} not started \
         (store {store})\n",
        if n == 1 { "" } else { "s" },
        c.processed,
        c.duplicate,
        c.held_elsewhere,
        c.failed,
        c.not_started,
    );
    if c.cut_off > 0 {
        // Only when it happened, so the line users grep for keeps its shape.
        s.insert_str(
            s.len() - 1,
            &format!(", {} cut off by the deadline", c.cut_off),
        );
    }
    for item in report.items() {
        if matches!(item.outcome, Outcome::Processed | Outcome::Duplicate) {
            continue;
        }
        let detail = item.outcome.detail().unwrap_or_default();
        s.push_str(&format!(
            "  {:<14} {}  {}\n",
            item.outcome.name(),
            item.message_id,
            detail.replace('\n', " ")
        ));
    }
    s
}

struct Balances {
    store: String,
}

impl LedgerTask for Balances {
    type Output = Result<(), CliError>;

    async fn run<L: Ledger + Clone>(self, ledger: L) -> Self::Output {
        let store = &self.store;
        let fail = |e: sqs_claim::Error| CliError::failed(format!("store {store}: {e:#}"));
        let balances = ledger.balances().await.map_err(fail)?;
        if balances.is_empty() {
            eprintln!("no accounts yet (store {store})");
        }
        for (account, cents) in balances {
            println!("{account}\t{cents}");
        }
        Ok(())
    }
}

struct Init {
    store: String,
}

impl LedgerTask for Init {
    type Output = Result<(), CliError>;

    async fn run<L: Ledger + Clone>(self, ledger: L) -> Self::Output {
        let store = &self.store;
        ledger
            .init()
            .await
            .map_err(|e| CliError::failed(format!("store {store}: {e:#}")))?;
        eprintln!("initialized {store}");
        Ok(())
    }
}

/// Rows deleted by one `prune` when `--limit` is not given.
const DEFAULT_PRUNE_LIMIT: u32 = 10_000;

struct Prune {
    store: String,
    limit: u32,
}

impl LedgerTask for Prune {
    type Output = Result<(), CliError>;

    async fn run<L: Ledger + Clone>(self, ledger: L) -> Self::Output {
        let store = &self.store;
        let pruned = ledger
            .prune_expired(std::time::SystemTime::now(), self.limit)
            .await
            .map_err(|e| CliError::failed(format!("store {store}: {e:#}")))?;
        match pruned {
            Some(n) => {
                println!("{n}");
                eprintln!(
                    "pruned {n} expired claim records from {store} (at most {} per run)",
                    self.limit
                );
            }
            None => {
                println!("0");
                // Memory has no TTL, but it lives only as long as this process.
                eprintln!(
                    "nothing to prune in {store} (DynamoDB and Redis expire records by TTL; \
                     memory: lasts only as long as one run)"
                );
            }
        }
        Ok(())
    }
}

async fn run(args: Args) -> Result<(), CliError> {
    if let Command::Help = args.command {
        print!("{USAGE}");
        return Ok(());
    }
    let settings = Settings::from_env().map_err(CliError::failed)?;
    // Read the event before touching the store: a typo in the path should not create files.
    let event = match &args.command {
        Command::Invoke { event, .. } => Some(read_event(event)?),
        _ => None,
    };
    let url = store_url(&args, &settings)?;
    let store = url.to_string();
    // Opening the store and its readiness check are bounded (SQS_CLAIM_STARTUP_TIMEOUT_MS).
    let startup = settings.startup_timeout;
    let opened = match args.command {
        Command::Invoke { json_report, .. } => {
            let event = event.unwrap_or_default();
            url.open_prepared(
                startup,
                Invoke {
                    event,
                    json_report,
                    settings,
                    store: store.clone(),
                },
            )
            .await
        }
        Command::Balances => {
            url.open_prepared(
                startup,
                Balances {
                    store: store.clone(),
                },
            )
            .await
        }
        Command::Init => {
            url.open(Init {
                store: store.clone(),
            })
            .await
        }
        Command::Prune { limit } => {
            url.open(Prune {
                store: store.clone(),
                limit,
            })
            .await
        }
        Command::Help => return Ok(()),
    };
    opened.map_err(|e| CliError::failed(format!("cannot open store {store}: {e:#}")))?
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args_os().skip(1).collect()) {
        Ok(args) => args,
        Err(e) => return fail(e),
    };
    if std::env::var_os("RUST_LOG").is_some_and(|v| !v.is_empty()) {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            // Colour codes only on a terminal: `2> run.log` or a pipe to grep stays plain text.
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return fail(CliError::failed(format!(
                "cannot start the async runtime: {e}"
            )));
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// Prints the error as exactly one line: causes from SDKs can span lines.
fn fail(e: CliError) -> ExitCode {
    let one_line = e.message.split_whitespace().collect::<Vec<_>>().join(" ");
    eprintln!("error: {one_line}");
    ExitCode::from(e.code)
}
