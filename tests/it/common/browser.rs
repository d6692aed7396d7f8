//! A real headless Chromium, driven over WebDriver by Debian's `chromedriver` (installed by
//! scripts/test.sh). Only the few W3C WebDriver commands the console test needs.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};

/// The W3C name of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
/// Longest a DOM condition may take to hold.
const WAIT: Duration = Duration::from_secs(30);
/// How long one wait script may run: a script whose page went away (a form submitted while it
/// waited) sometimes never answers, so `until` asks again on the page that follows.
const ONE_WAIT: Duration = Duration::from_secs(3);

fn program(env: &str, default: &str) -> String {
    let p = std::env::var(env).unwrap_or_else(|_| default.to_owned());
    assert!(
        std::path::Path::new(&p).exists(),
        "{p} is missing: scripts/test.sh installs Debian's chromium and chromium-driver (or set {env})"
    );
    p
}

/// Sends one WebDriver request; its JSON answer.
async fn send(rb: reqwest::RequestBuilder) -> Value {
    rb.send()
        .await
        .expect("webdriver request")
        .json()
        .await
        .expect("webdriver JSON")
}

/// chromedriver and one browser session; both end on drop.
pub struct Browser {
    driver: Child,
    base: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn start() -> Browser {
        let chromedriver = program("CHROMEDRIVER", "/usr/bin/chromedriver");
        let chromium = program("CHROMIUM", "/usr/bin/chromium");
        // Port 0: chromedriver takes a free port itself and names it in its ready line
        // ("ChromeDriver was started successfully on port N."), so no other test can take
        // the port between a probe and chromedriver's bind.
        let mut driver = Command::new(chromedriver)
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let stdout = driver.stdout.take().expect("chromedriver stdout");
        let mut lines = BufReader::new(stdout).lines();
        let port: u16 = loop {
            let line = lines
                .next()
                .expect("chromedriver exited before it was ready")
                .expect("chromedriver stdout");
            if let Some(rest) = line.split("started successfully on port ").nth(1) {
                break rest
                    .trim_end_matches('.')
                    .parse()
                    .unwrap_or_else(|e| panic!("chromedriver's ready line {line:?}: {e}"));
            }
        };
        std::thread::spawn(move || for _ in lines {});
        let profile = tempfile::tempdir().expect("profile dir");
        let http = reqwest::Client::new();
        let root = format!("http://127.0.0.1:{port}");
        // As the machine's probe found: without the background-networking flags Chromium keeps
        // trying hosts this closed network refuses.
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1440,2100",
                format!("--user-data-dir={}", profile.path().display())]}}}});
        let r: Value = http
            .post(format!("{root}/session"))
            .json(&caps)
            .send()
            .await
            .expect("new session")
            .json()
            .await
            .expect("session JSON");
        let id = r["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {r}"))
            .to_owned();
        let b = Browser {
            driver,
            base: format!("{root}/session/{id}"),
            http,
            _profile: profile,
        };
        b.cmd(
            "POST",
            "/timeouts",
            json!({"script": ONE_WAIT.as_millis() as u64}),
        )
        .await;
        b
    }

    async fn cmd(&self, method: &str, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.base);
        let rb = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url).json(&body),
        };
        let r = send(rb).await;
        if let Some(err) = r["value"]["error"].as_str() {
            panic!(
                "webdriver {method} {path}: {err}: {}",
                r["value"]["message"]
            );
        }
        r["value"].clone()
    }

    pub async fn goto(&self, url: &str) {
        self.cmd("POST", "/url", json!({"url": url})).await;
    }

    /// Runs `body` (a function body; `return` gives the value) in the page.
    pub async fn js(&self, body: &str) -> Value {
        self.cmd("POST", "/execute/sync", json!({"script": body, "args": []}))
            .await
    }

    /// Waits until `cond` (an expression over the page) is truthy, re-checking on every DOM
    /// change, and answers its value; fails the test with `what` after 30 s.
    pub async fn until(&self, what: &str, cond: &str) -> Value {
        let script = format!(
            "const done = arguments[arguments.length - 1];\n\
             const cond = () => {{ try {{ return ({cond}); }} catch (e) {{ return null; }} }};\n\
             let obs;\n\
             const check = () => {{ const v = cond(); if (v) {{ if (obs) obs.disconnect(); done(v); return true; }} return false; }};\n\
             if (!check()) {{ obs = new MutationObserver(check);\n\
               obs.observe(document, {{subtree: true, childList: true, attributes: true, characterData: true}}); }}"
        );
        let url = format!("{}/execute/async", self.base);
        let deadline = tokio::time::Instant::now() + WAIT;
        // A page that navigates away (a form just submitted) ends the script with an error, or
        // leaves it to time out: the condition is then checked again on the page that follows.
        let r = loop {
            let r = send(
                self.http
                    .post(&url)
                    .json(&json!({"script": script, "args": []})),
            )
            .await;
            let again = r["value"]["error"].is_string();
            if !again || tokio::time::Instant::now() >= deadline {
                break r;
            }
        };
        if r["value"]["error"].is_string() {
            let page = self
                .js("return document.body ? document.body.innerText.slice(0, 4000) : ''")
                .await;
            panic!("waited 30 s for {what} ({cond}); the page shows:\n{page}");
        }
        r["value"].clone()
    }

    async fn element(&self, css: &str) -> String {
        let v = self
            .cmd(
                "POST",
                "/element",
                json!({"using": "css selector", "value": css}),
            )
            .await;
        v[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}"))
            .to_owned()
    }

    pub async fn click(&self, css: &str) {
        let e = self.element(css).await;
        self.cmd("POST", &format!("/element/{e}/click"), json!({}))
            .await;
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let e = self.element(css).await;
        self.cmd("POST", &format!("/element/{e}/clear"), json!({}))
            .await;
        self.cmd(
            "POST",
            &format!("/element/{e}/value"),
            json!({"text": text}),
        )
        .await;
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let v = self.cmd("GET", "/screenshot", Value::Null).await;
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("base64 screenshot"))
            .expect("screenshot is base64")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ends the browser with its session; chromedriver goes with it.
        let url = self.base.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(rt) = rt {
                let _ = rt.block_on(async {
                    reqwest::Client::new()
                        .delete(url)
                        .timeout(Duration::from_secs(10))
                        .send()
                        .await
                });
            }
        })
        .join();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
