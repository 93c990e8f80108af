//! `sqs-claim`: run the reference consumer locally, over an SQS event file, exactly as Lambda
//! would, against an embedded SQLite file (the default), memory, DynamoDB, Redis, PostgreSQL or
//! a tiered store.
//!
//! ```text
//! sqs-claim invoke EVENT.json [--store URL] [--accounts-table NAME] [--report json]
//! sqs-claim balances [--store URL] [--accounts-table NAME]
//! sqs-claim init [--store URL] [--accounts-table NAME] [--partition-key K=T] [--sort-key K=T]
//! sqs-claim prune [--store URL] [--limit N]
//! sqs-claim doctor [--queue-url URL] [--function NAME] [--store URL] [--report json] [--strict]
//! sqs-claim inspect|release|forget KEY [--namespace NS] [--store URL]
//! ```
//!
//! Bad input (a missing file, not JSON, not an SQS event, an unknown store URL, a store that
//! does not answer) is one `error: ...` line on stderr and exit code 1; a usage mistake (an
//! unknown command or flag, a missing value) is one such line and exit code 2. A batch that ran
//! exits 0 even if messages failed: the batch response says which.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use lambda_runtime::{Context, LambdaEvent};
use payments::{AnyLedger, Ledger, Settings, StoreUrl};
use sqs_claim::BatchReport;
use sqs_claim::events::SqsEvent;

const USAGE: &str = "\
sqs-claim invoke EVENT.json [--store URL] [--report json]
       sqs-claim balances [--store URL]
       sqs-claim init [--store URL]
       sqs-claim prune [--store URL] [--limit N]
       sqs-claim doctor [--queue-url URL] [--function NAME] [--store URL] [--report json]
       sqs-claim inspect KEY [--namespace NS] [--report json]
       sqs-claim release|forget KEY [--namespace NS] [--yes]
       sqs-claim help [COMMAND]";

const AFTER_HELP: &str = "\
The store is --store, else --table (dynamodb:TABLE), else $SQS_CLAIM_STORE, else \
$SQS_CLAIM_TABLE, else sqlite:.sqs-claim/claims.db: a flag beats the environment.

DynamoDB endpoint, region and credentials come from the standard AWS environment \
(AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 for DynamoDB Local). Opening the store and \
checking its tables may take SQS_CLAIM_STARTUP_TIMEOUT_MS (default 5000). The consumer's other \
settings (SQS_CLAIM_KEY, SQS_CLAIM_NAMESPACE, ...) are read from the environment as the Lambda \
reads them. RUST_LOG=info shows the processor's logs on stderr.";

const STORE_HELP: &str = "Where claims and balances live: sqlite:PATH | memory: | \
dynamodb:TABLE | redis://HOST[:PORT][/DB][?prefix=P] | rediss://... (TLS) | \
postgres://USER@HOST[:PORT]/DB | tiered:REDIS_URL|DURABLE_URL [default: \
sqlite:.sqs-claim/claims.db]";

/// Run the sqs-claim reference consumer (a payments example) locally.
#[derive(Debug, Parser)]
#[command(
    name = "sqs-claim",
    version,
    override_usage = USAGE,
    after_help = AFTER_HELP,
    subcommand_required = true
)]
struct Cli {
    #[command(flatten)]
    store: StoreArgs,
    #[command(subcommand)]
    command: Command,
}

/// Which store to use: flags of every command, each with an environment fallback.
#[derive(Debug, Args)]
struct StoreArgs {
    // The help is a string, not a doc comment: rustdoc would read its brackets as links. The
    // value is hidden in help: a database URL can carry a password.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        help = STORE_HELP,
        env = "SQS_CLAIM_STORE",
        hide_env_values = true
    )]
    store: Option<String>,

    /// The DynamoDB claims table, when no store URL is given: the same as --store dynamodb:NAME
    #[arg(long, global = true, value_name = "NAME", env = "SQS_CLAIM_TABLE")]
    table: Option<String>,

    /// The DynamoDB accounts table [default: TABLE-accounts]
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        env = "SQS_CLAIM_ACCOUNTS_TABLE"
    )]
    accounts_table: Option<String>,

    /// The DynamoDB claims table's partition key, NAME=TEMPLATE, for a table shared with other
    /// items: pk=CLAIM#{key} [default: id={key}]
    #[arg(
        long,
        global = true,
        value_name = "NAME=TEMPLATE",
        env = "SQS_CLAIM_DYNAMODB_PARTITION_KEY"
    )]
    partition_key: Option<String>,

    /// The DynamoDB claims table's sort key, NAME=TEMPLATE: sk=CLAIM [default: none]
    #[arg(
        long,
        global = true,
        value_name = "NAME=TEMPLATE",
        env = "SQS_CLAIM_DYNAMODB_SORT_KEY"
    )]
    sort_key: Option<String>,
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

    /// Creates the store's tables (idempotent)
    ///
    /// DynamoDB tables are never created otherwise: `invoke` and the Lambda consumer only
    /// check that they exist.
    Init,

    /// Deletes expired claim records and prints how many
    ///
    /// For SQLite, PostgreSQL and the tiered store's durable tier. DynamoDB and Redis expire
    /// records by TTL: nothing to do there. Expired records already count as absent: pruning
    /// only reclaims space, so schedule it as often as the table's growth needs.
    Prune {
        /// At most N records per run
        #[arg(
            long,
            value_name = "N",
            default_value_t = DEFAULT_PRUNE_LIMIT,
            value_parser = clap::value_parser!(u32).range(1..)
        )]
        limit: u32,
    },

    /// Checks the queue, the event source mapping and the claims table against the rules
    /// the claim protocol needs
    ///
    /// One line per rule on stdout (ok, warn, fail or skip, the values seen, what to
    /// change), a summary on stderr. Exits 1 if a rule fails (with --strict, also if one
    /// warns). A value no API, flag or template gives is a skip line saying how to give it.
    /// SQS, Lambda and DynamoDB endpoints come from the standard AWS environment
    /// (AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL_LAMBDA, AWS_ENDPOINT_URL_DYNAMODB).
    Doctor(payments::doctor::DoctorArgs),
    /// The operator's commands for one key: inspect, release, forget
    #[command(flatten)]
    Operator(payments::operator::OperatorCommand),
}

/// `invoke --report`: the one report format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Report {
    /// Every message's outcome, the batch response and the counts, as one JSON object
    Json,
}

/// Rows deleted by one `prune` when `--limit` is not given.
const DEFAULT_PRUNE_LIMIT: u32 = 10_000;

/// An error for the user: printed as one `error: ...` line.
#[derive(Debug)]
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

    /// Exit 1 with `message`, its causes included (`{:#}`: a `sqs_claim::Error` prints its
    /// chain that way; for other types it is their plain message).
    fn failed(message: impl fmt::Display) -> Self {
        CliError {
            message: format!("{message:#}"),
            code: 1,
        }
    }
}

/// The store flags given on the command line (not from the environment: those are already in
/// [`Settings`], whose errors name the variable).
#[derive(Debug, Default, PartialEq, Eq)]
struct StoreFlags {
    store: Option<String>,
    table: Option<String>,
    accounts_table: Option<String>,
    partition_key: Option<String>,
    sort_key: Option<String>,
}

/// What the command line asks for: a command to run, or text to print (help, version).
#[derive(Debug)]
enum Parsed {
    /// The flags boxed: they would make the enum large for the text variant.
    Run(Command, Box<StoreFlags>),
    Print(String),
}

/// Parses the command line. No I/O: help and version come back as text to print.
fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, CliError> {
    let parsed = Cli::command()
        .try_get_matches_from(args)
        .and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, matches)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            return Ok(Parsed::Print(e.render().to_string()));
        }
        Err(e) => return Err(usage_error(&e)),
    };
    let given = |id: &str, value: Option<String>| {
        value.filter(|v| from_command_line(&matches, id) && !v.trim().is_empty())
    };
    let flags = StoreFlags {
        store: given("store", cli.store.store),
        table: given("table", cli.store.table),
        accounts_table: given("accounts_table", cli.store.accounts_table),
        partition_key: given("partition_key", cli.store.partition_key),
        sort_key: given("sort_key", cli.store.sort_key),
    };
    if flags.store.is_some() && flags.table.is_some() {
        return Err(CliError::usage(
            "--store and --table both name the store: give one",
        ));
    }
    Ok(Parsed::Run(cli.command, Box::new(flags)))
}

/// Whether the global flag `id` was typed (before or after the command), not taken from its
/// environment variable.
fn from_command_line(matches: &ArgMatches, id: &str) -> bool {
    let typed = |m: &ArgMatches| m.value_source(id) == Some(ValueSource::CommandLine);
    typed(matches) || matches.subcommand().is_some_and(|(_, sub)| typed(sub))
}

/// clap's error as one line, in the words the hand-written parser used where users may have
/// scripted around them.
fn usage_error(e: &clap::Error) -> CliError {
    let context = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => Some(v.join(", ")),
        _ => None,
    };
    let arg = context(ContextKind::InvalidArg).unwrap_or_default();
    let message = match e.kind() {
        // clap's derive answers a bare `sqs-claim` with its help (and exit code 2); the old
        // parser said what was missing, in one line.
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            "missing command: invoke, balances, init, prune, doctor, inspect, release or forget"
                .into()
        }
        ErrorKind::MissingRequiredArgument if arg.contains("EVENT") => {
            "invoke needs an event file: sqs-claim invoke EVENT.json".into()
        }
        // clap puts the missing argument on a second line, which one line would drop.
        ErrorKind::MissingRequiredArgument if !arg.is_empty() => {
            format!("missing argument {arg}")
        }
        ErrorKind::InvalidValue if context(ContextKind::InvalidValue).as_deref() == Some("") => {
            let flag = arg.split_whitespace().next().unwrap_or(&arg);
            format!("{flag} needs a value")
        }
        _ => {
            let rendered = e.render().to_string();
            let first = rendered.lines().next().unwrap_or_default();
            first.strip_prefix("error: ").unwrap_or(first).to_owned()
        }
    };
    CliError::usage(message)
}

/// The command line's store flags over the environment's: a flag beats any variable, so
/// `--table` drops an `SQS_CLAIM_STORE` from the environment and `--store` an
/// `SQS_CLAIM_TABLE`. Errors name the flag.
fn apply_flags(settings: &mut Settings, flags: StoreFlags) -> Result<(), CliError> {
    if let Some(store) = flags.store {
        let url =
            StoreUrl::parse(&store).map_err(|e| CliError::failed(format!("--store: {e:#}")))?;
        settings.store = Some(url);
        settings.table = None;
    } else if let Some(table) = flags.table {
        StoreUrl::parse(&format!("dynamodb:{table}"))
            .map_err(|e| CliError::failed(format!("--table: {e:#}")))?;
        settings.store = None;
        settings.table = Some(table.trim().to_owned());
    }
    if let Some(accounts) = flags.accounts_table {
        settings.accounts_table = Some(accounts);
    }
    if flags.partition_key.is_some() || flags.sort_key.is_some() {
        // Each flag beats its own variable; the other half of the layout may come from the
        // environment, and the two are checked together.
        let (env_partition, env_sort) = match &settings.dynamodb_keys {
            Some(schema) => {
                let (partition, sort) = payments::config::key_layout_values(schema);
                (Some(partition), sort)
            }
            None => (None, None),
        };
        let pick =
            |flag: &Option<String>, name: &'static str, env: Option<String>, var| match (flag, env)
            {
                (Some(value), _) => Some((name.to_owned(), value.clone())),
                (None, Some(value)) => Some((format!("environment variable {var}"), value)),
                (None, None) => None,
            };
        let partition = pick(
            &flags.partition_key,
            "--partition-key",
            env_partition,
            payments::config::PARTITION_KEY_VAR,
        );
        let sort = pick(
            &flags.sort_key,
            "--sort-key",
            env_sort,
            payments::config::SORT_KEY_VAR,
        );
        settings.dynamodb_keys = payments::config::key_layout(as_refs(&partition), as_refs(&sort))
            .map_err(CliError::failed)?;
    }
    Ok(())
}

/// A setting as [`payments::config::key_layout`] takes it: (where it came from, its value).
fn as_refs(setting: &Option<(String, String)>) -> Option<(&str, &str)> {
    setting
        .as_ref()
        .map(|(source, value)| (source.as_str(), value.as_str()))
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
    ledger: &AnyLedger,
    settings: &Settings,
    event: SqsEvent,
    format: Option<Report>,
    store: &str,
) -> Result<(), CliError> {
    let report = payments::with_ledger!(ledger, l => invoke_on(l.clone(), settings, event).await)?;
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
async fn invoke_on<L: Ledger>(
    ledger: L,
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
async fn balances(ledger: &AnyLedger, store: &str) -> Result<(), CliError> {
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
async fn init(ledger: &AnyLedger, store: &str) -> Result<(), CliError> {
    ledger
        .init()
        .await
        .map_err(|e| CliError::failed(format!("store {store}: {e:#}")))?;
    eprintln!("initialized {store}");
    Ok(())
}

/// `prune`: deletes at most `limit` expired claim records, prints how many.
async fn prune(ledger: &AnyLedger, store: &str, limit: u32) -> Result<(), CliError> {
    let pruned = ledger
        .prune_expired(std::time::SystemTime::now(), limit)
        .await
        .map_err(|e| CliError::failed(format!("store {store}: {e:#}")))?;
    match pruned {
        Some(n) => {
            println!("{n}");
            eprintln!("pruned {n} expired claim records from {store} (at most {limit} per run)");
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

async fn run(command: Command, flags: StoreFlags) -> Result<(), CliError> {
    let mut settings = Settings::from_env().map_err(CliError::failed)?;
    // Metrics lines are for Lambda's log pipeline; the CLI's output is its report.
    settings.metrics_namespace = None;
    // Read the event before touching the store: a typo in the path should not create files.
    let event = match &command {
        Command::Invoke { event, .. } => Some(read_event(event)?),
        _ => None,
    };
    apply_flags(&mut settings, flags)?;
    let url = settings.cli_store().map_err(CliError::failed)?;
    let store = url.to_string();
    let cannot_open = |e| CliError::failed(format!("cannot open store {store}: {e:#}"));
    // Opening the store and its readiness check are bounded (SQS_CLAIM_STARTUP_TIMEOUT_MS).
    let startup = settings.startup_timeout;
    match command {
        Command::Invoke { report, .. } => {
            let ledger = AnyLedger::open_prepared(&url, startup)
                .await
                .map_err(cannot_open)?;
            let event = event.unwrap_or_default();
            invoke(&ledger, &settings, event, report, &store).await
        }
        Command::Balances => {
            let ledger = AnyLedger::open_prepared(&url, startup)
                .await
                .map_err(cannot_open)?;
            balances(&ledger, &store).await
        }
        Command::Init => {
            let ledger = AnyLedger::open(&url).await.map_err(cannot_open)?;
            init(&ledger, &store).await
        }
        Command::Prune { limit } => {
            let ledger = AnyLedger::open(&url).await.map_err(cannot_open)?;
            prune(&ledger, &store, limit).await
        }
        Command::Doctor(args) => payments::doctor::run(&args, &settings, &url)
            .await
            .map_err(CliError::failed),
        Command::Operator(command) => {
            let ledger = AnyLedger::open_prepared(&url, startup)
                .await
                .map_err(cannot_open)?;
            payments::operator::run(command, &ledger, &settings, &store)
                .await
                .map_err(|e| match e.usage {
                    true => CliError::usage(e.message),
                    false => CliError::failed(e.message),
                })
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
    if std::env::var_os("RUST_LOG").is_some_and(|v| !v.is_empty()) {
        // The library's set-up (Lambda's log controls, no raw-event lines), on stderr: stdout
        // is the command's output. Colour codes only on a terminal: `2> run.log` or a pipe to
        // grep stays plain text.
        let logging = sqs_claim::logging::Logging::from_env()
            .stderr()
            .ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
        if let Err(e) = logging.init() {
            return fail(CliError::failed(e.to_string()));
        }
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
    match runtime.block_on(run(command, flags)) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_words(words: &[&str]) -> Result<Parsed, CliError> {
        parse(
            std::iter::once("sqs-claim")
                .chain(words.iter().copied())
                .map(OsString::from),
        )
    }

    fn run_of(words: &[&str]) -> (Command, StoreFlags) {
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
            assert_eq!(flags.store.as_deref(), Some("memory:"), "{words:?}");
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
        assert_eq!(
            flags,
            StoreFlags {
                store: None,
                table: Some("claims".into()),
                accounts_table: Some("ledger".into()),
                ..StoreFlags::default()
            }
        );
        // An empty value counts as not given, as before.
        assert_eq!(
            run_of(&["balances", "--store", ""]).1,
            StoreFlags::default()
        );
        let (command, _) = run_of(&["prune"]);
        assert!(matches!(
            command,
            Command::Prune {
                limit: DEFAULT_PRUNE_LIMIT
            }
        ));
    }

    #[test]
    fn usage_mistakes_are_one_line_in_the_old_words() {
        assert!(usage(&[]).contains("missing command"));
        assert!(usage(&["invoke"]).contains("invoke needs an event file"));
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
        }
    }

    #[test]
    fn help_and_version_are_text_to_print() {
        for (words, want) in [
            (&["--help"][..], "sqs-claim invoke EVENT.json"),
            (&["--version"], env!("CARGO_PKG_VERSION")),
            (&["help", "invoke"], "--report"),
            (&["invoke", "--help"], "--report"),
            (&["prune", "--help"], "--limit"),
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

    /// `--partition-key` and `--sort-key` set the DynamoDB key layout, each over its own
    /// variable (the other half may come from the environment), checked together; a bad value
    /// names the flag.
    #[test]
    fn the_key_layout_flags_beat_their_variables() {
        use sqs_claim::store::dynamodb::DynamoDbKeySchema;
        let (_, flags) = run_of(&[
            "init",
            "--table",
            "app",
            "--partition-key",
            "pk=CLAIM#{key}",
            "--sort-key",
            "sk=CLAIM",
        ]);
        assert_eq!(flags.partition_key.as_deref(), Some("pk=CLAIM#{key}"));
        assert_eq!(flags.sort_key.as_deref(), Some("sk=CLAIM"));
        let mut s = settings(&[]);
        apply_flags(&mut s, flags).expect("valid flags");
        let single_table =
            DynamoDbKeySchema::partition("pk", "CLAIM#{key}").with_sort("sk", "CLAIM");
        assert_eq!(
            s.cli_store().expect("url"),
            StoreUrl::DynamoDb {
                table: "app".into(),
                accounts_table: "app-accounts".into(),
                key_schema: Some(single_table.clone()),
            }
        );
        // The flag replaces its variable only: the sort key stays the environment's.
        let mut s = settings(&[
            ("SQS_CLAIM_DYNAMODB_PARTITION_KEY", "id={key}"),
            ("SQS_CLAIM_DYNAMODB_SORT_KEY", "sk=CLAIM"),
        ]);
        let flags = StoreFlags {
            partition_key: Some("pk=CLAIM#{key}".into()),
            ..StoreFlags::default()
        };
        apply_flags(&mut s, flags).expect("valid");
        assert_eq!(s.dynamodb_keys, Some(single_table));
        // A bad flag names the flag, not the variable.
        let mut s = settings(&[]);
        let flags = StoreFlags {
            partition_key: Some("pk=CLAIM".into()),
            ..StoreFlags::default()
        };
        let err = apply_flags(&mut s, flags).expect_err("no {key}");
        assert!(
            err.message.contains("--partition-key") && err.message.contains("{key}"),
            "{}",
            err.message
        );
        let mut s = settings(&[]);
        let flags = StoreFlags {
            sort_key: Some("sk".into()),
            partition_key: Some("pk={key}".into()),
            ..StoreFlags::default()
        };
        let err = apply_flags(&mut s, flags).expect_err("not NAME=TEMPLATE");
        assert!(err.message.contains("--sort-key"), "{}", err.message);
    }

    #[test]
    fn a_flag_beats_the_environment() {
        let env = [
            ("SQS_CLAIM_STORE", "memory:"),
            ("SQS_CLAIM_TABLE", "envtable"),
        ];
        let mut s = settings(&env);
        apply_flags(&mut s, StoreFlags::default()).expect("no flags");
        assert_eq!(s.cli_store().expect("url"), StoreUrl::Memory);

        let mut s = settings(&env);
        let flags = StoreFlags {
            table: Some("claims".into()),
            ..StoreFlags::default()
        };
        apply_flags(&mut s, flags).expect("--table");
        assert_eq!(
            s.cli_store().expect("url"),
            StoreUrl::DynamoDb {
                table: "claims".into(),
                accounts_table: "claims-accounts".into(),
                key_schema: None,
            }
        );

        let mut s = settings(&[
            ("SQS_CLAIM_TABLE", "envtable"),
            ("SQS_CLAIM_ACCOUNTS_TABLE", "a"),
        ]);
        let flags = StoreFlags {
            store: Some("sqlite:x.db".into()),
            accounts_table: Some("b".into()),
            ..StoreFlags::default()
        };
        apply_flags(&mut s, flags).expect("--store");
        assert_eq!(s.cli_store().expect("url"), StoreUrl::Sqlite("x.db".into()));
        assert_eq!(s.accounts_table.as_deref(), Some("b"));

        let mut s = settings(&[]);
        let bad = StoreFlags {
            table: Some("a b".into()),
            ..StoreFlags::default()
        };
        let err = apply_flags(&mut s, bad).expect_err("not a table name");
        assert!(err.message.starts_with("--table: "), "{}", err.message);
    }
}
