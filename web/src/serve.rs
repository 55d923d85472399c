//! The HTTP server: hyper's HTTP/1 connection over an accept loop of our own,
//! because `axum::serve` offers none of the bounds a service on a network
//! needs:
//!
//! - a header-read timeout: a connection must deliver a request's headers
//!   within it, or it is closed. The clock starts when hyper starts reading a
//!   request (on accept, and after each response), so it also closes a client
//!   that never finishes its headers;
//! - an idle timeout: a connection that sends nothing for that long after it
//!   was accepted, or after its last response was written, is closed;
//! - a write timeout: what a response has queued must be taken by the client
//!   within it from the moment the socket first refuses more, or the
//!   connection is closed: a client that asks and never reads holds its
//!   place for that long, not for as long as it stays connected;
//! - a bound on open connections: the loop accepts only while fewer are
//!   open, so a flood of connections waits in the kernel's backlog instead of
//!   taking one file descriptor and one task each until the process runs out.
//!   When every place is taken and a client waits, the connection that has
//!   waited on its own client longest (idle, or not reading its responses)
//!   is closed to make room, once it has waited [`EVICT_AFTER`]; one running
//!   a request is never closed for that. So slow readers on every place
//!   delay a fresh client by that much, not by the timeouts.
//!
//! Every response also carries the headers of [`hygiene`].

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use axum::http::{header, HeaderValue};
use axum::response::Response;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Sleep;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub write_timeout: Duration,
    pub max_connections: usize,
}

/// At the bound, with a client waiting: how long a connection must have
/// waited on its own client (sent nothing, taken nothing) before it is closed
/// to make room. Short, so that a fresh client is not kept waiting; not
/// zero, so that two new clients do not close each other before either has
/// sent its request.
pub const EVICT_AFTER: Duration = Duration::from_millis(250);

/// The page loads its script and style from echomq-web itself and fetches
/// the API from it; nothing else is allowed (no inline script or style, no
/// other origin, no framing).
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Added to every response: no content-type sniffing (a JSON or text body is
/// never run as a script or rendered as HTML), the content security policy,
/// and no referrer sent from the page.
pub async fn hygiene(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    resp
}

/// One open connection, as the accept loop sees it.
struct Conn {
    /// Requests being answered (the service called, its response not yet
    /// made): a connection doing work of its own is not closed to make room.
    busy: AtomicUsize,
    /// Since the last response was written (or the accept) and before the
    /// next byte read: what the idle timeout measures.
    idle: AtomicBool,
    /// When the client last gave or took a byte, or a request started or
    /// ended: microseconds since the table's epoch.
    progress_us: AtomicU64,
    /// Wakes the connection's task to close it.
    close: Notify,
}

/// The open connections, for the accept loop to find the one to close.
struct Table {
    epoch: Instant,
    next: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
}

impl Table {
    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    fn open(self: &Arc<Self>) -> (u64, Arc<Conn>) {
        let conn = Arc::new(Conn {
            busy: AtomicUsize::new(0),
            idle: AtomicBool::new(true),
            progress_us: AtomicU64::new(self.now_us()),
            close: Notify::new(),
        });
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, conn.clone());
        (id, conn)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Closes the connection that has waited on its client longest, if it
    /// has waited at least `after`; otherwise how long until one will have.
    fn evict(&self, after: Duration) -> Result<(), Duration> {
        let now = self.now_us();
        let after = after.as_micros() as u64;
        let conns = self.lock();
        let oldest = conns
            .values()
            .filter(|c| c.busy.load(Ordering::Acquire) == 0)
            .min_by_key(|c| c.progress_us.load(Ordering::Acquire));
        match oldest {
            Some(c) => {
                let waited = now.saturating_sub(c.progress_us.load(Ordering::Acquire));
                if waited >= after {
                    c.close.notify_one();
                    Ok(())
                } else {
                    Err(Duration::from_micros(after - waited))
                }
            }
            // Every one is answering a request: wait for one to end.
            None => Err(Duration::from_millis(50)),
        }
    }
}

/// A connection's socket, with its write and idle timeouts, telling the
/// table when its client gives or takes bytes.
struct Watched {
    io: TcpStream,
    conn: Arc<Conn>,
    table: Arc<Table>,
    write_timeout: Duration,
    idle_timeout: Duration,
    /// Armed when a write is refused, until hyper's buffer is empty.
    write_deadline: Option<Pin<Box<Sleep>>>,
    /// Armed when the connection becomes idle.
    idle_deadline: Option<Pin<Box<Sleep>>>,
}

impl Watched {
    fn progress(&self) {
        self.conn
            .progress_us
            .store(self.table.now_us(), Ordering::Release);
    }

    /// A refused write: the error once the write deadline has passed.
    fn poll_write_refused(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let timeout = self.write_timeout;
        let deadline = self
            .write_deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took no response within the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn wrote(
        &mut self,
        r: Poll<io::Result<usize>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.progress();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Pending => self.poll_write_refused(cx),
            other => other,
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.conn.idle.store(false, Ordering::Release);
                    this.idle_deadline = None;
                    this.progress();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                if !this.conn.idle.load(Ordering::Acquire) {
                    this.idle_deadline = None;
                    return Poll::Pending;
                }
                let timeout = this.idle_timeout;
                let deadline = this
                    .idle_deadline
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                ready!(deadline.as_mut().poll(cx));
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "idle for the idle timeout",
                )))
            }
            other => other,
        }
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        this.wrote(r, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.wrote(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    /// hyper flushes once its buffer is written out: the client has taken
    /// all there was, and with no request running the connection is idle.
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(Pin::new(&mut this.io).poll_flush(cx))?;
        this.write_deadline = None;
        if this.conn.busy.load(Ordering::Acquire) == 0
            && !this.conn.idle.swap(true, Ordering::AcqRel)
        {
            this.idle_deadline = None;
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The router as hyper calls it, counting the requests running on `conn`.
#[derive(Clone)]
struct Counted {
    inner: TowerToHyperService<Router>,
    conn: Arc<Conn>,
    table: Arc<Table>,
}

/// Ends a request's count, also when hyper drops it unfinished.
struct Running {
    conn: Arc<Conn>,
    table: Arc<Table>,
}

impl Running {
    fn start(conn: Arc<Conn>, table: Arc<Table>) -> Running {
        conn.busy.fetch_add(1, Ordering::AcqRel);
        conn.idle.store(false, Ordering::Release);
        conn.progress_us.store(table.now_us(), Ordering::Release);
        Running { conn, table }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.conn
            .progress_us
            .store(self.table.now_us(), Ordering::Release);
        self.conn.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<B> hyper::service::Service<axum::http::Request<B>> for Counted
where
    TowerToHyperService<Router>: hyper::service::Service<axum::http::Request<B>>,
    <TowerToHyperService<Router> as hyper::service::Service<axum::http::Request<B>>>::Future:
        Send + 'static,
{
    type Response =
        <TowerToHyperService<Router> as hyper::service::Service<axum::http::Request<B>>>::Response;
    type Error =
        <TowerToHyperService<Router> as hyper::service::Service<axum::http::Request<B>>>::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn call(&self, req: axum::http::Request<B>) -> Self::Future {
        let running = Running::start(self.conn.clone(), self.table.clone());
        let fut = self.inner.call(req);
        Box::pin(async move {
            let r = fut.await;
            drop(running);
            r
        })
    }
}

/// Accepts one waiting connection.
async fn accept(listener: &AsyncFd<std::net::TcpListener>) -> io::Result<TcpStream> {
    loop {
        let mut guard = listener.readable().await?;
        match guard.try_io(|l| l.get_ref().accept()) {
            Ok(Ok((stream, _))) => {
                stream.set_nonblocking(true)?;
                return TcpStream::from_std(stream);
            }
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => continue,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    // Held as a file descriptor to wait on: whether a client waits can be
    // known without accepting it.
    // SAFETY: the std listener owns its file descriptor, and the AsyncFd
    // owns the listener: the descriptor is neither closed nor replaced while
    // registered.
    let listener = match listener
        .into_std()
        .and_then(|l| unsafe { Ok(AsyncFd::register(l)?) })
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!("echomq-web: listen: {e}");
            return;
        }
    };
    let table = Arc::new(Table {
        epoch: Instant::now(),
        next: AtomicU64::new(0),
        conns: Mutex::new(HashMap::new()),
    });
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    tokio::pin!(shutdown);
    loop {
        // A slot first: past the bound, connections are not accepted at all.
        let permit = match slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                // Every place taken: wait for one to be freed, and if a
                // client waits meanwhile, free one.
                let waiting = tokio::select! {
                    p = slots.clone().acquire_owned() => match p {
                        Ok(p) => Some(p),
                        Err(_) => return,
                    },
                    r = listener.readable() => match r {
                        // Not accepted yet: the guard is dropped with its
                        // readiness kept.
                        Ok(_) => None,
                        Err(_) => return,
                    },
                    () = &mut shutdown => return,
                };
                match waiting {
                    Some(p) => p,
                    None => {
                        // Then wait for the slot it frees (or, if none could
                        // be closed yet, until one can).
                        let wait = match table.evict(EVICT_AFTER) {
                            Ok(()) => Duration::from_secs(1),
                            Err(until) => until,
                        };
                        tokio::select! {
                            p = slots.clone().acquire_owned() => match p {
                                Ok(p) => p,
                                Err(_) => return,
                            },
                            () = tokio::time::sleep(wait) => continue,
                            () = &mut shutdown => return,
                        }
                    }
                }
            }
        };
        let stream = tokio::select! {
            accepted = accept(&listener) => match accepted {
                Ok(stream) => stream,
                Err(e) => {
                    // E.g. out of file descriptors: wait rather than spin.
                    eprintln!("echomq-web: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        let _ = stream.set_nodelay(true);
        let (id, conn) = table.open();
        let io = Watched {
            io: stream,
            conn: conn.clone(),
            table: table.clone(),
            write_timeout: limits.write_timeout,
            idle_timeout: limits.idle_timeout,
            write_deadline: None,
            idle_deadline: None,
        };
        let service = Counted {
            inner: TowerToHyperService::new(router.clone()),
            conn: conn.clone(),
            table: table.clone(),
        };
        let served = http.serve_connection(TokioIo::new(io), service);
        let table = table.clone();
        tokio::spawn(async move {
            // A timed-out, broken or closed connection is the client's
            // business.
            tokio::select! {
                _ = served => {}
                () = conn.close.notified() => {}
            }
            table.lock().remove(&id);
            drop(permit);
        });
    }
}
