//! [`PostgresSettings`]: the client's timeouts, keepalives and pool size.

use super::*;

/// The bounds [`PostgresStore::connect_with`] puts on connections and calls. See "Timeouts" in
/// the module docs for why each exists; the defaults fit a Lambda invocation (a store call
/// normally takes a millisecond or two, so seconds mean the server or the network is gone).
/// Change a field on the defaults (`let mut s = PostgresSettings::default(); s.pool_size = 4;`):
/// the struct is `non_exhaustive`, so a setting added later keeps your code compiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresSettings {
    /// The client-side bound on each answer of a store call (each round trip, a pool wait and a
    /// connect included): see "Timeouts" in the module docs. Default 5 s.
    pub call_timeout: Duration,
    /// The server-side `statement_timeout` set on each connection (`None`: leave the server's
    /// or the URL's). Default 3 s.
    pub statement_timeout: Option<Duration>,
    /// How long opening a socket may take. Default 2 s.
    pub connect_timeout: Duration,
    /// Idle time before the first TCP keepalive probe. Default 5 s.
    pub(crate) keepalives_idle: Duration,
    /// Time between probes. Default 2 s.
    pub(crate) keepalives_interval: Duration,
    /// Probes before the connection is given up. Default 3.
    pub(crate) keepalives_retries: u32,
    /// How long sent data may stay unacknowledged before the kernel drops the connection
    /// (`TCP_USER_TIMEOUT`, Linux). Default 5 s.
    pub(crate) tcp_user_timeout: Duration,
    /// Connections in the pool. Default 16.
    pub pool_size: usize,
}

impl Default for PostgresSettings {
    fn default() -> Self {
        PostgresSettings {
            call_timeout: Duration::from_secs(5),
            statement_timeout: Some(Duration::from_secs(3)),
            connect_timeout: Duration::from_secs(2),
            keepalives_idle: Duration::from_secs(5),
            keepalives_interval: Duration::from_secs(2),
            keepalives_retries: 3,
            tcp_user_timeout: Duration::from_secs(5),
            pool_size: 16,
        }
    }
}

impl PostgresSettings {
    pub(super) fn apply(&self, config: &mut tokio_postgres::Config) {
        config
            .connect_timeout(self.connect_timeout)
            .keepalives(true)
            .keepalives_idle(self.keepalives_idle)
            .keepalives_interval(self.keepalives_interval)
            .keepalives_retries(self.keepalives_retries)
            .tcp_user_timeout(self.tcp_user_timeout);
        if let Some(timeout) = self.statement_timeout {
            let options = config.get_options().unwrap_or_default().to_owned();
            // A timeout the URL sets on purpose wins.
            if !options.contains("statement_timeout") {
                let ms = timeout.as_millis().max(1);
                let options = format!("{options} -c statement_timeout={ms}");
                config.options(options.trim_start());
            }
        }
    }
}
