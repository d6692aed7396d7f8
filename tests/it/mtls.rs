//! HTTPS and mTLS at the downstream listener: a client certificate from the configured CA is an
//! identity with roles; no certificate, or one from another CA, never gets through the
//! handshake. Certificates are made with openssl in the test; the client is curl.

use crate::common;

use std::{path::Path, process::Command};

use common::*;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`<ca>.pem`/`.key`) and a certificate signed by it with the given subject and extensions.
fn ca(dir: &Path, ca: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &format!("{ca}.key"),
            "-out",
            &format!("{ca}.pem"),
            "-days",
            "2",
            "-subj",
            &format!("/CN={ca}"),
        ],
    );
}

fn signed(dir: &Path, ca: &str, name: &str, cn: &str, ext: &str) {
    std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={cn}"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}

/// POSTs a JSON-RPC body with curl; returns (exit ok, headers+body).
fn curl(
    dir: &Path,
    url: &str,
    cert: Option<&str>,
    session: Option<&str>,
    body: &str,
) -> (bool, String) {
    let mut cmd = Command::new("curl");
    cmd.current_dir(dir)
        .args(["-sS", "-i", "--cacert", "ca1.pem", "-X", "POST", url])
        .args([
            "-H",
            "content-type: application/json",
            "-H",
            "accept: application/json, text/event-stream",
        ])
        .args(["-H", "mcp-protocol-version: 2025-11-25", "--data", body]);
    if let Some(c) = cert {
        cmd.args(["--cert", &format!("{c}.pem"), "--key", &format!("{c}.key")]);
    }
    if let Some(s) = session {
        cmd.args(["-H", &format!("mcp-session-id: {s}")]);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn client_certificates_are_identities() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ca(d, "ca1");
    ca(d, "ca2");
    signed(
        d,
        "ca1",
        "server",
        "localhost",
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    );
    let client_ext = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";
    signed(d, "ca1", "agent", "agent-1", client_ext);
    signed(d, "ca2", "stranger", "agent-1", client_ext);
    let cfg = d.join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "[gateway.tls]\ncert = \"server.pem\"\nkey = \"server.key\"\nclient_ca = \"ca1.pem\"\n\n\
             [auth]\n[[auth.client_certs]]\nsubject = \"agent-1\"\nroles = [\"reader\"]\n\n\
             [roles.reader]\ntools = [\"demo__echo\"]\n\n{}",
            stdio_upstream("demo", &[], "")
        ),
    )
    .unwrap();
    let keep = tempfile::tempdir().unwrap();
    let gw = Gateway::start_file(&cfg, keep);
    assert!(gw.url.starts_with("https://"), "{}", gw.url);
    let url = gw.url.replace("127.0.0.1", "localhost");

    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"0"}}}"#;
    let (ok, resp) = curl(d, &url, Some("agent"), None, init);
    assert!(ok && resp.starts_with("HTTP/"), "{resp}");
    let session = resp
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id: "))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| panic!("{resp}"));
    let echo = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"over mtls"}}}"#;
    let (_, resp) = curl(d, &url, Some("agent"), Some(&session), echo);
    assert!(resp.contains("echo: over mtls"), "{resp}");
    let crash = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo__crash","arguments":{}}}"#;
    let (_, resp) = curl(d, &url, Some("agent"), Some(&session), crash);
    assert!(
        resp.contains("unknown tool `demo__crash`"),
        "the role grants only demo__echo: {resp}"
    );

    let (ok, resp) = curl(d, &url, None, None, init);
    assert!(!ok, "no client certificate, no handshake: {resp}");
    let (ok, resp) = curl(d, &url, Some("stranger"), None, init);
    assert!(!ok, "a certificate from another CA is refused: {resp}");
}

/// A certificate's identity is looked up per request: a reload that narrows its roles applies
/// to a TLS connection that stays open (one `openssl s_client` connection, two requests).
#[test]
fn a_reload_applies_to_open_tls_connections() {
    use std::{
        io::{Read, Write},
        process::Stdio,
        sync::mpsc,
        time::Duration,
    };
    use tokio::time::Instant;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ca(d, "ca1");
    signed(
        d,
        "ca1",
        "server",
        "localhost",
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    );
    signed(
        d,
        "ca1",
        "agent",
        "agent-1",
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    );
    let config = |tools: &str| {
        format!(
            "[gateway]\nwatch_config = false\n\n[gateway.tls]\ncert = \"server.pem\"\nkey = \"server.key\"\n\
             client_ca = \"ca1.pem\"\n\n[auth]\n[[auth.client_certs]]\nsubject = \"agent-1\"\n\
             roles = [\"reader\"]\n\n[roles.reader]\ntools = [{tools:?}]\n\n{}",
            stdio_upstream("demo", &[], "")
        )
    };
    let cfg = d.join("gateway.toml");
    std::fs::write(&cfg, config("demo__echo")).unwrap();
    let gw = Gateway::start_file(&cfg, tempfile::tempdir().unwrap());
    let port = gw
        .url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/mcp")
        .to_owned();

    let mut tls = Command::new("openssl")
        .current_dir(d)
        .args([
            "s_client",
            "-quiet",
            "-connect",
            &format!("127.0.0.1:{port}"),
        ])
        .args([
            "-cert",
            "agent.pem",
            "-key",
            "agent.key",
            "-CAfile",
            "ca1.pem",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut input = tls.stdin.take().unwrap();
    let mut output = tls.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = output.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                return;
            }
        }
    });
    let mut seen = String::new();
    let mut until = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !seen.contains(what) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(chunk) => seen.push_str(&String::from_utf8_lossy(&chunk)),
                Err(_) => panic!("no `{what}` on the connection: {seen}"),
            }
        }
    };
    let mut echo = |text: &str| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"demo__echo","arguments":{{"text":"{text}"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{{"name":"s_client","version":"0"}},"io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
        );
        let req = format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost:{port}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMcp-Protocol-Version: 2026-07-28\r\n\
             Mcp-Method: tools/call\r\nMcp-Name: demo__echo\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        input.write_all(req.as_bytes()).unwrap();
        input.flush().unwrap();
    };
    echo("before");
    until("echo: before");

    // The role now grants another tool; the open connection's next request sees it.
    std::fs::write(&cfg, config("demo__add")).unwrap();
    let reloaded = Command::new("kill")
        .args(["-HUP", &gw.pid().to_string()])
        .status()
        .unwrap();
    assert!(reloaded.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    while !gw.stderr().contains("config reloaded") {
        assert!(Instant::now() < deadline, "no reload: {}", gw.stderr());
        std::thread::yield_now();
    }
    echo("after");
    until("unknown tool `demo__echo`");
    let _ = tls.kill();
    let _ = tls.wait();
}
