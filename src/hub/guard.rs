//! A bound on what hf-hub may read, and for how long.
//!
//! hf-hub 1.0 reads each of its answers whole (the preupload and LFS answers, the commit's, a
//! model's info, every error body) and has no deadline but a per-read stall. Its client cannot
//! be given a body limit: reqwest has no hook on a response's bytes. So hf-hub's client talks to
//! the Hub through this loopback proxy, which counts what each connection brings back and cuts
//! it once past its cap or its deadline; hf-hub then fails with a dropped connection, and the
//! call's error says which bound it met, naming the server and the route.
//!
//! Plain HTTP is forwarded request by request (the route is visible); HTTPS is a `CONNECT`
//! tunnel, counted as it passes (the route is the host, and the bytes include TLS's few percent).
//! hf-hub's client keeps no idle connection, so each request has a connection, and so a cap, of
//! its own. Once a bound is met, the guard refuses every connection until the next call, so
//! hf-hub's retries end at once instead of starting over.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::HubError;

/// The longest request head taken from hf-hub (its headers are a few hundred bytes).
const HEAD_CAP: usize = 64 * 1024;
/// Bytes of an answer's status line and headers allowed above a call's cap.
const HEADERS_ALLOWANCE: u64 = 64 * 1024;
/// The cap for a call whose answers are headers alone (a HEAD): room for an error's body.
pub const ERROR_BODY_CAP: u64 = 1024 * 1024;

/// The bounds of one call: what each connection may bring back, and when the call must end.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub cap: u64,
    pub deadline: Instant,
    /// The budget the deadline came from, for the error.
    pub budget: Duration,
}

/// Which bound a call met.
#[derive(Debug, Clone)]
enum Breach {
    TooLarge { route: String, cap: u64 },
    Late { route: String, budget: Duration },
}

struct Shared {
    /// Held through a call: one call at a time has the guard's bounds.
    calls: Mutex<()>,
    bounds: Mutex<Option<Bounds>>,
    breach: Mutex<Option<Breach>>,
    /// How long a connect or one read may wait, as hf-hub's own client is told.
    stall: Duration,
    stopped: AtomicBool,
}

/// The loopback proxy, listening until dropped.
pub struct AnswerGuard {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// The server the bounds protect, as the user named it (for errors).
    server: String,
}

impl AnswerGuard {
    /// Listens on a loopback port. `server`: the endpoint, for errors.
    pub fn start(server: &str, stall: Duration) -> Result<AnswerGuard, HubError> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(|e| HubError::Protocol(format!("starting the answer guard: {e}")))?;
        let addr = listener.local_addr().map_err(|e| HubError::Protocol(format!("starting the answer guard: {e}")))?;
        let shared = Arc::new(Shared {
            calls: Mutex::new(()),
            bounds: Mutex::new(None),
            breach: Mutex::new(None),
            stall,
            stopped: AtomicBool::new(false),
        });
        let accepting = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("hub-answer-guard".into())
            .spawn(move || accept(listener, accepting))
            .map_err(|e| HubError::Protocol(format!("starting the answer guard: {e}")))?;
        Ok(AnswerGuard { addr, shared, server: server.to_string() })
    }

    /// The proxy hf-hub's client is built with.
    pub fn proxy(&self) -> Result<reqwest::Proxy, HubError> {
        reqwest::Proxy::all(format!("http://{}", self.addr)).map_err(|e| HubError::Protocol(format!("the answer guard's proxy: {e}")))
    }

    /// Runs `call` (one hf-hub call, its retries included) under `cap` bytes a connection and
    /// `budget` in all. If it fails having met a bound, the error names the bound and `action`.
    pub fn run<T>(&self, action: &str, cap: u64, budget: Duration, call: impl FnOnce() -> Result<T, HubError>) -> Result<T, HubError> {
        let _one_at_a_time = lock(&self.shared.calls);
        let bounds = Bounds { cap, deadline: Instant::now() + budget, budget };
        *lock(&self.shared.breach) = None;
        *lock(&self.shared.bounds) = Some(bounds);
        let result = call();
        *lock(&self.shared.bounds) = None;
        let breach = lock(&self.shared.breach).take();
        match (result, breach) {
            (Ok(value), _) => Ok(value),
            (Err(_), Some(Breach::TooLarge { route, cap })) => {
                Err(HubError::TooLarge { server: self.server.clone(), route, cap, what: "it sent more than that".into() })
            }
            (Err(_), Some(Breach::Late { route, budget })) => {
                Err(HubError::Late { action: action.to_string(), server: self.server.clone(), route, budget })
            }
            (Err(e), None) => Err(e),
        }
    }
}

impl Drop for AnswerGuard {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::Relaxed);
        // Wakes the accepting thread so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn accept(listener: TcpListener, shared: Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopped.load(Ordering::Relaxed) {
            return;
        }
        let Ok(client) = client else { continue };
        let shared = Arc::clone(&shared);
        let _ = std::thread::Builder::new().name("hub-answer-guard-conn".into()).spawn(move || serve(client, &shared));
    }
}

/// One connection from hf-hub: refused outright outside a call or after a breach; else its
/// request forwarded and the answer passed back under the call's bounds.
fn serve(mut client: TcpStream, shared: &Shared) {
    let bounds = *lock(&shared.bounds);
    let Some(bounds) = bounds.filter(|b| Instant::now() < b.deadline && lock(&shared.breach).is_none()) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = client.set_read_timeout(Some(shared.stall));
    let Some((head, rest)) = read_head(&mut client) else { return };
    let Some(request) = Request::parse(&head) else {
        let _ = client.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        return;
    };
    let upstream = request.authority.to_socket_addrs().ok().and_then(|mut addrs| {
        addrs.find_map(|a| TcpStream::connect_timeout(&a, shared.stall.min(bounds.deadline.saturating_duration_since(Instant::now()))).ok())
    });
    let Some(mut upstream) = upstream else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        return;
    };
    let sent = match &request.forward {
        None => client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n"),
        Some(forward) => upstream.write_all(forward),
    };
    if sent.is_err() || upstream.write_all(&rest).is_err() {
        return;
    }
    // hf-hub's request (its upload included) goes up as it comes; only the answer is bounded.
    if let (Ok(mut from), Ok(mut to)) = (client.try_clone(), upstream.try_clone()) {
        let _ = from.set_read_timeout(None);
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(Shutdown::Write);
        });
    }
    if let Err(breach) = pass_back(&mut upstream, &mut client, bounds, shared.stall, &request.route) {
        *lock(&shared.breach) = Some(breach);
    }
    let _ = upstream.shutdown(Shutdown::Both);
    let _ = client.shutdown(Shutdown::Both);
}

/// Copies the answer back until it ends, or until it passes the cap or the deadline.
fn pass_back(upstream: &mut TcpStream, client: &mut TcpStream, bounds: Bounds, stall: Duration, route: &str) -> Result<(), Breach> {
    let mut buffer = vec![0u8; 64 * 1024];
    let mut total: u64 = 0;
    loop {
        let left = bounds.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Breach::Late { route: route.to_string(), budget: bounds.budget });
        }
        let _ = upstream.set_read_timeout(Some(left.min(stall)));
        let n = match upstream.read(&mut buffer) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                if Instant::now() >= bounds.deadline {
                    return Err(Breach::Late { route: route.to_string(), budget: bounds.budget });
                }
                // A stall: hf-hub's own read timeout ends the request.
                return Ok(());
            }
            Err(_) => return Ok(()),
        };
        total += n as u64;
        if total > bounds.cap.saturating_add(HEADERS_ALLOWANCE) {
            return Err(Breach::TooLarge { route: route.to_string(), cap: bounds.cap });
        }
        if client.write_all(&buffer[..n]).is_err() {
            return Ok(());
        }
    }
}

/// The request head (to the blank line) and whatever came after it.
fn read_head(client: &mut TcpStream) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let n = client.read(&mut buffer).ok().filter(|&n| n > 0)?;
        bytes.extend_from_slice(&buffer[..n]);
        if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = bytes.split_off(end + 4);
            return Some((bytes, rest));
        }
        if bytes.len() > HEAD_CAP {
            return None;
        }
    }
}

/// What a proxy needs of a request head.
#[derive(Debug, PartialEq)]
struct Request {
    /// `host:port` to connect to.
    authority: String,
    /// What errors name: the path of a plain request, the host of a tunnel.
    route: String,
    /// The head to send upstream (origin-form); None for a tunnel.
    forward: Option<Vec<u8>>,
}

impl Request {
    fn parse(head: &[u8]) -> Option<Request> {
        let text = std::str::from_utf8(head).ok()?;
        let (line, headers) = text.split_once("\r\n")?;
        let mut parts = line.split(' ');
        let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
        if method == "CONNECT" {
            return Some(Request { authority: target.to_string(), route: format!("a connection to {target}"), forward: None });
        }
        let url = reqwest::Url::parse(target).ok().filter(|u| u.scheme() == "http")?;
        let authority = format!("{}:{}", url.host_str()?, url.port_or_known_default()?);
        let origin_form = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_string(),
        };
        // The proxy's own headers stay here; every other goes up as hf-hub wrote it.
        let kept: String = headers
            .split("\r\n")
            .filter(|h| !h.is_empty() && !h.to_ascii_lowercase().starts_with("proxy-"))
            .map(|h| format!("{h}\r\n"))
            .collect();
        let forward = format!("{method} {origin_form} {version}\r\n{kept}\r\n").into_bytes();
        Some(Request { authority, route: url.path().to_string(), forward: Some(forward) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_request_goes_up_in_origin_form_without_the_proxys_headers() {
        let head = b"POST http://127.0.0.1:8080/api/datasets/o/n/preupload/main?x=1 HTTP/1.1\r\nhost: 127.0.0.1:8080\r\nproxy-connection: keep-alive\r\ncontent-length: 2\r\n\r\n";
        let r = Request::parse(head).unwrap();
        assert_eq!(r.authority, "127.0.0.1:8080");
        assert_eq!(r.route, "/api/datasets/o/n/preupload/main");
        let forward = String::from_utf8(r.forward.unwrap()).unwrap();
        assert_eq!(forward, "POST /api/datasets/o/n/preupload/main?x=1 HTTP/1.1\r\nhost: 127.0.0.1:8080\r\ncontent-length: 2\r\n\r\n");
    }

    /// A server on loopback that sends `chunk` over and over to whoever connects, until they go.
    fn endless_server(chunk: &'static [u8], every: Duration) -> SocketAddr {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    while stream.write_all(chunk).is_ok() {
                        std::thread::sleep(every);
                    }
                });
            }
        });
        addr
    }

    /// What a `CONNECT` tunnel through `guard` to `target` passes back before it is cut.
    fn through_tunnel(guard: &AnswerGuard, target: SocketAddr) -> u64 {
        let mut client = TcpStream::connect(guard.addr).unwrap();
        // A refused connection may be closed before the request is written: nothing comes back.
        if write!(client, "CONNECT {target} HTTP/1.1\r\nhost: {target}\r\n\r\n").is_err() {
            return 0;
        }
        let mut received = Vec::new();
        let _ = client.read_to_end(&mut received);
        received.len() as u64
    }

    /// HTTPS passes as a tunnel the guard cannot read: it counts the bytes and cuts the tunnel
    /// past the cap, or at the deadline, and the call's error says which.
    #[test]
    fn a_tunnel_is_cut_past_its_cap_or_at_its_deadline() {
        let guard = AnswerGuard::start("https://hub.example", Duration::from_secs(5)).unwrap();
        let flood = endless_server(&[b'x'; 64 * 1024], Duration::ZERO);
        let err = guard
            .run("reading", 1 << 20, Duration::from_secs(30), || {
                let received = through_tunnel(&guard, flood);
                assert!(received < (1 << 20) + 2 * HEADERS_ALLOWANCE, "{received} bytes passed");
                Err::<(), _>(HubError::Protocol("the connection dropped".into()))
            })
            .unwrap_err();
        assert!(matches!(&err, HubError::TooLarge { route, cap: 1048576, .. } if route == &format!("a connection to {flood}")), "{err}");

        let drip = endless_server(b"x", Duration::from_millis(100));
        let started = Instant::now();
        let err = guard
            .run("reading", 1 << 20, Duration::from_secs(1), || {
                through_tunnel(&guard, drip);
                // A retry after the cut is refused at once.
                assert_eq!(through_tunnel(&guard, drip), 0);
                Err::<(), _>(HubError::Protocol("the connection dropped".into()))
            })
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
        assert!(err.to_string().contains("https://hub.example was still answering a connection to"), "{err}");
        // A call that succeeds is not blamed for anything.
        assert_eq!(guard.run("reading", 1, Duration::from_secs(1), || Ok(7)).unwrap(), 7);
    }

    #[test]
    fn a_tunnel_names_its_host_and_anything_else_is_refused() {
        let r = Request::parse(b"CONNECT huggingface.co:443 HTTP/1.1\r\nhost: huggingface.co:443\r\n\r\n").unwrap();
        assert_eq!((r.authority.as_str(), r.route.as_str(), r.forward), ("huggingface.co:443", "a connection to huggingface.co:443", None));
        assert_eq!(Request::parse(b"GET /relative HTTP/1.1\r\n\r\n"), None, "not a proxy request");
        assert_eq!(Request::parse(b"GET ftp://x/y HTTP/1.1\r\n\r\n"), None);
    }
}
