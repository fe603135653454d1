//! fake-acp's MCP client: the host's chat tools server named in
//! `session/new`, over HTTP or stdio.

use std::io::{BufRead, Write};

use serde_json::{Value, json};

use super::{Fake, env_flag, stop};

/// An MCP server the host named.
#[derive(Clone)]
pub(crate) enum Server {
    /// Its URL and headers.
    Http(String, Vec<(String, String)>),
    /// Its command, arguments and environment.
    Stdio(String, Vec<String>, Vec<(String, String)>),
}

/// Name-value pairs (`headers`, `env`) of a server in `mcpServers`.
fn pairs(list: &Value) -> Vec<(String, String)> {
    list.as_array()
        .map(|h| {
            h.iter()
                .map(|h| {
                    let text = |k: &str| h[k].as_str().unwrap_or("").to_owned();
                    (text("name"), text("value"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Keeps the host's MCP server named in `session/new` or `session/load`
/// (none with `FAKE_ACP_NO_MCP=1`).
pub(crate) fn remember_mcp(fake: &Fake, params: &Value) {
    let server = params["mcpServers"].as_array().and_then(|list| {
        let s = list.first()?;
        let text = |k: &str| s[k].as_str().unwrap_or("").to_owned();
        Some(match s["type"].as_str() {
            Some("http") => Server::Http(text("url"), pairs(&s["headers"])),
            _ => Server::Stdio(
                text("command"),
                s["args"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|a| a.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default(),
                pairs(&s["env"]),
            ),
        })
    });
    if let Ok(mut mcp) = fake.mcp.lock() {
        *mcp = server.filter(|_| !env_flag("FAKE_ACP_NO_MCP"));
    }
}

/// One POST to `url` with `headers`: the status and the body.
fn post(url: &str, headers: &[(String, String)], body: &Value) -> Option<(u16, String)> {
    use std::io::Read as _;
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_owned()), |(h, p)| (h, format!("/{p}")));
    let mut stream = std::net::TcpStream::connect(host).ok()?;
    let body = body.to_string();
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let status = answer.split(' ').nth(1)?.parse().ok()?;
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

/// A JSON-RPC exchange with an MCP server: `None` for a notification.
type Exchange<'a> = Box<dyn FnMut(&Value) -> Option<Value> + 'a>;

/// Talks to the stdio server `command`: started with `args` and `env`, one
/// JSON line each way.
fn stdio_exchange(
    command: &str,
    args: &[String],
    env: &[(String, String)],
) -> Option<(std::process::Child, Exchange<'static>)> {
    let mut child = std::process::Command::new(command)
        .args(args)
        .envs(env.iter().cloned())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let mut stdout = std::io::BufReader::new(child.stdout.take()?);
    let exchange = move |message: &Value| {
        writeln!(stdin, "{message}").ok()?;
        message.get("id")?;
        let mut line = String::new();
        stdout.read_line(&mut line).ok()?;
        serde_json::from_str(&line).ok()
    };
    Some((child, Box::new(exchange)))
}

pub(crate) fn tools(fake: &Fake, id: &Value, text: &str) {
    let server = fake.mcp.lock().ok().and_then(|m| m.clone());
    let (mut exchange, child): (Exchange<'_>, _) = match server {
        None => {
            fake.chunk("no tools");
            return stop(fake, id, "end_turn");
        }
        Some(Server::Http(url, headers)) => {
            let unauthorized = post(
                &url,
                &[],
                &json!({"jsonrpc": "2.0", "id": 0, "method": "tools/list"}),
            );
            fake.log(&json!({"unauthorized": unauthorized.map(|(s, _)| s)}));
            let exchange = move |message: &Value| {
                post(&url, &headers, message).and_then(|(_, body)| serde_json::from_str(&body).ok())
            };
            (Box::new(exchange), None)
        }
        Some(Server::Stdio(command, args, env)) => {
            let wrong: Vec<(String, String)> = env
                .iter()
                .map(|(k, _)| (k.clone(), "wrong".into()))
                .collect();
            let refused =
                stdio_exchange(&command, &args, &wrong).and_then(|(mut child, mut exchange)| {
                    let answer =
                        exchange(&json!({"jsonrpc": "2.0", "id": 0, "method": "tools/list"}));
                    let _ = child.wait();
                    answer
                });
            fake.log(&json!({"unauthorized": refused.is_none()}));
            let Some((child, exchange)) = stdio_exchange(&command, &args, &env) else {
                fake.chunk("the stdio server did not start");
                return stop(fake, id, "end_turn");
            };
            (exchange, Some(child))
        }
    };
    let mut call = |n: u64, method: &str, params: Value| -> Value {
        exchange(&json!({"jsonrpc": "2.0", "id": n, "method": method, "params": params}))
            .unwrap_or(Value::Null)
    };
    call(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "fake-acp", "version": "0"}}),
    );
    let list = call(2, "tools/list", json!({}));
    let names: Vec<Value> = list["result"]["tools"]
        .as_array()
        .map(|t| t.iter().map(|t| t["name"].clone()).collect())
        .unwrap_or_default();
    fake.log(&json!({"tools": names}));
    let sent = call(
        3,
        "tools/call",
        json!({"name": "send", "arguments": {"text": format!("via mcp: {text}")}}),
    );
    fake.log(&json!({"send": sent}));
    call(
        4,
        "tools/call",
        json!({"name": "end_turn", "arguments": {}}),
    );
    drop(exchange);
    if let Some(mut child) = child {
        let _ = child.wait();
    }
    stop(fake, id, "end_turn");
}
