//! A tiny HTTP/1.1 server on a loopback port for tests that play a remote server (the hub, a
//! CDN, a scoring server, hostile ones): one thread per connection, every request recorded,
//! the answer and how long to hold the connection decided by the test.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request as the server read it.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub method: String,
    /// The path with its query.
    pub path: String,
    /// The Authorization header, if any.
    pub authorization: Option<String>,
    /// The Range header, if any (`bytes=N-`).
    pub range: Option<String>,
    pub body: Vec<u8>,
}

/// A server's answer: the bytes to write, then how long to hold the connection open.
type Handler = dyn Fn(&Request) -> (Vec<u8>, Duration) + Send + Sync;

pub struct Server {
    port: u16,
    seen: Arc<Mutex<Vec<Request>>>,
}

/// How a server writes its answer: at once, or a byte at a time with a pause after each (a
/// server that drips its answer).
#[derive(Debug, Clone, Copy)]
enum Pace {
    AtOnce,
    Drip(Duration),
}

impl Server {
    /// A server on a free loopback port answering every request with `handler`.
    pub fn start(handler: impl Fn(&Request) -> (Vec<u8>, Duration) + Send + Sync + 'static) -> std::io::Result<Self> {
        Self::start_paced(handler, Pace::AtOnce)
    }

    /// A server that writes every answer (status line and headers included) one byte at a
    /// time, `every` apart.
    pub fn dripping(
        every: Duration,
        handler: impl Fn(&Request) -> (Vec<u8>, Duration) + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        Self::start_paced(handler, Pace::Drip(every))
    }

    fn start_paced(
        handler: impl Fn(&Request) -> (Vec<u8>, Duration) + Send + Sync + 'static,
        pace: Pace,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (log, handler): (_, Arc<Handler>) = (seen.clone(), Arc::new(handler));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (log, handler) = (log.clone(), handler.clone());
                std::thread::spawn(move || serve(stream, &log, &*handler, pace));
            }
        });
        Ok(Self { port, seen })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request so far, in arrival order.
    pub fn seen(&self) -> Vec<Request> {
        self.seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }
}

fn serve(mut stream: TcpStream, log: &Mutex<Vec<Request>>, handler: &Handler, pace: Pace) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let mut words = head.split_whitespace();
    let (method, path) = (words.next().unwrap_or("").to_string(), words.next().unwrap_or("").to_string());
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(name)))
            .map(|(_, v)| v.trim().to_string())
    };
    let length: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0u8; length];
    let _ = stream.read_exact(&mut body);
    let request = Request { method, path, authorization: header("authorization"), range: header("range"), body };
    log.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(request.clone());
    let (reply, hold) = handler(&request);
    match pace {
        Pace::AtOnce => {
            let _ = stream.write_all(&reply);
        }
        Pace::Drip(every) => {
            for byte in reply {
                if stream.write_all(&[byte]).and_then(|_| stream.flush()).is_err() {
                    return;
                }
                std::thread::sleep(every);
            }
        }
    }
    let _ = stream.flush();
    std::thread::sleep(hold);
}

/// An HTTP/1.1 response that closes the connection.
pub fn reply(status: &str, headers: &[(&str, String)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}
