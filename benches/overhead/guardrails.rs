//! Part 3: what the guardrails cost. CPU per call of fedgate with 1 KiB results through an
//! upstream whose tier turns every guardrail off and one whose tier masks secrets both ways
//! and marks injected instructions (rounds interleaved), and the time to scan 1 MiB results
//! (ordinary text with a few secrets, and text built to slow a matcher) in this process.

use rmcp::{
    RoleClient,
    model::{CallToolResult, ContentBlock, ServerResult},
    service::RunningService,
};
use tokio::time::Instant;

use crate::{Bench, cpu_seconds, drive};

/// About 1 KiB of ordinary prose.
fn kib_of_text() -> String {
    let sentence = "The quarterly report lists 42 open issues, 7 of them blocking the release. ";
    sentence.repeat(1024 / sentence.len() + 1)[..1024].to_owned()
}

pub async fn guardrail_cost(client: &RunningService<RoleClient, Bench>, gw_pid: u32, secs: f64) {
    let pad = kib_of_text();
    println!(
        "\npart 3: guardrails, 1 KiB echoed text, rmcp client, c=8\n{:<22} {:>10} {:>9} {:>12} {:>6}",
        "upstream tier", "calls/s", "p50 µs", "CPU µs/call", "fail"
    );
    let mut per_call = [Vec::new(), Vec::new()];
    for _round in 0..2 {
        for (i, (label, tool)) in [
            ("guardrails off", "off__echo"),
            ("guardrails on", "on__echo"),
        ]
        .into_iter()
        .enumerate()
        {
            let cpu0 = cpu_seconds(gw_pid);
            let cell = drive(client, tool, 8, secs, &pad).await;
            let cpu = cpu_seconds(gw_pid) - cpu0;
            let us = cpu / cell.calls.max(1) as f64 * 1e6;
            per_call[i].push(us);
            println!(
                "{:<22} {:>10.0} {:>9.0} {:>12.1} {:>6}",
                label,
                cell.calls as f64 / cell.secs,
                cell.p50_us,
                us,
                cell.failures
            );
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    println!(
        "guardrails on / off: {:.3}x CPU per call (target: within 1.10x)",
        mean(&per_call[1]) / mean(&per_call[0]).max(f64::EPSILON)
    );

    // 1 MiB results scanned in this process (secrets masked, injections marked).
    let mut ordinary = String::with_capacity(1 << 20);
    while ordinary.len() < (1 << 20) {
        ordinary.push_str(&kib_of_text());
        if ordinary.len() % (64 << 10) < 1024 {
            ordinary.push_str("\nDB_PASSWORD=hunter2-prod AKIAIOSFODNN7EXAMPLE\n");
        }
    }
    let bait = "AKIA".repeat(1 << 18) + &"bearer ".repeat(1 << 10);
    println!("\n1 MiB result scanned (median of 15; target: at most 5 ms)");
    for (label, text) in [("ordinary text", ordinary), ("matcher bait", bait)] {
        let result =
            ServerResult::CallToolResult(CallToolResult::success(vec![ContentBlock::text(text)]));
        let mut times = Vec::new();
        let mut found = 0;
        for _ in 0..15 {
            let mut r = result.clone();
            let t = Instant::now();
            found = fedgate::guard::scan_result(
                &mut r,
                fedgate::guard::SecretAction::Redact,
                fedgate::guard::InjectionAction::Mark,
                fedgate::guard::Rules::standard(),
                "bench",
            )
            .len();
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "{:<22} {:>8.2} ms  ({found} findings)",
            label,
            times[times.len() / 2]
        );
    }
}
