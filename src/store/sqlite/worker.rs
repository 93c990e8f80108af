//! The connection thread and its group commit: jobs waiting in the queue run together in one
//! `BEGIN IMMEDIATE` transaction, each in its own savepoint, answered after the `COMMIT`.

use super::*;

/// The most jobs one transaction commits together: enough to amortize the fsync, small enough
/// that the write lock is never held for long.
pub(super) const MAX_GROUP: usize = 64;

/// Work for the connection thread: run inside the group's transaction, then answer the caller
/// once the transaction's fate is known.
pub(super) trait Job: Send {
    /// Whether the job runs in the group's write transaction (claims, completions, releases),
    /// or on its own in autocommit mode (queries and schema statements, which must not queue
    /// behind another process's writes for the write lock they do not need).
    fn grouped(&self) -> bool;
    /// Runs the work; returns whether it succeeded (a failed job's writes are rolled back) and
    /// how to deliver its answer after the commit.
    fn run(self: Box<Self>, conn: &mut Connection) -> (bool, Deliver);
    /// Answers with `error` without running (the group's transaction could not start).
    fn fail(self: Box<Self>, error: Error);
}

/// Delivers a job's answer: `None` if the group committed, else why it did not.
pub(super) type Deliver = Box<dyn FnOnce(Option<&GroupFailure>) + Send>;

/// Why a group's transaction did not commit; each caller gets an [`Error`] made from it.
pub(super) struct GroupFailure {
    kind: ErrorKind,
    message: String,
}

impl GroupFailure {
    fn new(e: rusqlite::Error, what: &str) -> Self {
        let e = classify(e, what);
        GroupFailure {
            kind: e.kind(),
            message: format!("{e:#}"),
        }
    }

    fn error(&self) -> Error {
        Error::new(self.kind, self.message.clone())
    }
}

pub(super) struct Task<F, T> {
    pub(super) grouped: bool,
    pub(super) work: F,
    pub(super) reply: tokio::sync::oneshot::Sender<Result<T, Error>>,
}

impl<F, T> Job for Task<F, T>
where
    F: FnOnce(&mut Connection) -> Result<T, Error> + Send + 'static,
    T: Send + 'static,
{
    fn grouped(&self) -> bool {
        self.grouped
    }

    fn run(self: Box<Self>, conn: &mut Connection) -> (bool, Deliver) {
        let Task { work, reply, .. } = *self;
        let result = work(conn);
        let ok = result.is_ok();
        let deliver: Deliver = Box::new(move |failure: Option<&GroupFailure>| {
            // The receiver may be gone (the caller was cancelled): the work is done anyway,
            // and the contract makes an unobserved claim harmless (it lapses with its lease).
            let _ = reply.send(match failure {
                None => result,
                Some(f) => Err(f.error()),
            });
        });
        (ok, deliver)
    }

    fn fail(self: Box<Self>, error: Error) {
        let _ = self.reply.send(Err(error));
    }
}

/// How long a caller waits for the connection thread's answer: the job may queue behind the
/// group being committed (one busy wait) and then wait for the lock itself (another), plus the
/// commit. Past that the disk or another process's lock is stuck, and the caller is told so
/// rather than left waiting; the job may still run later (a claim then holds until its lease
/// lapses, a repeated completion is a no-op).
pub(super) fn reply_bound(busy: Duration) -> Duration {
    busy.saturating_mul(2) + Duration::from_secs(2)
}

pub(super) fn worker(mut conn: Connection, jobs: mpsc::Receiver<Box<dyn Job>>) {
    // Ends when every store clone (and so every sender) is gone.
    while let Ok(first) = jobs.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match jobs.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let (grouped, direct): (Vec<_>, Vec<_>) = group.into_iter().partition(|j| j.grouped());
        for job in direct {
            if let Ok((_, deliver)) =
                std::panic::catch_unwind(AssertUnwindSafe(|| job.run(&mut conn)))
            {
                deliver(None);
            }
        }
        if !grouped.is_empty() {
            run_group(&mut conn, grouped);
        }
    }
}

/// Runs `group` in one `BEGIN IMMEDIATE` transaction and answers every job after the commit.
pub(super) fn run_group(conn: &mut Connection, group: Vec<Box<dyn Job>>) {
    // IMMEDIATE takes the write lock up front (waiting up to the busy timeout), so no job can
    // hit SQLITE_BUSY halfway, and a claim's upsert and the read that explains it see one state.
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        let failure = GroupFailure::new(e, "cannot start an SQLite transaction");
        for job in group {
            job.fail(failure.error());
        }
        return;
    }
    let mut delivers = Vec::with_capacity(group.len());
    let mut aborted = None;
    for job in group {
        if aborted.is_some() || conn.is_autocommit() {
            // A severe error (I/O, disk full) rolled the whole transaction back: do not run
            // the rest outside a transaction.
            let failure = aborted.get_or_insert_with(|| GroupFailure {
                kind: ErrorKind::StoreUnavailable,
                message: "SQLite rolled the transaction back after an error".into(),
            });
            job.fail(failure.error());
            continue;
        }
        // Each job in its own savepoint: a job that fails (a refused effect, a bad statement)
        // leaves no partial writes behind, and the others of the group still commit.
        if let Err(e) = conn.execute_batch("SAVEPOINT job") {
            job.fail(classify(e, "cannot start an SQLite savepoint"));
            continue;
        }
        // A panic inside a job must not take the connection down: its writes are rolled back
        // below, and its caller sees its channel closed.
        let ran = std::panic::catch_unwind(AssertUnwindSafe(|| job.run(conn)));
        let ok = matches!(ran, Ok((true, _)));
        let end = if ok {
            "RELEASE job"
        } else {
            "ROLLBACK TO job; RELEASE job"
        };
        // If this fails the transaction is gone; the next iteration or the commit notices.
        let _ = conn.execute_batch(end);
        if let Ok((_, deliver)) = ran {
            delivers.push(deliver);
        }
    }
    let failure = match aborted {
        Some(f) => Some(f),
        None if conn.is_autocommit() => Some(GroupFailure {
            kind: ErrorKind::StoreUnavailable,
            message: "SQLite rolled the transaction back after an error".into(),
        }),
        None => conn.execute_batch("COMMIT").err().map(|e| {
            let _ = conn.execute_batch("ROLLBACK");
            GroupFailure::new(e, "SQLite commit failed; nothing of this call was written")
        }),
    };
    for deliver in delivers {
        deliver(failure.as_ref());
    }
}
