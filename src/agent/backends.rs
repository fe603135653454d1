//! The one place a backend is chosen: `agent.backend` names it, and
//! nothing outside a backend's own room imports one.

use std::sync::Arc;

pub use super::acp::{AcpBackend, AcpSettings, BRIDGE_COMMAND, run_bridge};
pub use super::claude::{ClaudeBackend, ClaudeSettings};
use super::{AgentBackend, Scenario, ScenarioError, ScriptedBackend, ToolRegistry};
use crate::config::{Backend, Config};

/// Why a backend could not be made.
#[derive(Debug)]
pub enum BackendError {
    /// The scripted backend's `agent.script` cannot be read.
    Script(ScenarioError),
    /// The sandbox asked for does not work here.
    Sandbox(String),
}

/// The agent backend named by `agent.backend`. Each backend parses the
/// agent's tool calls with the chat tools and `turn.terminator_tools`.
///
/// # Errors
///
/// The scenario cannot be read, or bubblewrap cannot sandbox the agent.
pub fn from_config(config: &Config) -> Result<Arc<dyn AgentBackend>, BackendError> {
    let tools = Arc::new(ToolRegistry::new(&config.turn.terminator_tools));
    match config.agent.backend {
        Backend::Scripted => {
            let scenario = if config.agent.script.as_os_str().is_empty() {
                Scenario::default()
            } else {
                Scenario::from_file(&config.agent.script).map_err(BackendError::Script)?
            };
            Ok(Arc::new(ScriptedBackend::new(scenario).with_tools(tools)))
        }
        Backend::Claude => {
            let mut settings = ClaudeSettings::from_config(config);
            settings.probe_sandbox().map_err(BackendError::Sandbox)?;
            Ok(Arc::new(ClaudeBackend::new(settings, tools)))
        }
        Backend::Acp => {
            let mut settings = AcpSettings::from_config(config);
            settings.probe_sandbox().map_err(BackendError::Sandbox)?;
            Ok(Arc::new(AcpBackend::new(settings, tools)))
        }
    }
}

/// What the stream-json fuzz target (`fuzzing::agent`) drives of the
/// claude backend: its wire lines and their answers, the live view it
/// follows across them, and the answer to a permission nobody was asked.
/// Named here, where a backend is chosen, so nothing else imports one.
pub mod stream_json {
    pub(crate) use crate::agent::claude::driver::live::Live;
    pub use crate::agent::claude::permissions::answer_unasked;
    pub use crate::agent::claude::protocol::{
        self, CliLine, ControlRequest, HookCallback, HookInput, Line, McpMessage, McpRequest,
        SHOWN_CHARS, SystemLine,
    };
}
