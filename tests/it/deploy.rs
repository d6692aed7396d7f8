//! The shipped deploy artifacts parse and reference what the binary really serves: the port,
//! `/healthz`, `/readyz`, `/metrics`, the `serve` flags; the ConfigMap's gateway.toml passes
//! `fedgate check`; the systemd unit and Dockerfile run the real command.

use std::{collections::BTreeSet, path::Path, process::Command};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const FEDGATE: &str = env!("CARGO_BIN_EXE_fedgate");

fn manifests() -> Vec<(String, serde_norway::Value)> {
    let dir = Path::new(ROOT).join("deploy/kubernetes");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in serde_norway::Deserializer::from_str(&text) {
            let v = <serde_norway::Value as serde::Deserialize>::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            if !v.is_null() {
                out.push((path.file_name().unwrap().to_string_lossy().into_owned(), v));
            }
        }
    }
    out
}

fn kind<'a>(all: &'a [(String, serde_norway::Value)], k: &str) -> &'a serde_norway::Value {
    &all.iter()
        .find(|(_, v)| v["kind"] == k)
        .unwrap_or_else(|| panic!("no {k} manifest"))
        .1
}

#[test]
fn kubernetes_manifests_parse_and_match_the_binary() {
    let all = manifests();
    let kinds: BTreeSet<String> = all
        .iter()
        .filter_map(|(_, v)| v["kind"].as_str().map(str::to_owned))
        .collect();
    for k in [
        "Deployment",
        "Service",
        "ConfigMap",
        "Secret",
        "HorizontalPodAutoscaler",
        "ServiceMonitor",
        "PodMonitor",
        "NetworkPolicy",
        "PodDisruptionBudget",
    ] {
        assert!(kinds.contains(k), "missing {k}: {kinds:?}");
    }
    // kustomization.yaml is a build file, not a resource.
    for (file, v) in all.iter().filter(|(_, v)| v["kind"] != "Kustomization") {
        assert!(
            v["apiVersion"].is_string() && v["metadata"]["name"].is_string(),
            "{file}"
        );
    }

    let dep = kind(&all, "Deployment");
    let c = &dep["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = c["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    let port = c["ports"][0]["containerPort"].as_u64().unwrap();
    assert_eq!(port, 8930);
    assert!(args.contains(&"serve"), "{args:?}");
    let listen = args
        .iter()
        .position(|a| *a == "--listen")
        .map(|i| args[i + 1])
        .unwrap();
    assert_eq!(listen, format!("0.0.0.0:{port}"));
    let config = args
        .iter()
        .position(|a| *a == "--config")
        .map(|i| args[i + 1])
        .unwrap();
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    // The same flags are accepted by the binary (`--help` lists them).
    let help = Command::new(FEDGATE)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        let global = Command::new(FEDGATE).arg("--help").output().unwrap();
        assert!(
            help.contains(flag) || String::from_utf8_lossy(&global.stdout).contains(flag),
            "`{flag}` is not a fedgate flag"
        );
    }

    let svc = &all
        .iter()
        .find(|(_, v)| v["kind"] == "Service" && v["metadata"]["name"] == "fedgate")
        .expect("the fedgate Service")
        .1;
    assert_eq!(svc["spec"]["ports"][0]["port"].as_u64(), Some(8930));
    for monitor in ["ServiceMonitor", "PodMonitor"] {
        let m = kind(&all, monitor);
        let endpoints = if monitor == "ServiceMonitor" {
            &m["spec"]["endpoints"]
        } else {
            &m["spec"]["podMetricsEndpoints"]
        };
        assert_eq!(endpoints[0]["path"], "/metrics", "{monitor}");
    }

    // The ConfigMap's gateway.toml and tiers pass `fedgate check` where the Deployment mounts them.
    let cm = kind(&all, "ConfigMap");
    let dir = tempfile::tempdir().unwrap();
    let data = cm["data"].as_mapping().unwrap();
    std::fs::create_dir_all(dir.path().join("trust-tiers")).unwrap();
    for (k, v) in data {
        let key = k.as_str().unwrap();
        let target = if key == "gateway.toml" {
            dir.path().join(key)
        } else {
            dir.path().join("trust-tiers").join(key)
        };
        std::fs::write(target, v.as_str().unwrap()).unwrap();
    }
    assert!(config.ends_with("gateway.toml"));
    let out = Command::new(FEDGATE)
        .args(["check", dir.path().join("gateway.toml").to_str().unwrap()])
        .env("FEDGATE_JWT_SECRET", "test-only")
        .env("GITHUB_TOKEN", "test-only")
        .env(
            "FEDGATE_STATE_KEY",
            "test-only-state-key-of-at-least-32-bytes",
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn systemd_unit_and_dockerfile_run_the_real_command() {
    let unit =
        std::fs::read_to_string(Path::new(ROOT).join("deploy/systemd/fedgate.service")).unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    assert!(exec.contains("fedgate serve --config"), "{exec}");
    for hardening in [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
    ] {
        assert!(unit.contains(hardening), "missing {hardening}");
    }
    let docker = std::fs::read_to_string(Path::new(ROOT).join("deploy/Dockerfile")).unwrap();
    assert!(docker.matches("FROM ").count() >= 2, "multi-stage");
    assert!(docker.contains("USER "), "runs as non-root");
    assert!(docker.contains("EXPOSE 8930"));
    assert!(docker.contains(r#""serve""#) && docker.contains(r#""--config""#));
}

/// The core manifests against the Kubernetes OpenAPI schemas, strictly (unknown fields are
/// errors), with `kubernetes-validate` from PyPI (installed by scripts/test.sh; its schemas
/// ship with it). The Prometheus Operator kinds have no schema there; the test above checks
/// them.
#[test]
fn kubernetes_manifests_validate_against_the_schemas() {
    let validator = Path::new(ROOT).join("tests/clients/python/.venv/bin/kubernetes-validate");
    assert!(
        validator.exists(),
        "kubernetes-validate is missing: run `bash scripts/test.sh` (README's test command)"
    );
    let dir = Path::new(ROOT).join("deploy/kubernetes");
    let core = [
        "configmap.yaml",
        "deployment.yaml",
        "hpa.yaml",
        "networkpolicy.yaml",
        "pdb.yaml",
        "secret.yaml",
        "service.yaml",
        "stores.yaml",
    ];
    let out = Command::new(&validator)
        .arg("--strict")
        .args(core.iter().map(|f| dir.join(f)))
        .output()
        .expect("run kubernetes-validate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    for f in core {
        assert!(
            text.lines().any(|l| l.contains(f) && l.contains("passed")),
            "{f} not validated: {text}"
        );
    }
    // The validator does catch mistakes: the Deployment with a misspelt field fails.
    let broken = std::fs::read_to_string(dir.join("deployment.yaml"))
        .unwrap()
        .replacen("replicas:", "replicaz:", 1);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("deployment.yaml");
    std::fs::write(&path, broken).unwrap();
    let out = Command::new(&validator)
        .arg("--strict")
        .arg(&path)
        .output()
        .expect("run kubernetes-validate");
    assert!(
        !out.status.success(),
        "a misspelt field must fail validation"
    );
}

/// The docker-compose trial: the file parses, names what exists, and its gateway.toml passes
/// `fedgate check` with every store shared (the container paths mapped to the repository's).
#[test]
fn the_compose_trial_refers_to_real_files_and_shares_every_store() {
    let dir = Path::new(ROOT).join("deploy/compose");
    let text = std::fs::read_to_string(dir.join("docker-compose.yml")).unwrap();
    let compose: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    let services = compose["services"].as_mapping().expect("services");
    for s in ["redis", "postgres", "fedgate-a", "fedgate-b", "lb"] {
        assert!(services.contains_key(s), "service {s}");
    }
    for file in [
        "gateway.toml",
        "nginx.conf",
        "../Dockerfile",
        "../../examples/flows/flows",
    ] {
        assert!(dir.join(file).exists(), "{file}");
    }
    let nginx = std::fs::read_to_string(dir.join("nginx.conf")).unwrap();
    assert!(nginx.contains("fedgate-a:8930") && nginx.contains("fedgate-b:8930"));
    let config = std::fs::read_to_string(dir.join("gateway.toml"))
        .unwrap()
        .replace("/etc/fedgate/trust-tiers", &format!("{ROOT}/trust-tiers"))
        .replace(
            "/etc/fedgate/flows",
            &format!("{ROOT}/examples/flows/flows"),
        );
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("gateway.toml"), config).unwrap();
    let out = Command::new(FEDGATE)
        .arg("check")
        .arg(tmp.path().join("gateway.toml"))
        .env(
            "FEDGATE_STATE_KEY",
            "test-only-state-key-of-at-least-32-bytes",
        )
        .env("FEDGATE_ADMIN_TOKEN", "test-only")
        .env("FEDGATE_REDIS_URL", "redis://:pw@redis:6379/0")
        .env(
            "FEDGATE_POSTGRES_URL",
            "postgres://fedgate:pw@postgres:5432/fedgate",
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "rate limits: shared (Redis)",
        "idempotency records: shared (Redis)",
        "approval plans: shared (Redis)",
        "flow runs: shared (PostgreSQL, leases)",
        "workspaces' stages: shared (Redis)",
        "per-user credentials: shared (Redis)",
    ] {
        assert!(stdout.contains(line), "{line} in {stdout}");
    }
    assert!(!stdout.contains("pw@"), "no URL in the output");
}
