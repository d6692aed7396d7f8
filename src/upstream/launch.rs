//! The process behind an http/sse upstream that fedgate launches (`launch = {…}`): started when
//! none runs, only if nobody else already listens on the upstream's address (else fedgate would
//! talk to someone else's server, and send it that upstream's credentials), and watched like a
//! stdio child once it serves.

use std::net::SocketAddr;

use super::{
    error::UpstreamError,
    spawn::{ProcessGuard, spawn},
};
use crate::config::{ProcessSpec, UpstreamSpec};

/// Starts the launch process unless the one started before still runs.
pub(super) async fn ensure(
    spec: &UpstreamSpec,
    launch: &ProcessSpec,
    url: &str,
    launched: &mut Option<ProcessGuard>,
) -> Result<(), UpstreamError> {
    let running = match launched.as_mut() {
        Some(p) => matches!(p.child.try_wait(), Ok(None)),
        None => false,
    };
    if running {
        return Ok(());
    }
    if let Some(addr) = taken(url).await {
        return Err(UpstreamError::AddressTaken {
            addr,
            command: launch.command.clone(),
        });
    }
    *launched = Some(
        spawn(&spec.name, launch, false).map_err(|e| UpstreamError::Launch {
            command: launch.command.clone(),
            detail: e.to_string(),
        })?,
    );
    Ok(())
}

/// Waits until the launched server accepts connections (bounded by the caller's startup
/// timeout), so the MCP client's first connect does not fail and log an error; ends early when
/// the process exits.
pub(super) async fn wait_listening(
    url: &str,
    launched: &mut Option<ProcessGuard>,
) -> Result<(), UpstreamError> {
    let Some(target) = reqwest::Url::parse(url)
        .ok()
        .and_then(|u| Some((u.host_str()?.to_owned(), u.port_or_known_default()?)))
    else {
        return Ok(());
    };
    let mut pause = std::time::Duration::from_millis(5);
    loop {
        if tokio::net::TcpStream::connect((target.0.as_str(), target.1))
            .await
            .is_ok()
        {
            return Ok(());
        }
        if let Some(Ok(Some(status))) = launched.as_mut().map(|p| p.child.try_wait()) {
            let tail = launched
                .as_ref()
                .map(|p| p.stderr_tail.suffix())
                .unwrap_or_default();
            return Err(UpstreamError::LaunchedExited {
                status: status.to_string(),
                tail,
            });
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_millis(200));
    }
}

/// After connecting: the launched process must still run, or whoever answered is not it.
pub(super) fn still_running(launched: &mut Option<ProcessGuard>) -> Result<(), UpstreamError> {
    match launched.as_mut().map(|p| p.child.try_wait()) {
        Some(Ok(Some(status))) => Err(UpstreamError::Impostor(status.to_string())),
        _ => Ok(()),
    }
}

/// The local address of `url` when something already listens there (it can't be bound).
async fn taken(url: &str) -> Option<SocketAddr> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let port = parsed.port_or_known_default()?;
    let addrs = tokio::net::lookup_host((parsed.host_str()?, port))
        .await
        .ok()?;
    for addr in addrs {
        // Only addresses of this machine can be checked (and launched on).
        if (addr.ip().is_loopback() || addr.ip().is_unspecified())
            && let Err(e) = tokio::net::TcpListener::bind(addr).await
            && e.kind() == std::io::ErrorKind::AddrInUse
        {
            return Some(addr);
        }
    }
    None
}
