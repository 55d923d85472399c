//! The HTTP server: hyper's HTTP/1 connection over an accept loop of our own,
//! because `axum::serve` offers neither of the two bounds a service on a
//! network needs:
//!
//! - a header-read timeout: a connection must deliver a request's headers
//!   within it, or it is closed. The clock starts when the connection is
//!   accepted and again after each response, so an idle keep-alive connection
//!   is closed after the same time, as is a client that never finishes its
//!   headers;
//! - a bound on open connections: the loop accepts only while fewer are
//!   open, so a flood of idle connections waits in the kernel's backlog
//!   instead of taking one file descriptor and one task each until the
//!   process runs out.
//!
//! Every response also carries the headers of [`hygiene`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderValue};
use axum::response::Response;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub header_timeout: Duration,
    pub max_connections: usize,
}

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

/// Serves `router` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    tokio::pin!(shutdown);
    loop {
        // A slot first: past the bound, connections are not accepted at all.
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            () = &mut shutdown => return,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
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
        let service = TowerToHyperService::new(router.clone());
        let conn = http.serve_connection(TokioIo::new(stream), service);
        tokio::spawn(async move {
            // A timed-out or broken connection is the client's business.
            let _ = conn.await;
            drop(permit);
        });
    }
}
