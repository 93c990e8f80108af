//! The embedded SQLite store keeps the store contract: the shared conformance suite on a real
//! file, atomic effects, exactly one winner when two connections and several processes race on
//! one file, durability across reopen, and no blocking of the async runtime.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use futures::future::join_all;
use futures::stream::{self, StreamExt};
use sqs_claim::ErrorKind;
use sqs_claim::store::StoreAdmin;
use sqs_claim::store::{Claim, ClaimStore, Completion, Effects, StoredResponse};
use sqs_claim::{SqlEffect, SqlValue, SqliteStore};
use sqs_claim_testkit::conformance::request;
use sqs_claim_testkit::conformance::{self, EffectProbe};

/// A database file in a temp dir of its own, removed with the dir (and so with the WAL and
/// shared-memory files SQLite puts beside it) on drop.
struct TempDb {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl TempDb {
    fn new(name: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("sqs-claim-test-{name}-"))
            .tempdir()
            .expect("create a temp dir");
        TempDb {
            path: dir.path().join("claims.db"),
            _dir: dir,
        }
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

fn open(db: &TempDb) -> SqliteStore {
    SqliteStore::open(db.path()).expect("open the SQLite store")
}

/// Effects as rows of a `probe` table; refusal by a statement that changes no row while
/// `expect_rows(1)` asks for one.
struct RowCountProbe(SqliteStore);

/// The same, refused by a `CHECK` constraint instead.
struct ConstraintProbe(SqliteStore);

async fn probe_table(store: &SqliteStore) {
    store
        .execute_batch(
            "CREATE TABLE IF NOT EXISTS probe (
                 marker TEXT PRIMARY KEY,
                 amount INTEGER NOT NULL CHECK (amount >= 0)
             );",
        )
        .await
        .expect("create the probe table");
}

async fn applied(store: &SqliteStore, marker: &str) -> bool {
    let rows = store
        .query(
            "SELECT count(*) FROM probe WHERE marker = ?1",
            vec![marker.into()],
        )
        .await
        .expect("query the probe table");
    rows[0][0] != SqlValue::Integer(0)
}

fn write(marker: &str) -> SqlEffect {
    SqlEffect::new(
        "INSERT INTO probe (marker, amount) VALUES (?1, 1)",
        vec![marker.into()],
    )
}

impl EffectProbe<SqliteStore> for RowCountProbe {
    fn write(&self, marker: &str) -> SqlEffect {
        write(marker)
    }
    fn rejected(&self, marker: &str) -> SqlEffect {
        SqlEffect::new(
            "UPDATE probe SET amount = amount + 1 WHERE marker = ?1",
            vec![marker.into()],
        )
        .expect_rows(1)
    }
    async fn applied(&self, marker: &str) -> bool {
        applied(&self.0, marker).await
    }
}

impl EffectProbe<SqliteStore> for ConstraintProbe {
    fn write(&self, marker: &str) -> SqlEffect {
        write(marker)
    }
    fn rejected(&self, marker: &str) -> SqlEffect {
        SqlEffect::new(
            "INSERT INTO probe (marker, amount) VALUES (?1, -1)",
            vec![marker.into()],
        )
    }
    async fn applied(&self, marker: &str) -> bool {
        applied(&self.0, marker).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_on_a_file() {
    let db = TempDb::new("conformance");
    let store = open(&db);
    conformance::run_all(&store).await;
    probe_table(&store).await;
    conformance::run_effects(&store, &RowCountProbe(store.clone())).await;
    conformance::run_effects(&store, &ConstraintProbe(store.clone())).await;
    conformance::run_admin(&store).await;
}

#[tokio::test]
async fn conformance_in_memory() {
    let store = SqliteStore::open_in_memory().expect("open in memory");
    conformance::run_all(&store).await;
    conformance::run_admin(&store).await;
    let db = TempDb::new("init");
    conformance::run_admin(&open(&db)).await;
    probe_table(&store).await;
    conformance::run_effects(&store, &RowCountProbe(store.clone())).await;
}

/// Two stores (two connections, two threads) on one file, 16 claimers each per key, all at
/// once: SQLite's file lock must leave exactly one winner per key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_across_two_connections() {
    let db = TempDb::new("race");
    let (a, b) = (open(&db), open(&db));
    let prefix = uuid::Uuid::new_v4().to_string();
    let now = SystemTime::now();
    let winners: Vec<(usize, usize)> = stream::iter(0..200)
        .map(|k| {
            let key = format!("{prefix}#{k}");
            let (a, b) = (&a, &b);
            async move {
                let claims = (0..32).map(|i| {
                    let store = if i % 2 == 0 { a } else { b };
                    store.claim(request(&key, now))
                });
                let won = join_all(claims)
                    .await
                    .into_iter()
                    .map(|r| match r {
                        Ok(Claim::Acquired(_)) => 1,
                        Ok(Claim::HeldElsewhere { .. }) => 0,
                        other => panic!("race on {key:?}: unexpected answer {other:?}"),
                    })
                    .sum::<usize>();
                (k, won)
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    assert_eq!(winners.len(), 200);
    for (k, won) in winners {
        assert_eq!(
            won, 1,
            "key #{k}: {won} of 32 claimers on two connections won"
        );
    }
}

const CHILD_DB: &str = "SQS_CLAIM_TEST_RACE_DB";
const CHILD_PREFIX: &str = "SQS_CLAIM_TEST_RACE_PREFIX";
const CHILD_START: &str = "SQS_CLAIM_TEST_RACE_START_MS";
const RACE_KEYS: usize = 100;
/// Milliseconds between two keys of the cross-process race.
const PACE_MS: i64 = 10;

/// Four processes, each with 8 concurrent claimers per key, on one file: SQLite's
/// cross-process (fcntl) locking must leave exactly one winner per key. The children are this
/// test binary, running [`race_child`].
#[test]
fn race_across_processes() {
    let db = TempDb::new("race-processes");
    drop(open(&db)); // create the schema once, before the children race
    let prefix = uuid::Uuid::new_v4().to_string();
    // All children start claiming at the same instant, after each has opened the file.
    let start = sqs_claim::store::epoch_millis(SystemTime::now() + Duration::from_millis(1500));
    let exe = std::env::current_exe().expect("path of this test binary");
    // The child test's name in this binary: its module path without the crate's name.
    let child = module_path!()
        .split_once("::")
        .map_or("race_child".to_owned(), |(_, m)| format!("{m}::race_child"));
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(&exe)
                .args([
                    child.as_str(),
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_DB, db.path())
                .env(CHILD_PREFIX, &prefix)
                .env(CHILD_START, start.to_string())
                .output_async()
        })
        .collect();
    let mut wins = vec![0usize; RACE_KEYS];
    let mut per_child = Vec::new();
    for child in children {
        let out = child.wait_with_output().expect("wait for a child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout
            .lines()
            .find_map(|l| l.find("WON ").map(|at| &l[at + 4..]))
            .unwrap_or_else(|| panic!("child printed no WON line:\n{stdout}"));
        per_child.push(line.split_whitespace().count());
        for k in line.split_whitespace() {
            wins[k.parse::<usize>().expect("key index")] += 1;
        }
    }
    // Which process wins a key is up to the scheduler; shown, not asserted.
    eprintln!("keys won per process: {per_child:?}");
    for (k, w) in wins.iter().enumerate() {
        assert_eq!(
            *w, 1,
            "key #{k}: {w} winners across 4 processes, expected exactly 1"
        );
    }
}

trait SpawnExt {
    fn output_async(&mut self) -> std::process::Child;
}

impl SpawnExt for Command {
    fn output_async(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn a child test process")
    }
}

/// Helper process of [`race_across_processes`], not a test of its own: without the variables
/// the parent sets, it returns at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process for race_across_processes"]
async fn race_child() {
    let (Ok(db), Ok(prefix), Ok(start)) = (
        std::env::var(CHILD_DB),
        std::env::var(CHILD_PREFIX),
        std::env::var(CHILD_START),
    ) else {
        return;
    };
    let store = SqliteStore::open(&db).expect("child opens the database");
    let start: i64 = start.parse().expect("start time");
    let wait = start - sqs_claim::store::epoch_millis(SystemTime::now());
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
    let now = SystemTime::now();
    // Every child claims key k at the same instant, start + k * PACE: SQLite's lock is not
    // fair, and unpaced, one busy process would take every key before the others woke up.
    let mut won = Vec::new();
    for k in 0..RACE_KEYS {
        let at = start + (k as i64) * PACE_MS;
        let wait = at - sqs_claim::store::epoch_millis(SystemTime::now());
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait as u64)).await;
        }
        let key = format!("{prefix}#{k}");
        let results = join_all((0..8).map(|_| store.claim(request(&key, now)))).await;
        let mut wins = 0;
        for r in results {
            match r {
                Ok(Claim::Acquired(_)) => wins += 1,
                Ok(Claim::HeldElsewhere { .. }) => {}
                other => panic!("child race on {key:?}: unexpected {other:?}"),
            }
        }
        assert!(wins <= 1, "key #{k}: {wins} winners inside one process");
        if wins == 1 {
            won.push(k);
        }
    }
    let list: Vec<String> = won.iter().map(ToString::to_string).collect();
    // The harness prints "test test_sqlite_store::race_child ... " without a newline first.
    println!("\nWON {}", list.join(" "));
}

/// A completion is on disk: a new store on the same file sees the key as a duplicate, with
/// its fingerprint, and the committed effect.
#[tokio::test]
async fn completion_survives_reopen() {
    let db = TempDb::new("reopen");
    let key = format!("reopen#{}", uuid::Uuid::new_v4());
    let now = SystemTime::now();
    {
        let store = open(&db);
        probe_table(&store).await;
        let mut req = request(&key, now);
        req.fingerprint = Some("fp-1");
        let Ok(Claim::Acquired(token)) = store.claim(req).await else {
            panic!("first claim must win");
        };
        store
            .complete_with(
                &key,
                &token,
                Completion::new(now + Duration::from_secs(3600))
                    .with_effects(Effects::one(write("m1"))),
            )
            .await
            .expect("complete");
    }
    let store = open(&db);
    match store.claim(request(&key, now)).await {
        Ok(Claim::Completed { record: rec, .. }) => {
            assert_eq!(rec.fingerprint.as_deref(), Some("fp-1"))
        }
        other => panic!("after reopen the key must be a duplicate, got {other:?}"),
    }
    assert!(
        applied(&store, "m1").await,
        "the effect must be on disk with the completion"
    );
}

/// A file written by the version before the stored response (its `claims` table has no
/// `response` column) opens: the store adds the column, an old completed record reads as
/// completed with no response, and new completions store theirs. Opening it again changes
/// nothing.
#[tokio::test]
async fn a_table_without_the_response_column_is_upgraded_on_open() {
    let db = TempDb::new("old-schema");
    let now = SystemTime::now();
    let expires = i64::try_from(
        (now + Duration::from_secs(3600))
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("after the epoch")
            .as_millis(),
    )
    .expect("fits");
    {
        // The schema and a completed row exactly as the previous version wrote them.
        let old = rusqlite::Connection::open(db.path()).expect("open the old file");
        old.execute_batch(
            "CREATE TABLE IF NOT EXISTS claims (
                id             TEXT PRIMARY KEY NOT NULL,
                status         TEXT NOT NULL CHECK (status IN ('INPROGRESS', 'COMPLETED')),
                token          TEXT NOT NULL,
                lease_until_ms INTEGER,
                expires_at_ms  INTEGER NOT NULL,
                fingerprint    TEXT
            );",
        )
        .expect("old schema");
        old.execute(
            "INSERT INTO claims (id, status, token, lease_until_ms, expires_at_ms, fingerprint) \
             VALUES ('old-key', 'COMPLETED', 'old-token', NULL, ?1, 'fp-old')",
            [expires],
        )
        .expect("old completed row");
    }
    let store = open(&db);
    match store.claim(request("old-key", now)).await {
        Ok(Claim::Completed { record: rec, .. }) => {
            assert_eq!(rec.fingerprint.as_deref(), Some("fp-old"));
            assert_eq!(rec.response, None, "an old record has no response");
        }
        other => panic!("the old record must read as completed, got {other:?}"),
    }
    let inspected = store
        .inspect("old-key")
        .await
        .expect("inspect")
        .expect("the old record");
    assert_eq!(inspected.record.response, None);

    let Ok(Claim::Acquired(token)) = store.claim(request("new-key", now)).await else {
        panic!("a new key is claimed on the upgraded table");
    };
    store
        .complete_with(
            "new-key",
            &token,
            Completion::new(now + Duration::from_secs(3600))
                .with_response(StoredResponse::new("{\"ok\": true}")),
        )
        .await
        .expect("complete with a response on the upgraded table");
    drop(store);
    // Reopened: the column is there already, nothing to add, and the response was kept.
    let store = open(&db);
    match store.claim(request("new-key", now)).await {
        Ok(Claim::Completed { record: rec, .. }) => assert_eq!(
            rec.response.as_ref().map(StoredResponse::as_str),
            Some("{\"ok\": true}")
        ),
        other => panic!("the new completion must be a duplicate, got {other:?}"),
    }
}

/// A statement that is not valid SQL is a refusal (`StoreRejected`), not an `EffectRejected`,
/// and it cancels the completion too.
#[tokio::test]
async fn broken_effect_is_store_rejected() {
    let store = SqliteStore::open_in_memory().expect("open");
    let key = "broken-effect";
    let now = SystemTime::now();
    let Ok(Claim::Acquired(token)) = store.claim(request(key, now)).await else {
        panic!("claim must win");
    };
    let err = store
        .complete_with(
            key,
            &token,
            Completion::new(now + Duration::from_secs(60)).with_effects(Effects::one(
                SqlEffect::new("UPDATE no_such_table SET x = 1", vec![]),
            )),
        )
        .await
        .expect_err("an invalid statement must fail the completion");
    assert_eq!(err.kind(), ErrorKind::StoreRejected, "{err}");
    assert!(
        format!("{err:#}").contains("no_such_table"),
        "the cause must be named: {err:#}"
    );
    assert!(
        matches!(
            store.claim(request(key, now)).await,
            Ok(Claim::HeldElsewhere { .. })
        ),
        "the claim must still be in progress"
    );
}

/// Another process holding the database locked past the busy timeout makes the store
/// unavailable (transient), not a refusal.
#[tokio::test]
async fn locked_database_is_unavailable() {
    let db = TempDb::new("locked");
    let store = open(&db);
    store
        .set_busy_timeout(Duration::from_millis(200))
        .await
        .expect("set busy timeout");
    let locker = rusqlite::Connection::open(db.path()).expect("second connection");
    locker
        .execute_batch("BEGIN EXCLUSIVE")
        .expect("take the write lock");
    let started = Instant::now();
    let err = store
        .claim(request("locked", SystemTime::now()))
        .await
        .expect_err("a claim on a locked database must fail");
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable, "{err}");
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "the busy timeout must be waited out first ({:?})",
        started.elapsed()
    );
    locker.execute_batch("ROLLBACK").expect("release the lock");
    assert!(matches!(
        store.claim(request("locked", SystemTime::now())).await,
        Ok(Claim::Acquired(_))
    ));
}

/// Waiting on SQLite must not block the runtime: on a single-threaded runtime, a timer fires
/// while a claim waits for a lock another connection holds.
#[tokio::test(flavor = "current_thread")]
async fn waiting_on_a_lock_does_not_block_the_runtime() {
    let db = TempDb::new("nonblocking");
    let store = open(&db);
    let path = db.path().to_owned();
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let locker = std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(path).expect("locker connection");
        conn.execute_batch("BEGIN EXCLUSIVE").expect("lock");
        locked_tx.send(()).expect("signal");
        std::thread::sleep(Duration::from_millis(600));
        conn.execute_batch("ROLLBACK").expect("unlock");
    });
    locked_rx.recv().expect("locker took the lock");
    let started = Instant::now();
    let claim = store.claim(request("nonblocking", SystemTime::now()));
    let timer = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        started.elapsed()
    };
    let (claimed, timer_fired_after) = tokio::join!(claim, timer);
    assert!(matches!(claimed, Ok(Claim::Acquired(_))), "{claimed:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "the claim should have waited for the lock"
    );
    assert!(
        timer_fired_after < Duration::from_millis(400),
        "a 50 ms timer fired only after {timer_fired_after:?}: the claim blocked the runtime"
    );
    locker.join().expect("locker thread");
}

/// Opening something that is not a database is a refusal naming the file.
#[test]
fn not_a_database_is_rejected() {
    let db = TempDb::new("garbage");
    std::fs::write(db.path(), vec![b'x'; 4096]).expect("write garbage");
    let err = SqliteStore::open(db.path()).expect_err("garbage must not open");
    assert_eq!(err.kind(), ErrorKind::StoreRejected, "{err}");
    assert!(
        err.to_string().contains(&db.path().display().to_string()),
        "{err}"
    );
}

/// Expired records are purged; live ones stay.
#[tokio::test]
async fn purge_removes_only_expired_records() {
    let store = SqliteStore::open_in_memory().expect("open");
    let now = SystemTime::now();
    for (key, ttl) in [("short", 10), ("long", 3600)] {
        let Ok(Claim::Acquired(token)) = store.claim(request(key, now)).await else {
            panic!("claim {key}");
        };
        store
            .complete_with(key, &token, Completion::new(now + Duration::from_secs(ttl)))
            .await
            .expect("complete");
    }
    let purged = store
        .prune_expired(now + Duration::from_secs(60), 10_000)
        .await
        .expect("purge");
    assert_eq!(purged, Some(1));
    let rows = store
        .query("SELECT id FROM claims ORDER BY id", vec![])
        .await
        .expect("query");
    assert_eq!(rows, vec![vec![SqlValue::Text("long".into())]]);
}

/// Pruning never deletes an in-progress record under a live lease, even one claimed with a TTL
/// shorter than its lease (its expiry is kept at least until the lease).
#[tokio::test]
async fn prune_keeps_a_short_ttl_claim_under_its_lease() {
    let store = SqliteStore::open_in_memory().expect("open");
    let now = SystemTime::now();
    let mut req = request("short-ttl", now);
    req.lease_until = now + Duration::from_secs(60);
    req.expires_at = now + Duration::from_secs(1);
    let Ok(Claim::Acquired(_)) = store.claim(req).await else {
        panic!("claim short-ttl");
    };
    let later = now + Duration::from_secs(30);
    let pruned = store.prune_expired(later, 10_000).await.expect("prune");
    assert_eq!(
        pruned,
        Some(0),
        "a record under a live lease must not be pruned"
    );
    match store.claim(request("short-ttl", later)).await {
        Ok(Claim::HeldElsewhere { .. }) => {}
        other => panic!("the claim must still be held after pruning, got {other:?}"),
    }
}

/// Calls waiting together commit together (one transaction, one fsync), yet each stays its
/// own unit: a completion refused inside the group rolls back only its own writes. The
/// calls are queued while another connection holds the lock, so they form one group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_completion_in_a_group_leaves_the_others_alone() {
    let db = TempDb::new("group");
    let store = open(&db);
    probe_table(&store).await;
    let now = SystemTime::now();
    let keys: Vec<String> = (0..20).map(|i| format!("group#{i}")).collect();
    let mut tokens = Vec::new();
    for key in &keys {
        match store.claim(request(key, now)).await {
            Ok(Claim::Acquired(t)) => tokens.push(t),
            other => panic!("claim {key}: {other:?}"),
        }
    }
    let locker = rusqlite::Connection::open(db.path()).expect("second connection");
    locker.execute_batch("BEGIN IMMEDIATE").expect("lock");
    let completions = keys
        .iter()
        .zip(&tokens)
        .enumerate()
        .map(|(i, (key, token))| {
            let mut effects = vec![write(&format!("{key}#effect"))];
            if i == 7 {
                effects.push(RowCountProbe(store.clone()).rejected("nothing-matches"));
            }
            store.complete_with(
                key,
                token,
                Completion::new(now + Duration::from_secs(3600)).with_effects(effects.into()),
            )
        });
    let release = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        locker.execute_batch("COMMIT").expect("unlock");
    };
    let (results, ()) = tokio::join!(join_all(completions), release);
    for (i, (key, result)) in keys.iter().zip(results).enumerate() {
        let effect = applied(&store, &format!("{key}#effect")).await;
        if i == 7 {
            let err = result.expect_err("the refused completion fails");
            assert_eq!(err.kind(), ErrorKind::EffectRejected, "{err}");
            assert!(
                !effect,
                "the refused completion's first effect must be rolled back"
            );
            assert!(matches!(
                store.claim(request(key, now)).await,
                Ok(Claim::HeldElsewhere { .. })
            ));
        } else {
            result.unwrap_or_else(|e| panic!("completion of {key} in the same group: {e}"));
            assert!(effect, "{key}: effect committed");
            assert!(matches!(
                store.claim(request(key, now)).await,
                Ok(Claim::Completed { .. })
            ));
        }
    }
}

/// Several connections opening a new file at the same moment all succeed: the switch to WAL
/// and the schema creation race, and SQLite answers some of those conflicts with SQLITE_BUSY
/// at once instead of waiting.
#[test]
fn concurrent_opens_of_a_new_file_succeed() {
    for _ in 0..20 {
        let db = TempDb::new("open-race");
        let barrier = std::sync::Barrier::new(8);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        SqliteStore::open(db.path()).map(drop)
                    })
                })
                .collect();
            for h in handles {
                h.join()
                    .expect("opener thread")
                    .unwrap_or_else(|e| panic!("concurrent open failed: {e}"));
            }
        });
    }
}

/// The wait for the connection thread's answer is bounded too (twice the busy timeout plus
/// 2 s): a claim queued behind a statement that keeps the thread busy (a stuck disk looks the
/// same) fails with `StoreUnavailable` instead of waiting for as long as the thread is busy.
#[tokio::test]
async fn a_stuck_connection_thread_is_unavailable_within_the_reply_bound() {
    let db = TempDb::new("stuck");
    let store = SqliteStore::open(db.path()).expect("open");
    store
        .set_busy_timeout(Duration::from_millis(100))
        .await
        .expect("set busy timeout");
    // Minutes of work for the connection thread; nobody waits for its answer.
    let busy = store.clone();
    tokio::spawn(async move {
        let _ = busy
            .query(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n \
                 WHERE i < 2000000000) SELECT count(*) FROM n",
                vec![],
            )
            .await;
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(20),
        store.claim(request("ns#stuck", SystemTime::now())),
    )
    .await
    .expect("the claim must not wait for the busy thread");
    let err = result.expect_err("the thread never got to the claim");
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable, "{err}");
    assert!(
        err.to_string().contains("did not answer within 2200 ms"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded by 2.2 s, took {:?}",
        started.elapsed()
    );
}
