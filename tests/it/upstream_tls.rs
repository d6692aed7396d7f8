//! An upstream behind TLS with a private CA: the legacy HTTP+SSE transport trusts the CA its
//! `tls` names, as Streamable HTTP does (a TLS-terminating proxy in front of the demo server).

use crate::common;

use std::{path::Path, sync::Arc};

use common::*;

/// Terminates TLS with `cert`/`key` and forwards each connection to `to`; the address it
/// listens on.
async fn tls_proxy(dir: &Path, to: std::net::SocketAddr) -> std::net::SocketAddr {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let raw = fedgate::config::RawTls {
        cert: "server-c.pem".into(),
        key: "server-c.key".into(),
        client_ca: None,
    };
    let config = fedgate::config::tls::server_config(dir, &raw).expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let (Ok(mut tls), Ok(mut plain)) = (
                    acceptor.accept(tcp).await,
                    tokio::net::TcpStream::connect(to).await,
                ) else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread")]
async fn an_sse_upstream_trusts_the_ca_its_tls_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/federation/certs.sh"
    ))
    .arg(dir.path())
    .output()
    .expect("certs.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sse = HttpDemo::start("old", "--sse");
    let backend: std::net::SocketAddr = sse
        .url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .expect("the demo's address");
    let front = tls_proxy(dir.path(), backend).await;
    let path = sse.url.splitn(4, '/').nth(3).unwrap_or("sse");
    let ca = dir.path().join("federation-ca.pem");
    let gw = Gateway::start(&format!(
        "[upstreams.secure]\nkind = \"sse\"\nurl = \"https://127.0.0.1:{}/{path}\"\ntls = {{ ca = {:?} }}\n",
        front.port(),
        ca.display().to_string()
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(
        &client,
        "secure__echo",
        serde_json::json!({"text": "over tls"}),
    )
    .await
    .unwrap_or_else(|e| panic!("{e:?}\n{}", gw.stderr()));
    assert_eq!(first_text(&r), "echo: over tls");
    let (_, ready) = gw.readyz().await;
    assert_eq!(ready["upstreams"]["secure"]["kind"], "sse", "{ready}");
    client.cancel().await.unwrap();
}
