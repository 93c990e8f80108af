//! The example app's ledgers on every store: each keeps every balance within
//! `0..=Payment::MAX_BALANCE_CENTS` (refused in the store, with the completion), names an
//! unreadable balance with its account, and the `payments` command line credits once on each
//! server store (the operator's `sqs-claim` prunes, inspects, releases and forgets there). Moved
//! here from the library's store tests when the app left the library.

use std::time::{Duration, SystemTime};

use crate::support;

use sqs_claim_testkit::local as dynamodb_local;
#[cfg(feature = "postgres")]
use sqs_claim_testkit::silent;
// The `payments` and `sqs-claim` scenario shared by every server store.
#[cfg(any(feature = "redis", feature = "postgres"))]
use support::cli;
use support::{ledger, servers};

mod memory {
    /// The memory ledger keeps every balance within `0..=Payment::MAX_BALANCE_CENTS`.
    #[tokio::test]
    async fn memory_ledger_keeps_balances_in_range() {
        super::ledger::balance_stays_in_range(&payments::MemoryLedger::new()).await;
    }
}

mod sqlite {
    use payments::SqliteLedger;
    use sqs_claim::ErrorKind;
    use sqs_claim::SqliteStore;

    /// A database file in a temp dir, removed on drop.
    struct TempDb(tempfile::TempDir);

    impl TempDb {
        fn new(_name: &str) -> Self {
            TempDb(tempfile::tempdir().expect("a temp dir"))
        }
    }

    fn open(db: &TempDb) -> SqliteLedger {
        SqliteLedger::new(
            SqliteStore::open(db.0.path().join("claims.db")).expect("open the SQLite store"),
        )
    }

    /// The SQLite ledger keeps every balance within `0..=Payment::MAX_BALANCE_CENTS`: on a table
    /// `init` creates, and on an accounts table created before the range existed (no range
    /// `CHECK`: the credit's own condition must hold the line). An unreadable balance in such a
    /// table is named, with its account, by `balances`.
    #[tokio::test]
    async fn sqlite_ledger_keeps_balances_in_range() {
        use payments::Ledger as _;
        let db = TempDb::new("ledger");
        let store = open(&db);
        store.init().await.expect("init");
        super::ledger::balance_stays_in_range(&store).await;

        let db = TempDb::new("ledger-old");
        let store = open(&db);
        store
            .store()
            .execute_batch(
                "CREATE TABLE accounts (
                     account TEXT PRIMARY KEY NOT NULL,
                     balance INTEGER NOT NULL CHECK (typeof(balance) = 'integer')
                 );",
            )
            .await
            .expect("an accounts table of the old schema");
        store.init().await.expect("init keeps the old table");
        super::ledger::balance_stays_in_range(&store).await;

        // A table with no checks at all, written by something else.
        let db = TempDb::new("ledger-foreign");
        let store = open(&db);
        store
            .store()
            .execute_batch(
                "CREATE TABLE accounts (account TEXT PRIMARY KEY NOT NULL, balance NOT NULL);
                 INSERT INTO accounts VALUES ('acct-ok', 5), ('acct-odd', 12.5);",
            )
            .await
            .expect("a foreign accounts table");
        let err = store.balances().await.expect_err("12.5 is not a balance");
        let text = err.to_string();
        assert_eq!(err.kind(), ErrorKind::StoreRejected, "{text}");
        assert!(
            text.contains("\"acct-odd\"") && text.contains("not a whole number of cents"),
            "{text}"
        );
    }
}

mod dynamodb {
    use super::*;
    use sqs_claim::aws_sdk_dynamodb::Client;
    use sqs_claim::aws_sdk_dynamodb::types::AttributeValue;
    use sqs_claim::{ClaimStore, DynamoDbStore, Effects};
    use sqs_claim_testkit::conformance;

    fn client() -> Client {
        super::dynamodb_local::dynamodb_client(&super::dynamodb_local::dynamodb_endpoint())
    }

    /// The DynamoDB ledger keeps every balance within `0..=Payment::MAX_BALANCE_CENTS` (the
    /// condition on the credit's `Update` in the completion's transaction), and `balances` names
    /// an account whose stored balance it cannot read, with what is wrong with it.
    #[tokio::test]
    async fn dynamodb_ledger_keeps_balances_in_range() {
        use payments::{DynamoDbLedger, Ledger};
        let table = format!("ledger-{}", uuid::Uuid::new_v4());
        let accounts = format!("{table}-accounts");
        let ledger = DynamoDbLedger::new(DynamoDbStore::new(client(), &table), &accounts);
        ledger.init().await.expect("create both tables");
        super::ledger::balance_stays_in_range(&ledger).await;

        // (stored balance, what `balances` says, whether a credit on it is refused: a condition
        // cannot tell 12.5 from an integer, so that one is only named.)
        for (balance, want, refused) in [
            (
                AttributeValue::N("18446744073709551616".into()),
                "beyond the 64-bit range",
                true,
            ),
            (
                AttributeValue::N("12.5".into()),
                "not a whole number of cents",
                false,
            ),
            (
                AttributeValue::S("12".into()),
                "a string, not a number",
                true,
            ),
        ] {
            let account = format!("odd-{}", uuid::Uuid::new_v4().simple());
            client()
                .put_item()
                .table_name(&accounts)
                .item("account", AttributeValue::S(account.clone()))
                .item("balance", balance)
                .send()
                .await
                .expect("put an odd balance");
            let err = ledger.balances().await.expect_err("an unreadable balance");
            let text = err.to_string();
            assert_eq!(err.kind(), sqs_claim::ErrorKind::StoreRejected, "{text}");
            assert!(
                text.contains(&format!("{account:?}")) && text.contains(want),
                "{text} should name {account} and say {want}"
            );
            // A credit on it is refused, not added to something unreadable.
            if !refused {
                delete_account(&accounts, &account).await;
                continue;
            }
            let key = format!("odd#{account}");
            let now = SystemTime::now();
            let token = conformance::acquire(ledger.store(), conformance::request(&key, now)).await;
            let err = ledger
                .store()
                .complete_with(
                    &key,
                    &token,
                    sqs_claim::store::Completion::new(now + Duration::from_secs(60))
                        .with_effects(Effects::one(ledger.credit(&account, 1))),
                )
                .await
                .expect_err("a credit on an unreadable balance");
            assert_eq!(err.kind(), sqs_claim::ErrorKind::EffectRejected, "{err}");
            delete_account(&accounts, &account).await;
        }
        for t in [&table, &accounts] {
            let _ = client().delete_table().table_name(t).send().await;
        }
    }

    /// Deletes one account item (the odd balance a test put there).
    async fn delete_account(accounts: &str, account: &str) {
        client()
            .delete_item()
            .table_name(accounts)
            .key("account", AttributeValue::S(account.to_owned()))
            .send()
            .await
            .expect("delete the odd item");
    }

    /// On a single-table layout (`pk=CLAIM#{key}`, `sk=CLAIM`) the ledger's `init` creates the
    /// composite claims table, its start-up check accepts it, and the balance range holds (the
    /// credit rides in the completion's transaction, which names the claim's whole key).
    #[tokio::test]
    async fn dynamodb_ledger_on_a_single_table_layout() {
        use payments::{DynamoDbLedger, Ledger};
        use sqs_claim::store::dynamodb::DynamoDbKeySchema;
        let table = format!("ledger-single-{}", uuid::Uuid::new_v4());
        let accounts = format!("{table}-accounts");
        let store = DynamoDbStore::new(client(), &table)
            .with_key_schema(
                DynamoDbKeySchema::partition("pk", "CLAIM#{key}").with_sort("sk", "CLAIM"),
            )
            .expect("a valid layout");
        let ledger = DynamoDbLedger::new(store, &accounts);
        ledger.init().await.expect("create both tables");
        ledger
            .prepare()
            .await
            .expect("the composite table passes the check");
        super::ledger::balance_stays_in_range(&ledger).await;
        // The same table under the default layout fails the start-up check, saying why.
        let default = DynamoDbLedger::new(DynamoDbStore::new(client(), &table), &accounts);
        let err = default
            .prepare()
            .await
            .expect_err("the default layout on a composite table");
        assert_eq!(err.kind(), sqs_claim::ErrorKind::Config, "{err}");
        assert!(
            err.to_string()
                .contains("has the key schema pk (HASH, S) + sk (RANGE, S)"),
            "{err}"
        );
    }

    /// The operator's commands (`sqs-claim inspect`, `release`, `forget`) on a single-table
    /// layout given by the environment, after `payments init` made the composite table.
    #[cfg(any(feature = "redis", feature = "postgres"))]
    #[tokio::test]
    async fn operator_commands_on_a_single_table_layout() {
        let table = format!("ledger-single-op-{}", uuid::Uuid::new_v4());
        let store = format!("dynamodb:{table}");
        let endpoint = super::dynamodb_local::dynamodb_endpoint();
        tokio::task::spawn_blocking(move || {
            let env = [
                ("AWS_ENDPOINT_URL_DYNAMODB", endpoint.as_str()),
                ("AWS_REGION", "us-east-1"),
                ("AWS_ACCESS_KEY_ID", "test"),
                ("AWS_SECRET_ACCESS_KEY", "test"),
                ("AWS_EC2_METADATA_DISABLED", "true"),
                ("SQS_CLAIM_DYNAMODB_PARTITION_KEY", "pk=CLAIM#{key}"),
                ("SQS_CLAIM_DYNAMODB_SORT_KEY", "sk=CLAIM"),
            ];
            super::cli::run(&["init", "--store", &store], &env);
            super::cli::operator_commands(&store, &env);
        })
        .await
        .expect("the CLI scenario");
    }
}

#[cfg(feature = "redis")]
mod redis_ledger {
    use redis::AsyncCommands;
    use sqs_claim::ErrorKind;

    use super::servers::{cleanup, redis_store as store, redis_url};

    #[tokio::test]
    async fn cli_on_redis() {
        let conn = store().await.connection().clone();
        let url = redis_url();
        let sep = if url.contains('?') { '&' } else { '?' };
        let prefix = format!("test:{}:", uuid::Uuid::new_v4());
        let store = format!("{url}{sep}prefix={prefix}");
        let scenario = store.clone();
        tokio::task::spawn_blocking(move || super::cli::credits_once(&scenario))
            .await
            .expect("CLI scenario");
        tokio::task::spawn_blocking(move || super::cli::operator_commands(&store, &[]))
            .await
            .expect("operator's commands");
        let mut c = conn.clone();
        let balances: bool = c
            .exists(format!("{prefix}reference:balances"))
            .await
            .unwrap();
        assert!(balances, "the balances live under the URL's prefix");
        cleanup(&conn, &prefix).await;
        let err = super::cli::fails(&["balances", "--store", "redis://:hunter2@127.0.0.1:1/"]);
        assert!(
            err.contains("unavailable") && !err.contains("hunter2"),
            "{err}"
        );
    }

    /// The Redis ledger keeps every balance within `0..=Payment::MAX_BALANCE_CENTS` (the bounded
    /// increment in the completion script), and `balances` names an account whose stored balance
    /// it cannot read.
    #[tokio::test]
    async fn redis_ledger_keeps_balances_in_range() {
        use payments::Ledger as _;
        let store = store().await;
        let ledger = payments::RedisLedger::new(store.clone());
        super::ledger::balance_stays_in_range(&ledger).await;

        let key = payments::redis::balances_key(&store);
        let mut conn = store.connection().clone();
        let () = conn
            .hset(&key, "acct-huge", "18446744073709551616")
            .await
            .expect("HSET");
        let err = ledger.balances().await.expect_err("beyond i64");
        let text = err.to_string();
        assert_eq!(err.kind(), ErrorKind::StoreRejected, "{text}");
        assert!(
            text.contains("\"acct-huge\"") && text.contains("beyond the 64-bit range"),
            "{text}"
        );
        cleanup(store.connection(), store.prefix()).await;
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use payments::PostgresLedger;
    use sqs_claim::store::postgres::PostgresSettings;
    use sqs_claim::{ErrorKind, PostgresStore};

    use super::silent;

    use super::servers::{pg_url, sql};

    async fn store() -> PostgresStore {
        super::servers::pg_store("claims").await
    }

    async fn drop_table(store: &PostgresStore) {
        let t = store.table();
        sql(
            store,
            &format!("DROP TABLE IF EXISTS {t}, {t}_effects, {t}_accounts"),
        )
        .await;
    }

    fn fast() -> PostgresSettings {
        let mut settings = PostgresSettings::default();
        settings.call_timeout = Duration::from_secs(1);
        settings
    }

    #[tokio::test]
    async fn cli_on_postgres() {
        // The CLI uses the default table names; a schema of its own (via search_path) keeps this
        // run apart from others.
        let store = store().await;
        let schema = format!("cli_{}", uuid::Uuid::new_v4().simple());
        sql(&store, &format!("CREATE SCHEMA {schema}")).await;
        let url = pg_url();
        let sep = if url.contains('?') { '&' } else { '?' };
        let cli_url = format!("{url}{sep}options=-c%20search_path%3D{schema}");
        let scenario = cli_url.clone();
        tokio::task::spawn_blocking(move || super::cli::credits_once(&scenario))
            .await
            .expect("CLI scenario");
        tokio::task::spawn_blocking(move || super::cli::operator_commands(&cli_url, &[]))
            .await
            .expect("operator's commands");
        sql(&store, &format!("DROP SCHEMA {schema} CASCADE")).await;
        drop_table(&store).await;
        let err = super::cli::fails(&[
            "balances",
            "--store",
            "postgres://postgres:hunter2@127.0.0.1:1/test",
        ]);
        assert!(!err.contains("hunter2"), "{err}");
    }

    /// The start-up check says "run `sqs-claim init`" only for a missing table (42P01). A
    /// connection that breaks during the check is a network problem, and says so.
    #[tokio::test]
    async fn a_reset_during_the_start_up_check_is_not_a_missing_table() {
        use payments::Ledger as _;

        let closing = silent::fake_pg(silent::Then::Close).await;
        let url = format!("postgres://postgres@{}/test", closing.addr());
        let store = PostgresLedger::new(PostgresStore::connect_with(&url, fast()).unwrap());
        let err = store.prepare().await.expect_err("the connection closes");
        assert_eq!(err.kind(), ErrorKind::StoreUnavailable, "{err}");
        let text = err.to_string();
        assert!(
            !text.contains("init"),
            "a lost connection is not a missing table: {text}"
        );
        assert!(text.contains("connection to PostgreSQL lost"), "{text}");

        // The real server, a table never created: that one says what to run.
        let table = format!("never_{}", uuid::Uuid::new_v4().simple());
        let missing = PostgresLedger::new(
            PostgresStore::connect(&pg_url())
                .and_then(|s| s.with_table(&table))
                .unwrap(),
        );
        let err = missing.prepare().await.expect_err("no table");
        assert_eq!(err.kind(), ErrorKind::StoreRejected, "{err}");
        assert!(err.to_string().contains("`payments init`"), "{err}");
    }

    /// The PostgreSQL ledger keeps every balance within `0..=Payment::MAX_BALANCE_CENTS`: on the
    /// table `init` creates, and on an accounts table created before the range existed (only
    /// `CHECK (balance >= 0)`: the credit's own condition must hold the line).
    #[tokio::test]
    async fn postgres_ledger_keeps_balances_in_range() {
        use payments::Ledger as _;
        let store = store().await;
        let ledger = PostgresLedger::new(store.clone());
        ledger.init().await.expect("init");
        super::ledger::balance_stays_in_range(&ledger).await;
        drop_table(&store).await;

        let store = self::store().await;
        sql(
            &store,
            &format!(
                "CREATE TABLE {}_accounts (account TEXT PRIMARY KEY, \
                 balance BIGINT NOT NULL CHECK (balance >= 0))",
                store.table()
            ),
        )
        .await;
        let ledger = PostgresLedger::new(store.clone());
        ledger.init().await.expect("init keeps the old table");
        super::ledger::balance_stays_in_range(&ledger).await;
        drop_table(&store).await;
    }
}

#[cfg(all(feature = "redis", feature = "postgres"))]
mod tiered {
    use redis::AsyncCommands;
    use sqs_claim::PostgresStore;

    use super::servers::{cleanup, pg_url, redis_store as cache, redis_url, sql};

    async fn postgres() -> PostgresStore {
        super::servers::pg_store("tiered").await
    }

    async fn drop_tables(store: &PostgresStore) {
        let t = store.table();
        sql(store, &format!("DROP TABLE IF EXISTS {t}, {t}_effects")).await;
    }

    #[tokio::test]
    async fn cli_on_tiered_redis_and_postgres() {
        let pg = postgres().await;
        let schema = format!("cli_{}", uuid::Uuid::new_v4().simple());
        sql(&pg, &format!("CREATE SCHEMA {schema}")).await;
        let (redis, postgres) = (redis_url(), pg_url());
        let (rsep, psep) = (
            if redis.contains('?') { '&' } else { '?' },
            if postgres.contains('?') { '&' } else { '?' },
        );
        let prefix = format!("test:{}:", uuid::Uuid::new_v4());
        let store = format!(
            "tiered:{redis}{rsep}prefix={prefix}|{postgres}{psep}options=-c%20search_path%3D{schema}"
        );
        let scenario = store.clone();
        tokio::task::spawn_blocking(move || super::cli::credits_once(&scenario))
            .await
            .expect("CLI scenario");
        tokio::task::spawn_blocking(move || super::cli::operator_commands(&store, &[]))
            .await
            .expect("operator's commands");
        // With the cache down the durable store still decides, and the CLI still works.
        let down = format!("cli_{}", uuid::Uuid::new_v4().simple());
        sql(&pg, &format!("CREATE SCHEMA {down}")).await;
        let store = format!(
            "tiered:redis://127.0.0.1:1/|{postgres}{psep}options=-c%20search_path%3D{down}"
        );
        tokio::task::spawn_blocking(move || super::cli::credits_once(&store))
            .await
            .expect("CLI scenario with Redis down");
        sql(
            &pg,
            &format!("DROP SCHEMA {schema} CASCADE; DROP SCHEMA {down} CASCADE"),
        )
        .await;
        drop_tables(&pg).await;
        let cache = cache().await;
        let mut conn = cache.connection().clone();
        let markers: Vec<String> = conn.keys(format!("{prefix}done:*")).await.unwrap();
        // Three from each scenario: `forget` deleted one marker, and the rerun wrote it again.
        assert_eq!(
            markers.len(),
            6,
            "one marker per completed message: {markers:?}"
        );
        cleanup(cache.connection(), &prefix).await;
        let err = super::cli::fails(&["balances", "--store", "tiered:redis://127.0.0.1/"]);
        assert!(err.contains("tiered:REDIS_URL|DURABLE_URL"), "{err}");
    }
}
