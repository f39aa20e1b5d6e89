//! Who may use a server that has a token (`tritonforge serve`, `tritonforge dashboard`),
//! and how fast one client address may guess it.
//!
//! Every credential a request presents (a bearer header, the session cookie, the login
//! form's token) that does not match counts as a failed attempt of its client address.
//! Past [`Limit::failures`] within [`Limit::window`], that address gets 429 with
//! `Retry-After` for any request that presents a credential, right or wrong, until the
//! window has passed: were a right token still let through, a locked-out guesser would
//! learn the moment it guessed right. Requests that present nothing are not guesses and
//! are not counted (a browser without its cookie yet gets 401 and is sent to the form).
//!
//! A success does not clear the count: behind a proxy every client shares one address,
//! and a legitimate client's traffic would otherwise reset a guesser's count. The
//! address is the TCP peer's, never a forwarded-for header (which a guesser would
//! simply vary). IPv6 addresses count by their /64, which one host usually holds whole.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::ApiError;

/// How many failed attempts an address may make, and over how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub failures: u32,
    pub window: Duration,
}

impl Default for Limit {
    /// Ten a minute: a person who mistypes is not locked out, a guesser gets 14,400 tries
    /// a day (against a token of 128 random bits, nothing).
    fn default() -> Limit {
        Limit { failures: 10, window: Duration::from_secs(60) }
    }
}

/// Addresses tracked at most: an attacker with many addresses cannot grow the map
/// without bound (the oldest windows are dropped first).
const MAX_TRACKED: usize = 4096;

struct Window {
    since: Instant,
    failures: u32,
}

/// Failed attempts by client address.
struct Failures {
    limit: Limit,
    by_client: Mutex<HashMap<IpAddr, Window>>,
}

impl Failures {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Window>> {
        // Counters only: a panic while holding the lock leaves nothing half-done.
        self.by_client.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long `client` must still wait, if it is locked out.
    fn blocked(&self, client: IpAddr, now: Instant) -> Option<Duration> {
        let map = self.map();
        let w = map.get(&client)?;
        let left = self.limit.window.checked_sub(now.duration_since(w.since))?;
        (w.failures >= self.limit.failures && !left.is_zero()).then_some(left)
    }

    fn failed(&self, client: IpAddr, now: Instant) {
        let mut map = self.map();
        if !map.contains_key(&client) && map.len() >= MAX_TRACKED {
            let window = self.limit.window;
            map.retain(|_, w| now.duration_since(w.since) < window);
            if map.len() >= MAX_TRACKED {
                if let Some(oldest) = map.iter().min_by_key(|(_, w)| w.since).map(|(k, _)| *k) {
                    map.remove(&oldest);
                }
            }
        }
        let w = map.entry(client).or_insert(Window { since: now, failures: 0 });
        if now.duration_since(w.since) >= self.limit.window {
            *w = Window { since: now, failures: 0 };
        }
        w.failures = w.failures.saturating_add(1);
    }
}

/// The token a server checks (none: loopback, open to whoever can connect) and the
/// failed attempts it has seen.
pub struct Access {
    token: Option<Arc<str>>,
    failures: Failures,
}

impl Access {
    pub fn new(token: Option<&str>) -> Access {
        Access::with_limit(token, Limit::default())
    }

    pub fn with_limit(token: Option<&str>, limit: Limit) -> Access {
        Access {
            token: token.map(Arc::from),
            failures: Failures { limit, by_client: Mutex::default() },
        }
    }

    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// How long `client` is still locked out, if it is.
    pub(crate) fn blocked(&self, client: IpAddr) -> Option<Duration> {
        self.failures.blocked(client, Instant::now())
    }

    /// Count a wrong credential of `client`.
    pub(crate) fn failed(&self, client: IpAddr) {
        self.failures.failed(client, Instant::now());
    }
}

/// The client address a request came from, as the limit counts it (the middleware puts
/// it in the request's extensions for the login handler).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Client(pub IpAddr);

impl Client {
    /// The peer of the connection (`ConnectInfo`); a server that did not record it counts
    /// every client as one, which is stricter, never looser.
    fn of(req: &Request) -> Client {
        let ip = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
        Client(counted_as(ip))
    }
}

/// IPv4 as is (an IPv4-mapped IPv6 address too); IPv6 by its /64.
fn counted_as(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Paths anyone may fetch: the page shell and its assets carry no data, and the login
/// form must be reachable to log in.
pub fn is_public(method: &Method, path: &str) -> bool {
    (method == Method::GET || method == Method::HEAD)
        && (path == "/" || path.starts_with("/assets/") || path == "/dash/login")
        || (method == Method::POST && path == "/dash/login")
}

/// The session cookie's name.
pub const COOKIE: &str = "tritonforge_session";

/// What the session cookie holds for `token`: a hash, so the cookie never reveals it.
pub fn session_value(token: &str) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(b"tritonforge dashboard session\n");
    h.update(token.as_bytes());
    hex::encode(h.finalize())
}

/// The session cookie's value(s) a request carries.
fn session_cookies(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .filter(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v)
}

/// Whether the request carries the session cookie for `token`. It grants reads only.
pub fn session_grants(method: &Method, headers: &HeaderMap, token: &str) -> bool {
    (method == Method::GET || method == Method::HEAD) && session_matches(headers, token)
}

fn session_matches(headers: &HeaderMap, token: &str) -> bool {
    let want = session_value(token);
    session_cookies(headers).any(|v| constant_time_eq(v.as_bytes(), want.as_bytes()))
}

/// The bearer token a request presents, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok())?.strip_prefix("Bearer ")
}

/// Whether the request carries `Authorization: Bearer <token>`.
pub fn bearer_grants(headers: &HeaderMap, token: &str) -> bool {
    bearer(headers).is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes()))
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The 401 every refused request gets.
pub fn unauthorized() -> Response {
    let mut r = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "a bearer token is required (Authorization: Bearer <token>, or log in at /dash/login)",
    )
    .into_response();
    r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

/// Whole seconds to wait, rounded up, at least 1.
pub(crate) fn wait_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// The 429 of a locked-out address, with how long to wait.
pub(crate) fn too_many(wait: Duration) -> Response {
    let secs = wait_secs(wait);
    let mut r = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        format!("too many wrong tokens from this address: try again in {secs} s"),
    )
    .into_response();
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    r
}

/// The access check both servers run on every request: the public paths pass; with a
/// token, the bearer header (anything) or the session cookie (reads) passes; a wrong
/// credential counts against its address, and a locked-out address is answered 429.
/// The client's address goes in the request's extensions ([`Client`]) for the login form.
pub async fn guard(access: Arc<Access>, mut req: Request, next: Next) -> Response {
    let client = Client::of(&req);
    req.extensions_mut().insert(client);
    let Some(token) = access.token() else {
        return next.run(req).await;
    };
    if is_public(req.method(), req.uri().path()) {
        return next.run(req).await;
    }
    let headers = req.headers();
    let presented_bearer = bearer(headers).is_some();
    let presented_cookie = session_cookies(headers).next().is_some();
    if !presented_bearer && !presented_cookie {
        return unauthorized();
    }
    if let Some(wait) = access.blocked(client.0) {
        return too_many(wait);
    }
    if bearer_grants(headers, token) || session_grants(req.method(), headers, token) {
        return next.run(req).await;
    }
    // A right cookie sent with a write is refused (the cookie grants reads) but is no guess.
    let guessed = presented_bearer || !session_matches(headers, token);
    if guessed {
        access.failed(client.0);
    }
    unauthorized()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_of_failures_locks_out_then_passes() {
        let f = Failures {
            limit: Limit { failures: 3, window: Duration::from_secs(10) },
            by_client: Mutex::default(),
        };
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let t0 = Instant::now();
        for i in 0..3 {
            assert_eq!(f.blocked(a, t0), None, "attempt {i}");
            f.failed(a, t0 + Duration::from_secs(i));
        }
        assert_eq!(f.blocked(a, t0 + Duration::from_secs(4)), Some(Duration::from_secs(6)));
        assert_eq!(f.blocked(b, t0 + Duration::from_secs(4)), None, "per address");
        assert_eq!(f.blocked(a, t0 + Duration::from_secs(10)), None, "the window passed");
        // A failure after the window starts a new one.
        f.failed(a, t0 + Duration::from_secs(11));
        assert_eq!(f.blocked(a, t0 + Duration::from_secs(12)), None);
    }

    #[test]
    fn the_map_stays_bounded() {
        let f = Failures {
            limit: Limit { failures: 1, window: Duration::from_secs(60) },
            by_client: Mutex::default(),
        };
        let t0 = Instant::now();
        for i in 0..(MAX_TRACKED as u32 + 10) {
            f.failed(IpAddr::V4(Ipv4Addr::from(i)), t0 + Duration::from_millis(u64::from(i)));
        }
        assert_eq!(f.map().len(), MAX_TRACKED);
        // The newest are kept, the oldest dropped.
        let newest = IpAddr::V4(Ipv4Addr::from(MAX_TRACKED as u32 + 9));
        assert!(f.blocked(newest, t0 + Duration::from_secs(1)).is_some());
        assert!(f.blocked(IpAddr::V4(Ipv4Addr::from(0)), t0).is_none());
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        assert_eq!(counted_as(a), counted_as(b));
        assert_ne!(counted_as(a), counted_as("2001:db8:1:3::1".parse().unwrap()));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(counted_as(mapped), "10.0.0.1".parse::<IpAddr>().unwrap());
    }
}
