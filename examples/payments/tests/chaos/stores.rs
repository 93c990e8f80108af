//! The stores a chaos run can use, how a worker opens one, and how the driver creates, reads
//! and removes the tables and keys of one run.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use payments::{
    BoxLedger, DynamoDbLedger, Ledger, PostgresLedger, RedisLedger, SqliteLedger, TieredLedger,
};
use serde::{Deserialize, Serialize};
use sqs_claim::{PostgresStore, RedisStore, SqliteStore};

/// A store kind, as named in `CHAOS_STORES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
    Redis,
    DynamoDb,
    Tiered,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Sqlite,
        Kind::Postgres,
        Kind::Redis,
        Kind::DynamoDb,
        Kind::Tiered,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Sqlite => "sqlite",
            Kind::Postgres => "postgres",
            Kind::Redis => "redis",
            Kind::DynamoDb => "dynamodb",
            Kind::Tiered => "tiered",
        }
    }

    pub fn parse(s: &str) -> Result<Kind, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == s.trim())
            .ok_or_else(|| {
                format!(
                    "CHAOS_STORES: unknown store {s:?}: expected sqlite, postgres, redis, \
                     dynamodb or tiered (comma-separated)"
                )
            })
    }
}

/// Where a ledger lives, as handed to a worker (JSON in an environment variable).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Spec {
    Sqlite {
        path: String,
    },
    Postgres {
        url: String,
        table: String,
    },
    Redis {
        url: String,
        prefix: String,
    },
    /// The endpoint is given to the worker as `AWS_ENDPOINT_URL_DYNAMODB`, so it builds its
    /// client exactly as the binaries do ([`DynamoDbLedger::from_env`]).
    DynamoDb {
        endpoint: String,
        table: String,
        accounts: String,
    },
    Tiered {
        redis_url: String,
        prefix: String,
        pg_url: String,
        table: String,
    },
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Opens the ledger `spec` names with the library's ordinary constructors (connections are
/// opened lazily, on first use, inside the invocation).
pub async fn open(spec: &Spec) -> Result<BoxLedger, String> {
    Ok(match spec {
        Spec::Sqlite { path } => {
            BoxLedger::new(SqliteLedger::new(SqliteStore::open(path).map_err(text)?))
        }
        Spec::Postgres { url, table } => BoxLedger::new(PostgresLedger::new(postgres(url, table)?)),
        Spec::Redis { url, prefix } => BoxLedger::new(RedisLedger::new(redis(url, prefix)?)),
        Spec::DynamoDb {
            table, accounts, ..
        } => BoxLedger::new(DynamoDbLedger::from_env(table, accounts).await),
        Spec::Tiered {
            redis_url,
            prefix,
            pg_url,
            table,
        } => BoxLedger::new(TieredLedger::new(
            redis(redis_url, prefix)?,
            PostgresLedger::new(postgres(pg_url, table)?),
        )),
    })
}

fn postgres(url: &str, table: &str) -> Result<PostgresStore, String> {
    PostgresStore::connect(url)
        .and_then(|s| s.with_table(table))
        .map_err(text)
}

fn redis(url: &str, prefix: &str) -> Result<RedisStore, String> {
    Ok(RedisStore::connect_lazy(url)
        .map_err(text)?
        .with_prefix(prefix.to_owned()))
}

/// One run's tables and keys: the spec the driver reads through (straight to the servers),
/// and the servers a fault proxy may stand in front of.
pub struct Resources {
    pub kind: Kind,
    pub direct: Spec,
    /// `(name, address)` of each server a proxy can sit in front of (none for SQLite).
    pub upstreams: Vec<(&'static str, SocketAddr)>,
    pub sqlite_path: Option<PathBuf>,
}

pub fn redis_url() -> String {
    std::env::var("SQS_CLAIM_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into())
}

pub fn pg_url() -> String {
    std::env::var("SQS_CLAIM_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

pub fn dynamodb_endpoint() -> Result<String, String> {
    std::env::var("AWS_ENDPOINT_URL_DYNAMODB").map_err(|_| {
        "AWS_ENDPOINT_URL_DYNAMODB is not set: the chaos run needs DynamoDB Local \
         (`make chaos` starts it; by hand: set -a; . .standins/env; set +a)"
            .to_owned()
    })
}

/// `scheme://[userinfo@]host:port/rest` split around `host:port`.
fn split_authority(url: &str) -> Result<(String, String, String), String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("not a URL with a host: {}", shown(url)))?;
    let (auth, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (user, hostport) = match auth.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), auth),
    };
    Ok((
        format!("{scheme}://{user}"),
        hostport.to_owned(),
        path.to_owned(),
    ))
}

/// A URL for printing: the password, if any, replaced by `***`.
fn shown(url: &str) -> String {
    match url.split_once("://").and_then(|(s, r)| {
        let (userinfo, host) = r.rsplit_once('@')?;
        let user = userinfo.split(':').next()?;
        Some(format!("{s}://{user}:***@{host}"))
    }) {
        Some(s) => s,
        None => url.to_owned(),
    }
}

fn address(url: &str, default_port: u16) -> Result<SocketAddr, String> {
    let (_, hostport, _) = split_authority(url)?;
    let hostport = if hostport.contains(':') {
        hostport
    } else {
        format!("{hostport}:{default_port}")
    };
    hostport
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {hostport}: {e}"))?
        .next()
        .ok_or_else(|| format!("{hostport} resolves to no address"))
}

/// `url` with its host and port replaced by 127.0.0.1:`port` (a proxy).
pub fn retarget(url: &str, port: u16) -> Result<String, String> {
    let (head, _, path) = split_authority(url)?;
    Ok(format!("{head}127.0.0.1:{port}{path}"))
}

impl Resources {
    /// Fresh names for one run: nothing is shared with another run or another test.
    ///
    /// `dynamodb`: the endpoint DynamoDB is reached at, when not `AWS_ENDPOINT_URL_DYNAMODB`
    /// itself (the conflict model in front of it).
    pub fn new(kind: Kind, run_id: &str, dynamodb: Option<String>) -> Result<Resources, String> {
        let table = format!("chaos_{run_id}");
        let prefix = format!("chaos:{run_id}:");
        let (direct, upstreams, sqlite_path) = match kind {
            Kind::Sqlite => {
                let path = std::env::temp_dir().join(format!("sqs-claim-chaos-{run_id}.db"));
                (
                    Spec::Sqlite {
                        path: path.display().to_string(),
                    },
                    vec![],
                    Some(path),
                )
            }
            Kind::Postgres => {
                let url = pg_url();
                let addr = address(&url, 5432)?;
                (
                    Spec::Postgres { url, table },
                    vec![("postgres", addr)],
                    None,
                )
            }
            Kind::Redis => {
                let url = redis_url();
                let addr = address(&url, 6379)?;
                (Spec::Redis { url, prefix }, vec![("redis", addr)], None)
            }
            Kind::DynamoDb => {
                let endpoint = match dynamodb {
                    Some(endpoint) => endpoint,
                    None => dynamodb_endpoint()?,
                };
                let addr = address(&endpoint, 80)?;
                let table = format!("chaos-{run_id}");
                (
                    Spec::DynamoDb {
                        endpoint,
                        accounts: format!("{table}-accounts"),
                        table,
                    },
                    vec![("dynamodb", addr)],
                    None,
                )
            }
            Kind::Tiered => {
                let (redis_url, pg_url) = (redis_url(), pg_url());
                let upstreams = vec![
                    ("redis", address(&redis_url, 6379)?),
                    ("postgres", address(&pg_url, 5432)?),
                ];
                (
                    Spec::Tiered {
                        redis_url,
                        prefix,
                        pg_url,
                        table,
                    },
                    upstreams,
                    None,
                )
            }
        };
        Ok(Resources {
            kind,
            direct,
            upstreams,
            sqlite_path,
        })
    }

    /// The spec workers use: every server reached through its proxy (`ports[i]` stands for
    /// `upstreams[i]`).
    pub fn via(&self, ports: &[u16]) -> Result<Spec, String> {
        let port = |name: &str| {
            self.upstreams
                .iter()
                .position(|(n, _)| *n == name)
                .and_then(|i| ports.get(i).copied())
        };
        Ok(match (&self.direct, ports.is_empty()) {
            (spec, true) => spec.clone(),
            (Spec::Sqlite { .. }, _) => self.direct.clone(),
            (Spec::Postgres { url, table }, _) => Spec::Postgres {
                url: retarget(url, port("postgres").unwrap_or_default())?,
                table: table.clone(),
            },
            (Spec::Redis { url, prefix }, _) => Spec::Redis {
                url: retarget(url, port("redis").unwrap_or_default())?,
                prefix: prefix.clone(),
            },
            (
                Spec::DynamoDb {
                    endpoint,
                    table,
                    accounts,
                },
                _,
            ) => Spec::DynamoDb {
                endpoint: retarget(endpoint, port("dynamodb").unwrap_or_default())?,
                table: table.clone(),
                accounts: accounts.clone(),
            },
            (
                Spec::Tiered {
                    redis_url,
                    prefix,
                    pg_url,
                    table,
                },
                _,
            ) => Spec::Tiered {
                redis_url: retarget(redis_url, port("redis").unwrap_or_default())?,
                prefix: prefix.clone(),
                pg_url: retarget(pg_url, port("postgres").unwrap_or_default())?,
                table: table.clone(),
            },
        })
    }

    /// Creates the run's tables.
    pub async fn init(&self) -> Result<(), String> {
        let ledger = open(&self.direct).await?;
        ledger.init().await.map_err(text)?;
        ledger.prepare().await.map_err(text)
    }

    /// The balances, read straight from the server.
    pub async fn balances(&self) -> Result<Vec<(String, i64)>, String> {
        open(&self.direct).await?.balances().await.map_err(text)
    }

    /// Removes the run's tables, keys or file. Failures are printed, not fatal: the names are
    /// unique to the run.
    pub async fn cleanup(&self) {
        let result: Result<(), String> = async {
            match &self.direct {
                Spec::Sqlite { path } => {
                    for suffix in ["", "-wal", "-shm", "-journal"] {
                        let _ = std::fs::remove_file(format!("{path}{suffix}"));
                    }
                    Ok(())
                }
                Spec::Postgres { url, table } => drop_pg(url, table).await,
                Spec::Redis { url, prefix } => delete_keys(url, prefix).await,
                Spec::DynamoDb {
                    table, accounts, ..
                } => {
                    let ledger = DynamoDbLedger::from_env(table, accounts).await;
                    for t in [table, accounts] {
                        ledger
                            .store()
                            .client()
                            .delete_table()
                            .table_name(t)
                            .send()
                            .await
                            .map_err(|e| format!("delete table {t}: {e}"))?;
                    }
                    Ok(())
                }
                Spec::Tiered {
                    redis_url,
                    prefix,
                    pg_url,
                    table,
                } => {
                    delete_keys(redis_url, prefix).await?;
                    drop_pg(pg_url, table).await
                }
            }
        }
        .await;
        if let Err(e) = result {
            eprintln!("chaos: cleanup of the {} run failed: {e}", self.kind.name());
        }
    }
}

async fn drop_pg(url: &str, table: &str) -> Result<(), String> {
    let store = postgres(url, table)?;
    let client = store.pool().get().await.map_err(text)?;
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS \"{table}\"; DROP TABLE IF EXISTS \"{table}_accounts\""
        ))
        .await
        .map_err(text)
}

async fn delete_keys(url: &str, prefix: &str) -> Result<(), String> {
    let store = RedisStore::connect(url).await.map_err(text)?;
    let mut conn = store.connection().clone();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .map_err(text)?;
        if !keys.is_empty() {
            let () = redis::cmd("DEL")
                .arg(keys)
                .query_async(&mut conn)
                .await
                .map_err(text)?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}
