//! The table and its statements: the names (quoted, validated), the SQL of every call, and
//! how a key becomes the stored id.

use super::*;

/// The claim statement, writing the record with `status`: `INPROGRESS` for a claim,
/// `COMPLETED` for a one-shot write. It takes the row only if it is absent, expired, or in
/// progress under a lapsed lease, and answers whether it won with the row as it stands. A row
/// it takes starts with no response (a one-shot write stores none).
pub(super) fn claim_sql(quoted: &str, status: &str) -> String {
    let claimable = "(r.expires_at <= $6 OR (r.status = 'INPROGRESS' AND r.lease_until <= $6))";
    format!(
        "INSERT INTO {quoted} AS r (id, status, token, lease_until, expires_at, fingerprint) \
         VALUES ($1, '{status}', $2, $3, $4, $5) \
         ON CONFLICT (id) DO UPDATE SET \
           status = CASE WHEN {claimable} THEN '{status}' ELSE r.status END, \
           token = CASE WHEN {claimable} THEN EXCLUDED.token ELSE r.token END, \
           lease_until = CASE WHEN {claimable} THEN EXCLUDED.lease_until ELSE r.lease_until END, \
           expires_at = CASE WHEN {claimable} THEN EXCLUDED.expires_at ELSE r.expires_at END, \
           fingerprint = CASE WHEN {claimable} THEN EXCLUDED.fingerprint ELSE r.fingerprint END, \
           response = CASE WHEN {claimable} THEN NULL ELSE r.response END \
         RETURNING token = $2 AS won, status, lease_until, expires_at, fingerprint, response"
    )
}

/// The SQL of one table, built once.
#[derive(Debug)]
pub(super) struct Statements {
    pub(super) table: String,
    pub(super) claim: String,
    pub(super) claim_completed: String,
    pub(super) complete: String,
    pub(super) completed_by: String,
    pub(super) lock: String,
    pub(super) release: String,
    pub(super) extend: String,
    pub(super) inspect: String,
    pub(super) delete_if: String,
    pub(super) prune: String,
    pub(super) migrate: String,
}

impl Statements {
    pub(super) fn new(table: &str) -> Self {
        let quoted = quote_table(table);
        let index = format!(
            "\"{}_expires_at_idx\"",
            table.rsplit('.').next().unwrap_or(table)
        );
        Statements {
            table: table.to_owned(),
            claim: claim_sql(&quoted, "INPROGRESS"),
            // The one-shot write: the claim's condition, the record written completed.
            claim_completed: claim_sql(&quoted, "COMPLETED"),
            complete: format!(
                "UPDATE {quoted} SET status = 'COMPLETED', lease_until = NULL, expires_at = $3, \
                 response = $4 WHERE id = $1 AND token = $2 AND status = 'INPROGRESS'"
            ),
            completed_by: format!("SELECT status FROM {quoted} WHERE id = $1 AND token = $2"),
            lock: format!("SELECT status FROM {quoted} WHERE id = $1 AND token = $2 FOR UPDATE"),
            release: format!(
                "DELETE FROM {quoted} WHERE id = $1 AND token = $2 AND status = 'INPROGRESS'"
            ),
            extend: format!(
                "UPDATE {quoted} SET lease_until = $3, expires_at = $4 \
                 WHERE id = $1 AND token = $2 AND status = 'INPROGRESS'"
            ),
            inspect: format!(
                "SELECT status, token, lease_until, expires_at, fingerprint, response \
                 FROM {quoted} WHERE id = $1"
            ),
            // The operator's force_release and forget: the status is checked by the delete.
            delete_if: format!("DELETE FROM {quoted} WHERE id = $1 AND status = $2"),
            // The outer `expires_at <= $1` is re-checked on the row's latest version if a claim
            // took the row over meanwhile, so a live claim is never deleted.
            prune: format!(
                "DELETE FROM {quoted} WHERE id IN (\
                   SELECT id FROM {quoted} WHERE expires_at <= $1 \
                   ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED) \
                 AND expires_at <= $1"
            ),
            // The advisory lock serialises concurrent migrations: two `CREATE TABLE IF NOT
            // EXISTS` racing can otherwise fail on the catalog's unique index (and two
            // upgrades could both find the column missing). The column of the stored response
            // is added to a table of an older version only if it is missing: `ALTER TABLE`
            // takes an exclusive lock even when `IF NOT EXISTS` finds nothing to do, which
            // would queue every claim behind each start-up's migration.
            migrate: format!(
                "SELECT pg_advisory_xact_lock(7262871090); \
                 CREATE TABLE IF NOT EXISTS {quoted} (\
                   id TEXT PRIMARY KEY, \
                   status TEXT NOT NULL CHECK (status IN ('INPROGRESS', 'COMPLETED')), \
                   token TEXT NOT NULL, \
                   lease_until BIGINT, \
                   expires_at BIGINT NOT NULL, \
                   fingerprint TEXT, \
                   response TEXT); \
                 DO $migrate$ BEGIN \
                   IF NOT EXISTS (SELECT 1 FROM pg_attribute \
                       WHERE attrelid = '{quoted}'::regclass AND attname = 'response' \
                       AND NOT attisdropped) THEN \
                     ALTER TABLE {quoted} ADD COLUMN IF NOT EXISTS response TEXT; \
                   END IF; \
                 END $migrate$; \
                 CREATE INDEX IF NOT EXISTS {index} ON {quoted} (expires_at);"
            ),
        }
    }
}

pub(super) fn quote_table(table: &str) -> String {
    table
        .split('.')
        .map(|part| format!("\"{part}\""))
        .collect::<Vec<_>>()
        .join(".")
}

/// A table name is spliced into SQL, so only plain identifiers (optionally `schema.table`)
/// are accepted.
pub(super) fn validate_table(table: &str) -> Result<(), Error> {
    let parts: Vec<&str> = table.split('.').collect();
    let ok = (1..=2).contains(&parts.len())
        && parts.iter().all(|p| {
            let mut chars = p.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
                && p.len() <= 63
        });
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Config,
            format!(
                "invalid PostgreSQL table name {table:?}: use letters, digits and underscores \
                 (at most 63), optionally as schema.table"
            ),
        ))
    }
}

/// The `id` a key is stored under (see "Long keys" in the module docs).
pub(super) fn stored_id(key: &str) -> Cow<'_, str> {
    if key.len() <= MAX_VERBATIM_KEY && !key.contains('\0') && !key.starts_with("sha256:") {
        Cow::Borrowed(key)
    } else {
        Cow::Owned(format!("sha256:{}", crate::key::sha256_hex(key.as_bytes())))
    }
}
