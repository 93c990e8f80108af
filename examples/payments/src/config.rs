//! The example consumer's settings: the `SQS_CLAIM_*` variables every consumer reads
//! ([`sqs_claim::settings`], the table of them), this app's defaults for the key and the
//! namespace, and the settings of its own, the DynamoDB accounts table and the output queue ([`VARIABLES`],
//! read the library's way, [`read`]). Parsing only.
//!
//! | variable | default | meaning |
//! |----------|---------|---------|
//! | `SQS_CLAIM_KEY` | `json:/order_id` | the key source, [`KeySource`]'s `FromStr` syntax |
//! | `SQS_CLAIM_ENVELOPE` | `none` | the envelope around each payment (`sns`, `eventbridge`, `s3`, `none`): the key and the payment are read from the payload inside |
//! | `SQS_CLAIM_NAMESPACE` | `payments` | the key namespace |
//! | `SQS_CLAIM_ACCOUNTS_TABLE` | `<claims table>-accounts` | the DynamoDB accounts table |
//! | `SQS_CLAIM_OUTPUT_QUEUE_URL` | none | the queue the credit notices go to |

use std::fmt;
use std::ops::{Deref, DerefMut};

use sqs_claim::settings::{Variable, read};
use sqs_claim::{Error, KeySource};

pub use sqs_claim::settings::{
    PARTITION_KEY_VAR, SORT_KEY_VAR, ServerUrl, StoreUrl, describe_key_layout, key_layout,
    key_layout_values, powertools,
};

/// The key namespace when `SQS_CLAIM_NAMESPACE` is unset.
pub const DEFAULT_NAMESPACE: &str = "payments";

/// The variable of the DynamoDB accounts table.
pub const ACCOUNTS_TABLE_VAR: &str = "SQS_CLAIM_ACCOUNTS_TABLE";

/// The variable of the queue the credit notices are published to.
pub const OUTPUT_QUEUE_URL_VAR: &str = "SQS_CLAIM_OUTPUT_QUEUE_URL";

/// The app's own variables, beside every consumer's ([`sqs_claim::settings::VARIABLES`]):
/// docs/configuration.md shows them in a table of their own, checked against this one.
pub const VARIABLES: &[Variable] = &[
    Variable::new(
        ACCOUNTS_TABLE_VAR,
        "`<claims table>-accounts`",
        "DynamoDB accounts table (`--accounts-table` overrides it in the CLI)",
    ),
    Variable::new(
        OUTPUT_QUEUE_URL_VAR,
        "none",
        "also publish `{\"event\": \"credited\", \"order_id\", \"account\", \"amount_cents\"}` per credit to this SQS queue (message group = account on FIFO; deduplication id derived from the key), before the completion commits",
    ),
];

/// The example consumer's settings: every consumer's ([`sqs_claim::settings::Settings`], reached
/// through `Deref`) plus the accounts table.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Settings {
    /// The `SQS_CLAIM_*` settings every consumer reads.
    pub consumer: sqs_claim::settings::Settings,
    /// `SQS_CLAIM_ACCOUNTS_TABLE`.
    pub accounts_table: Option<String>,
    /// `SQS_CLAIM_OUTPUT_QUEUE_URL`.
    pub output_queue_url: Option<String>,
}

impl Deref for Settings {
    type Target = sqs_claim::settings::Settings;

    fn deref(&self) -> &Self::Target {
        &self.consumer
    }
}

impl DerefMut for Settings {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.consumer
    }
}

impl Settings {
    /// Reads every `SQS_CLAIM_*` variable of the process environment. An empty value counts as
    /// unset.
    /// The app's own variables are named beside the library's, so they are not warned of as
    /// unknown ([`sqs_claim::settings::Settings::from_env_beside`]).
    pub fn from_env() -> Result<Settings, Error> {
        let own: Vec<&str> = VARIABLES.iter().map(|v| v.name).collect();
        let consumer = sqs_claim::settings::Settings::from_env_beside(&own)?;
        Self::own(consumer, |name| std::env::var(name).ok())
    }

    /// Reads the settings through `lookup` (a variable's value by name).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, Error> {
        let consumer = sqs_claim::settings::Settings::from_lookup(&lookup)?;
        Self::own(consumer, lookup)
    }

    /// `consumer` with the app's own settings, read through `lookup`.
    fn own(
        consumer: sqs_claim::settings::Settings,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Settings, Error> {
        let accounts_table = read::<String>(&lookup, ACCOUNTS_TABLE_VAR)?;
        let output_queue_url = read::<QueueUrl>(&lookup, OUTPUT_QUEUE_URL_VAR)?.map(|q| q.0);
        Ok(Settings {
            consumer,
            accounts_table,
            output_queue_url,
        })
    }

    /// Whether a setting needs an SQS client: the output queue, a failure queue or the
    /// per-message backoff.
    pub fn needs_sqs(&self) -> bool {
        self.output_queue_url.is_some() || self.consumer.needs_sqs()
    }

    /// `SQS_CLAIM_KEY`, else the order id (`json:/order_id`): a producer that sends one order
    /// twice under two message ids is caught too.
    pub fn key(&self) -> KeySource {
        self.consumer
            .key
            .clone()
            .unwrap_or_else(|| KeySource::JsonPointer("/order_id".into()))
    }

    /// `SQS_CLAIM_NAMESPACE`, else [`DEFAULT_NAMESPACE`].
    pub fn namespace(&self) -> &str {
        self.consumer
            .namespace
            .as_deref()
            .unwrap_or(DEFAULT_NAMESPACE)
    }

    /// The store the `payments` binary uses: [`sqs_claim::settings::Settings::cli_store`], with the
    /// accounts table.
    pub fn cli_store(&self) -> Result<AppStore, Error> {
        Ok(self.app_store(self.consumer.cli_store()?))
    }

    /// The store the Lambda consumer uses: [`sqs_claim::settings::Settings::lambda_store`], with the
    /// accounts table.
    pub fn lambda_store(&self) -> Result<AppStore, Error> {
        Ok(self.app_store(self.consumer.lambda_store()?))
    }

    fn app_store(&self, claims: StoreUrl) -> AppStore {
        AppStore {
            claims,
            accounts_table: self.accounts_table.clone(),
        }
    }
}

/// An SQS queue URL (`https://sqs.REGION.amazonaws.com/ACCOUNT/NAME`, or `http://` for a
/// local endpoint). Only the scheme is checked: a queue's name where its URL belongs is the
/// usual mistake.
struct QueueUrl(String);

impl std::str::FromStr for QueueUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.starts_with("https://") || s.starts_with("http://") {
            Ok(QueueUrl(s.to_owned()))
        } else {
            Err(format!(
                "{s:?}: expected a queue URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)"
            ))
        }
    }
}

/// Where the example keeps its claims and balances: the claims store, and for DynamoDB (alone
/// or as a tiered store's durable tier) the accounts table beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppStore {
    /// The claims store.
    pub claims: StoreUrl,
    /// The DynamoDB accounts table; `None` for `<claims table>-accounts`.
    pub accounts_table: Option<String>,
}

impl AppStore {
    /// The claims store `claims`, with the default accounts table.
    pub fn new(claims: StoreUrl) -> Self {
        AppStore {
            claims,
            accounts_table: None,
        }
    }

    /// The accounts table beside the DynamoDB claims table `table`.
    pub fn accounts_table_for(&self, table: &str) -> String {
        self.accounts_table
            .clone()
            .unwrap_or_else(|| format!("{table}-accounts"))
    }

    fn describe(&self, url: &StoreUrl, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match url {
            StoreUrl::DynamoDb { table, key_schema } => {
                write!(
                    f,
                    "dynamodb:{table} (accounts: {}",
                    self.accounts_table_for(table)
                )?;
                if let Some(schema) = key_schema {
                    let layout = describe_key_layout(schema);
                    write!(f, "; {layout}")?;
                }
                f.write_str(")")
            }
            StoreUrl::Tiered { cache, durable } => {
                write!(f, "tiered:{cache}|")?;
                self.describe(durable, f)
            }
            other => write!(f, "{other}"),
        }
    }
}

/// The store URL, with the accounts table of a DynamoDB store:
/// `dynamodb:claims (accounts: claims-accounts)`.
impl fmt::Display for AppStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.describe(&self.claims, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqs_claim::store::dynamodb::DynamoDbKeySchema;

    fn settings(vars: &[(&str, &str)]) -> Settings {
        Settings::from_lookup(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
        .expect("valid settings")
    }

    #[test]
    fn the_apps_defaults_and_the_accounts_table() {
        let s = settings(&[]);
        assert_eq!(s.key(), KeySource::JsonPointer("/order_id".into()));
        assert_eq!(s.namespace(), "payments");
        let s = settings(&[("SQS_CLAIM_TABLE", "claims")]);
        let store = s.lambda_store().expect("dynamodb");
        assert_eq!(
            store.to_string(),
            "dynamodb:claims (accounts: claims-accounts)"
        );
        let s = settings(&[
            ("SQS_CLAIM_TABLE", "claims"),
            ("SQS_CLAIM_ACCOUNTS_TABLE", " acc "),
            ("SQS_CLAIM_NAMESPACE", "ns"),
        ]);
        assert_eq!(s.namespace(), "ns");
        assert_eq!(
            s.cli_store().expect("dynamodb").to_string(),
            "dynamodb:claims (accounts: acc)"
        );
        let s = settings(&[
            ("SQS_CLAIM_TABLE", "app"),
            (PARTITION_KEY_VAR, "pk=CLAIM#{key}"),
            (SORT_KEY_VAR, "sk=CLAIM"),
        ]);
        let store = s.cli_store().expect("dynamodb");
        assert_eq!(
            store.claims,
            StoreUrl::DynamoDb {
                table: "app".into(),
                key_schema: Some(
                    DynamoDbKeySchema::partition("pk", "CLAIM#{key}").with_sort("sk", "CLAIM")
                ),
            }
        );
        assert_eq!(
            store.to_string(),
            "dynamodb:app (accounts: app-accounts; keys: pk=CLAIM#{key}, sk=CLAIM)"
        );
        let s = settings(&[("SQS_CLAIM_STORE", "tiered:redis://h/|dynamodb:app")]);
        assert_eq!(
            s.cli_store().expect("tiered").to_string(),
            "tiered:redis://h/|dynamodb:app (accounts: app-accounts)"
        );
    }

    /// docs/configuration.md's table of the app's own variables is [`VARIABLES`].
    #[test]
    fn docs_configuration_md_shows_the_apps_variables() {
        let doc = include_str!("../../../docs/configuration.md");
        let (begin, end) = (
            "<!-- BEGIN payments::config::VARIABLES (examples/payments/src/config.rs) -->\n",
            "<!-- END payments::config::VARIABLES -->",
        );
        let block = doc
            .split_once(begin)
            .and_then(|(_, rest)| rest.split_once(end))
            .map(|(block, _)| block)
            .expect("docs/configuration.md has the app's block");
        let want = sqs_claim::settings::markdown_table(VARIABLES);
        assert!(block == want, "the block should read:\n{want}");
        for v in VARIABLES {
            assert!(
                sqs_claim::settings::Variable::find(sqs_claim::settings::VARIABLES, v.name)
                    .is_none(),
                "{} is the library's",
                v.name
            );
        }
    }
}
