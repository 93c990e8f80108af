//! The commands themselves, for the `sqs-claim` binary and for a team's binary that offers them
//! beside its own (flatten [`AdminCommand`] into its commands): the store flags and how they
//! beat the environment (the library's [`StoreFlags`]), `init`, `prune`, `doctor` and the
//! operator's commands for one key, and the one-line errors with their exit codes. The example
//! app's `payments` does not: it is built on the library alone.

use std::fmt;
use std::process::ExitCode;
use std::time::SystemTime;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, Subcommand};

use sqs_claim::store::{BoxStore, StoreAdmin};

use crate::{Settings, StoreUrl, doctor, operator};
pub use sqs_claim::settings::StoreFlags;

/// The help of `--store`, with every URL form.
pub const STORE_HELP: &str = "Where claims live: sqlite:PATH | memory: | dynamodb:TABLE | \
redis://HOST[:PORT][/DB][?prefix=P] | rediss://... (TLS) | postgres://USER@HOST[:PORT]/DB | \
tiered:REDIS_URL|DURABLE_URL [default: sqlite:.sqs-claim/claims.db] [env: SQS_CLAIM_STORE]";

/// Which store to use: flags of every command, each with an environment fallback.
#[derive(Debug, Args)]
pub struct StoreArgs {
    // The help is a string, not a doc comment: rustdoc would read its brackets as links. No
    // `env = ...` on these flags: their variables are read once, by the settings
    // (`sqs_claim::settings::Settings`), and a flag beats them there ([`apply_store_flags`]).
    // The help still names each flag's variable, as clap's `env` did, for whoever reads it.
    #[arg(long, global = true, value_name = "URL", help = STORE_HELP)]
    store: Option<String>,

    /// The DynamoDB claims table, when no store URL is given: the same as --store dynamodb:NAME
    /// [env: SQS_CLAIM_TABLE]
    #[arg(long, global = true, value_name = "NAME")]
    table: Option<String>,

    /// The DynamoDB claims table's partition key, NAME=TEMPLATE, for a table shared with other
    /// items: pk=CLAIM#{key} [default: id={key}] [env: SQS_CLAIM_DYNAMODB_PARTITION_KEY]
    #[arg(long, global = true, value_name = "NAME=TEMPLATE")]
    partition_key: Option<String>,

    /// The DynamoDB claims table's sort key, NAME=TEMPLATE: sk=CLAIM [default: none] [env:
    /// SQS_CLAIM_DYNAMODB_SORT_KEY]
    #[arg(long, global = true, value_name = "NAME=TEMPLATE")]
    sort_key: Option<String>,
}

impl StoreArgs {
    /// The flags that `matches` says were typed (before or after the command), not taken from
    /// their variables: the library's [`StoreFlags`], which applies them over the
    /// environment's settings ([`apply_store_flags`]). `--store` and `--table` together are a
    /// usage mistake.
    pub fn typed(self, matches: &ArgMatches, program: &str) -> Result<StoreFlags, CliError> {
        let mut flags = StoreFlags::default();
        flags.store = typed(matches, "store", self.store);
        flags.table = typed(matches, "table", self.table);
        flags.partition_key = typed(matches, "partition_key", self.partition_key);
        flags.sort_key = typed(matches, "sort_key", self.sort_key);
        if flags.names_the_store_twice() {
            return Err(CliError::usage(
                program,
                "--store and --table both name the store: give one",
            ));
        }
        Ok(flags)
    }
}

/// [`StoreFlags::apply`]: a flag beats any variable; the error (exit 1) names the flag.
pub fn apply_store_flags(flags: StoreFlags, settings: &mut Settings) -> Result<(), CliError> {
    flags.apply(settings).map_err(CliError::failed)
}

/// `value` if the flag `id` was typed and is not blank.
fn typed(matches: &ArgMatches, id: &str, value: Option<String>) -> Option<String> {
    value.filter(|v| from_command_line(matches, id) && !v.trim().is_empty())
}

/// Whether the global flag `id` was typed (before or after the command), not taken from its
/// environment variable.
pub fn from_command_line(matches: &ArgMatches, id: &str) -> bool {
    let typed = |m: &ArgMatches| m.value_source(id) == Some(ValueSource::CommandLine);
    typed(matches) || matches.subcommand().is_some_and(|(_, sub)| typed(sub))
}

/// The commands that need nothing but the claims table, whatever the consumer: flattened into
/// `sqs-claim`'s commands after `init`, and into an app's.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
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
    Doctor(doctor::DoctorArgs),

    /// The operator's commands for one key: inspect, release, forget
    #[command(flatten)]
    Operator(operator::OperatorCommand),
}

/// Rows deleted by one `prune` when `--limit` is not given.
pub const DEFAULT_PRUNE_LIMIT: u32 = 10_000;

impl AdminCommand {
    /// Runs the command on the claims store `url` (named `store` in messages), under
    /// `settings` (the consumer's, from the environment, with the flags applied).
    pub async fn run(
        self,
        settings: &Settings,
        url: &StoreUrl,
        store: &str,
    ) -> Result<(), CliError> {
        let cannot_open = |e| CliError::failed(format!("cannot open store {store}: {e:#}"));
        match self {
            AdminCommand::Prune { limit } => {
                let claims = url.open().await.map_err(cannot_open)?;
                prune(&claims, store, limit).await
            }
            AdminCommand::Doctor(args) => doctor::run(&args, settings, url)
                .await
                .map_err(CliError::failed),
            AdminCommand::Operator(command) => {
                // Bounded, as the consumer's start: SQS_CLAIM_STARTUP_TIMEOUT_MS.
                let claims = url
                    .open_checked(settings.startup_timeout)
                    .await
                    .map_err(cannot_open)?;
                operator::run(command, &claims, settings, store)
                    .await
                    .map_err(|e| CliError {
                        code: if e.usage { 2 } else { 1 },
                        message: e.message,
                    })
            }
        }
    }
}

/// `init`: creates the claims table (or schema) if missing, migrates an older one.
pub async fn init(url: &StoreUrl, store: &str) -> Result<(), CliError> {
    let claims = url
        .open()
        .await
        .map_err(|e| CliError::failed(format!("cannot open store {store}: {e:#}")))?;
    claims
        .init()
        .await
        .map_err(|e| CliError::failed(format!("store {store}: {e:#}")))?;
    eprintln!("initialized {store}");
    Ok(())
}

/// `prune`: deletes at most `limit` expired claim records, prints how many.
async fn prune(claims: &BoxStore, store: &str, limit: u32) -> Result<(), CliError> {
    let pruned = claims
        .prune_expired(SystemTime::now(), limit)
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

/// An error for the user: printed as one `error: ...` line by [`fail`].
#[derive(Debug)]
pub struct CliError {
    /// The line, without `error: `.
    pub message: String,
    /// The exit code: 2 for a usage mistake, 1 for anything else.
    pub code: u8,
}

impl CliError {
    /// A usage mistake of `program` (exit 2), with a pointer to its help.
    pub fn usage(program: &str, message: impl Into<String>) -> Self {
        CliError {
            message: format!("{} (see {program} --help)", message.into()),
            code: 2,
        }
    }

    /// Exit 1 with `message`, its causes included (`{:#}`: a `sqs_claim::Error` prints its
    /// chain that way; for other types it is their plain message).
    pub fn failed(message: impl fmt::Display) -> Self {
        CliError {
            message: format!("{message:#}"),
            code: 1,
        }
    }
}

/// clap's error as one line, in the words users may have scripted around. `commands` lists the
/// program's commands for a missing one (`invoke, balances or init`).
pub fn usage_error(e: &clap::Error, program: &str, commands: &str) -> CliError {
    let context = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => Some(v.join(", ")),
        _ => None,
    };
    let arg = context(ContextKind::InvalidArg).unwrap_or_default();
    let message = match e.kind() {
        // clap's derive answers a bare command with its help (and exit code 2); one line says
        // what is missing.
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            format!("missing command: {commands}")
        }
        ErrorKind::MissingRequiredArgument if arg.contains("EVENT") => {
            format!("invoke needs an event file: {program} invoke EVENT.json")
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
    CliError::usage(program, message)
}

/// What a command line asks for: something to run, or text to print (help, version).
#[derive(Debug)]
pub enum Parsed<T> {
    /// Run this.
    Run(T),
    /// Print this on stdout and exit 0.
    Print(String),
}

/// Parses `args` with the clap command `P`, without I/O: help and version come back as text to
/// print, any other clap error goes through `usage` (usually [`usage_error`]) to become one
/// line. The matches come with the value, to tell typed flags from their variables
/// ([`StoreArgs::typed`]).
pub fn parse<P: clap::Parser>(
    args: impl IntoIterator<Item = std::ffi::OsString>,
    usage: impl FnOnce(&clap::Error) -> CliError,
) -> Result<Parsed<(P, ArgMatches)>, CliError> {
    let parsed = P::command()
        .try_get_matches_from(args)
        .and_then(|matches| Ok((P::from_arg_matches(&matches)?, matches)));
    match parsed {
        Ok(parsed) => Ok(Parsed::Run(parsed)),
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            Ok(Parsed::Print(e.render().to_string()))
        }
        Err(e) => Err(usage(&e)),
    }
}

/// A binary's whole `main` after parsing: print the text, or set up logging and run the
/// command on a current-thread runtime; every failure one line ([`fail`]) and its exit code.
pub fn main<T, F>(parsed: Result<Parsed<T>, CliError>, run: impl FnOnce(T) -> F) -> ExitCode
where
    F: Future<Output = Result<(), CliError>>,
{
    let command = match parsed {
        Ok(Parsed::Run(command)) => command,
        Ok(Parsed::Print(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(e) => return fail(e),
    };
    let ran = start_logging().and_then(|()| block_on(run(command)));
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// Sets up logging when `RUST_LOG` is set: the library's set-up (Lambda's log controls, no
/// raw-event lines) on stderr, since stdout is the command's output; colour codes only on a
/// terminal, so `2> run.log` or a pipe to grep stays plain text.
pub fn start_logging() -> Result<(), CliError> {
    if std::env::var_os("RUST_LOG").is_some_and(|v| !v.is_empty()) {
        let logging = sqs_claim::logging::Logging::from_env()
            .stderr()
            .ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
        logging
            .init()
            .map_err(|e| CliError::failed(e.to_string()))?;
    }
    Ok(())
}

/// Runs `work` on a current-thread runtime: what one command needs.
pub fn block_on<T>(work: impl Future<Output = Result<T, CliError>>) -> Result<T, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failed(format!("cannot start the async runtime: {e}")))?
        .block_on(work)
}

/// Prints the error as exactly one line (causes from SDKs can span lines) and gives its exit
/// code.
pub fn fail(e: CliError) -> ExitCode {
    let one_line = e.message.split_whitespace().collect::<Vec<_>>().join(" ");
    eprintln!("error: {one_line}");
    ExitCode::from(e.code)
}
