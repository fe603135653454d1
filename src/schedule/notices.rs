//! What schedules tell a chat and its agent: the run's mark, and the
//! answers to removing one. (The chat's own notices are `chat::notices`;
//! this room sits below the chat and cannot reach them.)

/// The text of a schedule's run, marked as one (`⏰ NAME: prompt`).
pub(crate) fn run(name: &str, prompt: &str) -> String {
    format!("⏰ {name}: {prompt}")
}

/// What a run that catches up `missed` slots adds (`missed` > 0).
pub(crate) fn caught_up(missed: u64) -> String {
    let slots = if missed == 1 {
        "1 run was".to_owned()
    } else {
        format!("{missed} runs were")
    };
    format!("\n\n({slots} missed while turnstile was down; this one run stands for all of them.)")
}

/// A schedule removed.
pub(crate) fn removed(id: i64) -> String {
    format!("Removed schedule #{id}.")
}

/// Why an operator's schedule was not removed.
pub(crate) fn operators(id: i64) -> String {
    format!("schedule #{id} is the operator's (🔒): only the config removes it")
}

/// Why a schedule the conversation does not have was not removed.
pub(crate) fn not_here(id: i64) -> String {
    format!("this conversation has no schedule #{id}")
}

/// Why a schedule was not removed when the store failed.
pub(crate) const NOT_REMOVED: &str = "the schedule could not be removed; try again";
