//! The stdio lines between the client and the MCP service: a line that is not JSON gets a
//! JSON-RPC parse error (code -32700, id null), as JSON-RPC 2.0 asks, instead of the silence of
//! rmcp's own transport, which drops it (a client waiting for an answer would wait forever).
//! Everything else passes through unchanged. The service's lines and these errors reach the
//! client through one writer, a whole line at a time, so they never interleave.

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Bytes buffered between the service and each side.
const PIPE_BYTES: usize = 1 << 16;

/// The two ends the service reads and writes, and the task that writes the client's side; it
/// ends once the service closed its output, after writing everything queued.
pub struct Guarded {
    pub service_input: DuplexStream,
    pub service_output: DuplexStream,
    pub writer: JoinHandle<std::io::Result<()>>,
}

async fn write_line<W: AsyncWrite + Unpin>(output: &mut W, line: &[u8]) -> std::io::Result<()> {
    output.write_all(line).await?;
    output.write_all(b"\n").await?;
    output.flush().await
}

/// The JSON-RPC error for a line that is not JSON.
pub fn parse_error(detail: &str) -> String {
    json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32700, "message": format!("Parse error: {detail}")}
    })
    .to_string()
}

/// Puts the line filter between the client's `input`/`output` and the service.
pub fn guard<R, W>(input: R, output: W) -> Guarded
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (service_input, mut to_service) = tokio::io::duplex(PIPE_BYTES);
    let (service_output, from_service) = tokio::io::duplex(PIPE_BYTES);
    let (errors, mut pending_errors) = mpsc::unbounded_channel::<String>();

    tokio::spawn(async move {
        let mut input = BufReader::new(input);
        let mut line = Vec::new();
        loop {
            line.clear();
            match input.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            // Checked only (nothing is built): the service parses it again.
            match serde_json::from_slice::<serde::de::IgnoredAny>(text) {
                Ok(_) => {
                    if write_line(&mut to_service, text).await.is_err() {
                        break;
                    }
                }
                Err(e) => {
                    if errors.send(parse_error(&e.to_string())).is_err() {
                        break;
                    }
                }
            }
        }
        // Dropping `to_service` ends the service's input, as the client's end would.
    });

    let writer = tokio::spawn(async move {
        let mut output = output;
        let mut from_service = BufReader::new(from_service);
        let mut line = Vec::new();
        loop {
            tokio::select! {
                // A read cut short by the other branch keeps what it read in `line`.
                read = from_service.read_until(b'\n', &mut line) => {
                    if read? == 0 {
                        // The service is done: the errors already queued go out, then this ends.
                        while let Ok(error) = pending_errors.try_recv() {
                            write_line(&mut output, error.as_bytes()).await?;
                        }
                        return Ok(());
                    }
                    output.write_all(&line).await?;
                    output.flush().await?;
                    line.clear();
                }
                Some(error) = pending_errors.recv() => {
                    write_line(&mut output, error.as_bytes()).await?;
                }
            }
        }
    });

    Guarded {
        service_input,
        service_output,
        writer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// Feeds `client_lines` through the filter to an echoing "service" and returns what the
    /// client reads back.
    async fn round_trip(client_lines: &[u8]) -> String {
        let (mut client_in, input) = tokio::io::duplex(1 << 16);
        let (output, mut client_out) = tokio::io::duplex(1 << 16);
        let guarded = guard(input, output);
        // The service echoes each line it gets.
        let (service_input, mut service_output) = (guarded.service_input, guarded.service_output);
        tokio::spawn(async move {
            let mut lines = BufReader::new(service_input).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                service_output.write_all(line.as_bytes()).await.unwrap();
                service_output.write_all(b"\n").await.unwrap();
            }
        });
        client_in.write_all(client_lines).await.unwrap();
        drop(client_in);
        guarded.writer.await.unwrap().unwrap();
        let mut got = String::new();
        client_out.read_to_string(&mut got).await.unwrap();
        got
    }

    #[tokio::test]
    async fn json_lines_pass_and_others_get_a_parse_error() {
        let got = round_trip(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\nnot json at all\n\n\xff\xfe\n[1, 2]\r\n{\"unterminated\": \n",
        )
        .await;
        let lines: Vec<serde_json::Value> = got
            .lines()
            .map(|l| serde_json::from_str(l).expect("only JSON reaches the client"))
            .collect();
        assert_eq!(lines.len(), 5, "{got}");
        let echoed: Vec<&serde_json::Value> =
            lines.iter().filter(|v| v.get("error").is_none()).collect();
        assert_eq!(echoed.len(), 2, "{got}");
        assert!(echoed.iter().any(|v| v["method"] == "ping"));
        assert!(echoed.iter().any(|v| *v == &json!([1, 2])));
        let errors: Vec<&serde_json::Value> =
            lines.iter().filter(|v| v.get("error").is_some()).collect();
        assert_eq!(errors.len(), 3, "{got}");
        for e in errors {
            assert_eq!(e["error"]["code"], -32700);
            assert_eq!(e["id"], serde_json::Value::Null);
            assert_eq!(e["jsonrpc"], "2.0");
        }
    }
}
