//! `sqs-claim`: the operator's commands for a claims table, on any store.
//!
//! ```text
//! sqs-claim init [--store URL] [--partition-key K=T] [--sort-key K=T]
//! sqs-claim prune [--store URL] [--limit N]
//! sqs-claim doctor [--queue-url URL] [--function NAME] [--store URL] [--report json] [--strict]
//! sqs-claim inspect|release|forget KEY [--namespace NS] [--store URL]
//! sqs-claim inspect --event FILE [--namespace NS] [--store URL] [--report json]
//! ```
//!
//! Bad input (an unknown store URL, a store that does not answer, a key with no record) is one
//! `error: ...` line on stderr and exit code 1; a usage mistake (an unknown command or flag, a
//! missing value) is one such line and exit code 2.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};
use sqs_claim::settings::Settings;
use sqs_claim_cli::command::{self, AdminCommand, CliError, StoreArgs, StoreFlags};

const PROGRAM: &str = "sqs-claim";

const COMMANDS: &str = "init, prune, doctor, inspect, release or forget";

const USAGE: &str = "\
sqs-claim init [--store URL] [--partition-key K=T] [--sort-key K=T]
       sqs-claim prune [--store URL] [--limit N]
       sqs-claim doctor [--queue-url URL] [--function NAME] [--store URL] [--report json]
       sqs-claim inspect KEY [--namespace NS] [--report json]
       sqs-claim inspect --event FILE [--namespace NS] [--report json]
       sqs-claim release|forget KEY [--namespace NS] [--yes]
       sqs-claim help [COMMAND]";

const AFTER_HELP: &str = "\
The store is --store, else --table (dynamodb:TABLE), else $SQS_CLAIM_STORE, else \
$SQS_CLAIM_TABLE, else sqlite:.sqs-claim/claims.db: a flag beats the environment.

DynamoDB endpoint, region and credentials come from the standard AWS environment \
(AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 for DynamoDB Local). Opening the store and \
checking its table may take SQS_CLAIM_STARTUP_TIMEOUT_MS (default 15000). The consumer's other \
settings (SQS_CLAIM_NAMESPACE, SQS_CLAIM_TTL_SECS, SQS_CLAIM_POWERTOOLS_*, ...) are read from \
the environment as the consumer reads them. RUST_LOG=info shows the library's logs on stderr.";

/// The operator's commands for sqs-claim claims tables, on any store.
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

#[derive(Debug, Subcommand)]
enum Command {
    /// Creates the claims table (idempotent), or migrates an older one
    ///
    /// DynamoDB: the table, with the configured key layout, and its TTL. PostgreSQL: the
    /// table and its columns. SQLite: the file and its table. Redis and memory: nothing to
    /// create. Consumers never create tables: they only check that theirs exist.
    Init,

    #[command(flatten)]
    Admin(AdminCommand),
}

/// What the command line asks for (the flags boxed: they would make the enum large for the
/// text variant).
type Parsed = command::Parsed<(Command, Box<StoreFlags>)>;

/// Parses the command line. No I/O: help and version come back as text to print.
fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, CliError> {
    let usage = |e: &clap::Error| {
        if e.kind() == ErrorKind::InvalidSubcommand && app_command(e) {
            return CliError::usage(
                PROGRAM,
                "invoke and balances belong to the example app now: run `payments invoke \
                 EVENT.json` or `payments balances` (cargo run -p payments --features cli --bin payments -- \
                 ...); sqs-claim keeps the commands that need only the claims table",
            );
        }
        command::usage_error(e, PROGRAM, COMMANDS)
    };
    let (cli, matches) = match command::parse::<Cli>(args, usage)? {
        command::Parsed::Run(parsed) => parsed,
        command::Parsed::Print(text) => return Ok(Parsed::Print(text)),
    };
    let flags = cli.store.typed(&matches, PROGRAM)?;
    Ok(Parsed::Run((cli.command, Box::new(flags))))
}

/// Whether an unknown command is one the example app's binary has.
fn app_command(e: &clap::Error) -> bool {
    matches!(
        e.get(clap::error::ContextKind::InvalidSubcommand),
        Some(clap::error::ContextValue::String(s)) if s == "invoke" || s == "balances"
    )
}

async fn run(command: Command, flags: StoreFlags) -> Result<(), CliError> {
    let mut settings = Settings::from_env().map_err(CliError::failed)?;
    command::apply_store_flags(flags, &mut settings)?;
    let url = settings.cli_store().map_err(CliError::failed)?;
    let store = url.to_string();
    match command {
        Command::Init => command::init(&url, &store).await,
        Command::Admin(admin) => admin.run(&settings, &url, &store).await,
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

    fn parse_words(words: &[&str]) -> Result<Parsed, CliError> {
        parse(
            std::iter::once("sqs-claim")
                .chain(words.iter().copied())
                .map(OsString::from),
        )
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
            &["--store", "memory:", "prune"][..],
            &["prune", "--store", "memory:"][..],
            &["init", "--store=memory:"][..],
        ] {
            match parse_words(words) {
                Ok(Parsed::Run((_, flags))) => {
                    assert_eq!(flags.store.as_deref(), Some("memory:"), "{words:?}")
                }
                other => panic!("{words:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn usage_mistakes_are_one_line() {
        assert!(usage(&[]).contains("missing command: init, prune"));
        assert!(usage(&["prune", "--store"]).contains("--store needs a value"));
        assert!(usage(&["prune", "--limit", "0"]).contains("--limit"));
        assert!(usage(&["init", "--store", "memory:", "--table", "t"]).contains("--table"));
        assert!(usage(&["inspect"]).contains("KEY"));
        for app in ["invoke", "balances"] {
            let message = usage(&[app, "e.json"]);
            assert!(message.contains("payments"), "{message}");
        }
        for words in [&[][..], &["frobnicate"], &["prune", "--bogus"]] {
            let message = usage(words);
            assert!(!message.contains('\n'), "{words:?}: {message:?}");
            assert!(message.ends_with("(see sqs-claim --help)"), "{message}");
        }
    }

    #[test]
    fn help_and_version_are_text_to_print() {
        for (words, want) in [
            (&["--help"][..], "sqs-claim init"),
            (&["--version"], env!("CARGO_PKG_VERSION")),
            (&["help", "inspect"], "--namespace"),
            (&["prune", "--help"], "--limit"),
            (&["doctor", "--help"], "--queue-url"),
        ] {
            match parse_words(words) {
                Ok(Parsed::Print(text)) => assert!(text.contains(want), "{words:?}: {text}"),
                other => panic!("{words:?}: expected text, got {other:?}"),
            }
        }
    }
}
