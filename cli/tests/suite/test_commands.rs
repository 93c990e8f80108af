//! The `sqs-claim` binary as an operator of any consumer runs it: on claims tables created by
//! `sqs-claim init` alone (no example app, no accounts table), on SQLite, DynamoDB Local,
//! PostgreSQL and Redis. Claims are taken through the library, as a consumer of one's own
//! would take them; the CLI then inspects, releases, forgets and prunes them.
//!
//! The servers: DynamoDB Local at `SQS_CLAIM_DYNAMODB_ENDPOINT` (default
//! `http://127.0.0.1:8000`, `scripts/standins.sh up`), Redis at 127.0.0.1:6379, PostgreSQL at
//! 127.0.0.1:5432 (trust auth, database `test`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use sqs_claim::RedisStore;
use sqs_claim::SqliteStore;
use sqs_claim::store::dynamodb::DynamoDbStore;
use sqs_claim::store::postgres::PostgresStore;
use sqs_claim::store::{Claim, ClaimRequest, ClaimStore, Completion};

const BIN: &str = env!("CARGO_BIN_EXE_sqs-claim");

#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(self, what: &str) -> Run {
        assert_eq!(self.code, 0, "{what}: {}{}", self.stdout, self.stderr);
        self
    }

    /// A failure: exit `code` and exactly one `error: ` line.
    fn fails(self, code: i32, what: &str) -> Run {
        assert_eq!(self.code, code, "{what}: {}{}", self.stdout, self.stderr);
        assert!(
            self.stderr.starts_with("error: ") && self.stderr.trim_end().lines().count() == 1,
            "{what}: one error line expected: {}",
            self.stderr
        );
        self
    }
}

fn dynamodb_endpoint() -> String {
    std::env::var("SQS_CLAIM_DYNAMODB_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:8000".into())
}

/// The environment the CLI gets: nothing of the test's but the AWS settings for DynamoDB Local.
fn aws_env() -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_endpoint()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]
}

fn sqs_claim(dir: &Path, args: &[&str]) -> Run {
    let out = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .envs(aws_env())
        .output()
        .expect("run sqs-claim");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
    }
}

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// Takes `stuck` (left in progress, as by a consumer killed midway) and `done` (completed) on
/// `store`, as a consumer built on the library would.
async fn claims_of_a_consumer<S: ClaimStore>(store: &S, stuck: &str, done: &str) {
    let now = SystemTime::now();
    let request = |key| ClaimRequest {
        key,
        now,
        lease_until: now + Duration::from_secs(600),
        expires_at: now + Duration::from_secs(3600),
        fingerprint: Some("fp"),
    };
    let claim = store.claim(request(stuck)).await.expect("claim");
    assert!(matches!(claim, Claim::Acquired(_)), "{claim:?}");
    let Claim::Acquired(token) = store.claim(request(done)).await.expect("claim") else {
        panic!("{done} already claimed");
    };
    store
        .complete_with(
            done,
            &token,
            Completion::new(now + Duration::from_secs(3600)),
        )
        .await
        .expect("complete");
}

/// The operator's whole round on `url`: init (twice: idempotent), then on a stuck and a
/// completed claim taken by a consumer, inspect, the refusals, release, forget, prune.
async fn operator_round<S: ClaimStore>(dir: &Path, url: &str, open: impl Future<Output = S>) {
    let ns = unique("orders");
    let (stuck, done) = (format!("{ns}#o-1"), format!("{ns}#o-2"));
    for _ in 0..2 {
        let init = sqs_claim(dir, &["init", "--store", url]).ok("init");
        assert!(init.stderr.contains("initialized"), "{}", init.stderr);
    }
    let store = open.await;
    claims_of_a_consumer(&store, &stuck, &done).await;

    let inspect = sqs_claim(
        dir,
        &["inspect", &stuck, "--store", url, "--report", "json"],
    )
    .ok("inspect the stuck claim");
    let record: Value = serde_json::from_str(&inspect.stdout).expect("inspect --report json");
    assert_eq!(record["status"], "in_progress", "{record}");
    assert_eq!(record["key"], stuck.as_str(), "{record}");
    let plain = sqs_claim(dir, &["inspect", "o-2", "--namespace", &ns, "--store", url])
        .ok("inspect the completed claim by its raw key");
    assert!(plain.stdout.contains("completed"), "{}", plain.stdout);

    // Each command refuses the other status, and a raw key without its namespace.
    let run = sqs_claim(dir, &["forget", &stuck, "--yes", "--store", url]).fails(1, "forget");
    assert!(run.stderr.contains("in progress"), "{}", run.stderr);
    let run = sqs_claim(dir, &["release", &done, "--yes", "--store", url]).fails(1, "release");
    assert!(run.stderr.contains("completed"), "{}", run.stderr);
    let run = sqs_claim(dir, &["inspect", "o-1", "--store", url]).fails(2, "a raw key");
    assert!(run.stderr.contains("NAMESPACE#o-1"), "{}", run.stderr);

    let run = sqs_claim(dir, &["release", &stuck, "--yes", "--store", url]).ok("release");
    assert!(
        run.stdout.contains(&format!("released {stuck}")),
        "{}",
        run.stdout
    );
    let run = sqs_claim(dir, &["forget", &done, "--yes", "--store", url]).ok("forget");
    assert!(
        run.stdout.contains(&format!("forgotten {done}")),
        "{}",
        run.stdout
    );
    for key in [&stuck, &done] {
        let run = sqs_claim(dir, &["inspect", key, "--store", url]).fails(1, "gone");
        assert!(run.stderr.contains("no claim record"), "{}", run.stderr);
    }
    // Both keys can be claimed again at once.
    claims_of_a_consumer(&store, &stuck, &done).await;

    let prune = sqs_claim(dir, &["prune", "--store", url]).ok("prune");
    assert!(
        prune.stdout.trim().parse::<u64>().is_ok(),
        "{}",
        prune.stdout
    );
}

#[tokio::test]
async fn the_operator_round_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("claims.db");
    let url = format!("sqlite:{}", db.display());
    operator_round(dir.path(), &url, async {
        SqliteStore::open(&db).expect("open the CLI's SQLite file")
    })
    .await;
    // The default store is the same file under the current directory.
    let run = sqs_claim(dir.path(), &["prune"]).ok("prune on the default store");
    assert_eq!(run.stdout.trim(), "0");
    assert!(dir.path().join(".sqs-claim/claims.db").is_file());
}

/// The issue this crate was made for: on a claims table created as the README says, with no
/// accounts table anywhere, every command works.
#[tokio::test]
async fn the_operator_round_on_a_dynamodb_table_of_its_own() {
    let dir = tempfile::tempdir().expect("temp dir");
    let table = unique("claims-");
    let url = format!("dynamodb:{table}");
    let endpoint = dynamodb_endpoint();
    let config = sqs_claim::aws_config::defaults(sqs_claim::aws_config::BehaviorVersion::latest())
        .endpoint_url(&endpoint)
        .region(sqs_claim::aws_config::Region::new("us-east-1"))
        .credentials_provider(sqs_claim::aws_sdk_dynamodb::config::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .load()
        .await;
    let store = DynamoDbStore::from_sdk_config(&config, table.clone(), Default::default());
    let client = store.client().clone();
    operator_round(dir.path(), &url, async { store }).await;
    let tables = client
        .list_tables()
        .send()
        .await
        .expect("list tables")
        .table_names
        .unwrap_or_default();
    assert!(tables.contains(&table), "{tables:?}");
    assert!(
        !tables.iter().any(|t| t.starts_with(&table) && t != &table),
        "init creates the claims table alone: {tables:?}"
    );
    // A single-table layout: the key layout flags reach init and the operator's commands.
    let shared = unique("app-");
    let layout = [
        "--store",
        &format!("dynamodb:{shared}"),
        "--partition-key",
        "pk=CLAIM#{key}",
        "--sort-key",
        "sk=CLAIM",
    ]
    .map(str::to_owned);
    let layout: Vec<&str> = layout.iter().map(String::as_str).collect();
    sqs_claim(dir.path(), &[&["init"], &layout[..]].concat()).ok("init a single table");
    let run = sqs_claim(dir.path(), &[&["inspect", "ns#k"], &layout[..]].concat())
        .fails(1, "no record yet");
    assert!(run.stderr.contains("no claim record"), "{}", run.stderr);
}

#[tokio::test]
async fn the_operator_round_on_postgres() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = "postgres://postgres@127.0.0.1:5432/test";
    operator_round(dir.path(), url, async {
        PostgresStore::connect(url).expect("PostgreSQL at 127.0.0.1:5432")
    })
    .await;
}

#[tokio::test]
async fn the_operator_round_on_redis() {
    let dir = tempfile::tempdir().expect("temp dir");
    let prefix = unique("cli-");
    let url = format!("redis://127.0.0.1:6379/?prefix={prefix}:");
    operator_round(dir.path(), &url, async {
        RedisStore::connect("redis://127.0.0.1:6379/")
            .await
            .expect("Redis at 127.0.0.1:6379")
            .with_prefix(format!("{prefix}:"))
    })
    .await;
}

/// `invoke` and `balances` moved to the example app: a usage error that says where.
#[test]
fn the_apps_commands_point_at_the_app() {
    let dir = tempfile::tempdir().expect("temp dir");
    for args in [&["invoke", "events/plain.json"][..], &["balances"]] {
        let run = sqs_claim(dir.path(), args).fails(2, "an app command");
        assert!(run.stderr.contains("payments"), "{}", run.stderr);
    }
    let help = sqs_claim(dir.path(), &["--help"]).ok("help");
    for command in ["init", "prune", "doctor", "inspect", "release", "forget"] {
        let listed = help
            .stdout
            .lines()
            .any(|l| l.trim_start().starts_with(&format!("{command} ")));
        assert!(listed, "{command}: {}", help.stdout);
    }
    assert!(!help.stdout.contains("invoke"), "{}", help.stdout);
    assert!(
        !dir.path().join(".sqs-claim").exists(),
        "help touches no store"
    );
}
