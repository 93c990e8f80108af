//! `payments`: the example app's command line. It runs the reference consumer locally, over
//! an SQS event file, exactly as Lambda would, against an embedded SQLite file (the default),
//! memory, DynamoDB, Redis, PostgreSQL or a tiered store; prints the balances; and creates the
//! claims and accounts tables. It is built on the library alone: the operator's commands
//! (`prune`, `doctor`, `inspect`, `release`, `forget`) are the `sqs-claim` binary's
//! (`cargo install --path cli`), on the same store.
//!
//! ```text
//! payments invoke EVENT.json [--store URL] [--accounts-table NAME] [--report json]
//! payments balances [--store URL] [--accounts-table NAME]
//! payments init [--store URL] [--accounts-table NAME] [--partition-key K=T] [--sort-key K=T]
//! ```
//!
//! Bad input (a missing file, not JSON, not an SQS event, an unknown store URL, a store that
//! does not answer) is one `error: ...` line on stderr and exit code 1; a usage mistake (an
//! unknown command or flag, a missing value, an operator's command) is one such line and exit
//! code 2. A batch that ran exits 0 even if messages failed: the batch response says which.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use lambda_runtime::{Context, LambdaEvent};
use payments::{BoxLedger, Ledger, Settings};
use sqs_claim::BatchReport;
use sqs_claim::events::SqsEvent;
use sqs_claim::settings::{StoreFlags, bounded_startup};

const PROGRAM: &str = "payments";

const COMMANDS: &str = "invoke, balances or init";

/// The operator's commands, which are `sqs-claim`'s: named here only to point there.
const OPERATOR_COMMANDS: [&str; 5] = ["prune", "doctor", "inspect", "release", "forget"];

const USAGE: &str = "\
payments invoke EVENT.json [--store URL] [--report json]
       payments balances [--store URL]
       payments init [--store URL]
       payments help [COMMAND]";

const AFTER_HELP: &str = "\
The store is --store, else --table (dynamodb:TABLE), else $SQS_CLAIM_STORE, else \
$SQS_CLAIM_TABLE, else sqlite:.sqs-claim/claims.db: a flag beats the environment.

DynamoDB endpoint, region and credentials come from the standard AWS environment \
(AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 for DynamoDB Local). Opening the store and \
checking its tables may take SQS_CLAIM_STARTUP_TIMEOUT_MS (default 15000). The consumer's other \
settings (SQS_CLAIM_KEY, SQS_CLAIM_NAMESPACE, ...) are read from the environment as the Lambda \
reads them. RUST_LOG=info shows the processor's logs on stderr.

The operator's commands (prune, doctor, inspect, release, forget) are sqs-claim's, on the same \
store: cargo install --path cli, then e.g. SQS_CLAIM_NAMESPACE=payments sqs-claim inspect KEY.";

/// The help of `--store`, with every URL form.
const STORE_HELP: &str = "Where claims and accounts live: sqlite:PATH | memory: | \
dynamodb:TABLE | redis://HOST[:PORT][/DB][?prefix=P] | rediss://... (TLS) | \
postgres://USER@HOST[:PORT]/DB | tiered:REDIS_URL|DURABLE_URL [default: \
sqlite:.sqs-claim/claims.db] [env: SQS_CLAIM_STORE]";

/// Run the sqs-claim example app (a payments consumer) locally.
#[derive(Debug, Parser)]
#[command(
    name = "payments",
    version,
    override_usage = USAGE,
    after_help = AFTER_HELP,
    subcommand_required = true
)]
struct Cli {
    #[command(flatten)]
    args: AppArgs,
    #[command(subcommand)]
    command: Command,
}

/// Flags of every command. No `env = ...`: their variables are read once, by the settings
/// (`payments::config`), and a flag beats them there ([`StoreFlags::apply`]); the help still
/// names each flag's variable.
#[derive(Debug, Args)]
struct AppArgs {
    // The help is a string, not a doc comment: rustdoc would read its brackets as links.
    #[arg(long, global = true, value_name = "URL", help = STORE_HELP)]
    store: Option<String>,

    /// The DynamoDB claims table, when no store URL is given: the same as --store dynamodb:NAME
    /// [env: SQS_CLAIM_TABLE]
    #[arg(long, global = true, value_name = "NAME")]
    table: Option<String>,

    /// The DynamoDB claims table's partition key, NAME=TEMPLATE: pk=CLAIM#{key} [default:
    /// id={key}] [env: SQS_CLAIM_DYNAMODB_PARTITION_KEY]
    #[arg(long, global = true, value_name = "NAME=TEMPLATE")]
    partition_key: Option<String>,

    /// The DynamoDB claims table's sort key, NAME=TEMPLATE: sk=CLAIM [default: none] [env:
    /// SQS_CLAIM_DYNAMODB_SORT_KEY]
    #[arg(long, global = true, value_name = "NAME=TEMPLATE")]
    sort_key: Option<String>,

    /// The DynamoDB accounts table [default: TABLE-accounts] [env: SQS_CLAIM_ACCOUNTS_TABLE]
    #[arg(long, global = true, value_name = "NAME")]
    accounts_table: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs the consumer over an SQS event file as Lambda would
    ///
    /// Prints the batch response (or, with --report json, every message's outcome) on stdout,
    /// a summary on stderr. A batch that ran exits 0 even if messages failed: the batch
    /// response says which. The store must be ready: embedded stores (memory, SQLite) create
    /// their tables; DynamoDB, Redis and PostgreSQL tables come from `payments init`.
    Invoke {
        /// The SQS event file (JSON, as Lambda delivers it: {"Records": [...]})
        #[arg(value_name = "EVENT.json")]
        event: PathBuf,

        /// Print {"response", "outcomes", "counts"} instead of the batch response
        #[arg(long, value_name = "FORMAT")]
        report: Option<Report>,
    },

    /// Prints each account and its balance in cents, tab-separated
    Balances,

    /// Creates the store's tables, claims and accounts (idempotent)
    ///
    /// DynamoDB tables are never created otherwise: `invoke` and the Lambda consumer only
    /// check that they exist.
    Init,
}

/// `invoke --report`: the one report format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Report {
    /// Every message's outcome, the batch response and the counts, as one JSON object
    Json,
}

/// The flags typed on the command line: the store's, and the accounts table.
#[derive(Debug, Default, PartialEq, Eq)]
struct Flags {
    store: StoreFlags,
    accounts_table: Option<String>,
}

/// What the command line asks for: a command to run, or text to print (help, version).
#[derive(Debug)]
enum Parsed {
    Run(Command, Box<Flags>),
    Print(String),
}

/// An error for the user: one `error: ...` line on stderr and its exit code (2 for a usage
/// mistake, 1 for anything else).
#[derive(Debug)]
struct Failure {
    message: String,
    code: u8,
}

impl Failure {
    /// A usage mistake (exit 2), with a pointer to the help.
    fn usage(message: impl fmt::Display) -> Self {
        Failure {
            message: format!("{message} (see {PROGRAM} --help)"),
            code: 2,
        }
    }

    /// Exit 1 with `message`, its causes included (`{:#}`).
    fn failed(message: impl fmt::Display) -> Self {
        Failure {
            message: format!("{message:#}"),
            code: 1,
        }
    }
}

/// Parses the command line. No I/O: help and version come back as text to print.
fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, Failure> {
    let matches = match Cli::command().try_get_matches_from(args) {
        Ok(matches) => matches,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            return Ok(Parsed::Print(e.render().to_string()));
        }
        Err(e) => return Err(usage_error(&e)),
    };
    let cli = Cli::from_arg_matches(&matches).map_err(|e| usage_error(&e))?;
    // A flag counts when typed (before or after the command) and not blank.
    let typed = |id: &str, value: Option<String>| {
        let on_line = |m: &ArgMatches| m.value_source(id) == Some(ValueSource::CommandLine);
        let typed = on_line(&matches) || matches.subcommand().is_some_and(|(_, m)| on_line(m));
        value.filter(|v| typed && !v.trim().is_empty())
    };
    let args = cli.args;
    let mut store = StoreFlags::default();
    store.store = typed("store", args.store);
    store.table = typed("table", args.table);
    store.partition_key = typed("partition_key", args.partition_key);
    store.sort_key = typed("sort_key", args.sort_key);
    let flags = Flags {
        store,
        accounts_table: typed("accounts_table", args.accounts_table),
    };
    if flags.store.names_the_store_twice() {
        return Err(Failure::usage(
            "--store and --table both name the store: give one",
        ));
    }
    Ok(Parsed::Run(cli.command, Box::new(flags)))
}

/// clap's error as one line, in the words users may have scripted around.
fn usage_error(e: &clap::Error) -> Failure {
    let context = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => Some(v.join(", ")),
        _ => None,
    };
    let arg = context(ContextKind::InvalidArg).unwrap_or_default();
    let message = match e.kind() {
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            format!("missing command: {COMMANDS}")
        }
        ErrorKind::InvalidSubcommand => match context(ContextKind::InvalidSubcommand) {
            Some(command) if OPERATOR_COMMANDS.contains(&command.as_str()) => format!(
                "{command} is an operator command: run sqs-claim {command} with the same store \
                 flags (cargo install --path cli; SQS_CLAIM_NAMESPACE=payments for this app's \
                 keys)"
            ),
            _ => first_line(e),
        },
        ErrorKind::MissingRequiredArgument if arg.contains("EVENT") => {
            format!("invoke needs an event file: {PROGRAM} invoke EVENT.json")
        }
        // clap puts the missing argument on a second line, which one line would drop.
        ErrorKind::MissingRequiredArgument if !arg.is_empty() => {
            format!("missing argument {arg}")
        }
        ErrorKind::InvalidValue if context(ContextKind::InvalidValue).as_deref() == Some("") => {
            let flag = arg.split_whitespace().next().unwrap_or(&arg);
            format!("{flag} needs a value")
        }
        _ => first_line(e),
    };
    Failure::usage(message)
}

/// The first line of clap's rendered error, without its `error: `.
fn first_line(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let first = rendered.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_owned()
}

/// The command line's flags over the environment's: a flag beats any variable. Errors name
/// the flag.
fn apply_flags(settings: &mut Settings, flags: Flags) -> Result<(), Failure> {
    flags
        .store
        .apply(&mut settings.consumer)
        .map_err(Failure::failed)?;
    if let Some(accounts) = flags.accounts_table {
        settings.accounts_table = Some(accounts);
    }
    Ok(())
}

/// Reads and checks an SQS event file, as `sqs_claim::lambda::run` does: every failure names
/// the file and what is wrong, never the content (a type error is given by line and column:
/// serde's own message would quote the value, which may be a body).
fn read_event(path: &Path) -> Result<SqsEvent, Failure> {
    sqs_claim::lambda::read_event_file(path).map_err(Failure::failed)
}

/// `invoke` on whichever ledger is open: the batch response (or the `--report json`
/// object) on stdout, the summary on stderr.
async fn invoke(
    ledger: &BoxLedger,
    settings: &Settings,
    event: SqsEvent,
    format: Option<Report>,
    store: &str,
) -> Result<(), Failure> {
    let report = invoke_on(ledger.clone(), settings, event).await?;
    print_report(&report, format, store)
}

/// Runs the start-up `check` and the `batch` together: `Ok` with the batch's result when the
/// check passed (a batch that ends first waits for it); else the check's error, with the
/// batch's result when it ended: a check that fails first gives the batch `grace` more to end
/// (where the store answers, its claims are completed or released, not left in progress),
/// then drops it.
async fn check_beside<E, R>(
    check: impl Future<Output = Result<(), E>>,
    batch: impl Future<Output = R>,
    grace: Duration,
) -> Result<R, (E, Option<R>)> {
    tokio::pin!(check, batch);
    tokio::select! {
        checked = &mut check => match checked {
            Ok(()) => Ok(batch.await),
            Err(e) => Err((e, tokio::time::timeout(grace, batch).await.ok())),
        },
        ran = &mut batch => match check.await {
            Ok(()) => Ok(ran),
            Err(e) => Err((e, Some(ran))),
        },
    }
}

/// A start-up check that refused the store after (or while) the batch ran: the report of
/// what the batch applied, if anything, then the check's error.
fn refused(
    error: Failure,
    ran: Option<BatchReport>,
    format: Option<Report>,
    store: &str,
) -> Result<(), Failure> {
    if let Some(ran) = ran
        && ran.counts().processed > 0
    {
        print_report(&ran, format, store)?;
    }
    Err(error)
}

/// `invoke`'s output: the batch response (or the `--report json` object) on stdout, the
/// summary on stderr.
fn print_report(report: &BatchReport, format: Option<Report>, store: &str) -> Result<(), Failure> {
    let out = match format {
        Some(Report::Json) => report.to_json(),
        None => serde_json::to_value(report.response()).map_err(Failure::failed)?,
    };
    let text = serde_json::to_string_pretty(&out).map_err(Failure::failed)?;
    println!("{text}");
    eprint!("{}", summary(report, store));
    Ok(())
}

/// The reference consumer over `event` on `ledger`, as Lambda would run it.
async fn invoke_on(
    ledger: BoxLedger,
    settings: &Settings,
    event: SqsEvent,
) -> Result<BatchReport, Failure> {
    let processor = payments::build(ledger, settings)
        .await
        .map_err(Failure::failed)?;
    // A default context: no deadline (0), as outside Lambda; leases use SQS_CLAIM_LEASE_SECS.
    processor
        .process(LambdaEvent::new(event, Context::default()))
        .await
        .map_err(|e| Failure::failed(format!("the batch was refused: {e:#}")))
}

fn summary(report: &BatchReport, store: &str) -> String {
    // The library's summary, with the store named after the counts as the CLI always has
    // (before the cut-off count, which appears only when it happened: the line users grep
    // for keeps its shape).
    let mut s = sqs_claim::lambda::summary(report);
    const COUNTS_END: &str = " not started";
    if let Some(i) = s.find(COUNTS_END) {
        s.insert_str(i + COUNTS_END.len(), &format!(" (store {store})"));
    }
    s
}

/// `balances`: one `account<TAB>cents` line per account on stdout.
async fn balances(ledger: &BoxLedger, store: &str) -> Result<(), Failure> {
    let balances = ledger
        .balances()
        .await
        .map_err(|e| Failure::failed(format!("store {store}: {e:#}")))?;
    if balances.is_empty() {
        eprintln!("no accounts yet (store {store})");
    }
    for (account, cents) in balances {
        println!("{account}\t{cents}");
    }
    Ok(())
}

/// `init`: creates the store's tables.
async fn init(ledger: &BoxLedger, store: &str) -> Result<(), Failure> {
    ledger
        .init()
        .await
        .map_err(|e| Failure::failed(format!("store {store}: {e:#}")))?;
    eprintln!("initialized {store}");
    Ok(())
}

async fn run(command: Command, flags: Flags) -> Result<(), Failure> {
    let mut settings = Settings::from_env().map_err(Failure::failed)?;
    // Metrics lines are for Lambda's log pipeline; the CLI's output is its report.
    settings.metrics_namespace = None;
    // Read the event before touching the store: a typo in the path should not create files.
    let event = match &command {
        Command::Invoke { event, .. } => Some(read_event(event)?),
        _ => None,
    };
    apply_flags(&mut settings, flags)?;
    let app = settings.cli_store().map_err(Failure::failed)?;
    let store = app.to_string();
    let cannot_open = |e| Failure::failed(format!("cannot open store {store}: {e:#}"));
    // Opening the store and its readiness check are bounded (SQS_CLAIM_STARTUP_TIMEOUT_MS).
    let startup = settings.startup_timeout;
    match command {
        Command::Invoke { report, .. } => {
            let event = event.unwrap_or_default();
            // Where the check may not overlap the writes, it runs first, in the opening's
            // start-up bound (as open_prepared); where it may (DynamoDB, whose opening sends
            // nothing), it gets the bound of its own beside the batch.
            let ledger = bounded_startup(startup, async {
                let ledger = payments::open(&app).await?;
                if !ledger.check_may_overlap_writes() {
                    ledger.prepare().await?;
                }
                Ok(ledger)
            })
            .await
            .map_err(cannot_open)?;
            if !ledger.check_may_overlap_writes() {
                return invoke(&ledger, &settings, event, report, &store).await;
            }
            // The check beside the batch's first writes, not before them: one round trip
            // less at a distance (Ledger::check_may_overlap_writes says where that is safe).
            // A batch that ends first waits for the check. A check that fails first does not
            // cut the batch short: it runs to its end where the store answers (a claim that
            // landed on a table the check refuses is completed or released by its message,
            // not left in progress), given the start-up bound once more; only a store that
            // answers nothing is dropped after it. What the batch applied is printed before
            // the check's error.
            let check = bounded_startup(startup, ledger.prepare());
            let batch = invoke_on(ledger.clone(), &settings, event);
            match check_beside(check, batch, startup).await {
                Ok(ran) => print_report(&ran?, report, &store),
                Err((e, ran)) => refused(cannot_open(e), ran.and_then(Result::ok), report, &store),
            }
        }
        Command::Balances => {
            let ledger = payments::open_prepared(&app, startup)
                .await
                .map_err(cannot_open)?;
            balances(&ledger, &store).await
        }
        Command::Init => {
            let ledger = payments::open(&app).await.map_err(cannot_open)?;
            init(&ledger, &store).await
        }
    }
}

fn main() -> ExitCode {
    let (command, flags) = match parse(std::env::args_os()) {
        Ok(Parsed::Run(command, flags)) => (command, *flags),
        Ok(Parsed::Print(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(e) => return fail(e),
    };
    let ran = start_logging().and_then(|()| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Failure::failed(format!("cannot start the async runtime: {e}")))?
            .block_on(run(command, flags))
    });
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// Sets up logging when `RUST_LOG` is set: the library's set-up on stderr (stdout is the
/// command's output), colour codes only on a terminal.
fn start_logging() -> Result<(), Failure> {
    if std::env::var_os("RUST_LOG").is_some_and(|v| !v.is_empty()) {
        sqs_claim::logging::Logging::from_env()
            .stderr()
            .ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init()
            .map_err(Failure::failed)?;
    }
    Ok(())
}

/// Prints the error as exactly one line (causes from SDKs can span lines) and gives its exit
/// code.
fn fail(e: Failure) -> ExitCode {
    let one_line = e.message.split_whitespace().collect::<Vec<_>>().join(" ");
    eprintln!("error: {one_line}");
    ExitCode::from(e.code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use payments::config::StoreUrl;

    fn parse_words(words: &[&str]) -> Result<Parsed, Failure> {
        parse(
            std::iter::once("payments")
                .chain(words.iter().copied())
                .map(OsString::from),
        )
    }

    fn run_of(words: &[&str]) -> (Command, Flags) {
        match parse_words(words) {
            Ok(Parsed::Run(command, flags)) => (command, *flags),
            other => panic!("{words:?}: expected a command, got {other:?}"),
        }
    }

    fn usage(words: &[&str]) -> String {
        match parse_words(words) {
            Err(e) => {
                assert_eq!(e.code, 2, "{words:?}: {}", e.message);
                e.message
            }
            other => panic!("{words:?}: expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn the_command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn store_flags_go_before_or_after_the_command() {
        for words in [
            &["--store", "memory:", "balances"][..],
            &["balances", "--store", "memory:"][..],
            &["balances", "--store=memory:"][..],
        ] {
            let (command, flags) = run_of(words);
            assert!(matches!(command, Command::Balances), "{words:?}");
            assert_eq!(flags.store.store.as_deref(), Some("memory:"), "{words:?}");
        }
        let (command, flags) = run_of(&[
            "invoke",
            "e.json",
            "--table",
            "claims",
            "--accounts-table",
            "ledger",
            "--report",
            "json",
        ]);
        assert!(matches!(
            command,
            Command::Invoke { ref event, report: Some(Report::Json) } if event == Path::new("e.json")
        ));
        assert_eq!(flags.store.table.as_deref(), Some("claims"));
        assert_eq!(flags.accounts_table.as_deref(), Some("ledger"));
        // An empty value counts as not given, as before.
        assert_eq!(run_of(&["balances", "--store", ""]).1, Flags::default());
        let (_, flags) = run_of(&[
            "init",
            "--partition-key",
            "pk=A#{key}",
            "--sort-key",
            "sk=A",
        ]);
        assert_eq!(flags.store.partition_key.as_deref(), Some("pk=A#{key}"));
        assert_eq!(flags.store.sort_key.as_deref(), Some("sk=A"));
    }

    #[test]
    fn usage_mistakes_are_one_line_in_the_old_words() {
        assert!(usage(&[]).contains("missing command: invoke, balances or init"));
        assert!(usage(&["invoke"]).contains("invoke needs an event file: payments invoke"));
        assert!(usage(&["balances", "--store"]).contains("--store needs a value"));
        assert!(usage(&["balances", "--bogus"]).contains("--bogus"));
        assert!(usage(&["frobnicate"]).contains("frobnicate"));
        assert!(usage(&["invoke", "e.json", "--report", "yaml"]).contains("yaml"));
        assert!(usage(&["balances", "--limit", "5"]).contains("--limit"));
        assert!(usage(&["balances", "--store", "a", "--store", "b"]).contains("--store"));
        assert!(usage(&["balances", "--store", "memory:", "--table", "t"]).contains("--table"));
        // The operator's commands are sqs-claim's: the line says where they went.
        for command in OPERATOR_COMMANDS {
            for words in [
                &[command][..],
                &[command, "k", "--store", "memory:"],
                &[command, "--help"],
            ] {
                let message = usage(words);
                assert!(
                    message.contains(&format!("run sqs-claim {command}")),
                    "{message}"
                );
            }
        }
        for words in [
            &[][..],
            &["invoke"],
            &["balances", "--bogus"],
            &["prune", "--limit", "0"],
        ] {
            let message = usage(words);
            assert!(!message.contains('\n'), "{words:?}: {message:?}");
            assert!(message.ends_with("(see payments --help)"), "{message}");
        }
    }

    #[test]
    fn help_and_version_are_text_to_print() {
        for (words, want) in [
            (&["--help"][..], "payments invoke EVENT.json"),
            (&["--version"], env!("CARGO_PKG_VERSION")),
            (&["help", "invoke"], "--report"),
            (&["invoke", "--help"], "--report"),
            (&["init", "--help"], "--accounts-table"),
        ] {
            match parse_words(words) {
                Ok(Parsed::Print(text)) => assert!(text.contains(want), "{words:?}: {text}"),
                other => panic!("{words:?}: expected text, got {other:?}"),
            }
        }
    }

    fn settings(vars: &[(&str, &str)]) -> Settings {
        Settings::from_lookup(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
        .expect("valid settings")
    }

    #[test]
    fn the_accounts_table_flag_beats_its_variable() {
        let mut s = settings(&[
            ("SQS_CLAIM_TABLE", "envtable"),
            ("SQS_CLAIM_ACCOUNTS_TABLE", "a"),
        ]);
        let (_, flags) = run_of(&[
            "balances",
            "--store",
            "sqlite:x.db",
            "--accounts-table",
            "b",
        ]);
        apply_flags(&mut s, flags).expect("--store");
        let store = s.cli_store().expect("url");
        assert_eq!(store.claims, StoreUrl::Sqlite("x.db".into()));
        assert_eq!(s.accounts_table.as_deref(), Some("b"));

        let mut s = settings(&[("SQS_CLAIM_STORE", "memory:")]);
        let (_, flags) = run_of(&["balances", "--table", "claims"]);
        apply_flags(&mut s, flags).expect("--table");
        assert_eq!(
            s.cli_store().expect("url").to_string(),
            "dynamodb:claims (accounts: claims-accounts)"
        );
    }
    /// `payments invoke`'s overlap of its start-up check and the batch (time paused: the
    /// sleeps are the order of events, not waits).
    mod check_beside {
        use super::super::check_beside;
        use std::time::Duration;
        use tokio::time::sleep;

        const GRACE: Duration = Duration::from_secs(5);

        async fn after<T>(ms: u64, value: T) -> T {
            sleep(Duration::from_millis(ms)).await;
            value
        }

        #[tokio::test(start_paused = true)]
        async fn a_passed_check_gives_the_batch_whichever_ends_first() {
            let check_first = check_beside(after(10, Ok::<(), &str>(())), after(50, "ran"), GRACE);
            assert_eq!(check_first.await, Ok("ran"));
            let batch_first = check_beside(after(50, Ok::<(), &str>(())), after(10, "ran"), GRACE);
            assert_eq!(batch_first.await, Ok("ran"));
        }

        /// A check that fails first lets the batch end (its claims completed or released), not
        /// dropped mid-write: the mutant that drops it at once fails here.
        #[tokio::test(start_paused = true)]
        async fn a_check_that_fails_first_lets_the_batch_end() {
            let started = tokio::time::Instant::now();
            let got = check_beside(after(10, Err("refused")), after(500, "ran"), GRACE).await;
            assert_eq!(got, Err(("refused", Some("ran"))));
            assert_eq!(started.elapsed(), Duration::from_millis(500));
        }

        #[tokio::test(start_paused = true)]
        async fn a_batch_that_does_not_end_is_dropped_after_the_grace() {
            let started = tokio::time::Instant::now();
            let never = std::future::pending::<&str>();
            let got = check_beside(after(10, Err("dark")), never, GRACE).await;
            assert_eq!(got, Err(("dark", None)));
            assert_eq!(started.elapsed(), Duration::from_millis(10) + GRACE);
        }

        #[tokio::test(start_paused = true)]
        async fn a_check_that_fails_after_the_batch_keeps_its_report() {
            let got = check_beside(after(50, Err("refused")), after(10, "ran"), GRACE).await;
            assert_eq!(got, Err(("refused", Some("ran"))));
        }
    }
}
