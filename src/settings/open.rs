//! Opening the store a [`StoreUrl`] names, as one [`BoxStore`]: the one place that maps a URL to
//! a store type (as sqlx's `AnyPool` does for database URLs). The consumer, the operator's
//! `sqs-claim` and your own consumer all open stores here.

use std::future::Future;
use std::time::Duration;

use crate::store::BoxStore;
use crate::store::StoreAdmin;
use crate::{Error, ErrorKind};

use super::StoreUrl;

impl StoreUrl {
    /// Opens the store this URL names. Embedded stores open their file (SQLite creates it,
    /// and its directory, if missing); DynamoDB builds its client from the standard AWS
    /// environment; Redis connects at once (and fails if it does not answer); PostgreSQL and a
    /// `tiered:` cache connect lazily, on first use. Nothing is created or checked: see
    /// [`StoreAdmin::check_ready`] and [`StoreAdmin::init`], or [`StoreUrl::open_checked`].
    ///
    /// A URL whose store this build lacks (`redis://` without the `redis` feature, ...) fails
    /// with [`ErrorKind::Config`] naming the feature. A `tiered:` store boxes its durable store
    /// first: [`TieredStore<BoxStore>`](crate::TieredStore), boxed again.
    ///
    /// ```
    /// # async fn f() -> Result<(), sqs_claim::Error> {
    /// use sqs_claim::settings::StoreUrl;
    /// use sqs_claim::store::{ClaimStore, MemoryStore};
    ///
    /// let store = "memory:".parse::<StoreUrl>()?.open().await?;
    /// assert!(store.downcast_ref::<MemoryStore>().is_some());
    /// # Ok(()) }
    /// ```
    pub async fn open(&self) -> Result<BoxStore, Error> {
        match self {
            StoreUrl::Tiered { cache, durable } => tiered(self, cache.expose(), durable).await,
            other => open_durable(other).await,
        }
    }

    /// [`open`](Self::open), then [`check_ready`](StoreAdmin::check_ready), the two together
    /// bounded by `startup` ([`Settings::startup_timeout`](super::Settings::startup_timeout),
    /// `SQS_CLAIM_STARTUP_TIMEOUT_MS`). A store that does not answer in time (a partition, a
    /// port that accepts connections and never replies) fails with
    /// [`ErrorKind::StoreUnavailable`] naming the bound, instead of hanging.
    ///
    /// The error ends a start-up, so its `{}` says everything: the store (password hidden),
    /// for a server its `host:port`, and the whole chain of causes (PostgreSQL's
    /// `database "x" does not exist`, `Connection refused`), not only under `{:#}`.
    pub async fn open_checked(&self, startup: Duration) -> Result<BoxStore, Error> {
        bounded_startup(startup, async {
            let store = self.open().await?;
            store.check_ready().await?;
            Ok(store)
        })
        .await
        .map_err(|e| e.at_start_up(format_args!("cannot start on store {}", self.target())))
    }

    /// The URL (password hidden) and, for a server, the `host:port` it connects to (the
    /// scheme's default port when the URL gives none): what a start-up error names.
    fn target(&self) -> String {
        match self {
            StoreUrl::Redis(server) | StoreUrl::Postgres(server) => {
                format!("{self} (server {})", server.host_port())
            }
            StoreUrl::Tiered { cache, durable } => {
                format!(
                    "{self} (cache {}; durable {})",
                    cache.host_port(),
                    durable.target()
                )
            }
            other => other.to_string(),
        }
    }
}

/// Runs `ready` (opening a store and checking it) within `startup`, or fails with
/// [`ErrorKind::StoreUnavailable`] saying which bound ran out and what to check. An error of
/// `ready` keeps its kind, with its causes in its own message: `{}` shows the whole chain.
pub async fn bounded_startup<T>(
    startup: Duration,
    ready: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(startup, ready).await {
        // The whole chain in `{}`: a start-up error is printed once, with `{}`.
        Ok(result) => result.map_err(|e| e.at_start_up("")),
        Err(_) => Err(Error::new(
            ErrorKind::StoreUnavailable,
            format!(
                "the store did not answer within {} ms at start-up \
                 (SQS_CLAIM_STARTUP_TIMEOUT_MS): check that it is up and reachable from \
                 here (network, firewall or security group, endpoint)",
                startup.as_millis()
            ),
        )),
    }
}

/// The error for a URL whose store this build was compiled without.
#[allow(dead_code)] // unused when every store feature is on
fn missing(url: &StoreUrl, feature: &str) -> Error {
    Error::new(
        ErrorKind::Config,
        format!(
            "store URL {url} needs the `{feature}` feature of sqs-claim, which this build lacks"
        ),
    )
}

fn not_nested() -> Error {
    Error::new(ErrorKind::Config, "tiered store URLs do not nest")
}

/// `tiered:CACHE|DURABLE`: the durable store opened and boxed, behind a Redis cache that
/// connects lazily, so a consumer starts even while the cache is down (the durable store
/// still decides every claim).
#[cfg(feature = "redis")]
async fn tiered(_url: &StoreUrl, cache: &str, durable: &StoreUrl) -> Result<BoxStore, Error> {
    use crate::store::redis::RedisStore;
    use crate::store::tiered::TieredStore;
    let (url, prefix) = split_prefix(cache);
    let mut cache = RedisStore::connect_lazy(&url)?;
    if let Some(p) = prefix {
        cache = cache.with_prefix(p);
    }
    if matches!(durable, StoreUrl::Tiered { .. }) {
        return Err(not_nested());
    }
    let durable = open_durable(durable).await?;
    Ok(BoxStore::new(TieredStore::new(cache, durable)))
}

#[cfg(not(feature = "redis"))]
async fn tiered(url: &StoreUrl, _cache: &str, _durable: &StoreUrl) -> Result<BoxStore, Error> {
    Err(missing(url, "redis"))
}

/// [`StoreUrl::open`] for every store but `tiered:` (which wraps one of these).
async fn open_durable(url: &StoreUrl) -> Result<BoxStore, Error> {
    Ok(match url {
        StoreUrl::Memory => BoxStore::new(crate::MemoryStore::new()),
        #[cfg(feature = "sqlite")]
        StoreUrl::Sqlite(path) => {
            // Created on demand, so `sqlite:.sqs-claim/claims.db` works on a fresh clone.
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| {
                    Error::with_source(
                        ErrorKind::StoreUnavailable,
                        format!(
                            "cannot create directory {} for the SQLite store",
                            dir.display()
                        ),
                        e,
                    )
                })?;
            }
            BoxStore::new(crate::store::sqlite::SqliteStore::open(path)?)
        }
        StoreUrl::DynamoDb { table, key_schema } => {
            let mut store = crate::DynamoDbStore::from_env(table).await;
            if let Some(schema) = key_schema {
                store = store.with_key_schema(schema.clone())?;
            }
            BoxStore::new(store)
        }
        #[cfg(feature = "redis")]
        StoreUrl::Redis(server) => {
            let (url, prefix) = split_prefix(server.expose());
            let mut store = crate::store::redis::RedisStore::connect(&url).await?;
            if let Some(p) = prefix {
                store = store.with_prefix(p);
            }
            BoxStore::new(store)
        }
        #[cfg(feature = "postgres")]
        StoreUrl::Postgres(server) => BoxStore::new(
            crate::store::postgres::PostgresStore::connect(server.expose())?,
        ),
        StoreUrl::Tiered { .. } => return Err(not_nested()),
        #[cfg(not(feature = "sqlite"))]
        StoreUrl::Sqlite(_) => return Err(missing(url, "sqlite")),
        #[cfg(not(feature = "redis"))]
        StoreUrl::Redis(_) => return Err(missing(url, "redis")),
        #[cfg(not(feature = "postgres"))]
        StoreUrl::Postgres(_) => return Err(missing(url, "postgres")),
    })
}

/// Takes the `prefix=` parameter out of a Redis URL's query (the `redis` crate does not know
/// it).
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
fn split_prefix(url: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut prefix = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.strip_prefix("prefix=") {
            Some(p) => {
                prefix = Some(p.to_owned());
                false
            }
            None => !pair.is_empty(),
        })
        .collect();
    if rest.is_empty() {
        (base.to_owned(), prefix)
    } else {
        (format!("{base}?{}", rest.join("&")), prefix)
    }
}
#[cfg(test)]
mod tests {
    use super::split_prefix;

    #[test]
    fn prefix_parameter() {
        assert_eq!(split_prefix("redis://h/"), ("redis://h/".into(), None));
        assert_eq!(
            split_prefix("redis://h/?prefix=app:"),
            ("redis://h/".into(), Some("app:".into()))
        );
        assert_eq!(
            split_prefix("rediss://h/0?protocol=resp3&prefix=a&x=1"),
            ("rediss://h/0?protocol=resp3&x=1".into(), Some("a".into()))
        );
    }
}
