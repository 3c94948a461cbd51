//! What the integration tests share: an MCP client for a skills-mcp child process.

// Each test binary uses a part of this.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A client speaking MCP to a skills-mcp child process over its stdin/stdout.
pub struct Mcp {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// Responses read while waiting for another id.
    pending: HashMap<u64, Value>,
    next_id: u64,
}

impl Mcp {
    pub fn start(dsn: &str, extra: &[&str]) -> Mcp {
        let mut child = Command::new(env!("CARGO_BIN_EXE_skills-mcp"))
            .arg("--dsn")
            .arg(dsn)
            .args(extra)
            .env_remove("PG_SKILLS_DSN")
            // The tests' connection strings say everything about TLS themselves.
            .env_remove("PGSSLMODE")
            .env_remove("PGSSLROOTCERT")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("skills-mcp starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Mcp {
            child,
            stdin,
            lines,
            pending: HashMap::new(),
            next_id: 1,
        }
    }

    pub fn send(&mut self, message: &Value) {
        let mut text = message.to_string();
        text.push('\n');
        self.stdin.write_all(text.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends `text` and a newline as they are (not necessarily JSON).
    pub fn send_raw(&mut self, text: &[u8]) {
        self.stdin.write_all(text).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next message the server writes, whatever its id.
    pub fn next_message(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(30))
            .expect("a message within 30 s");
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout carries only JSON-RPC ({e}): {line}"))
    }

    /// Sends a request and returns its id without waiting for the answer.
    pub fn send_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The response with this id (the whole JSON-RPC message).
    pub fn response(&mut self, id: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(v) = self.pending.remove(&id) {
                return v;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no response to request {id} within 120 s"));
            let message: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout carries only JSON-RPC ({e}): {line}"));
            if let Some(got) = message.get("id").and_then(Value::as_u64) {
                self.pending.insert(got, message);
            }
        }
    }

    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.response(id)
    }

    pub fn initialize(&mut self) -> Value {
        let response = self.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "protocol-test", "version": "0"}
            }),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        response["result"].clone()
    }

    /// tools/call; the `result` object (content, structuredContent, isError).
    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let response = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        assert!(
            response.get("error").is_none(),
            "{tool}: protocol error {response}"
        );
        response["result"].clone()
    }

    /// A call that must succeed; its structured content.
    pub fn ok(&mut self, tool: &str, arguments: Value) -> Value {
        let result = self.call(tool, arguments.clone());
        assert_ne!(
            result["isError"],
            json!(true),
            "{tool} {arguments} failed: {result}"
        );
        result["structuredContent"].clone()
    }

    /// A call that must fail as a tool error; its message.
    pub fn tool_error(&mut self, tool: &str, arguments: Value) -> String {
        let result = self.call(tool, arguments.clone());
        assert_eq!(
            result["isError"],
            json!(true),
            "{tool} {arguments} should fail: {result}"
        );
        result["content"][0]["text"].as_str().unwrap().to_string()
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
