//! [`StoreUrl`]: where a consumer keeps its claims, as one string (`SQS_CLAIM_STORE`, the
//! CLI's `--store`). Parsing and display only; opening the store a URL names is the caller's.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::store::dynamodb::DynamoDbKeySchema;
use crate::{Error, ErrorKind};

use super::describe_key_layout;

/// Where a consumer keeps its claims.
///
/// | URL | store |
/// |-----|-------|
/// | `memory:` | in-process, gone when the process exits |
/// | `sqlite:PATH` | an SQLite file (created if missing, with its directory) |
/// | `dynamodb:TABLE` | DynamoDB. Endpoint, region and credentials come from the standard AWS environment (`AWS_ENDPOINT_URL_DYNAMODB` for DynamoDB Local) |
/// | `redis://HOST[:PORT][/DB][?prefix=P]`, `rediss://...` (TLS) | Redis; keys under the prefix `P` (default `sqs-claim:`) |
/// | `postgres://USER[:PASSWORD]@HOST[:PORT]/DB`, `postgresql://...` | PostgreSQL; claims in `sqs_claim_processed_events` |
/// | `tiered:REDIS_URL\|DURABLE_URL` | a Redis cache of completed keys in front of any store above |
///
/// Parsed with [`str::parse`] (`FromStr`). Errors name the scheme, never the rest
/// of the URL, and `Debug` and `Display` hide a password ([`ServerUrl`]): a database URL can
/// carry one, and both end up in logs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// `memory:`.
    Memory,
    /// `sqlite:PATH`.
    Sqlite(PathBuf),
    /// `dynamodb:TABLE`.
    DynamoDb {
        /// The claims table.
        table: String,
        /// The claims table's key layout; `None` for the store's default (`id={key}`).
        key_schema: Option<DynamoDbKeySchema>,
    },
    /// `redis://...` or `rediss://...`.
    Redis(ServerUrl),
    /// `postgres://...` or `postgresql://...`.
    Postgres(ServerUrl),
    /// `tiered:REDIS_URL|DURABLE_URL`.
    Tiered {
        /// The Redis cache.
        cache: ServerUrl,
        /// The durable store (not itself tiered).
        durable: Box<StoreUrl>,
    },
}

/// A server URL that may carry a password: `Debug` and `Display` show it with the password
/// replaced by `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerUrl(String);

impl ServerUrl {
    /// The URL, password included, to connect with.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// The `host:port` the URL connects to, the scheme's default port (6379 for Redis, 5432
    /// for PostgreSQL) when it gives none: what an unreachable server's error names. Never
    /// the user or password.
    pub fn host_port(&self) -> String {
        // Read from the shown form, whose password is already `***`, so no odd character in
        // a password can make part of it look like the host.
        let shown = self.to_string();
        let (scheme, rest) = shown.split_once("://").unwrap_or(("", &shown));
        let authority = rest.split(['/', '?']).next().unwrap_or(rest);
        let host = authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host);
        let default_port = match scheme.to_ascii_lowercase().as_str() {
            "redis" | "rediss" => "6379",
            _ => "5432",
        };
        let host = if host.is_empty() { "localhost" } else { host };
        // `[::1]` or `[::1]:6380`; `h` or `h:6380`.
        let has_port = match host.rsplit_once(']') {
            Some((_, after)) => after.starts_with(':'),
            None => host.contains(':'),
        };
        if has_port {
            host.to_owned()
        } else {
            format!("{host}:{default_port}")
        }
    }
}

impl fmt::Display for ServerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some((scheme, rest)) = self.0.split_once("://") else {
            return f.write_str(&self.0);
        };
        let host = match rest.rsplit_once('@') {
            Some((userinfo, host)) if userinfo.contains(':') => {
                let user = userinfo.split(':').next().unwrap_or("");
                write!(f, "{scheme}://{user}:***@")?;
                host
            }
            Some((userinfo, host)) => {
                write!(f, "{scheme}://{userinfo}@")?;
                host
            }
            None => {
                write!(f, "{scheme}://")?;
                rest
            }
        };
        // A password may also come as a query parameter (`?password=...`, which
        // tokio-postgres and the redis crate accept).
        let Some((path, query)) = host.split_once('?') else {
            return f.write_str(host);
        };
        write!(f, "{path}?")?;
        for (i, pair) in query.split('&').enumerate() {
            if i > 0 {
                f.write_str("&")?;
            }
            match pair.split_once('=') {
                Some((name, _)) if name.eq_ignore_ascii_case("password") => {
                    write!(f, "{name}=***")?;
                }
                _ => f.write_str(pair)?,
            }
        }
        Ok(())
    }
}

impl fmt::Debug for ServerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServerUrl({self})")
    }
}

impl StoreUrl {
    /// Parses a store URL. Errors name the scheme, never the rest of the URL (a database URL
    /// can carry a password).
    pub(crate) fn parse(url: &str) -> Result<StoreUrl, Error> {
        let url = url.trim();
        let (scheme, rest) = url.split_once(':').unwrap_or((url, ""));
        let bad = |why: String| Error::new(ErrorKind::Config, why);
        match scheme.to_ascii_lowercase().as_str() {
            "memory" => Ok(StoreUrl::Memory),
            "sqlite" => {
                // Accept sqlite:PATH and the URL-ish sqlite://PATH (sqlite:///abs/path).
                let path = rest.strip_prefix("//").unwrap_or(rest);
                if path.is_empty() {
                    return Err(bad(
                        "store URL sqlite: needs a path, e.g. sqlite:claims.db".into()
                    ));
                }
                Ok(StoreUrl::Sqlite(PathBuf::from(path)))
            }
            "dynamodb" => {
                let table = rest.strip_prefix("//").unwrap_or(rest);
                check_table_name(table)?;
                Ok(StoreUrl::DynamoDb {
                    table: table.to_owned(),
                    key_schema: None,
                })
            }
            "redis" | "rediss" => Ok(StoreUrl::Redis(ServerUrl(url.to_owned()))),
            "postgres" | "postgresql" => Ok(StoreUrl::Postgres(ServerUrl(url.to_owned()))),
            "tiered" => {
                let usage = "store URL tiered: expects tiered:REDIS_URL|DURABLE_URL, e.g. \
                             tiered:redis://127.0.0.1:6379/|postgres://postgres@127.0.0.1/test";
                let (cache, durable) = rest.split_once('|').ok_or_else(|| bad(usage.into()))?;
                if !matches!(StoreUrl::parse(cache)?, StoreUrl::Redis(_)) {
                    return Err(bad(format!("{usage} (the cache must be a Redis URL)")));
                }
                let durable = StoreUrl::parse(durable)?;
                if matches!(durable, StoreUrl::Tiered { .. }) {
                    return Err(bad(format!("{usage} (tiers do not nest)")));
                }
                Ok(StoreUrl::Tiered {
                    cache: ServerUrl(cache.trim().to_owned()),
                    durable: Box::new(durable),
                })
            }
            _ => Err(bad(format!(
                "unknown store URL scheme {scheme:?}: expected memory:, sqlite:PATH, \
                 dynamodb:TABLE, redis://, rediss://, postgres://, postgresql:// or tiered:"
            ))),
        }
    }

    /// The Cargo feature of sqs-claim this build lacks to open the store this URL names
    /// (`redis` for `redis://...` and for a `tiered:` cache, `sqlite`, `postgres`,
    /// `dynamodb`), if any. [`Settings::from_env`](super::Settings::from_env) refuses such a
    /// `SQS_CLAIM_STORE` at once, naming the variable; [`StoreUrl::open`] refuses it too.
    pub fn missing_feature(&self) -> Option<&'static str> {
        let needs = |feature: &'static str| (!super::feature_enabled(feature)).then_some(feature);
        match self {
            StoreUrl::Memory => None,
            StoreUrl::Sqlite(_) => needs("sqlite"),
            StoreUrl::DynamoDb { .. } => needs("dynamodb"),
            StoreUrl::Redis(_) => needs("redis"),
            StoreUrl::Postgres(_) => needs("postgres"),
            StoreUrl::Tiered { durable, .. } => {
                needs("redis").or_else(|| durable.missing_feature())
            }
        }
    }

    /// Sets the DynamoDB claims table's key layout (`None` keeps it), of a `dynamodb:` store
    /// or of a tiered store's DynamoDB tier. Other stores ignore it: they have no key layout.
    pub(crate) fn with_key_schema(self, schema: Option<DynamoDbKeySchema>) -> StoreUrl {
        match (self, schema) {
            (StoreUrl::DynamoDb { table, .. }, Some(schema)) => StoreUrl::DynamoDb {
                table,
                key_schema: Some(schema),
            },
            (StoreUrl::Tiered { cache, durable }, schema @ Some(_)) => StoreUrl::Tiered {
                cache,
                durable: Box::new(durable.with_key_schema(schema)),
            },
            (url, _) => url,
        }
    }
}

fn check_table_name(table: &str) -> Result<(), Error> {
    let ok = (3..=255).contains(&table.len())
        && table
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Config,
            format!(
                "store URL dynamodb:{table} does not name a valid DynamoDB table (3 to 255 \
                 characters among a-z A-Z 0-9 _ - .)"
            ),
        ))
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Memory => f.write_str("memory:"),
            StoreUrl::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            StoreUrl::DynamoDb { table, key_schema } => {
                write!(f, "dynamodb:{table}")?;
                if let Some(schema) = key_schema {
                    write!(f, " ({})", describe_key_layout(schema))?;
                }
                Ok(())
            }
            StoreUrl::Redis(url) | StoreUrl::Postgres(url) => write!(f, "{url}"),
            StoreUrl::Tiered { cache, durable } => write!(f, "tiered:{cache}|{durable}"),
        }
    }
}

impl FromStr for StoreUrl {
    type Err = Error;

    /// Parses a store URL. Errors name the scheme, never the rest of the URL (a database URL
    /// can carry a password).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StoreUrl::parse(s)
    }
}
