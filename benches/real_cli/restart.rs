//! 5b. Warm after a restart: the first message after a restart, on the
//! session the new process prewarmed, against a warm turn before it.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use turnstile::Turnstile;
use turnstile::events::BotEvent;

use super::support::collect::Collector;
use super::support::figures::{Better, figure};
use super::support::stats::{Summary, ms, ms_between, ratio, table};
use super::support::{self, Fakes};
use super::{Bot, GAP, TURN_TIMEOUT, end_turn_reply, start_bot};

impl Bot {
    /// Stops the bot and starts it again on the same state file, agent
    /// home and fakes, as `/restart`'s re-exec does; answers how long the
    /// new process took to have the chat's session prewarmed.
    async fn restart(&mut self) -> Result<Duration, String> {
        let name = self.name;
        let _ = self.bot.stop().await;
        let stopped = Instant::now();
        let bot = Turnstile::start_with_limits(
            &self.config,
            self.backend.clone(),
            support::generous_limits(),
        )
        .await
        .map_err(|e| format!("{name}: the bot did not start again: {e}"))?;
        let mut events = bot.events.subscribe();
        let (collector, over) = Collector::start(&bot.events);
        drop(std::mem::replace(&mut self.collector, collector).finish());
        self.over = over;
        self.bot = bot;
        loop {
            match tokio::time::timeout(TURN_TIMEOUT, events.recv()).await {
                Ok(Ok(BotEvent::Prewarmed { at, .. })) => return Ok(at - stopped),
                Ok(Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
                Ok(Err(_)) | Err(_) => {
                    return Err(format!(
                        "{name}: no session was prewarmed after the restart"
                    ));
                }
            }
        }
    }
}

/// Per iteration: a warm turn, a restart, and the first turn after it.
pub(super) async fn restart_run(
    claude: String,
    iterations: usize,
) -> Result<(String, Vec<String>), String> {
    let fakes = Fakes::new();
    let mut bot = start_bot("restart", &fakes, &claude, "10m", true, &[]).await?;
    eprintln!("real_cli: restart: warm-up (one turn, not counted)");
    bot.turn(&[end_turn_reply()], "terminated", false).await?;
    let (mut before, mut after, mut warmed) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..iterations {
        tokio::time::sleep(GAP).await;
        let warm = bot.turn(&[end_turn_reply()], "terminated", false).await?;
        before.push(ms_between(warm.push, warm.first_call));
        warmed.push(bot.restart().await?.as_secs_f64() * 1000.0);
        tokio::time::sleep(GAP).await;
        let first = bot.turn(&[end_turn_reply()], "terminated", false).await?;
        after.push(ms_between(first.push, first.first_call));
        eprintln!(
            "real_cli: restart {} of {iterations}: first API request warm {:.0} ms, after the restart {:.0} ms",
            i + 1,
            before[i],
            after[i],
        );
    }
    let spawned = bot.backend.spawned();
    let _ = bot.bot.stop().await;
    drop(bot.collector.finish());
    let p50 = |v: &[f64]| Summary::of(v).map_or(f64::NAN, |s| s.p50);
    let cells = |v: &[f64]| {
        Summary::of(v).map_or("–".to_string(), |s| {
            format!("{} / {} / {}", ms(s.p50), ms(s.p99), ms(s.max))
        })
    };
    figure(
        "real_cli",
        "first message after a restart → first API request, p50 (ms)",
        p50(&after),
        "ms",
        Better::Lower,
        (50.0, 20.0),
    );
    let rows = vec![
        vec![
            "warm process, before the restart: user message → first API request".into(),
            cells(&before),
            String::new(),
        ],
        vec![
            "**first message after the restart** (session prewarmed): user message → first API request"
                .into(),
            cells(&after),
            format!("after / before (p50): **{}**", ratio(p50(&after), p50(&before))),
        ],
        vec![
            "restart: old process stopped → prewarmed (the CLI answered `initialize`)".into(),
            cells(&warmed),
            String::new(),
        ],
    ];
    let mut f = String::new();
    let _ = writeln!(f, "\n### 5b. Warm after a restart\n");
    let _ = writeln!(
        f,
        "One chat, {iterations} iterations after one warm-up turn: a turn on the warm process, then the bot \
         stops and starts again on the same state file (as `/restart`'s re-exec does), which resumes the \
         chat's session in the background (`agent.keep_warm = 10m`); once it is prewarmed and after a {} ms \
         pause, the first message after the restart. Processes spawned: {spawned} (one per start). Compare \
         the cold row above: a fresh process per turn.\n",
        GAP.as_millis()
    );
    f.push_str(&table(&["measure", "p50 / p99 / max", "ratio"], &rows));
    Ok((f, Vec::new()))
}
