//! A TCP endpoint for tests, as a managed service's primary endpoint is: a
//! fixed address whose new connections go to the current primary. A
//! failover moves it (`point_to`); connections opened before keep going to
//! the server they reached, as a DNS name that changes leaves open sockets
//! alone. Threads only, two per connection.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// A listening endpoint on 127.0.0.1 forwarding to a target port; stops
/// accepting when dropped (open connections end with their peers).
pub struct Endpoint {
    port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    target: AtomicU16,
    stop: AtomicBool,
    accepted: AtomicUsize,
}

impl Endpoint {
    /// An endpoint on a free port whose connections go to `target_port`.
    pub fn start(target_port: u16) -> Endpoint {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the endpoint");
        let port = listener.local_addr().expect("endpoint address").port();
        let shared = Arc::new(Shared {
            target: AtomicU16::new(target_port),
            stop: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
        });
        let s = shared.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                s.accepted.fetch_add(1, Ordering::SeqCst);
                let target = s.target.load(Ordering::SeqCst);
                thread::spawn(move || forward(client, target));
            }
        });
        Endpoint { port, shared }
    }

    /// The endpoint's port (connect to `127.0.0.1:<port>`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// New connections go to `new_port` from now on; open ones stay where
    /// they are.
    pub fn point_to(&self, new_port: u16) {
        self.shared.target.store(new_port, Ordering::SeqCst);
    }

    /// How many connections the endpoint accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread so it sees `stop`.
        let _ =
            TcpStream::connect_timeout(&([127, 0, 0, 1], self.port).into(), Duration::from_secs(1));
    }
}

/// Copies both ways between a client and a new connection to `target`; a
/// close (or error) on either side closes both.
fn forward(client: TcpStream, target: u16) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    thread::spawn(move || pipe(server2, client2));
    pipe(client, server);
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
