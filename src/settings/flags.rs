//! The store as a command line names it: `--store`, `--table`, `--partition-key` and
//! `--sort-key`, each beating its environment variable. The operator's `sqs-claim` and an app's
//! own command line (the example app's `payments`) apply them the same way, with no argument
//! parser here: each program parses its own flags. Feature `admin`.

use super::{PARTITION_KEY_VAR, SORT_KEY_VAR, Settings, StoreUrl, key_layout, key_layout_values};
use crate::{Error, ErrorKind};

/// The store flags typed on a command line (not their variables: those are already in
/// [`Settings`], whose errors name the variable). A blank value counts as not given.
///
/// ```
/// use sqs_claim::settings::{Settings, StoreFlags};
///
/// let mut settings = Settings::from_lookup(|name| {
///     (name == "SQS_CLAIM_TABLE").then(|| "from-env".to_owned())
/// })?;
/// let mut flags = StoreFlags::default();
/// flags.store = Some("sqlite:claims.db".into()); // as typed: --store sqlite:claims.db
/// flags.apply(&mut settings)?;
/// assert_eq!(settings.cli_store()?.to_string(), "sqlite:claims.db");
/// # Ok::<(), sqs_claim::Error>(())
/// ```
///
/// `Debug` shows a store URL as [`StoreUrl`] displays it, password hidden.
#[derive(Default, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreFlags {
    /// `--store URL`.
    pub store: Option<String>,
    /// `--table NAME`: the same as `--store dynamodb:NAME`.
    pub table: Option<String>,
    /// `--partition-key NAME=TEMPLATE`.
    pub partition_key: Option<String>,
    /// `--sort-key NAME=TEMPLATE`.
    pub sort_key: Option<String>,
}

impl std::fmt::Debug for StoreFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A URL may carry a password (postgres://user:secret@...): never print it as typed.
        let store = self.store.as_deref().map(|s| match s.parse::<StoreUrl>() {
            Ok(url) => url.to_string(),
            Err(_) => "<not a store URL>".to_owned(),
        });
        f.debug_struct("StoreFlags")
            .field("store", &store)
            .field("table", &self.table)
            .field("partition_key", &self.partition_key)
            .field("sort_key", &self.sort_key)
            .finish()
    }
}

impl StoreFlags {
    /// Whether `--store` and `--table` were both given: a usage mistake (both name the store),
    /// which the program reports in its own words before [`StoreFlags::apply`].
    pub fn names_the_store_twice(&self) -> bool {
        given(&self.store).is_some() && given(&self.table).is_some()
    }

    /// Applies the flags over the environment's settings: a flag beats any variable, so
    /// `--table` drops an `SQS_CLAIM_STORE` from the environment and `--store` an
    /// `SQS_CLAIM_TABLE`. Each key flag beats its own variable; the other half of the layout
    /// may come from the environment, and the two are checked together ([`key_layout`]).
    /// Errors ([`ErrorKind::Config`]) name the flag; `--store` and `--table` together are one.
    pub fn apply(self, settings: &mut Settings) -> Result<(), Error> {
        if self.names_the_store_twice() {
            return Err(Error::new(
                ErrorKind::Config,
                "--store and --table both name the store: give one",
            ));
        }
        let flag_error =
            |flag: &str, e: Error| Error::new(ErrorKind::Config, format!("{flag}: {e:#}"));
        if let Some(store) = given(&self.store) {
            let url = store
                .parse::<StoreUrl>()
                .map_err(|e| flag_error("--store", e))?;
            settings.store = Some(url);
            settings.table = None;
        } else if let Some(table) = given(&self.table) {
            format!("dynamodb:{table}")
                .parse::<StoreUrl>()
                .map_err(|e| flag_error("--table", e))?;
            settings.store = None;
            settings.table = Some(table.trim().to_owned());
        }
        let (partition_flag, sort_flag) = (given(&self.partition_key), given(&self.sort_key));
        if partition_flag.is_none() && sort_flag.is_none() {
            return Ok(());
        }
        let (env_partition, env_sort) = match &settings.dynamodb_keys {
            Some(schema) => {
                let (partition, sort) = key_layout_values(schema);
                (Some(partition), sort)
            }
            None => (None, None),
        };
        let pick =
            |flag: Option<&str>, name: &'static str, env: Option<String>, var| match (flag, env) {
                (Some(value), _) => Some((name.to_owned(), value.to_owned())),
                (None, Some(value)) => Some((format!("environment variable {var}"), value)),
                (None, None) => None,
            };
        let partition = pick(
            partition_flag,
            "--partition-key",
            env_partition,
            PARTITION_KEY_VAR,
        );
        let sort = pick(sort_flag, "--sort-key", env_sort, SORT_KEY_VAR);
        settings.dynamodb_keys = key_layout(as_refs(&partition), as_refs(&sort))?;
        Ok(())
    }
}

/// A setting as [`key_layout`] takes it: (where it came from, its value).
fn as_refs(setting: &Option<(String, String)>) -> Option<(&str, &str)> {
    setting
        .as_ref()
        .map(|(source, value)| (source.as_str(), value.as_str()))
}

/// A flag's value, unless absent or blank.
fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Settings {
        super::super::tests::settings(vars).expect("valid settings")
    }

    /// `--partition-key` and `--sort-key` set the DynamoDB key layout, each over its own
    /// variable (the other half may come from the environment), checked together; a bad value
    /// names the flag.
    #[test]
    fn the_key_layout_flags_beat_their_variables() {
        use crate::store::dynamodb::DynamoDbKeySchema;
        let flags = StoreFlags {
            table: Some("app".into()),
            partition_key: Some("pk=CLAIM#{key}".into()),
            sort_key: Some("sk=CLAIM".into()),
            ..StoreFlags::default()
        };
        let mut s = settings(&[]);
        flags.apply(&mut s).expect("valid flags");
        let single_table =
            DynamoDbKeySchema::partition("pk", "CLAIM#{key}").with_sort("sk", "CLAIM");
        assert_eq!(
            s.cli_store().expect("url"),
            StoreUrl::DynamoDb {
                table: "app".into(),
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
        flags.apply(&mut s).expect("valid");
        assert_eq!(s.dynamodb_keys, Some(single_table));
        // A bad flag names the flag, not the variable.
        let mut s = settings(&[]);
        let flags = StoreFlags {
            partition_key: Some("pk=CLAIM".into()),
            ..StoreFlags::default()
        };
        let err = flags.apply(&mut s).expect_err("no {key}");
        assert!(
            err.to_string().contains("--partition-key") && err.to_string().contains("{key}"),
            "{err}"
        );
        let mut s = settings(&[]);
        let flags = StoreFlags {
            sort_key: Some("sk".into()),
            partition_key: Some("pk={key}".into()),
            ..StoreFlags::default()
        };
        let err = flags.apply(&mut s).expect_err("not NAME=TEMPLATE");
        assert!(err.to_string().contains("--sort-key"), "{err}");
    }

    #[test]
    fn a_flag_beats_the_environment() {
        let env = [
            ("SQS_CLAIM_STORE", "memory:"),
            ("SQS_CLAIM_TABLE", "envtable"),
        ];
        let mut s = settings(&env);
        StoreFlags::default().apply(&mut s).expect("no flags");
        assert_eq!(s.cli_store().expect("url"), StoreUrl::Memory);

        let mut s = settings(&env);
        let flags = StoreFlags {
            table: Some("claims".into()),
            ..StoreFlags::default()
        };
        flags.apply(&mut s).expect("--table");
        assert_eq!(
            s.cli_store().expect("url"),
            StoreUrl::DynamoDb {
                table: "claims".into(),
                key_schema: None,
            }
        );

        let mut s = settings(&[("SQS_CLAIM_TABLE", "envtable")]);
        let flags = StoreFlags {
            store: Some("sqlite:x.db".into()),
            ..StoreFlags::default()
        };
        flags.apply(&mut s).expect("--store");
        assert_eq!(s.cli_store().expect("url"), StoreUrl::Sqlite("x.db".into()));

        let mut s = settings(&[]);
        let bad = StoreFlags {
            table: Some("a b".into()),
            ..StoreFlags::default()
        };
        let err = bad.apply(&mut s).expect_err("not a table name");
        assert!(err.to_string().starts_with("--table: "), "{err}");
    }

    /// A blank flag counts as not given; `--store` and `--table` together are refused, not
    /// one of them quietly used; `Debug` hides a URL's password.
    #[test]
    fn blank_flags_are_not_given_and_two_stores_are_refused() {
        let mut s = settings(&[("SQS_CLAIM_STORE", "memory:")]);
        let blank = StoreFlags {
            store: Some("  ".into()),
            table: Some(String::new()),
            ..StoreFlags::default()
        };
        assert!(!blank.names_the_store_twice());
        blank.apply(&mut s).expect("blank flags");
        assert_eq!(s.cli_store().expect("url"), StoreUrl::Memory);

        let both = StoreFlags {
            store: Some("memory:".into()),
            table: Some("claims".into()),
            ..StoreFlags::default()
        };
        assert!(both.names_the_store_twice());
        let err = both.apply(&mut s).expect_err("two stores");
        assert!(err.to_string().contains("--store and --table"), "{err}");

        let secret = StoreFlags {
            store: Some("postgres://app:hunter2@db.internal/claims".into()),
            ..StoreFlags::default()
        };
        let shown = format!("{secret:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("db.internal"),
            "{shown}"
        );
    }
}
