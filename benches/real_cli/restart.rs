//! 5b. Warm after a restart: the first message after a restart, on the
//! session the new process prewarmed, against a warm turn before it.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use turnstile::Turnstile;
use turnstile::events::BotEvent;

use super::support::collect::Collector;
use super::support::figures::{Better, figure};
use super::support::stats::{Summary, ms, ms_between, ms_cells, p50_of, ratio, table};
use super::support::{self, Fakes};
use super::{Bot, ClaudeSettings, Direct, GAP, OwnTiming, TURN_TIMEOUT, end_turn_reply, start_bot};

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
    let own = own_first_turns(&fakes, &claude, &bot.settings, iterations).await?;
    let spawned = bot.backend.spawned();
    let _ = bot.bot.stop().await;
    drop(bot.collector.finish());
    let (p50, cells) = (p50_of, ms_cells);
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
    f.push_str(&own.report(iterations));
    Ok((f, Vec::new()))
}

/// The CLI's own account of its first turn in a process against its later
/// ones: what is left after a prewarm lies inside the CLI.
struct OwnFirstTurns {
    first: Vec<OwnTiming>,
    later: Vec<OwnTiming>,
}

/// Turns per process in [`own_first_turns`]: the first, then warm ones.
const TURNS_PER_PROCESS: usize = 3;

/// `iterations` fresh CLI processes, each driven directly with turnstile's
/// arguments and `CLAUDE_CODE_EMIT_STARTUP_TIMING=1`: spawned, `initialize`
/// answered (as a prewarmed session is), then [`TURNS_PER_PROCESS`] turns.
async fn own_first_turns(
    fakes: &support::Fakes,
    claude: &str,
    base: &ClaudeSettings,
    iterations: usize,
) -> Result<OwnFirstTurns, String> {
    let mut settings = base.clone();
    settings
        .process
        .env
        .insert("CLAUDE_CODE_EMIT_STARTUP_TIMING".into(), "1".into());
    let mut own = OwnFirstTurns {
        first: Vec::new(),
        later: Vec::new(),
    };
    for _ in 0..iterations {
        let mut direct = Direct::spawn(fakes, claude, &settings).await?;
        direct.ready().await?;
        for n in 0..TURNS_PER_PROCESS {
            tokio::time::sleep(GAP).await;
            let turn = direct.turn().await?;
            let timing = turn
                .own
                .ok_or("direct: the CLI's result has no time_to_request_ms")?;
            if n == 0 {
                &mut own.first
            } else {
                &mut own.later
            }
            .push(timing);
        }
        direct.close().await;
    }
    Ok(own)
}

impl OwnFirstTurns {
    fn report(&self, iterations: usize) -> String {
        let cells = |v: &[OwnTiming], pick: fn(&OwnTiming) -> f64| {
            let v: Vec<f64> = v.iter().map(pick).collect();
            Summary::of(&v).map_or("–".to_string(), |s| {
                format!("{} / {} / {}", ms(s.p50), ms(s.p99), ms(s.max))
            })
        };
        let row = |what: &str, v: &[OwnTiming]| {
            vec![
                what.to_string(),
                cells(v, |t| t.to_request_ms),
                cells(v, |t| t.cpu_ms),
            ]
        };
        let rows = vec![
            row(
                "first turn of a process, `initialize` answered",
                &self.first,
            ),
            row("later turns of the same process", &self.later),
        ];
        let mut f = String::new();
        let _ = writeln!(
            f,
            "\nWhat is left lies inside the CLI: {iterations} fresh processes driven directly \
             (`CLAUDE_CODE_EMIT_STARTUP_TIMING=1`, turnstile's arguments, `initialize` answered \
             before the first turn), {TURNS_PER_PROCESS} turns each, {} ms apart; the CLI's own \
             `time_to_request_ms` and `time_to_request_cpu_ms` from its `result` lines.\n",
            GAP.as_millis()
        );
        f.push_str(&table(
            &[
                "the CLI's own way to its first request",
                "ms p50 / p99 / max",
                "CPU ms p50 / p99 / max",
            ],
            &rows,
        ));
        f
    }
}
