//! `payments`: the example app's command line. It runs the reference consumer locally, over
//! an SQS event file, exactly as Lambda would, against an embedded SQLite file (the default),
//! memory, DynamoDB, Redis, PostgreSQL or a tiered store; prints the balances; creates the
//! claims and accounts tables; and offers the operator's commands of `sqs-claim`
//! ([`sqs_claim_cli::command::AdminCommand`]) on the same store.
//!
//! ```text
//! payments invoke EVENT.json [--store URL] [--accounts-table NAME] [--report json]
//! payments balances [--store URL] [--accounts-table NAME]
//! payments init [--store URL] [--accounts-table NAME] [--partition-key K=T] [--sort-key K=T]
//! payments prune|doctor|inspect|release|forget ...   (as sqs-claim's)
//! ```
//!
//! Bad input (a missing file, not JSON, not an SQS event, an unknown store URL, a store that
//! does not answer) is one `error: ...` line on stderr and exit code 1; a usage mistake (an
//! unknown command or flag, a missing value) is one such line and exit code 2. A batch that ran
//! exits 0 even if messages failed: the batch response says which.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use lambda_runtime::{Context, LambdaEvent};
use payments::{BoxLedger, Ledger, Settings};
use sqs_claim::BatchReport;
use sqs_claim::events::SqsEvent;
use sqs_claim_cli::command::{self, AdminCommand, CliError, StoreArgs, StoreFlags};

const PROGRAM: &str = "payments";

const COMMANDS: &str = "invoke, balances, init, prune, doctor, inspect, release or forget";

const USAGE: &str = "\
payments invoke EVENT.json [--store URL] [--report json]
       payments balances [--store URL]
       payments init [--store URL]
       payments prune [--store URL] [--limit N]
       payments doctor [--queue-url URL] [--function NAME] [--store URL] [--report json]
       payments inspect KEY [--namespace NS] [--report json]
       payments inspect --event FILE [--namespace NS] [--report json]
       payments release|forget KEY [--namespace NS] [--yes]
       payments help [COMMAND]";

const AFTER_HELP: &str = "\
The store is --store, else --table (dynamodb:TABLE), else $SQS_CLAIM_STORE, else \
$SQS_CLAIM_TABLE, else sqlite:.sqs-claim/claims.db: a flag beats the environment.

DynamoDB endpoint, region and credentials come from the standard AWS environment \
(AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 for DynamoDB Local). Opening the store and \
checking its tables may take SQS_CLAIM_STARTUP_TIMEOUT_MS (default 15000). The consumer's other \
settings (SQS_CLAIM_KEY, SQS_CLAIM_NAMESPACE, ...) are read from the environment as the Lambda \
reads them. RUST_LOG=info shows the processor's logs on stderr.";

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

#[derive(Debug, Args)]
struct AppArgs {
    #[command(flatten)]
    store: StoreArgs,

    /// The DynamoDB accounts table [default: TABLE-accounts] [env: SQS_CLAIM_ACCOUNTS_TABLE]
    // No `env = ...`: the variable is read once, by the settings (`payments::config`).
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
    /// their tables; DynamoDB, Redis and PostgreSQL tables come from `sqs-claim init`.
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

    #[command(flatten)]
    Admin(AdminCommand),
}

/// `invoke --report`: the one report format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Report {
    /// Every message's outcome, the batch response and the counts, as one JSON object
    Json,
}

/// The flags of the command line: the store's, and the accounts table.
#[derive(Debug, Default, PartialEq, Eq)]
struct Flags {
    store: StoreFlags,
    accounts_table: Option<String>,
}

/// What the command line asks for (the flags boxed: they would make the enum large for the
/// text variant).
type Parsed = command::Parsed<(Command, Box<Flags>)>;

/// Parses the command line. No I/O: help and version come back as text to print.
fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, CliError> {
    let usage = |e: &clap::Error| command::usage_error(e, PROGRAM, COMMANDS);
    let (cli, matches) = match command::parse::<Cli>(args, usage)? {
        command::Parsed::Run(parsed) => parsed,
        command::Parsed::Print(text) => return Ok(Parsed::Print(text)),
    };
    let accounts_table = cli
        .args
        .accounts_table
        .filter(|v| command::from_command_line(&matches, "accounts_table") && !v.trim().is_empty());
    let flags = Flags {
        store: StoreFlags::typed(&matches, cli.args.store, PROGRAM)?,
        accounts_table,
    };
    Ok(Parsed::Run((cli.command, Box::new(flags))))
}

/// The command line's flags over the environment's: a flag beats any variable. Errors name
/// the flag.
fn apply_flags(settings: &mut Settings, flags: Flags) -> Result<(), CliError> {
    flags.store.apply(&mut settings.consumer)?;
    if let Some(accounts) = flags.accounts_table {
        settings.accounts_table = Some(accounts);
    }
    Ok(())
}

/// Reads and checks an SQS event file, as `sqs_claim::lambda::run` does: every failure names
/// the file and what is wrong, never the content (a type error is given by line and column:
/// serde's own message would quote the value, which may be a body).
fn read_event(path: &Path) -> Result<SqsEvent, CliError> {
    sqs_claim::lambda::read_event_file(path).map_err(CliError::failed)
}

/// `invoke` on whichever ledger is open: the batch response (or the `--report json`
/// object) on stdout, the summary on stderr.
async fn invoke(
    ledger: &BoxLedger,
    settings: &Settings,
    event: SqsEvent,
    format: Option<Report>,
    store: &str,
) -> Result<(), CliError> {
    let report = invoke_on(ledger.clone(), settings, event).await?;
    let out = match format {
        Some(Report::Json) => report.to_json(),
        None => serde_json::to_value(report.response()).map_err(CliError::failed)?,
    };
    let text = serde_json::to_string_pretty(&out).map_err(CliError::failed)?;
    println!("{text}");
    eprint!("{}", summary(&report, store));
    Ok(())
}

/// The reference consumer over `event` on `ledger`, as Lambda would run it.
async fn invoke_on(
    ledger: BoxLedger,
    settings: &Settings,
    event: SqsEvent,
) -> Result<BatchReport, CliError> {
    let processor = payments::build(ledger, settings)
        .await
        .map_err(CliError::failed)?;
    // A default context: no deadline (0), as outside Lambda; leases use SQS_CLAIM_LEASE_SECS.
    processor
        .process(LambdaEvent::new(event, Context::default()))
        .await
        .map_err(|e| CliError::failed(format!("the batch was refused: {e:#}")))
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
async fn balances(ledger: &BoxLedger, store: &str) -> Result<(), CliError> {
    let balances = ledger
        .balances()
        .await
        .map_err(|e| CliError::failed(format!("store {store}: {e:#}")))?;
    if balances.is_empty() {
        eprintln!("no accounts yet (store {store})");
    }
    for (account, cents) in balances {
        println!("{account}\t{cents}");
    }
    Ok(())
}

/// `init`: creates the store's tables.
async fn init(ledger: &BoxLedger, store: &str) -> Result<(), CliError> {
    ledger
        .init()
        .await
        .map_err(|e| CliError::failed(format!("store {store}: {e:#}")))?;
    eprintln!("initialized {store}");
    Ok(())
}

async fn run(command: Command, flags: Flags) -> Result<(), CliError> {
    let mut settings = Settings::from_env().map_err(CliError::failed)?;
    // Metrics lines are for Lambda's log pipeline; the CLI's output is its report.
    settings.metrics_namespace = None;
    // Read the event before touching the store: a typo in the path should not create files.
    let event = match &command {
        Command::Invoke { event, .. } => Some(read_event(event)?),
        _ => None,
    };
    apply_flags(&mut settings, flags)?;
    let app = settings.cli_store().map_err(CliError::failed)?;
    let store = app.to_string();
    let cannot_open = |e| CliError::failed(format!("cannot open store {store}: {e:#}"));
    // Opening the store and its readiness check are bounded (SQS_CLAIM_STARTUP_TIMEOUT_MS).
    let startup = settings.startup_timeout;
    match command {
        Command::Invoke { report, .. } => {
            let ledger = payments::open_prepared(&app, startup)
                .await
                .map_err(cannot_open)?;
            let event = event.unwrap_or_default();
            invoke(&ledger, &settings, event, report, &store).await
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
        Command::Admin(admin) => {
            // The operator's commands see this app's namespace when the environment names
            // none, as its consumer does.
            let mut consumer = settings.consumer.clone();
            consumer
                .namespace
                .get_or_insert_with(|| settings.namespace().to_owned());
            admin.run(&consumer, &app.claims, &store).await
        }
    }
}

fn main() -> ExitCode {
    command::main(parse(std::env::args_os()), |(command, flags)| {
        run(command, *flags)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use payments::config::StoreUrl;

    fn parse_words(words: &[&str]) -> Result<Parsed, CliError> {
        parse(
            std::iter::once("payments")
                .chain(words.iter().copied())
                .map(OsString::from),
        )
    }

    fn run_of(words: &[&str]) -> (Command, Flags) {
        match parse_words(words) {
            Ok(Parsed::Run((command, flags))) => (command, *flags),
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
        let (command, _) = run_of(&["prune"]);
        assert!(matches!(
            command,
            Command::Admin(AdminCommand::Prune {
                limit: command::DEFAULT_PRUNE_LIMIT
            })
        ));
    }

    #[test]
    fn usage_mistakes_are_one_line_in_the_old_words() {
        assert!(usage(&[]).contains("missing command: invoke, balances, init"));
        assert!(usage(&["invoke"]).contains("invoke needs an event file: payments invoke"));
        assert!(usage(&["balances", "--store"]).contains("--store needs a value"));
        assert!(usage(&["balances", "--bogus"]).contains("--bogus"));
        assert!(usage(&["frobnicate"]).contains("frobnicate"));
        assert!(usage(&["invoke", "e.json", "--report", "yaml"]).contains("yaml"));
        assert!(usage(&["prune", "--limit", "0"]).contains("--limit"));
        assert!(usage(&["balances", "--limit", "5"]).contains("--limit"));
        assert!(usage(&["balances", "--store", "a", "--store", "b"]).contains("--store"));
        assert!(usage(&["balances", "--store", "memory:", "--table", "t"]).contains("--table"));
        for words in [&[][..], &["invoke"], &["balances", "--bogus"]] {
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
            (&["prune", "--help"], "--limit"),
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
}
