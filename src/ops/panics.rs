//! What a panic does: never leave a silent, live process.
//!
//! Where one piece of outside input is handled (an update in the intake and
//! the dispatcher, a Markdown render), [`contain`] catches a panic and the
//! caller drops that input with an ERROR log and goes on. Anywhere else a
//! panic would only end the task it ran in (an actor: the bot keeps running
//! and answers nobody), so the hook [`exit_on_uncontained_panic`] installs
//! (the binary does, at start) logs it at ERROR and ends the process with
//! [`EXIT_CODE`], for the service manager to restart it; what the previous
//! process left unfinished is then recovered from the state file.

use std::any::Any;
use std::cell::Cell;
use std::panic::AssertUnwindSafe;

/// The exit code after a panic outside [`contain`] (`EX_SOFTWARE`): not 2
/// or 3, which the unit keeps from being restarted, and not 101, which a
/// panicking test harness also uses.
pub const EXIT_CODE: i32 = 70;

thread_local! {
    /// How many [`contain`] calls this thread is inside: a panic there is
    /// caught by the caller.
    static CONTAINED: Cell<usize> = const { Cell::new(0) };
}

/// Runs `f`, catching a panic: `Err` holds its message. The caller drops
/// whatever `f` was handling (and logs it); state `f` left half-changed is
/// kept as it is.
pub fn contain<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    CONTAINED.with(|c| c.set(c.get() + 1));
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    CONTAINED.with(|c| c.set(c.get().saturating_sub(1)));
    result.map_err(|payload| message(payload.as_ref()))
}

/// A panic's message (`panic!("…")` carries a `&str` or a `String`).
fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// Installs the panic hook: every panic is logged at ERROR with where it
/// happened; one outside [`contain`] then ends the process with
/// [`EXIT_CODE`]. For the binary only: a test process keeps the default.
pub fn exit_on_uncontained_panic() {
    std::panic::set_hook(Box::new(|info| {
        let panic = message(info.payload());
        let location = info
            .location()
            .map_or_else(String::new, ToString::to_string);
        let thread = std::thread::current();
        let thread = thread.name().unwrap_or("unnamed");
        if CONTAINED.with(Cell::get) > 0 {
            tracing::error!(%panic, %location, thread, "panic caught; the input it was handling is dropped");
            return;
        }
        tracing::error!(
            %panic,
            %location,
            thread,
            exit_code = EXIT_CODE,
            "panic; exiting so that the service manager restarts turnstile"
        );
        std::process::exit(EXIT_CODE);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set in the child process [`an_uncontained_panic_is_logged_and_ends_the_process`] starts.
    const CHILD: &str = "TURNSTILE_TEST_PANIC_CHILD";

    #[test]
    fn contain_catches_a_panic_and_gives_its_message() {
        assert_eq!(contain(|| 7), Ok(7));
        assert_eq!(
            contain(|| -> u8 { panic!("boom") }),
            Err("boom".to_string())
        );
        let n = 3;
        assert_eq!(
            contain(|| -> u8 { panic!("boom {n}") }),
            Err("boom 3".to_string())
        );
        assert_eq!(CONTAINED.with(Cell::get), 0, "the count is back to zero");
    }

    #[test]
    fn an_uncontained_panic_is_logged_and_ends_the_process() {
        let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "ops::panics::tests::child_panics_contained_then_uncontained",
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .output()
            .expect("the test binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(EXIT_CODE), "{stderr}");
        assert!(
            stderr.contains("alive after the contained panic"),
            "{stderr}"
        );
        let logged = |needle: &str| {
            stderr
                .lines()
                .any(|l| l.contains("ERROR") && l.contains(needle))
        };
        assert!(logged("contained boom"), "{stderr}");
        assert!(logged("uncontained boom"), "{stderr}");
        assert!(logged("exiting"), "{stderr}");
        assert!(!stderr.contains("still alive"), "{stderr}");
    }

    /// The child: a contained panic is logged and the process goes on; one
    /// in an actor's task (where actix would just end the actor) ends it.
    #[test]
    #[ignore = "run in a child process by an_uncontained_panic_is_logged_and_ends_the_process"]
    fn child_panics_contained_then_uncontained() {
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .init();
        exit_on_uncontained_panic();
        assert!(contain(|| -> u8 { panic!("contained boom") }).is_err());
        eprintln!("alive after the contained panic");
        actix_rt::System::new().block_on(async {
            let _ = actix_rt::spawn(async { panic!("uncontained boom") }).await;
        });
        eprintln!("still alive after the uncontained panic");
    }
}
